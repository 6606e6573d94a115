//! Prometheus metrics. Names and labels follow controller-runtime and client-go's
//! workqueue so existing dashboards and alerts work unchanged; Wasm-specific ones are
//! prefixed `capstan_`. One registry per process, one place that names every metric.

mod labels;
mod register;

pub(crate) use labels::*;
pub use register::Described;

use std::sync::OnceLock;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Why a reconcile was put off, wholly or in part: its parent's last writes not yet in
/// the caches, the plugin over its CPU share, the parent's writes slowed by the write-loop
/// guard, creations left for later by the creation budget.
pub const PUT_OFF_CAUSES: [&str; 4] = ["unseen", "cpu_share", "write_rate", "creation_rate"];

/// Every metric the host exports.
pub struct Metrics {
    registry: Registry,
    /// Every metric in `registry`: name, kind, help.
    described: Vec<Described>,
    /// controller_runtime_reconcile_total.
    pub(crate) reconcile_total: Family<ResultLabels, Counter>,
    /// controller_runtime_reconcile_errors_total.
    pub(crate) reconcile_errors: Family<ControllerLabel, Counter>,
    /// controller_runtime_reconcile_panics_total (plugin panics and other traps).
    pub(crate) reconcile_panics: Family<ControllerLabel, Counter>,
    /// controller_runtime_reconcile_time_seconds.
    pub(crate) reconcile_time: Family<ControllerLabel, Histogram>,
    /// controller_runtime_max_concurrent_reconciles.
    pub(crate) max_concurrent: Family<ControllerLabel, Gauge>,
    /// controller_runtime_active_workers.
    pub(crate) active_workers: Family<ControllerLabel, Gauge>,
    /// workqueue_retries_total: reconciles requeued with backoff.
    pub(crate) retries: Family<QueueLabel, Counter>,
    /// workqueue_adds_total.
    pub(crate) queue_adds: Family<QueueLabel, Counter>,
    /// workqueue_depth.
    pub(crate) queue_depth: Family<QueueLabel, Gauge>,
    /// workqueue_queue_duration_seconds: from add to the start of the reconcile.
    pub(crate) queue_duration: Family<QueueLabel, Histogram>,
    /// workqueue_work_duration_seconds.
    pub(crate) work_duration: Family<QueueLabel, Histogram>,
    /// leader_election_master_status: 1 while this process leads.
    pub(crate) leader: Family<LeaseLabel, Gauge>,
    /// capstan_wasm_dispatch_seconds: one sandboxed call, instantiation included.
    pub(crate) dispatch_time: Family<CallLabels, Histogram>,
    /// capstan_wasm_faults_total by cause.
    pub(crate) faults: Family<FaultLabels, Counter>,
    /// capstan_wasm_cpu_seconds_total: CPU time of the plugin's calls, as charged to its
    /// CPU share.
    pub(crate) cpu_seconds: Family<PluginLabel, Counter<f64, AtomicU64>>,
    /// capstan_plugin_response_refused_total: responses refused by validation.
    pub(crate) refused: Family<PluginLabel, Counter>,
    /// capstan_api_writes_total: API writes made by reconciles.
    pub(crate) api_writes: Family<PluginLabel, Counter>,
    /// capstan_reconcile_unchanged_total: reconciles that found a parent's inputs as its
    /// last quiet reconcile left them, and did not call the plugin.
    pub(crate) unchanged: Family<PluginLabel, Counter>,
    /// capstan_reconcile_put_off_total: reconciles that did nothing and come back later,
    /// by cause (see [`PUT_OFF_CAUSES`]).
    pub(crate) put_off: Family<CauseLabels, Counter>,
    /// capstan_plugin_reloads_total: hot reloads by result.
    pub(crate) reloads: Family<ReloadLabels, Counter>,
    /// capstan_child_conflicts_total: responses refused because a child they name
    /// already exists and belongs to someone else.
    pub(crate) child_conflicts: Family<PluginLabel, Counter>,
    /// capstan_events_dropped_total: events not recorded, by cause: over their object's
    /// and reason's budget, a full queue, a failed write.
    pub(crate) events_dropped: Family<EventsDroppedLabels, Counter>,
    /// capstan_events_written_total: Event creates and series updates written.
    pub(crate) events_written: Family<PluginLabel, Counter>,
    /// capstan_status_conflicts_total: status writes not made because another plugin
    /// manages a field they set.
    pub(crate) status_conflicts: Family<PluginLabel, Counter>,
    /// capstan_write_loops_total: writes not made because they rewrote content the
    /// plugin had just written (ping-pong with another writer, or a flipping plugin).
    pub(crate) write_loops: Family<PluginLabel, Counter>,
    /// capstan_plugin_up: 1 while a plugin's controller runs, 0 while it waits (e.g. for
    /// its kinds to be served) or failed to load.
    pub(crate) plugin_up: Family<PluginLabel, Gauge>,
    /// capstan_shadow_divergences_total: what a shadow's reconciles would have written
    /// differently, counted per reconcile.
    pub(crate) divergences: Family<DivergenceLabels, Counter>,
    /// capstan_shadow_divergent_objects: objects a shadow's last reconcile of each parent
    /// would write differently, now.
    pub(crate) divergent: Family<DivergenceLabels, Gauge>,
    /// capstan_cache_objects: objects each plugin's caches hold, by kind.
    pub(crate) cached_objects: Family<CacheLabels, Gauge>,
    /// capstan_shard_members: live members this replica counts.
    pub(crate) shard_members: Gauge,
    /// capstan_shard_ranges: hash ranges this replica reconciles.
    pub(crate) shard_ranges: Gauge,
    /// capstan_shard_share: the share of the hash space they cover (0 to 1).
    pub(crate) shard_share: Gauge<f64, std::sync::atomic::AtomicU64>,
    /// capstan_shard_rebalances_total: changes of this replica's ranges.
    pub(crate) shard_rebalances: Counter,
    /// capstan_finalizers_stuck_total: deletions found waiting past the finalizer
    /// timeout for a plugin's cleanup (each time the host warns about one).
    pub(crate) finalizers_stuck: Family<PluginLabel, Counter>,
    /// capstan_memory_budget_bytes: the host's memory budget for plugins (`--memory-budget`).
    pub(crate) memory_budget: Gauge,
    /// capstan_memory_budget_used_bytes: what plugins reserve of it, and hold above that.
    pub(crate) memory_budget_used: Gauge,
}

/// client-go's workqueue buckets: 1 µs to 10 s, ×10.
fn queue_latency() -> Family<QueueLabel, Histogram> {
    Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.000_001, 10.0, 8)))
}

fn latency() -> Family<CallLabels, Histogram> {
    Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.000_01, 2.0, 20)))
}

/// Count one event of `plugin`'s in a counter family labelled by plugin alone.
pub(crate) fn count(family: impl Fn(&Metrics) -> &Family<PluginLabel, Counter>, plugin: &str) {
    family(get())
        .get_or_create(&PluginLabel {
            plugin: plugin.into(),
        })
        .inc();
}

/// Count one reconcile of `plugin`'s put off by `cause` (one of [`PUT_OFF_CAUSES`]).
pub(crate) fn put_off(plugin: &str, cause: &str) {
    let labels = CauseLabels {
        plugin: plugin.into(),
        cause: cause.into(),
    };
    get().put_off.get_or_create(&labels).inc();
}

/// The process-wide metrics.
pub fn get() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(|| {
        let mut m = Metrics {
            registry: Registry::default(),
            described: Vec::new(),
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
            cpu_seconds: Family::default(),
            refused: Family::default(),
            api_writes: Family::default(),
            unchanged: Family::default(),
            put_off: Family::default(),
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
            finalizers_stuck: Family::default(),
            memory_budget: Gauge::default(),
            memory_budget_used: Gauge::default(),
        };
        let mut registry = std::mem::take(&mut m.registry);
        let mut registrar = register::Registrar::new(&mut registry);
        register::controller_runtime(&mut registrar, &m);
        register::capstan(&mut registrar, &m);
        m.described = registrar.described;
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

    /// Every metric the host exports, whether or not it has a series yet.
    pub fn described(&self) -> &[Described] {
        &self.described
    }

    /// The text exposition format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// Start `plugin`'s counters at zero, as controller-runtime does for each controller:
    /// a series that first appears at 1 shows no `increase()`, so an alert on a plugin's
    /// first fault (of any of `fault_causes`) would never fire, and a dashboard would show
    /// nothing rather than 0. `drop_causes` are why an event may not be recorded.
    pub fn start_plugin(&self, plugin: &str, fault_causes: &[&str], drop_causes: &[&str]) {
        let controller = ControllerLabel {
            controller: plugin.into(),
        };
        for result in ["success", "error", "requeue", "requeue_after"] {
            let labels = ResultLabels {
                controller: plugin.into(),
                result: result.into(),
            };
            drop(self.reconcile_total.get_or_create(&labels));
        }
        drop(self.reconcile_errors.get_or_create(&controller));
        drop(self.reconcile_panics.get_or_create(&controller));
        for cause in fault_causes {
            let labels = FaultLabels {
                plugin: plugin.into(),
                cause: (*cause).into(),
            };
            drop(self.faults.get_or_create(&labels));
        }
        for cause in PUT_OFF_CAUSES {
            let labels = CauseLabels {
                plugin: plugin.into(),
                cause: cause.into(),
            };
            drop(self.put_off.get_or_create(&labels));
        }
        for cause in drop_causes {
            let labels = EventsDroppedLabels {
                plugin: plugin.into(),
                cause: (*cause).into(),
            };
            drop(self.events_dropped.get_or_create(&labels));
        }
        let label = PluginLabel {
            plugin: plugin.into(),
        };
        for family in [
            &self.refused,
            &self.api_writes,
            &self.unchanged,
            &self.child_conflicts,
            &self.events_written,
            &self.status_conflicts,
            &self.write_loops,
            &self.finalizers_stuck,
        ] {
            drop(family.get_or_create(&label));
        }
        drop(self.cpu_seconds.get_or_create(&label));
    }

    /// The memory budget, `(total, used)` bytes, as the engine reports it.
    pub fn memory(&self, (total, used): (usize, usize)) {
        self.memory_budget.set(i64::try_from(total).unwrap_or(i64::MAX));
        self.memory_budget_used
            .set(i64::try_from(used).unwrap_or(i64::MAX));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_started_plugin_exports_its_counters_at_zero() {
        let m = get();
        m.start_plugin("zeroed", &["trap", "deadline"], &["queue"]);
        let text = m.encode();
        for series in [
            r#"controller_runtime_reconcile_total{controller="zeroed",result="error"} 0"#,
            r#"controller_runtime_reconcile_errors_total{controller="zeroed"} 0"#,
            r#"capstan_wasm_faults_total{plugin="zeroed",cause="trap"} 0"#,
            r#"capstan_wasm_faults_total{plugin="zeroed",cause="deadline"} 0"#,
            r#"capstan_events_dropped_total{plugin="zeroed",cause="queue"} 0"#,
            r#"capstan_write_loops_total{plugin="zeroed"} 0"#,
            r#"capstan_finalizers_stuck_total{plugin="zeroed"} 0"#,
        ] {
            assert!(text.contains(series), "missing {series}");
        }
    }

    #[test]
    fn every_metric_is_described_with_its_labels() {
        let described = get().described();
        let faults = described
            .iter()
            .find(|d| d.name == "capstan_wasm_faults")
            .expect("described");
        assert_eq!(
            (faults.kind, faults.labels.clone()),
            ("counter", vec!["plugin".into(), "cause".into()])
        );
        let share = described
            .iter()
            .find(|d| d.name == "capstan_shard_share")
            .expect("described");
        assert_eq!((share.kind, share.labels.len()), ("gauge", 0));
        let dispatch = described
            .iter()
            .find(|d| d.name == "capstan_wasm_dispatch_seconds")
            .expect("described");
        assert_eq!(dispatch.series()[0], "capstan_wasm_dispatch_seconds_bucket");
    }

    #[test]
    fn the_memory_budget_is_exported_as_set() {
        let m = get();
        m.memory((400 << 20, 100 << 20));
        let text = m.encode();
        assert!(text.contains(&format!("capstan_memory_budget_bytes {}", 400u64 << 20)));
        assert!(text.contains(&format!("capstan_memory_budget_used_bytes {}", 100u64 << 20)));
    }
}
