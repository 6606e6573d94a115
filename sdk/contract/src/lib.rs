//! The contract between a Capstan plugin and the host, as data and rules: the kinds a
//! plugin declares, what the host lets a response do, and the labels and annotation the
//! host keeps for itself.
//!
//! This is the one source of truth for plugin and response validation: `capstan run`
//! checks every plugin it loads with [`declared::declared`] and every response with [`response`]
//! before a single write, `capstan test` applies it offline,
//! and the SDK's `testing::Fixture` applies it in `cargo test`, so the three cannot
//! disagree. Pure logic on JSON, no I/O; it builds for `wasm32-wasip2` too.
//!
//! ```
//! use capstan_contract::{Allowances, Kind, Metadata, children};
//! use serde_json::json;
//!
//! let config_map = Kind {
//!     group: "".into(),
//!     version: "v1".into(),
//!     kind: "ConfigMap".into(),
//!     plural: "configmaps".into(),
//!     namespaced: true,
//! };
//! let metadata = Metadata {
//!     name: "greeter".into(),
//!     version: "0.1.0".into(),
//!     parent: Kind { group: "example.com".into(), kind: "Greeting".into(), plural: "greetings".into(), ..config_map.clone() },
//!     children: vec![config_map],
//!     related: vec![],
//!     settings_schema: None,
//!     finalizer: None,
//! };
//! let ok = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}});
//! let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}});
//! let allow = Allowances::default();
//! assert_eq!(children(&metadata, Some("demo"), vec![ok.clone()], &allow).unwrap()[0].object["metadata"]["namespace"], "demo");
//! let refusal = children(&metadata, Some("demo"), vec![ok, secret], &allow).unwrap_err();
//! assert_eq!(refusal.to_string(), "child 1 (Secret/s): v1 Secret is not a declared child kind");
//! ```

mod builtin;
pub mod declared;
pub mod events;
mod kind;
mod names;
mod parent;
mod place;
pub mod related;
mod selector;
mod validate;
// The version named in code against the WIT files and the README.
#[cfg(test)]
mod version_check;

pub use kind::{Kind, Metadata};
pub use names::{dns1123_label, dns1123_subdomain, object_name, printable};
pub use parent::ParentMetadata;
pub use place::{home_namespace, parent_namespace};
pub use related::{RelatedQuery, Selector};
pub use selector::{LabelSelector, Labels};
pub use validate::{ANY_NAMESPACE, Allowances, Child, Refusal, Rest, children, namespace_grant, response};

/// The contract's version, named once: every constant below is built from it, and a test
/// holds it to `wit/reconciler.wit`'s `package` line and to the README.
macro_rules! wit_version {
    () => {
        "0.3.0"
    };
}

/// The version of the WIT package the host and the SDK implement.
pub const WIT_VERSION: &str = wit_version!();
/// The WIT package the host and the SDK implement, `capstan:reconciler@<version>`.
pub const WIT_PACKAGE: &str = concat!("capstan:reconciler@", wit_version!());
/// The interface every plugin exports.
pub const PLUGIN_EXPORT: &str = concat!("capstan:reconciler/plugin@", wit_version!());
/// The time offline runs (`capstan test`, the SDK's fixtures) tell a plugin it is unless
/// told otherwise: fixed, so their outputs are reproducible.
pub const FIXTURE_NOW: &str = "2026-01-01T00:00:00Z";

/// Older versions the host still serves, each adapted to the current one (a test holds
/// each to its frozen copy in `wit/<version>/`).
pub const OLDER_VERSIONS: &[&str] = &["0.2.0", "0.1.0"];
/// Name prefix of the plugin export, whatever its version.
pub const PLUGIN_EXPORT_PREFIX: &str = "capstan:reconciler/plugin";

/// Label every managed child carries.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "capstan");
/// Label naming the plugin that owns a child.
pub const PLUGIN_LABEL: &str = "capstan.dev/plugin";
/// Annotation holding the digest of the object last applied for a child.
pub const APPLIED_ANNOTATION: &str = "capstan.dev/applied";
