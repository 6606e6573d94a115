//! Loads reconcile plugins (WebAssembly components) and runs them in a sandbox.
//!
//! One [`Engine`] per host compiles components and owns the instance pool and the epoch
//! ticker that enforces deadlines. A [`Plugin`] is a validated, precompiled component;
//! every [`Plugin::reconcile`] runs in a fresh `Store` and instance, so no state leaks
//! between objects and a trap only poisons the instance it happened in.
//!
//! ```no_run
//! use capstan_engine::{Engine, Limits, Request};
//!
//! let engine = Engine::new(Default::default())?;
//! let plugin = engine.load_file("echo.wasm".as_ref(), Limits::default())?;
//! let response = plugin.reconcile(&Request {
//!     parent: serde_json::json!({"apiVersion": "capstan.dev/v1alpha1", "kind": "Echo",
//!         "metadata": {"name": "hi", "namespace": "default"}, "spec": {"message": "hi"}})
//!     .into(),
//!     ..Default::default()
//! });
//! # anyhow::Ok(())
//! ```

#![warn(missing_docs)]

mod bindings;
pub mod bucket;
mod budget;
mod cache;
mod clocks;
mod compiled;
mod deadline;
mod fault;
mod instance;
mod kept;
mod limits;
mod load;
mod logs;
mod memory;
mod pagemap;
mod parsed;
mod plugin;
mod rename;
mod sandbox;
mod slots;
mod text;
mod types;
mod versions;
mod waits;

use std::sync::Arc;
use std::time::Duration;

use wasmtime::component::Linker;

pub use bindings::{OLDER_VERSIONS, WIT_PACKAGE};
pub use cache::private_dir;
pub use deadline::{ThreadClock, thread_cpu_time};
pub use fault::{DispatchError, Fault};
pub use instance::Instance;
pub use limits::Limits;
pub use load::LoadError;
pub use memory::rss_bytes;
pub use parsed::Held;
use plugin::NO_SETTINGS;
pub use plugin::Plugin;
pub use types::{
    Event, EventType, Json, Kind, Metadata, ParentMetadata, RelatedParent, RelatedQuery, Request, Response,
    Selector,
};

use sandbox::State;

/// Linear memory of each pool slot kept resident (and reset in place) between calls.
const KEEP_RESIDENT: usize = 2 << 20;

/// How often the deadline clock ticks; deadlines are enforced to within one tick.
const EPOCH_TICK: Duration = Duration::from_millis(5);

/// The longest retry delay a plugin may ask for.
pub const MAX_RETRY_DELAY: Duration = Duration::from_secs(300);

/// The host's memory budget unless configured: floors of about 190 plugins of Echo's size
/// (5.2 MiB, most of it the lift allowance of a 4 MiB response), or eight at the default
/// `memoryTotal` in full.
pub const DEFAULT_MEMORY_BUDGET: usize = 1 << 30;

/// Engine-wide settings, fixed at start-up.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Instances that may exist at once across all plugins (pool slots).
    pub max_instances: u32,
    /// The largest memory limit any plugin may be given.
    pub max_memory: usize,
    /// Linear memory all loaded plugins may hold together: the sum of their
    /// `memoryTotal`s must fit, or a plugin is refused at load.
    pub memory_budget: usize,
    /// Where compiled components are kept between runs; `None` compiles every load.
    pub cache_dir: Option<std::path::PathBuf>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            max_instances: 256,
            max_memory: 1 << 30,
            memory_budget: DEFAULT_MEMORY_BUDGET,
            cache_dir: None,
        }
    }
}

/// What the instance pool keeps resident in slots no instance uses, as it counts it.
fn resident(engine: &wasmtime::Engine) -> Box<dyn Fn() -> usize + Send + Sync> {
    match engine.pooling_allocator_metrics() {
        Some(pool) => {
            Box::new(move || pool.unused_memory_bytes_resident() + pool.unused_table_bytes_resident())
        }
        None => Box::new(|| 0),
    }
}

/// Reset pool slots with `PAGEMAP_SCAN` only where it leaves no page of a call behind.
fn scan_or_not() -> wasmtime::Enabled {
    match pagemap::check() {
        Ok(()) => wasmtime::Enabled::Auto,
        Err(reason) => {
            tracing::info!("pool slots reset without the pagemap scan, slower but clean: {reason}");
            wasmtime::Enabled::No
        }
    }
}

/// Compiles plugins and runs their calls; cheap to clone.
#[derive(Clone)]
pub struct Engine {
    inner: wasmtime::Engine,
    linker: Arc<Linker<State>>,
    config: EngineConfig,
    cache: Option<cache::CompileCache>,
    slots: Arc<slots::Slots>,
    budget: Arc<memory::Budget>,
    /// Code shared by plugins loaded from the same bytes.
    compiled: Arc<compiled::Compiled>,
    /// The deadline clock, ticking while instances live.
    clock: Arc<deadline::Clock>,
}

impl Engine {
    /// An engine with a pooling allocator sized by `config` and a running deadline clock.
    pub fn new(config: EngineConfig) -> anyhow::Result<Engine> {
        let cache = match &config.cache_dir {
            Some(dir) => Some(
                cache::CompileCache::open(dir)
                    .map_err(|e| anyhow::anyhow!("compile cache {}: {e}", dir.display()))?,
            ),
            None => None,
        };
        let mut pool = wasmtime::PoolingAllocationConfig::new();
        // A Rust component holds a handful of core instances and tables but one memory.
        pool.total_component_instances(config.max_instances)
            .total_core_instances(config.max_instances * 8)
            .total_memories(config.max_instances * 2)
            .total_tables(config.max_instances * 8)
            .total_stacks(config.max_instances)
            .max_memory_size(config.max_memory)
            // Keeping a slot's first pages resident and resetting them with pagemap
            // scanning is what makes a fresh instance per call cheap; 2 MiB holds all
            // of a typical plugin's memory (Echo's is 1.1 MiB), so such calls give
            // nothing back to the kernel and need no syscall to end.
            .linear_memory_keep_resident(KEEP_RESIDENT)
            .table_keep_resident(64 << 10)
            .pagemap_scan(scan_or_not())
            // What lies beyond is returned as the call ends, not batched: a batch of
            // 16 memory bombs would keep up to 16 × their cap resident after a burst.
            .decommit_batch_size(1);
        let mut wasm = wasmtime::Config::new();
        wasm.allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(pool))
            .epoch_interruption(true)
            .wasm_component_model(true);
        let inner = wasmtime::Engine::new(&wasm)?;

        let mut linker = Linker::new(&inner);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
        waits::add_to_linker(&mut linker)?;
        versions::add_to_linker(&mut linker)?;

        let clock = deadline::Clock::start(&inner, EPOCH_TICK)?;
        let budget = memory::Budget::with_pool(config.memory_budget, resident(&inner));
        Ok(Engine {
            clock,
            inner,
            linker: Arc::new(linker),
            slots: slots::Slots::new(config.max_instances),
            budget,
            compiled: Arc::default(),
            config,
            cache,
        })
    }

    /// Load, validate and precompile a plugin file.
    pub fn load_file(&self, path: &std::path::Path, limits: Limits) -> Result<Plugin, LoadError> {
        let bytes =
            std::fs::read(path).map_err(|e| LoadError::Read(path.display().to_string(), e.to_string()))?;
        self.load(&bytes, limits)
    }

    /// Load, validate and precompile a plugin from bytes, and read its metadata.
    pub fn load(&self, bytes: &[u8], limits: Limits) -> Result<Plugin, LoadError> {
        self.check_limits(&limits)?;
        let pre = self.compiled.get_or_link(bytes, || {
            let (component, version) = load::compile(&self.inner, self.cache.as_ref(), bytes)?;
            versions::Pre::new(&self.linker, &self.inner, &component, version)
        })?;
        // Reserved from the host's budget once the plugin's name is known.
        let memory = memory::PluginMemory::new(limits.memory_total, None);
        let mut plugin = Plugin {
            engine: self.clone(),
            pre,
            // Set with the memory reserved below: the loading calls are fresh.
            kept: None,
            memory,
            logs: Arc::new(logs::LogBudget::new(limits.log_bytes_per_second)),
            limits,
            name: Arc::from("<loading>"),
            metadata: None,
            settings: Arc::from(NO_SETTINGS),
            footprint: 0,
            declared: None,
        };
        let mut instance = plugin
            .instantiate("<metadata>")
            .map_err(|f| LoadError::Metadata(f.to_string()))?;
        let mut metadata = instance
            .metadata()
            .map_err(|f| LoadError::Metadata(f.to_string()))??;
        plugin.footprint = instance.footprint();
        drop(instance);
        load::validate_metadata(&mut metadata)?;
        plugin.memory = self.reserve(&metadata.name, &plugin.limits, plugin.footprint)?;
        plugin.kept = kept::Kept::of(self, &plugin.memory, &plugin.limits);
        plugin.name = Arc::from(metadata.name.as_str());
        plugin.metadata = Some(metadata);
        Ok(plugin)
    }
}

impl Engine {
    /// The memory budget shared by all plugins and what they reserve or hold of it now,
    /// `(total, used)` in bytes.
    pub fn memory_budget(&self) -> (usize, usize) {
        self.budget.usage()
    }

    /// Instances that may exist at once across all plugins.
    pub fn max_instances(&self) -> u32 {
        self.config.max_instances
    }

    fn check_limits(&self, limits: &Limits) -> Result<(), LoadError> {
        if limits.memory > self.config.max_memory {
            return Err(LoadError::Limits(format!(
                "memory limit {} exceeds the engine maximum {}",
                limits.memory, self.config.max_memory
            )));
        }
        if limits.memory > limits.memory_total {
            return Err(LoadError::Limits(format!(
                "memory limit {} of one call exceeds the plugin's memoryTotal {}",
                limits.memory, limits.memory_total
            )));
        }
        Ok(())
    }

    /// The plugin's memory: its total, with a floor in the host's budget of what one
    /// instance was measured to hold (`footprint`), within the total.
    fn reserve(
        &self,
        name: &str,
        limits: &Limits,
        footprint: usize,
    ) -> Result<Arc<memory::PluginMemory>, LoadError> {
        let reservation = self
            .budget
            .reserve(name, footprint.min(limits.memory_total))
            .map_err(LoadError::Budget)?;
        Ok(memory::PluginMemory::new(limits.memory_total, Some(reservation)))
    }
}

/// What a controller dispatches reconciles to: a sandboxed [`Plugin`], or native code
/// implementing the same contract (benchmarks compare the two).
pub trait Reconcile: Send + Sync + 'static {
    /// What the reconciler declares.
    fn metadata(&self) -> &Metadata;
    /// What the reconciler reads for `parent` besides its children.
    fn related(&self, _parent: &RelatedParent) -> Result<Vec<RelatedQuery>, DispatchError> {
        Ok(Vec::new())
    }
    /// One reconcile.
    fn reconcile(&self, request: &Request) -> Result<Response, DispatchError>;
    /// Charge `bytes` of the plugin's own text that the host repeats in its log to the
    /// plugin's log budget; `false` when the budget has no room (leave the text out).
    fn charge_log(&self, _bytes: usize) -> bool {
        true
    }
}

/// `namespace/name` (or `name`) of an object, for logs.
pub fn object_key(object: &Json) -> String {
    match names_in(object.text()) {
        Some((Some(namespace), name)) => format!("{namespace}/{name}"),
        Some((None, name)) => name,
        None => "<unnamed>".to_string(),
    }
}

/// The namespace (`None` when it has none) and name of an object given as JSON text, read
/// without a tree of the whole object; `None` when it has no name.
pub fn names_in(object: &str) -> Option<(Option<String>, String)> {
    #[derive(serde::Deserialize)]
    struct Object<'a> {
        #[serde(borrow)]
        metadata: Option<Meta<'a>>,
    }
    #[derive(serde::Deserialize)]
    struct Meta<'a> {
        #[serde(borrow)]
        namespace: Option<std::borrow::Cow<'a, str>>,
        #[serde(borrow)]
        name: Option<std::borrow::Cow<'a, str>>,
    }
    let meta = serde_json::from_str::<Object<'_>>(object).ok()?.metadata?;
    Some((meta.namespace.map(Into::into), meta.name?.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_object_is_named_namespace_slash_name_or_name_from_its_text() {
        let named = |text: &str| object_key(&serde_json::from_str::<serde_json::Value>(text).unwrap().into());
        assert_eq!(named(r#"{"metadata": {"namespace": "ns", "name": "a"}}"#), "ns/a");
        assert_eq!(named(r#"{"metadata": {"name": "a", "namespace": null}}"#), "a");
        assert_eq!(named(r#"{"metadata": {}}"#), "<unnamed>");
        assert_eq!(names_in("[]"), None);
    }
}
