//! Why a reconcile produced no response.

use std::fmt;
use std::time::Duration;

/// A reconcile failure, as the host sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReconcileError {
    /// Transient: the host retries, after `after` when given (capped at five minutes by
    /// the host), else with per-object exponential backoff.
    Retry {
        /// What went wrong, for logs and events.
        message: String,
        /// How long to wait before the retry.
        after: Option<Duration>,
    },
    /// Permanent for this object as it is: the host records a Warning event and waits
    /// until the object changes.
    Fatal(String),
}

impl ReconcileError {
    /// A transient failure worth retrying, with the host's exponential backoff.
    pub fn retry(message: impl Into<String>) -> Self {
        ReconcileError::Retry {
            message: message.into(),
            after: None,
        }
    }

    /// A transient failure worth retrying after `after`, e.g. when the plugin knows when
    /// a dependency will be ready.
    pub fn retry_after(message: impl Into<String>, after: Duration) -> Self {
        ReconcileError::Retry {
            message: message.into(),
            after: Some(after),
        }
    }

    /// A failure that retrying cannot fix until the object changes.
    pub fn fatal(message: impl Into<String>) -> Self {
        ReconcileError::Fatal(message.into())
    }

    /// The message, whichever variant.
    pub fn message(&self) -> &str {
        match self {
            ReconcileError::Retry { message, .. } | ReconcileError::Fatal(message) => message,
        }
    }
}

impl fmt::Display for ReconcileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReconcileError::Retry { message, after: None } => write!(f, "retry: {message}"),
            ReconcileError::Retry {
                message,
                after: Some(after),
            } => write!(f, "retry after {after:?}: {message}"),
            ReconcileError::Fatal(m) => write!(f, "fatal: {m}"),
        }
    }
}

impl std::error::Error for ReconcileError {}

/// Malformed objects are a bug in the plugin or an invalid object: retrying will not help.
impl From<serde_json::Error> for ReconcileError {
    fn from(e: serde_json::Error) -> Self {
        ReconcileError::Fatal(format!("invalid object: {e}"))
    }
}
