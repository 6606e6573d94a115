//! What the operator may set, in the `settings` of the plugin's entry. Every field has a
//! default, so `{}` gives each opted-in Namespace all three objects:
//!
//! ```yaml
//! label: capstan.dev/defaults          # opt-in label; its value must be "true"
//! quota:
//!   enabled: true
//!   hard:                              # replaces the default list as a whole
//!     requests.cpu: "4"
//!     requests.memory: 8Gi
//!     limits.cpu: "8"
//!     limits.memory: 16Gi
//!     pods: "50"
//! limitRange:                          # per container
//!   enabled: true
//!   defaultCpu: 500m                   # limit of a container that sets none
//!   defaultMemory: 512Mi
//!   defaultRequestCpu: 100m            # request of a container that sets none
//!   defaultRequestMemory: 128Mi
//!   maxCpu: null                       # optional ceilings
//!   maxMemory: null
//! networkPolicy: true                  # deny all ingress to the Namespace's pods
//! ```

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::quantity;

/// The label that opts a Namespace in unless the settings name another.
pub const LABEL: &str = "capstan.dev/defaults";

/// The plugin's settings.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DefaultsSettings {
    /// Label whose value "true" opts a Namespace in; other Namespaces get nothing.
    #[serde(default = "default_label")]
    pub label: String,
    /// The Namespace's ResourceQuota.
    #[serde(default)]
    pub quota: QuotaSettings,
    /// The Namespace's LimitRange: defaults and ceilings for each container.
    #[serde(default)]
    pub limit_range: LimitRangeSettings,
    /// A NetworkPolicy that denies all ingress to the Namespace's pods, so each allowed
    /// flow has to be opened by a policy of its own.
    #[serde(default = "yes")]
    pub network_policy: bool,
}

/// The ResourceQuota's settings.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct QuotaSettings {
    /// Create the ResourceQuota.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Its `spec.hard`: resource name → quantity. Given, it replaces the default list.
    #[serde(default = "default_hard")]
    pub hard: BTreeMap<String, String>,
}

/// The LimitRange's settings (all per container).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LimitRangeSettings {
    /// Create the LimitRange.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// CPU limit of a container that sets none.
    #[serde(default = "default_cpu")]
    pub default_cpu: String,
    /// Memory limit of a container that sets none.
    #[serde(default = "default_memory")]
    pub default_memory: String,
    /// CPU request of a container that sets none.
    #[serde(default = "default_request_cpu")]
    pub default_request_cpu: String,
    /// Memory request of a container that sets none.
    #[serde(default = "default_request_memory")]
    pub default_request_memory: String,
    /// Most CPU a container may ask for (none by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cpu: Option<String>,
    /// Most memory a container may ask for (none by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_memory: Option<String>,
}

fn yes() -> bool {
    true
}

fn default_label() -> String {
    LABEL.into()
}

fn default_hard() -> BTreeMap<String, String> {
    [
        ("requests.cpu", "4"),
        ("requests.memory", "8Gi"),
        ("limits.cpu", "8"),
        ("limits.memory", "16Gi"),
        ("pods", "50"),
    ]
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .into()
}

fn default_cpu() -> String {
    "500m".into()
}

fn default_memory() -> String {
    "512Mi".into()
}

fn default_request_cpu() -> String {
    "100m".into()
}

fn default_request_memory() -> String {
    "128Mi".into()
}

impl Default for DefaultsSettings {
    fn default() -> Self {
        DefaultsSettings {
            label: default_label(),
            quota: QuotaSettings::default(),
            limit_range: LimitRangeSettings::default(),
            network_policy: true,
        }
    }
}

impl Default for QuotaSettings {
    fn default() -> Self {
        QuotaSettings {
            enabled: true,
            hard: default_hard(),
        }
    }
}

impl Default for LimitRangeSettings {
    fn default() -> Self {
        LimitRangeSettings {
            enabled: true,
            default_cpu: default_cpu(),
            default_memory: default_memory(),
            default_request_cpu: default_request_cpu(),
            default_request_memory: default_request_memory(),
            max_cpu: None,
            max_memory: None,
        }
    }
}

impl capstan_sdk::Settings for DefaultsSettings {
    fn validate(&self) -> Result<(), String> {
        label_key(&self.label)?;
        if self.quota.enabled {
            if self.quota.hard.is_empty() {
                return Err("quota.hard is empty: give limits or set quota.enabled to false".into());
            }
            for (resource, amount) in &self.quota.hard {
                resource_name(resource).map_err(|e| format!("quota.hard: {e}"))?;
                quantity::parse(amount).map_err(|e| format!("quota.hard.{resource}: {e}"))?;
            }
        }
        if self.limit_range.enabled {
            self.limit_range.validate()?;
        }
        Ok(())
    }
}

impl LimitRangeSettings {
    /// Each quantity parses, and request ≤ limit ≤ max, which the API server requires
    /// of a LimitRange.
    fn validate(&self) -> Result<(), String> {
        let amount =
            |name: &str, text: &str| quantity::parse(text).map_err(|e| format!("limitRange.{name}: {e}"));
        for (resource, request, limit, max) in [
            ("Cpu", &self.default_request_cpu, &self.default_cpu, &self.max_cpu),
            (
                "Memory",
                &self.default_request_memory,
                &self.default_memory,
                &self.max_memory,
            ),
        ] {
            let (request_name, limit_name) =
                (format!("defaultRequest{resource}"), format!("default{resource}"));
            let request_value = amount(&request_name, request)?;
            let limit_value = amount(&limit_name, limit)?;
            if request_value > limit_value {
                return Err(format!(
                    "limitRange.{request_name} {request} is more than limitRange.{limit_name} {limit}"
                ));
            }
            if let Some(max) = max {
                let max_name = format!("max{resource}");
                if limit_value > amount(&max_name, max)? {
                    return Err(format!(
                        "limitRange.{limit_name} {limit} is more than limitRange.{max_name} {max}"
                    ));
                }
            }
        }
        Ok(())
    }
}

/// A label key as Kubernetes allows it: an optional DNS-subdomain prefix and `/`, then a
/// name of at most 63 characters.
fn label_key(key: &str) -> Result<(), String> {
    let fine = key
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c));
    // A bare key is an "exists" requirement: the contract's selector parser checks it.
    if fine && capstan_contract::LabelSelector::parse(key).is_ok() && !key.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "label {key:?} is not a label key (e.g. capstan.dev/defaults)"
        ))
    }
}

/// A quota's resource name: `pods`, `requests.cpu`, `count/deployments.apps`, ….
fn resource_name(name: &str) -> Result<(), String> {
    let fine = !name.is_empty()
        && name.len() <= 253
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "-./".contains(c));
    if fine {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not a resource name (e.g. requests.cpu, pods)"
        ))
    }
}
