//! Carrying out a [`Plan`]: one [`Sink`] trait, with a [`Live`] sink that writes and a
//! [`Dry`] one that asks the API server what each write would store and writes nothing
//! (`capstan diff`, shadows). The steps of a reconcile decide; only the sink knows
//! whether anything is written. The write-loop guard, the creation budget,
//! read-your-own-writes and "count it and raise a Warning" live in the live sink alone.

mod dry;
mod live;

use kube::api::DynamicObject;
use prometheus_client::metrics::family::Family;
use serde_json::Value;

use super::Shared;
use super::outcome::{Error, Observed, Outcome, Writes};
use super::plan::{self, Action, Plan, Step};
use crate::engine::ParentMetadata;
use crate::key::ObjectKey;
use crate::ops::metrics::{Metrics, PluginLabel};
use crate::preview::Change;
use crate::validate::Child;
pub(super) use dry::Dry;
pub(super) use live::Live;

/// The parent a reconcile writes for, and as whom.
pub(super) struct At<'a> {
    pub shared: &'a Shared,
    pub parent: &'a DynamicObject,
    /// The field manager and label the writes are made with ([`Sink::writer`]).
    pub writer: &'a str,
}

/// A plugin's counter of one cause, in the process-wide metrics.
pub(super) type Counter = fn(&Metrics) -> &Family<PluginLabel, prometheus_client::metrics::counter::Counter>;

/// A problem the host reports about a parent: live, a count and a Warning event on it;
/// in a preview, a finding.
pub(super) struct Warning {
    pub reason: &'static str,
    pub message: String,
    /// The plugin's counter of this cause, where it has one.
    pub counter: Option<Counter>,
    /// What a preview finds instead, where it finds anything: the change, and the kind
    /// and key of the object it is about.
    pub finding: Option<(Change, String, ObjectKey)>,
}

impl Warning {
    /// A Warning with no counter of its own and nothing for a preview to find.
    pub fn plain(reason: &'static str, message: String) -> Warning {
        Warning {
            reason,
            message,
            counter: None,
            finding: None,
        }
    }

    /// A refusal of something about the parent itself, found by a preview as such.
    pub fn about_parent(at: &At<'_>, reason: &'static str, message: String) -> Warning {
        let kind = at.shared.parent.kind.clone();
        let finding = Some((Change::Refuse, kind, ObjectKey::of(at.parent)));
        Warning {
            finding,
            ..Warning::plain(reason, message)
        }
    }
}

/// What carries out a plan and reports on it. Each write has its live form and its dry
/// twin in the same method of the two sinks.
#[async_trait::async_trait]
pub(super) trait Sink: Send + Sync {
    /// Whose children, labels and field manager `plugin`'s writes are made as: its own, or
    /// in a preview the live plugin's it previews.
    fn writer<'a>(&'a self, plugin: &'a str) -> &'a str;
    /// Create every child of `steps` or, when one meets another holder, none.
    async fn create(&self, at: &At<'_>, steps: &[&Step]) -> Outcome;
    /// Apply one changed child over the object observed.
    async fn update(&self, at: &At<'_>, step: &Step) -> Outcome;
    /// Delete an observed child the answer no longer holds.
    async fn prune(&self, at: &At<'_>, child: &Observed) -> Outcome;
    /// Set and remove the parent's own labels and annotations the answer changes.
    async fn metadata(&self, at: &At<'_>, changes: &ParentMetadata) -> Outcome;
    /// Apply the parent's status.
    async fn status(&self, at: &At<'_>, status: &Value) -> Outcome;
    /// Set the parent's finalizers (and the annotation recording the plugin's); `true`
    /// when the parent was written.
    async fn finalizers(
        &self,
        at: &At<'_>,
        finalizers: Vec<String>,
        record: Option<&str>,
    ) -> Result<bool, Error>;
    /// Report a problem about the parent.
    fn warn(&self, at: &At<'_>, warning: Warning);
    /// Record one of the plugin's own events on the parent.
    fn event(&self, at: &At<'_>, event: &crate::engine::Event);
    /// Close the reconcile of `object`: `result` is `Err` when its term ended first.
    fn finished(
        &self,
        plugin: &str,
        object: &ObjectKey,
        result: &Result<Outcome<Option<std::time::Duration>>, tokio::time::Instant>,
    );
    /// Say that a reconcile failed and comes back after `delay`.
    fn failed(&self, shared: &Shared, object: &ObjectKey, error: &Error, delay: std::time::Duration);
}

/// Carry out `plan`: the creations (all or none) first — the one write that can meet an
/// object someone else holds, which refuses the answer before anything else is sent —
/// then the updates and the prunes, each set concurrently, then the parent's labels and
/// annotations, then its status.
pub(super) async fn execute(sink: &dyn Sink, at: &At<'_>, plan: &Plan) -> Outcome {
    let creations: Vec<&Step> = plan
        .children
        .iter()
        .filter(|s| s.action == Action::Create)
        .collect();
    let mut writes = sink.create(at, &creations).await?;
    let updates = plan
        .children
        .iter()
        .filter(|s| matches!(s.action, Action::Update { .. }))
        .map(|s| sink.update(at, s));
    writes = all(writes, futures::future::join_all(updates).await)?;
    let prunes = plan.prune.iter().map(|o| sink.prune(at, o));
    writes = all(writes, futures::future::join_all(prunes).await)?;
    if !plan.metadata.is_empty() {
        writes = writes.and(sink.metadata(at, &plan.metadata).await?);
    }
    match &plan.status {
        Some(status) => Ok(writes.and(sink.status(at, status).await?)),
        None => Ok(writes),
    }
}

/// What a set of writes made, added to `writes`; the first failure, once all are done.
fn all(writes: Writes, outcomes: Vec<Outcome>) -> Outcome {
    outcomes.into_iter().try_fold(writes, |w, o| Ok(w.and(o?)))
}

/// Refuse an answer that names an object someone else controls: a `ChildConflict`
/// (`capstan_child_conflicts_total`), and the error that backs the parent off.
pub(super) fn conflict(
    sink: &dyn Sink,
    at: &At<'_>,
    child: &Child,
    holder: &impl crate::apply::Labelled,
) -> Error {
    let message = format!(
        "{} already exists and is not controlled by this {} (its controller: {}); nothing applied",
        plan::describe(child),
        at.shared.parent.kind,
        crate::apply::controller_of(holder)
    );
    sink.warn(
        at,
        Warning {
            reason: "ChildConflict",
            message: message.clone(),
            counter: Some(|m| &m.child_conflicts),
            finding: Some((Change::Refuse, child.kind.kind.clone(), plan::key_of(child))),
        },
    );
    Error::Conflict(message)
}

/// A status field another plugin manages: a `StatusConflict`
/// (`capstan_status_conflicts_total`), and the error that says so.
pub(super) fn status_held(sink: &dyn Sink, at: &At<'_>, message: &str) -> Error {
    let message =
        format!("status not written: {message} (a status field belongs to the plugin that set it first)");
    let warning = Warning {
        counter: Some(|m| &m.status_conflicts),
        ..Warning::about_parent(at, "StatusConflict", message.clone())
    };
    sink.warn(at, warning);
    Error::StatusHeld(message)
}

/// The apply of `status` to the parent `at` names.
fn status_apply<'a>(at: &'a At<'_>, status: &'a Value) -> crate::apply::StatusApply<'a> {
    crate::apply::StatusApply {
        client: &at.shared.client,
        kind: &at.shared.parent,
        parent: at.parent,
        status,
        plugin: at.writer,
    }
}
