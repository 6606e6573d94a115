//! Why a reconcile produced no response.

use std::fmt;

/// A reconcile failure, as the host sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReconcileError {
    /// Transient: the host retries with per-object exponential backoff.
    Retry(String),
    /// Permanent for this object as it is: the host records a Warning event and waits
    /// until the object changes.
    Fatal(String),
}

impl ReconcileError {
    /// A transient failure worth retrying.
    pub fn retry(message: impl Into<String>) -> Self {
        ReconcileError::Retry(message.into())
    }

    /// A failure that retrying cannot fix until the object changes.
    pub fn fatal(message: impl Into<String>) -> Self {
        ReconcileError::Fatal(message.into())
    }

    /// The message, whichever variant.
    pub fn message(&self) -> &str {
        match self {
            ReconcileError::Retry(m) | ReconcileError::Fatal(m) => m,
        }
    }
}

impl fmt::Display for ReconcileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReconcileError::Retry(m) => write!(f, "retry: {m}"),
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
