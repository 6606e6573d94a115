//! The kinds a plugin names, and what it declares about itself.

use serde::{Deserialize, Serialize};

/// A Kubernetes kind a plugin names.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Kind {
    /// API group, empty for core.
    pub group: String,
    /// Version within the group.
    pub version: String,
    /// CamelCase kind.
    pub kind: String,
    /// Lower-case plural.
    pub plural: String,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
}

impl Kind {
    /// `group/version`, or `version` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// True when an operator's `key` names this kind: its `Kind`, or `plural.group` (how
    /// `allowClusterKinds` and `updates` name kinds).
    pub fn is_named(&self, key: &str) -> bool {
        key == self.kind
            || key
                .strip_prefix(self.plural.as_str())
                .and_then(|rest| rest.strip_prefix('.'))
                .is_some_and(|group| group == self.group)
    }

    /// True when a JSON object's `apiVersion` and `kind` name this kind.
    pub fn matches(&self, object: &serde_json::Value) -> bool {
        object["kind"].as_str() == Some(self.kind.as_str())
            && object["apiVersion"].as_str() == Some(self.api_version().as_str())
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.kind, self.api_version())
    }
}

/// What a plugin declares about itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Metadata {
    /// Plugin name.
    pub name: String,
    /// Plugin version.
    pub version: String,
    /// The reconciled kind.
    pub parent: Kind,
    /// Kinds it may create.
    pub children: Vec<Kind>,
    /// Kinds it reads but never writes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub related: Vec<Kind>,
    /// JSON Schema of its settings, if it takes any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings_schema: Option<serde_json::Value>,
    /// Finalizer it asks for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finalizer: Option<String>,
}
