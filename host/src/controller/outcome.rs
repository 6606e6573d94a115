//! What the steps of a reconcile hand each other and report: the error that backs a
//! parent off, an observed child, and what the write steps did. A leaf: every step
//! imports it, it imports none of them.

use std::sync::Arc;
use std::time::Duration;

use super::compact::Compact;
use crate::ops::metrics;
use crate::validate;

/// Why a reconcile must be retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The plugin asked to retry, after its own delay or with backoff.
    #[error("plugin asked to retry: {message}")]
    Retry {
        /// Why.
        message: String,
        /// The plugin's delay, capped.
        after: Option<Duration>,
    },
    /// The plugin's related queries broke the rules; nothing was dispatched.
    #[error("related queries refused: {0}")]
    RelatedRefused(String),
    /// The plugin faulted.
    #[error("plugin fault: {0}")]
    Fault(crate::engine::Fault),
    /// The plugin's response broke the rules; nothing was applied.
    #[error("response refused: {0}")]
    Refused(validate::Refusal),
    /// A Kubernetes API call failed.
    #[error("API: {0}")]
    Api(#[from] kube::Error),
    /// A child the response names exists and belongs to someone else; nothing was applied.
    #[error("child conflict: {0}")]
    Conflict(String),
    /// Another plugin manages a status field the response sets; the status was not written.
    #[error("status conflict: {0}")]
    StatusHeld(String),
    /// A write would repeat content just written (ping-pong); it was not made.
    #[error("write loop: {0}")]
    Loop(String),
    /// The plugin is over its CPU share: not dispatched, back after this long.
    #[error("over the plugin's CPU share; back in {0:?}")]
    Deferred(Duration),
    /// The parent's writes are slowed by the write-loop guard: back after this long.
    #[error("the parent's writes are slowed; back in {0:?}")]
    Slowed(Duration),
    /// The caches do not show the parent's last writes yet (read your own writes):
    /// nothing was done; the watch event that shows them wakes the parent first.
    #[error("the caches do not show this parent's last writes yet; back in {0:?} at most")]
    Unseen(Duration),
    /// The blocking dispatch task died.
    #[error("dispatch task failed: {0}")]
    Join(String),
    /// A cached object could not be shown whole; nothing was dispatched.
    #[error("cached object unreadable: {0}")]
    Cache(#[from] serde_json::Error),
}

impl Error {
    /// How long until the reconcile comes back, when this is no failure but a wait: the
    /// plugin over its CPU share, the parent's writes slowed, its last writes unseen.
    pub fn put_off(&self) -> Option<Duration> {
        match self {
            Error::Deferred(after) | Error::Unseen(after) | Error::Slowed(after) => Some(*after),
            _ => None,
        }
    }

    /// What kind of failure this is, without any text that came from the plugin: what a
    /// log line says once the plugin's log budget is spent.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Retry { .. } => "plugin asked to retry",
            Error::RelatedRefused(_) => "related queries refused",
            Error::Fault(_) => "plugin fault",
            Error::Refused(_) => "response refused",
            Error::Api(_) => "API",
            Error::Conflict(_) => "child conflict",
            Error::StatusHeld(_) => "status conflict",
            Error::Loop(_) => "write loop",
            Error::Deferred(_) => "over the plugin's CPU share",
            Error::Unseen(_) => "last writes not yet seen",
            Error::Slowed(_) => "writes slowed",
            Error::Join(_) => "dispatch task failed",
            Error::Cache(_) => "cached object unreadable",
        }
    }
}

/// What carrying out an answer came to: what the writes did, or why the answer stands
/// unwritten or half-written (refused, conflicted, put off, failed).
pub(super) type Outcome<T = Writes> = Result<T, Error>;

/// An observed child: which declared kind, and the object from its cache.
#[derive(Clone)]
pub(super) struct Observed {
    pub kind: usize,
    pub object: Arc<Compact>,
}

/// What the write steps of one reconcile did, added up step by step. A write that would
/// repeat ping-pong is not here: it is [`Error::Loop`], which backs the parent off.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Writes {
    /// Some API write was made.
    pub wrote: bool,
    /// Some write was left for later (a creation over the rate); back after this long.
    pub deferred: Option<Duration>,
}

impl Writes {
    /// One write made by `plugin`'s reconcile, counted.
    pub fn wrote(plugin: &str) -> Writes {
        count_write(plugin);
        Writes {
            wrote: true,
            deferred: None,
        }
    }

    /// A write a preview found would be made (made by nobody, counted nowhere).
    pub fn would() -> Writes {
        Writes {
            wrote: true,
            deferred: None,
        }
    }

    /// A write left for later.
    pub fn deferred(after: Duration) -> Writes {
        Writes {
            wrote: false,
            deferred: Some(after),
        }
    }

    /// Both steps' writes; the earliest deferral.
    pub fn and(self, other: Writes) -> Writes {
        let deferred = match (self.deferred, other.deferred) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Writes {
            wrote: self.wrote || other.wrote,
            deferred,
        }
    }
}

/// Count one API write of `plugin`'s reconciles.
pub(super) fn count_write(plugin: &str) {
    metrics::count(|m| &m.api_writes, plugin);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_add_up_to_the_earliest_deferral_and_any_write() {
        let none = Writes::default();
        let later = |s| Writes::deferred(Duration::from_secs(s));
        assert_eq!(none.and(none), none);
        assert_eq!(later(5).and(later(2)).deferred, Some(Duration::from_secs(2)));
        let wrote = Writes::wrote("test").and(later(3));
        assert!(wrote.wrote);
        assert_eq!(wrote.deferred, Some(Duration::from_secs(3)));
    }
}
