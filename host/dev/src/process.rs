//! Spawning, watching and killing the plane's processes.

use std::collections::HashSet;
use std::fs::File;
use std::io;
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};

/// How a component relates to the process that starts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lifetime {
    /// Killed by the kernel when the spawning thread (and so the test process) goes away.
    Attached,
    /// A session of its own that outlives the caller (`capstan dev up`).
    Detached,
}

/// One running component: its child handle, process group and log file.
#[derive(Debug)]
pub(crate) struct Proc {
    pub name: &'static str,
    pub child: Child,
    pub log: PathBuf,
}

impl Proc {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// One line for an error: why the component failed, and where to read more.
    pub fn failure(&self, what: &str) -> anyhow::Error {
        component_error(self.name, &self.log, what)
    }

    /// `Some(error)` if the process has exited.
    pub fn exited(&mut self) -> Option<anyhow::Error> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(self.failure(&format!("exited during start ({status})"))),
            Ok(None) => None,
            Err(e) => Some(self.failure(&format!("cannot be waited for: {e}"))),
        }
    }

    /// Kills the whole process group and reaps the leader.
    pub fn kill(&mut self, grace: Duration) {
        let pgid = self.pid() as libc::pid_t;
        if !grace.is_zero() && matches!(self.child.try_wait(), Ok(None)) {
            signal_group(pgid, libc::SIGTERM);
            let deadline = Instant::now() + grace;
            while Instant::now() < deadline {
                if !matches!(self.child.try_wait(), Ok(None)) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        // Also after the leader exited: anything it forked into the group must go too.
        signal_group(pgid, libc::SIGKILL);
        let _ = self.child.wait();
    }
}

/// The error every start failure turns into: component, reason, log file, all on one line.
pub(crate) fn component_error(name: &str, log: &Path, what: &str) -> anyhow::Error {
    let hint = log_hint(log);
    anyhow!("{name} {what}{hint} (log: {})", log.display())
}

/// A failure before the process exists; the reason also goes to its log, so the log
/// named in the error explains itself.
pub(crate) fn pre_spawn_error(name: &str, log: &Path, what: &str) -> anyhow::Error {
    let _ = std::fs::write(log, format!("capstan dev: {name} {what}\n"));
    anyhow!("{name} {what} (log: {})", log.display())
}

/// The most telling line of a log, so the error line alone often says what went wrong.
fn log_hint(log: &Path) -> String {
    let Ok(text) = std::fs::read_to_string(log) else {
        return String::new();
    };
    let lines: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    if let Some(line) = lines.iter().rev().find(|l| l.contains(PORT_CLASH)) {
        return format!(": {}", around_clash(line));
    }
    let pick = lines
        .iter()
        .rev()
        .find(|l| {
            let l = l.to_ascii_lowercase();
            l.contains("error") || l.contains("fatal") || l.contains("panic")
        })
        .or(lines.last());
    match pick {
        Some(line) => {
            let short: String = line.chars().take(HINT_CHARS).collect();
            format!(": {short}")
        }
        None => String::new(),
    }
}

/// What a component logs when its port was taken; callers retry on it, so a hint must keep it.
const PORT_CLASH: &str = "address already in use";

/// Whether a start failed only because an auto-picked port was taken meanwhile.
pub(crate) fn is_port_clash(err: &anyhow::Error) -> bool {
    format!("{err:#}").contains(PORT_CLASH)
}
const HINT_CHARS: usize = 240;

/// The end of `line` up to and including the clash, so a long (JSON) line keeps the words
/// the retry looks for.
fn around_clash(line: &str) -> String {
    let end = line.find(PORT_CLASH).map_or(line.len(), |i| i + PORT_CLASH.len());
    let chars: Vec<char> = line[..end].chars().collect();
    let from = chars.len().saturating_sub(HINT_CHARS);
    let cut: String = chars[from..].iter().collect();
    if from > 0 { format!("…{cut}") } else { cut }
}

fn signal_group(pgid: libc::pid_t, sig: libc::c_int) {
    if pgid > 1 {
        // SAFETY: plain syscall; a group that is already gone gives ESRCH, which is fine.
        unsafe {
            libc::kill(-pgid, sig);
        }
    }
}

type SpawnJob = Box<dyn FnOnce() + Send>;

/// PDEATHSIG fires when the *thread* that forked a child exits, so attached children are
/// forked from one thread that lives as long as the process, never from a test's thread.
fn on_spawner_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<SpawnJob>>> = OnceLock::new();
    let tx = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnJob>();
        std::thread::Builder::new()
            .name("capstan-plane-spawner".into())
            .spawn(move || {
                for job in rx {
                    job();
                }
            })
            .expect("starting the plane's spawner thread");
        Mutex::new(tx)
    });
    let (reply_tx, reply_rx) = mpsc::channel();
    let job: SpawnJob = Box::new(move || {
        let _ = reply_tx.send(f());
    });
    tx.lock()
        .unwrap_or_else(|p| p.into_inner())
        .send(job)
        .expect("the spawner thread lives as long as the process");
    reply_rx.recv().expect("the spawner thread answers every job")
}

/// The Go runtime's collector for the plane's components (etcd, kube-apiserver, the
/// controllers), unless the caller's environment sets its own. A local plane is CPU-bound
/// long before it is short of memory: with Go's default (`GOGC=100`) kube-apiserver spent
/// 18% more CPU on a fault test (45.4 s against 38.5 s at `GOGC=400`), and the tests and
/// the host share the same cores. The soft limit turns the collector back up before a
/// large plane (the 10 000-Echo bench) would grow toward five times its live heap.
fn go_gc(cmd: &mut Command) {
    if std::env::var_os("GOGC").is_none() {
        cmd.env("GOGC", "400");
    }
    if std::env::var_os("GOMEMLIMIT").is_none() {
        cmd.env("GOMEMLIMIT", "4GiB");
    }
}

/// No component exports traces: nothing here listens for them, and the image mirror's
/// registry (OpenTelemetry from its environment) logged a failed export every few seconds.
fn no_traces(cmd: &mut Command) {
    if std::env::var_os("OTEL_TRACES_EXPORTER").is_none() {
        cmd.env("OTEL_TRACES_EXPORTER", "none");
    }
}

/// Starts `program args...` with stdout and stderr going to `log`.
pub(crate) fn spawn(
    name: &'static str,
    program: &Path,
    args: Vec<String>,
    cwd: &Path,
    log: PathBuf,
    lifetime: Lifetime,
) -> Result<Proc> {
    if !program.is_file() {
        let what = format!("cannot start: binary not found at {}", program.display());
        return Err(pre_spawn_error(name, &log, &what));
    }
    let out = File::create(&log).with_context(|| format!("creating {}", log.display()))?;
    let mut cmd = Command::new(program);
    cmd.args(&args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        // Only explicit kubeconfig flags: never let a component wander to a real cluster.
        .env_remove("KUBECONFIG");
    go_gc(&mut cmd);
    no_traces(&mut cmd);
    match lifetime {
        Lifetime::Attached => {
            cmd.process_group(0);
            // SAFETY: getpid is async-signal-safe and runs before the fork.
            let parent = unsafe { libc::getpid() };
            // SAFETY: only async-signal-safe calls (prctl, getppid) and no allocation.
            unsafe {
                cmd.pre_exec(move || {
                    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                        return Err(io::Error::last_os_error());
                    }
                    // The parent may have died between fork and prctl; then nobody kills us.
                    if libc::getppid() != parent {
                        return Err(io::Error::from_raw_os_error(libc::ESRCH));
                    }
                    Ok(())
                });
            }
        }
        Lifetime::Detached => {
            // SAFETY: setsid is async-signal-safe; a new session is also a new group.
            unsafe {
                cmd.pre_exec(|| {
                    if libc::setsid() < 0 {
                        return Err(io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
    }
    let child = on_spawner_thread(move || cmd.spawn())
        .map_err(|e| component_error(name, &log, &format!("failed to start: {e}")))?;
    Ok(Proc { name, child, log })
}

/// A loopback port that is free right now; never the same one twice in this process.
pub(crate) fn free_port() -> Result<u16> {
    static HANDED_OUT: Mutex<Option<HashSet<u16>>> = Mutex::new(None);
    let mut seen = HANDED_OUT.lock().unwrap_or_else(|p| p.into_inner());
    let seen = seen.get_or_insert_with(HashSet::new);
    for _ in 0..64 {
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .context("binding a loopback port")?
            .local_addr()?
            .port();
        if seen.insert(port) {
            return Ok(port);
        }
    }
    bail!("no free loopback port found")
}

/// Whether something already listens on (or holds) a loopback port.
pub(crate) fn port_in_use(port: u16) -> bool {
    TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_err()
}

/// Whether a process exists and is not a zombie.
pub(crate) fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat_field(&stat, 3).is_some_and(|s| s != "Z" && s != "X"),
        Err(_) => false,
    }
}

/// The process start time in clock ticks since boot; with the pid it names a process
/// uniquely, so a recycled pid is never mistaken for ours.
pub(crate) fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat_field(&stat, 22)?.parse().ok()
}

/// Field `n` (1-based, as in proc(5)) of /proc/<pid>/stat; the command name may hold spaces.
fn stat_field(stat: &str, n: usize) -> Option<&str> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(n.checked_sub(3)?)
}

/// Stops a process group we are not the parent of (a detached plane), SIGTERM first.
pub(crate) fn stop_foreign(pid: u32, expected_start: Option<u64>, grace: Duration) {
    if !alive(pid) || (expected_start.is_some() && start_time(pid) != expected_start) {
        return;
    }
    let pgid = pid as libc::pid_t;
    signal_group(pgid, libc::SIGTERM);
    let deadline = Instant::now() + grace;
    while alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    signal_group(pgid, libc::SIGKILL);
    let deadline = Instant::now() + Duration::from_secs(5);
    while alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    // If we started it ourselves (same process as `start_detached`), reap the zombie.
    // SAFETY: WNOHANG never blocks; for a pid that is not our child this is ECHILD.
    unsafe {
        libc::waitpid(pid as libc::pid_t, std::ptr::null_mut(), libc::WNOHANG);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_json_line_keeps_the_port_clash_in_its_hint() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("kwok.log");
        let pad = "x".repeat(400);
        let line = format!(
            r#"{{"level":"ERROR","msg":"Failed to run server","id":"{pad}","err":"listen tcp 127.0.0.1:4321: bind: address already in use"}}"#
        );
        std::fs::write(&log, format!("starting\n{line}\nbye\n")).unwrap();
        let err = component_error("kwok", &log, "exited during start");
        assert!(is_port_clash(&err), "{err:#}");
        assert!(format!("{err:#}").contains("127.0.0.1:4321"), "{err:#}");
    }

    #[test]
    fn stat_fields_survive_spaces_in_comm() {
        let stat = "42 (a b) S 1 42 42 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 777 0 0";
        assert_eq!(stat_field(stat, 3), Some("S"));
        assert_eq!(stat_field(stat, 22), Some("777"));
    }

    #[test]
    fn own_process_is_alive_with_start_time() {
        let me = std::process::id();
        assert!(alive(me));
        assert!(start_time(me).is_some());
        assert!(capstan_engine::rss_bytes(me) > 0);
    }
}
