//! The per-call sandbox: a deny-all WASI context, captured stdio, the `log` import and
//! the memory limiter. One [`State`] lives in one `Store`, for one call.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use wasmtime::Store;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::bindings::capstan::reconciler::{host, types::Level};
use super::text::escape_controls;

/// Bytes of stdout/stderr kept per call; the rest is counted and dropped so a chatty
/// plugin cannot exhaust host memory or fault because its writes failed.
const OUTPUT_CAP: usize = 64 * 1024;
/// `log` lines emitted per call; further lines are counted and dropped.
const LOG_LINES_CAP: usize = 1000;
/// Longest single `log` line emitted.
const LOG_LINE_BYTES: usize = 8 * 1024;
/// Entries a call's resource table, and handles its component instance, may hold: far
/// above what a plugin keeps open (each wait takes two entries), and about a megabyte of
/// host memory. Past it the call traps, as its own fault. wasmtime allows 1 M entries
/// (~100 MB) and 100 000 handles.
pub(crate) const MAX_RESOURCES: usize = 10_000;

/// Store data of one sandboxed call.
pub(crate) struct State {
    /// Built on the first WASI call: most reconciles make none, and building one (clocks,
    /// random, stdio, socket policy) is a tenth of a fresh instance's set-up.
    wasi: Option<(WasiCtx, super::clocks::VirtualClock)>,
    table: ResourceTable,
    pub limiter: Limiter,
    pub stdout: Capture,
    pub stderr: Capture,
    plugin: Arc<str>,
    object: String,
    log_lines: usize,
    logs: Arc<super::logs::LogBudget>,
    /// Each call's lift allowance (hostcall fuel), held of the plugin's total.
    lift_fuel: usize,
}

impl State {
    /// A sandbox with no filesystem, environment, arguments, network or stdin.
    pub fn new(
        plugin: Arc<str>,
        object: String,
        memory_limit: usize,
        (memory, claim): (Arc<super::memory::PluginMemory>, super::memory::Claim),
        logs: Arc<super::logs::LogBudget>,
    ) -> State {
        State {
            wasi: None,
            table: {
                let mut table = ResourceTable::new();
                table.set_max_capacity(MAX_RESOURCES);
                table
            },
            limiter: Limiter {
                limit: memory_limit,
                claim,
                plugin: memory,
                held: 0,
                denied: None,
            },
            stdout: Capture::default(),
            stderr: Capture::default(),
            plugin,
            object,
            log_lines: 0,
            logs,
            lift_fuel: 0,
        }
    }

    /// A new call in a kept instance, on `object`: its own log lines and key.
    pub fn begin_call(&mut self, object: &str) {
        object.clone_into(&mut self.object);
        self.log_lines = 0;
    }

    /// Each call's lift allowance.
    pub fn lift_fuel(&self) -> usize {
        self.lift_fuel
    }

    /// Emit what the guest wrote to stdout/stderr as tracing events, within the plugin's
    /// log budget; report what was dropped (at most once a minute).
    pub fn flush_output(&self) {
        for (stream, capture) in [("stdout", &self.stdout), ("stderr", &self.stderr)] {
            let (text, dropped) = capture.take();
            for line in text.lines().filter(|l| !l.trim().is_empty()).map(escape_controls) {
                if self.logs.allow(line.len()) {
                    tracing::info!(target: "capstan::plugin", plugin = %self.plugin, object = %self.object, stream, "{line}");
                }
            }
            self.logs.dropped(dropped as u64);
        }
        if let Some(bytes) = self.logs.report() {
            tracing::warn!(target: "capstan::plugin", plugin = %self.plugin, dropped_bytes = bytes, "plugin output dropped: over its log budget ({} bytes/s) or the per-call caps ({OUTPUT_CAP} bytes of output, {LOG_LINES_CAP} log lines)", self.logs.rate());
        }
    }
}

/// The store of one call, with what the guest can make the host hold capped: linear
/// memory by the [`Limiter`], resource entries and handles at [`MAX_RESOURCES`], and the
/// host memory that lifting takes.
///
/// Lifting copies what the guest hands the host (a response, a host call's arguments)
/// into host values before any check of ours can run, and not in proportion to guest
/// memory: an empty string is 8 guest bytes and 24 host bytes, and a list may name one
/// guest string a million times. So no factor on guest memory bounds it; wasmtime's
/// hostcall fuel does. It counts every lifted list element at its host size and every
/// string at its length, and fails the lift before allocating once it has run out. A
/// call's fuel is `lift` bytes taken from the plugin's memory total while the call lives
/// (less when the total has less left), so what lifting may allocate counts with the
/// plugin's linear memory, within its share of `--memory-budget`.
pub(crate) fn store(engine: &wasmtime::Engine, mut state: State, lift: usize) -> Store<State> {
    let fuel = state.limiter.hold_up_to(lift);
    state.lift_fuel = fuel;
    let mut store = Store::new(engine, state);
    store.limiter(|s| &mut s.limiter);
    store.set_hostcall_fuel(fuel);
    store.set_max_component_handles(MAX_RESOURCES);
    store
}

impl State {
    fn wasi(&mut self) -> &mut (WasiCtx, super::clocks::VirtualClock) {
        let (stdout, stderr) = (&self.stdout, &self.stderr);
        self.wasi.get_or_insert_with(|| deny_all(stdout, stderr))
    }

    /// The plugin's virtual monotonic clock.
    pub(crate) fn clock(&mut self) -> &super::clocks::VirtualClock {
        &self.wasi().1
    }

    /// The call's resource table.
    pub(crate) fn table(&mut self) -> &mut ResourceTable {
        &mut self.table
    }
}

impl WasiView for State {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        let (stdout, stderr) = (&self.stdout, &self.stderr);
        let (ctx, _) = self.wasi.get_or_insert_with(|| deny_all(stdout, stderr));
        WasiCtxView {
            ctx,
            table: &mut self.table,
        }
    }
}

/// No filesystem, environment, arguments, network or stdin; stdout and stderr captured;
/// deterministic clocks and entropy (see `clocks`).
fn deny_all(stdout: &Capture, stderr: &Capture) -> (WasiCtx, super::clocks::VirtualClock) {
    let clock = super::clocks::VirtualClock::default();
    let mut builder = WasiCtxBuilder::new();
    builder
        .stdout(stdout.clone())
        .stderr(stderr.clone())
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false)
        .socket_addr_check(|_, _| Box::pin(async { false }));
    super::clocks::deterministic(&mut builder, clock.clone());
    (builder.build(), clock)
}

impl host::Host for State {
    fn log(&mut self, level: Level, message: String) {
        self.log_lines += 1;
        if self.log_lines > LOG_LINES_CAP {
            self.logs.dropped(message.len() as u64);
            return;
        }
        let message = escape_controls(truncate(&message, LOG_LINE_BYTES));
        if !self.logs.allow(message.len()) {
            return;
        }
        let (plugin, object) = (&*self.plugin, self.object.as_str());
        match level {
            Level::Trace => tracing::trace!(target: "capstan::plugin", plugin, object, "{message}"),
            Level::Debug => tracing::debug!(target: "capstan::plugin", plugin, object, "{message}"),
            Level::Info => tracing::info!(target: "capstan::plugin", plugin, object, "{message}"),
            Level::Warn => tracing::warn!(target: "capstan::plugin", plugin, object, "{message}"),
            Level::Error => tracing::error!(target: "capstan::plugin", plugin, object, "{message}"),
        }
    }
}

impl super::bindings::capstan::reconciler::types::Host for State {}

/// An older plugin logs through the same budget and caps.
macro_rules! older_log {
    ($($version:ident),*) => {$(
        impl super::bindings::$version::capstan::reconciler::host::Host for State {
            fn log(&mut self, level: super::bindings::$version::capstan::reconciler::types::Level, message: String) {
                use super::bindings::$version::capstan::reconciler::types::Level as Old;
                let level = match level {
                    Old::Trace => Level::Trace,
                    Old::Debug => Level::Debug,
                    Old::Info => Level::Info,
                    Old::Warn => Level::Warn,
                    Old::Error => Level::Error,
                };
                host::Host::log(self, level, message);
            }
        }

        impl super::bindings::$version::capstan::reconciler::types::Host for State {}
    )*};
}

older_log!(v0_1, v0_2);

fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Caps linear memory per call and, with the plugin's other live instances, per plugin;
/// remembers a denied growth, which is how an out-of-memory abort is told apart from a
/// panic.
pub(crate) struct Limiter {
    limit: usize,
    plugin: Arc<super::memory::PluginMemory>,
    /// What this instance holds of the plugin's total (given back on drop).
    held: usize,
    /// What it was admitted with and has not drawn yet.
    claim: super::memory::Claim,
    pub denied: Option<super::Fault>,
}

impl Limiter {
    /// Take up to `bytes` of the plugin's total for this call's life; what was taken.
    fn hold_up_to(&mut self, bytes: usize) -> usize {
        let taken = self.plugin.take_up_to(bytes, &mut self.claim);
        self.held += taken;
        taken
    }
}

impl Limiter {
    /// What this instance holds of the plugin's total: its linear memory and lift fuel.
    pub(crate) fn held(&self) -> usize {
        self.held
    }

    /// The plugin's memory, which its calls' parsed responses are held from too.
    pub(crate) fn memory(&self) -> &Arc<super::memory::PluginMemory> {
        &self.plugin
    }
}

impl wasmtime::ResourceLimiter for Limiter {
    // Also called for a memory's initial size (`current` 0), so `held` is all of it.
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.limit {
            self.denied = Some(super::Fault::OutOfMemory(self.limit));
            return Ok(false);
        }
        let more = desired.saturating_sub(current);
        if let Err(denied) = self.plugin.grow(more, &mut self.claim) {
            self.denied = Some(match denied {
                super::memory::Denied::Total => super::Fault::PluginMemory(self.plugin.limit()),
                super::memory::Denied::Budget => super::Fault::HostMemory(self.plugin.floor()),
            });
            return Ok(false);
        }
        self.held += more;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 100_000)
    }
}

impl Drop for Limiter {
    fn drop(&mut self) {
        let claim = std::mem::take(&mut self.claim);
        self.plugin.end(self.held, self.denied.is_some(), claim);
    }
}

/// A bounded in-memory sink for a guest's stdout or stderr that never refuses a write.
#[derive(Clone, Default)]
pub(crate) struct Capture(Arc<Mutex<CaptureBuf>>);

#[derive(Default)]
struct CaptureBuf {
    kept: Vec<u8>,
    dropped: usize,
}

impl Capture {
    fn take(&self) -> (String, usize) {
        let mut buf = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let text = String::from_utf8_lossy(&buf.kept).into_owned();
        let dropped = buf.dropped;
        *buf = CaptureBuf::default();
        (text, dropped)
    }

    /// Everything kept so far, without consuming it.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|e| e.into_inner()).kept).into_owned()
    }
}

impl IsTerminal for Capture {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for Capture {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(tokio::io::sink())
    }
}

#[wasmtime_wasi::async_trait]
impl OutputStream for Capture {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        let mut buf = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let room = OUTPUT_CAP.saturating_sub(buf.kept.len()).min(bytes.len());
        buf.kept.extend_from_slice(&bytes[..room]);
        buf.dropped += bytes.len() - room;
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(64 * 1024)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for Capture {
    async fn ready(&mut self) {}
}
