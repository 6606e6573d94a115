//! Every metric's name and help text, in one place: controller-runtime's and client-go's
//! names first, then Capstan's own.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::{Metric, Registry};

use super::Metrics;

/// One registered metric: its name, kind and help, as `/metrics` describes it.
#[derive(Clone, Debug)]
pub struct Described {
    /// The name registered (prometheus-client adds `_total` to a counter's).
    pub name: &'static str,
    /// `counter`, `gauge` or `histogram`.
    pub kind: &'static str,
    /// The names of its labels (none for a single series).
    pub labels: Vec<String>,
    /// The help text.
    pub help: &'static str,
}

impl Described {
    /// The names of the series the text format writes for it.
    pub fn series(&self) -> Vec<String> {
        match self.kind {
            "counter" => vec![format!("{}_total", self.name)],
            "histogram" => ["_bucket", "_sum", "_count"]
                .iter()
                .map(|s| format!("{}{s}", self.name))
                .collect(),
            _ => vec![self.name.to_string()],
        }
    }
}

/// A registry being filled, and the description of everything put in it.
pub(super) struct Registrar<'a> {
    registry: &'a mut Registry,
    pub(super) described: Vec<Described>,
}

impl<'a> Registrar<'a> {
    pub(super) fn new(registry: &'a mut Registry) -> Self {
        Registrar {
            registry,
            described: Vec::new(),
        }
    }

    fn register<M: Metric + TypedMetric + Labels>(
        &mut self,
        name: &'static str,
        help: &'static str,
        metric: M,
    ) {
        let kind = match M::TYPE {
            MetricType::Counter => "counter",
            MetricType::Gauge => "gauge",
            MetricType::Histogram => "histogram",
            MetricType::Info => "info",
            MetricType::Unknown => "unknown",
        };
        let labels = M::names();
        self.described.push(Described {
            name,
            kind,
            labels,
            help,
        });
        self.registry.register(name, help, metric);
    }
}

/// The label names of a metric's series.
trait Labels {
    fn names() -> Vec<String>;
}

impl<N, A> Labels for Counter<N, A> {
    fn names() -> Vec<String> {
        Vec::new()
    }
}

impl<N, A> Labels for Gauge<N, A> {
    fn names() -> Vec<String> {
        Vec::new()
    }
}

impl Labels for Histogram {
    fn names() -> Vec<String> {
        Vec::new()
    }
}

/// A label set's names, as the text format writes them: label sets only encode
/// themselves, so one series of the default set is written out and read back.
impl<L, M, C> Labels for Family<L, M, C>
where
    L: EncodeLabelSet + Default + Clone + std::hash::Hash + Eq + std::fmt::Debug + Send + Sync + 'static,
{
    fn names() -> Vec<String> {
        let family = Family::<L, Counter>::default();
        drop(family.get_or_create(&L::default()));
        let mut registry = Registry::default();
        registry.register("labels", "", family);
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &registry);
        text.lines()
            .find_map(|l| l.strip_prefix("labels_total{"))
            .and_then(|l| l.split_once('}'))
            .map(|(set, _)| {
                set.split(',')
                    .filter_map(|pair| pair.split_once('='))
                    .map(|(name, _)| name.to_string())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// controller-runtime's and client-go's names, so their dashboards work unchanged.
/// prometheus-client appends `_total` to counters itself.
pub(super) fn controller_runtime(r: &mut Registrar, m: &Metrics) {
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
pub(super) fn capstan(r: &mut Registrar, m: &Metrics) {
    r.register(
        "capstan_wasm_dispatch_seconds",
        "Time of one sandboxed plugin call (call: reconcile or related), instantiation included",
        m.dispatch_time.clone(),
    );
    r.register("capstan_wasm_faults", "Plugin faults by cause", m.faults.clone());
    r.register(
        "capstan_wasm_cpu_seconds",
        "CPU seconds the plugin's calls used (reconcile and related), as charged to its CPU share",
        m.cpu_seconds.clone(),
    );
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
        "capstan_reconcile_put_off",
        "Reconciles put off, wholly or in part, to come back later, by cause: unseen (the caches do not show the parent's last writes yet), cpu_share (the plugin is over its CPU share), write_rate (the parent's writes are slowed by the write-loop guard), creation_rate (creations left for later by the creation budget)",
        m.put_off.clone(),
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
        "Events not recorded, by cause: budget (over the budget of their object and reason: 3, then 1 a minute), queue (the plugin's event queue full), failed (the write failed), shutdown (still queued when the controller stopped), fenced (the term or range it was queued in ended first)",
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
    r.register(
        "capstan_finalizers_stuck",
        "Deletions found waiting past the finalizer timeout for a plugin's cleanup",
        m.finalizers_stuck.clone(),
    );
    r.register(
        "capstan_memory_budget_bytes",
        "The host's memory budget for plugins' linear memory (--memory-budget)",
        m.memory_budget.clone(),
    );
    r.register(
        "capstan_memory_budget_used_bytes",
        "What plugins reserve of the memory budget, and hold above their reservations",
        m.memory_budget_used.clone(),
    );
}
