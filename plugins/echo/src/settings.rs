//! What the operator may set for Echo, in the `settings` of its plugin entry. None are
//! needed: without settings Echo's Jobs are exactly those of Echo before it had any.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Image the Job runs unless the settings name another; pinned so a reconcile is
/// reproducible.
pub const IMAGE: &str = "busybox:1.37.0";

/// Echo's settings.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EchoSettings {
    /// Image of the Job's container; it must provide `echo`.
    #[serde(default = "default_image")]
    pub image: String,
    /// Retries of a failed echo before the Job is marked Failed (default 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_limit: Option<i32>,
    /// Delete a finished Job this many seconds after it finished (default: keep it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds_after_finished: Option<i32>,
}

fn default_image() -> String {
    IMAGE.into()
}

impl Default for EchoSettings {
    fn default() -> Self {
        EchoSettings {
            image: default_image(),
            backoff_limit: None,
            ttl_seconds_after_finished: None,
        }
    }
}

impl capstan_sdk::Settings for EchoSettings {
    fn validate(&self) -> Result<(), String> {
        if self.image.trim().is_empty() || self.image.contains(char::is_whitespace) {
            return Err(format!("image {:?} is not an image reference", self.image));
        }
        for (name, value) in [
            ("backoffLimit", self.backoff_limit),
            ("ttlSecondsAfterFinished", self.ttl_seconds_after_finished),
        ] {
            if let Some(v) = value.filter(|v| *v < 0) {
                return Err(format!("{name} must be at least 0, got {v}"));
            }
        }
        Ok(())
    }
}
