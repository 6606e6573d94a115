//! Prometheus metrics. Names and labels follow controller-runtime and client-go's
//! workqueue so existing dashboards and alerts work unchanged; Wasm-specific ones are
//! prefixed `capstan_`. One registry per process, one place that names every metric.

use std::sync::OnceLock;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// `controller` label, as controller-runtime uses it.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabel {
    /// Controller name: the plugin name.
    pub controller: String,
}

/// `controller` and `result` labels of `controller_runtime_reconcile_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// Controller name.
    pub controller: String,
    /// success, error, requeue or requeue_after.
    pub result: String,
}

/// `name` label of client-go's workqueue metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabel {
    /// Queue name: the plugin name.
    pub name: String,
}

/// `name` label of `leader_election_master_status`: the Lease name.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LeaseLabel {
    /// Lease name.
    pub name: String,
}

/// Labels of Wasm fault counts.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FaultLabels {
    /// Plugin name.
    pub plugin: String,
    /// Fault cause, see `Fault::cause`.
    pub cause: String,
}

/// Labels of `capstan_plugin_reloads_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReloadLabels {
    /// Plugin name (empty when a new file could not be read as a plugin at all).
    pub plugin: String,
    /// reloaded, restarted, started or refused.
    pub result: String,
}

/// `plugin` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginLabel {
    /// Plugin name.
    pub plugin: String,
}

/// Labels of the shadow divergence metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DivergenceLabels {
    /// The shadow's name.
    pub plugin: String,
    /// The kind of the object that would change.
    pub kind: String,
    /// `would-create`, `would-change`, `would-delete`, `would-refuse`, `would-fail`.
    pub change: String,
}

/// Labels of `capstan_events_dropped_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EventsDroppedLabels {
    /// Plugin name.
    pub plugin: String,
    /// Why: `budget`, `queue`, `failed` or `shutdown`.
    pub cause: String,
}

/// Labels of `capstan_cache_objects`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CacheLabels {
    /// Plugin name.
    pub plugin: String,
    /// The cached kind.
    pub kind: String,
}

/// Every metric the host exports.
pub struct Metrics {
    registry: Registry,
    /// controller_runtime_reconcile_total.
    pub reconcile_total: Family<ResultLabels, Counter>,
    /// controller_runtime_reconcile_errors_total.
    pub reconcile_errors: Family<ControllerLabel, Counter>,
    /// controller_runtime_reconcile_panics_total (plugin panics and other traps).
    pub reconcile_panics: Family<ControllerLabel, Counter>,
    /// controller_runtime_reconcile_time_seconds.
    pub reconcile_time: Family<ControllerLabel, Histogram>,
    /// controller_runtime_max_concurrent_reconciles.
    pub max_concurrent: Family<ControllerLabel, Gauge>,
    /// controller_runtime_active_workers.
    pub active_workers: Family<ControllerLabel, Gauge>,
    /// workqueue_retries_total: reconciles requeued with backoff.
    pub retries: Family<QueueLabel, Counter>,
    /// workqueue_adds_total.
    pub queue_adds: Family<QueueLabel, Counter>,
    /// workqueue_depth.
    pub queue_depth: Family<QueueLabel, Gauge>,
    /// workqueue_queue_duration_seconds: from add to the start of the reconcile.
    pub queue_duration: Family<QueueLabel, Histogram>,
    /// workqueue_work_duration_seconds.
    pub work_duration: Family<QueueLabel, Histogram>,
    /// leader_election_master_status: 1 while this process leads.
    pub leader: Family<LeaseLabel, Gauge>,
    /// capstan_wasm_dispatch_seconds: one sandboxed call, instantiation included.
    pub dispatch_time: Family<PluginLabel, Histogram>,
    /// capstan_wasm_faults_total by cause.
    pub faults: Family<FaultLabels, Counter>,
    /// capstan_plugin_response_refused_total: responses refused by validation.
    pub refused: Family<PluginLabel, Counter>,
    /// capstan_api_writes_total: API writes made by reconciles.
    pub api_writes: Family<PluginLabel, Counter>,
    /// capstan_reconcile_unchanged_total: reconciles that found a parent's inputs as its
    /// last quiet reconcile left them, and did not call the plugin.
    pub unchanged: Family<PluginLabel, Counter>,
    /// capstan_plugin_reloads_total: hot reloads by result.
    pub reloads: Family<ReloadLabels, Counter>,
    /// capstan_child_conflicts_total: responses refused because a child they name
    /// already exists and belongs to someone else.
    pub child_conflicts: Family<PluginLabel, Counter>,
    /// capstan_events_dropped_total: events not recorded, by cause: over their object's
    /// and reason's budget, a full queue, a failed write.
    pub events_dropped: Family<EventsDroppedLabels, Counter>,
    /// capstan_events_written_total: Event creates and series updates written.
    pub events_written: Family<PluginLabel, Counter>,
    /// capstan_status_conflicts_total: status writes not made because another plugin
    /// manages a field they set.
    pub status_conflicts: Family<PluginLabel, Counter>,
    /// capstan_write_loops_total: writes not made because they rewrote content the
    /// plugin had just written (ping-pong with another writer, or a flipping plugin).
    pub write_loops: Family<PluginLabel, Counter>,
    /// capstan_plugin_up: 1 while a plugin's controller runs, 0 while it waits (e.g. for
    /// its kinds to be served) or failed to load.
    pub plugin_up: Family<PluginLabel, Gauge>,
    /// capstan_shadow_divergences_total: what a shadow's reconciles would have written
    /// differently, counted per reconcile.
    pub divergences: Family<DivergenceLabels, Counter>,
    /// capstan_shadow_divergent_objects: objects a shadow's last reconcile of each parent
    /// would write differently, now.
    pub divergent: Family<DivergenceLabels, Gauge>,
    /// capstan_cache_objects: objects each plugin's caches hold, by kind.
    pub cached_objects: Family<CacheLabels, Gauge>,
    /// capstan_shard_members: live members this replica counts.
    pub shard_members: Gauge,
    /// capstan_shard_ranges: hash ranges this replica reconciles.
    pub shard_ranges: Gauge,
    /// capstan_shard_share: the share of the hash space they cover (0 to 1).
    pub shard_share: Gauge<f64, std::sync::atomic::AtomicU64>,
    /// capstan_shard_rebalances_total: changes of this replica's ranges.
    pub shard_rebalances: Counter,
}

/// client-go's workqueue buckets: 1 µs to 10 s, ×10.
fn queue_latency() -> Family<QueueLabel, Histogram> {
    Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.000_001, 10.0, 8)))
}

fn latency() -> Family<PluginLabel, Histogram> {
    Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.000_01, 2.0, 20)))
}

/// The process-wide metrics.
pub fn get() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(|| {
        let mut m = Metrics {
            registry: Registry::default(),
            reconcile_total: Family::default(),
            reconcile_errors: Family::default(),
            reconcile_panics: Family::default(),
            reconcile_time: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.000_5, 2.0, 18))
            }),
            max_concurrent: Family::default(),
            active_workers: Family::default(),
            retries: Family::default(),
            queue_adds: Family::default(),
            queue_depth: Family::default(),
            queue_duration: queue_latency(),
            work_duration: queue_latency(),
            leader: Family::default(),
            dispatch_time: latency(),
            faults: Family::default(),
            refused: Family::default(),
            api_writes: Family::default(),
            unchanged: Family::default(),
            reloads: Family::default(),
            child_conflicts: Family::default(),
            plugin_up: Family::default(),
            events_dropped: Family::default(),
            events_written: Family::default(),
            status_conflicts: Family::default(),
            write_loops: Family::default(),
            cached_objects: Family::default(),
            divergences: Family::default(),
            divergent: Family::default(),
            shard_members: Gauge::default(),
            shard_ranges: Gauge::default(),
            shard_share: Gauge::default(),
            shard_rebalances: Counter::default(),
        };
        let mut registry = std::mem::take(&mut m.registry);
        register_controller_runtime(&mut registry, &m);
        register_capstan(&mut registry, &m);
        m.registry = registry;
        m
    })
}

impl Metrics {
    /// The gauge of how many objects of `kind` `plugin`'s caches hold.
    pub fn cache(&self, plugin: &str, kind: &str) -> Gauge {
        self.cached_objects
            .get_or_create(&CacheLabels {
                plugin: plugin.into(),
                kind: kind.into(),
            })
            .clone()
    }

    /// The text exposition format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// Count one finished reconcile of `controller`.
    pub fn reconciled(&self, controller: &str, result: &str, took: Duration) {
        let label = ControllerLabel {
            controller: controller.into(),
        };
        self.reconcile_total
            .get_or_create(&ResultLabels {
                controller: controller.into(),
                result: result.into(),
            })
            .inc();
        self.reconcile_time
            .get_or_create(&label)
            .observe(took.as_secs_f64());
        if result == "error" {
            self.reconcile_errors.get_or_create(&label).inc();
        }
    }
}

/// controller-runtime's and client-go's names, so their dashboards work unchanged.
/// prometheus-client appends `_total` to counters itself.
fn register_controller_runtime(r: &mut Registry, m: &Metrics) {
    r.register(
        "controller_runtime_reconcile",
        "Total number of reconciliations per controller",
        m.reconcile_total.clone(),
    );
    r.register(
        "controller_runtime_reconcile_errors",
        "Total number of reconciliation errors per controller",
        m.reconcile_errors.clone(),
    );
    r.register(
        "controller_runtime_reconcile_panics",
        "Total number of reconciliation panics per controller",
        m.reconcile_panics.clone(),
    );
    r.register(
        "controller_runtime_reconcile_time_seconds",
        "Length of time per reconciliation per controller",
        m.reconcile_time.clone(),
    );
    r.register(
        "controller_runtime_max_concurrent_reconciles",
        "Maximum number of concurrent reconciles per controller",
        m.max_concurrent.clone(),
    );
    r.register(
        "controller_runtime_active_workers",
        "Number of currently used workers per controller",
        m.active_workers.clone(),
    );
    r.register(
        "workqueue_retries",
        "Total number of retries handled by workqueue",
        m.retries.clone(),
    );
    r.register(
        "workqueue_adds",
        "Total number of adds handled by workqueue",
        m.queue_adds.clone(),
    );
    r.register(
        "workqueue_depth",
        "Current depth of workqueue",
        m.queue_depth.clone(),
    );
    r.register(
        "workqueue_queue_duration_seconds",
        "How long in seconds an item stays in workqueue before being requested",
        m.queue_duration.clone(),
    );
    r.register(
        "workqueue_work_duration_seconds",
        "How long in seconds processing an item from workqueue takes",
        m.work_duration.clone(),
    );
    r.register(
        "leader_election_master_status",
        "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master",
        m.leader.clone(),
    );
}

/// Capstan's own: the sandbox, the write path's guards, plugin lifecycle.
fn register_capstan(r: &mut Registry, m: &Metrics) {
    r.register(
        "capstan_wasm_dispatch_seconds",
        "Time of one sandboxed plugin call, instantiation included",
        m.dispatch_time.clone(),
    );
    r.register("capstan_wasm_faults", "Plugin faults by cause", m.faults.clone());
    r.register(
        "capstan_plugin_response_refused",
        "Plugin responses refused by validation",
        m.refused.clone(),
    );
    r.register(
        "capstan_reconcile_unchanged",
        "Reconciles that found the inputs of the parent's last quiet reconcile and did not call the plugin",
        m.unchanged.clone(),
    );
    r.register(
        "capstan_api_writes",
        "API writes (apply, delete, status, finalizer) made by reconciles; events are counted in capstan_events_written",
        m.api_writes.clone(),
    );
    r.register(
        "capstan_plugin_reloads",
        "Plugin files reloaded, restarted with new watches, started, or refused",
        m.reloads.clone(),
    );
    r.register(
        "capstan_child_conflicts",
        "Responses refused because a child they name exists and belongs to another owner",
        m.child_conflicts.clone(),
    );
    r.register(
        "capstan_events_dropped",
        "Events not recorded, by cause: budget (over the budget of their object and reason: 3, then 1 a minute), queue (the plugin's event queue full), failed (the write failed), shutdown (still queued when the controller stopped)",
        m.events_dropped.clone(),
    );
    r.register(
        "capstan_events_written",
        "Event creates and series updates written, off the reconciles' path",
        m.events_written.clone(),
    );
    r.register(
        "capstan_status_conflicts",
        "Status writes not made: another plugin manages a field they set",
        m.status_conflicts.clone(),
    );
    r.register(
        "capstan_write_loops",
        "Writes not made: they rewrote content the plugin had just written (3, then 1 a minute per object)",
        m.write_loops.clone(),
    );
    r.register(
        "capstan_plugin_up",
        "1 while the plugin's controller runs, 0 while it waits for its kinds or failed to load",
        m.plugin_up.clone(),
    );
    r.register(
        "capstan_shadow_divergences",
        "What a shadow plugin's reconciles would have written differently from the cluster, per reconcile, by kind and change",
        m.divergences.clone(),
    );
    r.register(
        "capstan_shadow_divergent_objects",
        "Objects a shadow plugin would write differently now (its last reconcile of each parent), by kind and change",
        m.divergent.clone(),
    );
    r.register(
        "capstan_cache_objects",
        "Objects held in the host's caches, by plugin and kind (parents, children, related)",
        m.cached_objects.clone(),
    );
    r.register(
        "capstan_shard_members",
        "Live members of the shard group, as this replica counts them",
        m.shard_members.clone(),
    );
    r.register(
        "capstan_shard_ranges",
        "Hash ranges this replica reconciles",
        m.shard_ranges.clone(),
    );
    r.register(
        "capstan_shard_share",
        "Share of the hash space this replica reconciles (0 to 1)",
        m.shard_share.clone(),
    );
    r.register(
        "capstan_shard_rebalances",
        "Changes of the ranges this replica reconciles",
        m.shard_rebalances.clone(),
    );
}
