//! The desired state a reconcile returns, built fluently.

use std::time::Duration;

use kube_core::Resource;
use serde::{Serialize, de::DeserializeOwned};

use crate::{KindRef, ReconcileError, metadata::Scope};

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
/// rest, writes the status and records the events.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Response {
    /// Desired children as JSON objects.
    pub children: Vec<serde_json::Value>,
    /// The parent's new status, if it should change.
    pub status: Option<serde_json::Value>,
    /// Look at this parent again after this long.
    pub requeue_after: Option<Duration>,
    /// Events to record on the parent.
    pub events: Vec<Event>,
    /// Cleanup finished; the host may remove the finalizer.
    pub finalized: bool,
}

impl Response {
    /// An empty response: no children (so every observed child is pruned), status untouched.
    pub fn new() -> Self {
        Response::default()
    }

    /// Add a desired child. Its `apiVersion` and `kind` come from its type.
    pub fn child<K: Serialize>(mut self, child: &K) -> Result<Self, ReconcileError> {
        self.children.push(serde_json::to_value(child)?);
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

    /// Report that finalization is complete.
    pub fn finalized(mut self) -> Self {
        self.finalized = true;
        self
    }

    /// The desired children of type `K`, for assertions in tests.
    pub fn children_of<K>(&self) -> Result<Vec<K>, ReconcileError>
    where
        K: Resource<DynamicType = ()> + DeserializeOwned,
        K::Scope: Scope,
    {
        let kind = KindRef::of::<K>();
        self.children
            .iter()
            .filter(|c| kind.matches(c))
            .map(|c| Ok(K::deserialize(c)?))
            .collect()
    }

    /// The status as `S`, for assertions in tests.
    pub fn status_as<S: DeserializeOwned>(&self) -> Result<Option<S>, ReconcileError> {
        Ok(self.status.as_ref().map(S::deserialize).transpose()?)
    }
}
