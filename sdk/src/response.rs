//! The desired state a reconcile returns, built fluently.

use std::time::Duration;

use kube_core::Resource;
use serde::{Serialize, de::DeserializeOwned};
use serde_json::value::RawValue;

use crate::{KindRef, ReconcileError, metadata::Scope};
pub use capstan_contract::ParentMetadata;

/// Severity of an [`Event`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// Informational.
    Normal,
    /// Needs a human's attention.
    Warning,
}

/// An event the host records on the parent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// Normal or Warning.
    pub event_type: EventType,
    /// UpperCamelCase reason, e.g. `JobCreated`.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
}

impl Event {
    /// A Normal event.
    pub fn normal(reason: impl Into<String>, message: impl Into<String>) -> Self {
        Event {
            event_type: EventType::Normal,
            reason: reason.into(),
            message: message.into(),
        }
    }

    /// A Warning event.
    pub fn warning(reason: impl Into<String>, message: impl Into<String>) -> Self {
        Event {
            event_type: EventType::Warning,
            reason: reason.into(),
            message: message.into(),
        }
    }
}

/// The full desired state for one parent: the host applies these children, prunes the
/// rest, sets the parent's labels and annotations it names, writes the status and records
/// the events.
#[derive(Clone, Debug, Default)]
pub struct Response {
    /// Desired children as JSON text: serialized once, straight from their types, since
    /// building a `Value` first costs more than the rest of a small reconcile.
    pub children: Vec<Box<RawValue>>,
    /// The parent's new status, if it should change.
    pub status: Option<serde_json::Value>,
    /// Look at this parent again after this long.
    pub requeue_after: Option<Duration>,
    /// Events to record on the parent.
    pub events: Vec<Event>,
    /// Cleanup finished; the host may remove the finalizer.
    pub finalized: bool,
    /// Labels and annotations to set on the parent itself (`Some`) or remove (`None`).
    pub parent: ParentMetadata,
}

impl Response {
    /// An empty response: no children (so every observed child is pruned), status untouched.
    pub fn new() -> Self {
        Response::default()
    }

    /// Add a desired child. Its `apiVersion` and `kind` come from its type.
    pub fn child<K: Serialize>(mut self, child: &K) -> Result<Self, ReconcileError> {
        self.children.push(serde_json::value::to_raw_value(child)?);
        Ok(self)
    }

    /// Set the parent's status (anything that serializes to a JSON object).
    pub fn status<S: Serialize>(mut self, status: &S) -> Result<Self, ReconcileError> {
        self.status = Some(serde_json::to_value(status)?);
        Ok(self)
    }

    /// Reconcile again after `after`, even if nothing changes.
    pub fn requeue_after(mut self, after: Duration) -> Self {
        self.requeue_after = Some(after);
        self
    }

    /// Record an event on the parent.
    pub fn event(mut self, event: Event) -> Self {
        self.events.push(event);
        self
    }

    /// Report that finalization is complete; on a live parent with no children, that the
    /// plugin holds nothing for it (the host takes its finalizer off).
    pub fn finalized(mut self) -> Self {
        self.finalized = true;
        self
    }

    /// Set label `key` of the parent itself to `value`; its other labels stay as they are.
    pub fn parent_label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.parent.labels.insert(key.into(), Some(value.into()));
        self
    }

    /// Remove label `key` from the parent itself, if it is there.
    pub fn remove_parent_label(mut self, key: impl Into<String>) -> Self {
        self.parent.labels.insert(key.into(), None);
        self
    }

    /// Set annotation `key` of the parent itself to `value`; its other annotations stay.
    pub fn parent_annotation(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.parent.annotations.insert(key.into(), Some(value.into()));
        self
    }

    /// Remove annotation `key` from the parent itself, if it is there.
    pub fn remove_parent_annotation(mut self, key: impl Into<String>) -> Self {
        self.parent.annotations.insert(key.into(), None);
        self
    }

    /// The desired children of type `K`, for assertions in tests.
    pub fn children_of<K>(&self) -> Result<Vec<K>, ReconcileError>
    where
        K: Resource<DynamicType = ()> + DeserializeOwned,
        K::Scope: Scope,
    {
        KindRef::of::<K>().parse_all(&self.children, ReconcileError::from)
    }

    /// The desired children as JSON values, for assertions in tests.
    pub fn children_json(&self) -> Result<Vec<serde_json::Value>, ReconcileError> {
        Ok(self
            .children
            .iter()
            .map(|c| serde_json::from_str(c.get()))
            .collect::<Result<_, _>>()?)
    }

    /// The status as `S`, for assertions in tests.
    pub fn status_as<S: DeserializeOwned>(&self) -> Result<Option<S>, ReconcileError> {
        Ok(self.status.as_ref().map(S::deserialize).transpose()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::batch::v1::Job;
    use k8s_openapi::api::core::v1::ConfigMap;

    #[test]
    fn children_are_kept_as_their_json_and_read_back_typed_or_untyped() {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some("cm".into());
        let mut job = Job::default();
        job.metadata.name = Some("job".into());
        let r = Response::new().child(&cm).unwrap().child(&job).unwrap();
        assert_eq!(r.children[0].get(), serde_json::to_string(&cm).unwrap());
        let jobs = r.children_of::<Job>().unwrap();
        assert_eq!(jobs.len(), 1);
        assert_eq!(jobs[0].metadata.name.as_deref(), Some("job"));
        let all = r.children_json().unwrap();
        assert_eq!(all[0]["kind"], "ConfigMap");
        assert_eq!(all[1]["apiVersion"], "batch/v1");
    }
}
