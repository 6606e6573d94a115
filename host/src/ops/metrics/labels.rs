//! The label sets of the host's metrics.

use prometheus_client::encoding::EncodeLabelSet;

/// `controller` label, as controller-runtime uses it.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabel {
    /// Controller name: the plugin name.
    pub controller: String,
}

/// `controller` and `result` labels of `controller_runtime_reconcile_total`.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// Controller name.
    pub controller: String,
    /// success, error, requeue or requeue_after.
    pub result: String,
}

/// `name` label of client-go's workqueue metrics.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabel {
    /// Queue name: the plugin name.
    pub name: String,
}

/// `name` label of `leader_election_master_status`: the Lease name.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LeaseLabel {
    /// Lease name.
    pub name: String,
}

/// Labels of Wasm fault counts.
pub type FaultLabels = CauseLabels;

/// `plugin` and `cause` labels: of faults (see `Fault::cause`), events dropped and
/// reconciles put off.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CauseLabels {
    /// Plugin name.
    pub plugin: String,
    /// Why.
    pub cause: String,
}

/// Labels of `capstan_plugin_reloads_total`.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReloadLabels {
    /// Plugin name (empty when a new file could not be read as a plugin at all).
    pub plugin: String,
    /// reloaded, restarted, started or refused.
    pub result: String,
}

/// `plugin` and `call` labels of plugin call times: `reconcile` or `related`.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    /// Plugin name.
    pub plugin: String,
    /// The export called.
    pub call: String,
}

/// `plugin` label.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginLabel {
    /// Plugin name.
    pub plugin: String,
}

/// Labels of the shadow divergence metrics.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DivergenceLabels {
    /// The shadow's name.
    pub plugin: String,
    /// The kind of the object that would change.
    pub kind: String,
    /// `would-create`, `would-change`, `would-delete`, `would-refuse`, `would-fail`.
    pub change: String,
}

/// Labels of `capstan_events_dropped_total`; the cause is `budget`, `queue`, `failed` or
/// `shutdown`.
pub type EventsDroppedLabels = CauseLabels;

/// Labels of `capstan_cache_objects`.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CacheLabels {
    /// Plugin name.
    pub plugin: String,
    /// The cached kind.
    pub kind: String,
}
