//! The `capstan run --config` file: per-plugin path, limits, concurrency, resync period
//! and allowed cluster-scoped kinds.
//!
//! ```yaml
//! registry:                      # how plugins named oci://… are pulled (all optional)
//!   plainHttp: [localhost:5000]  # registries spoken to without TLS
//!   caFiles: [ca.pem]            # CA certificates trusted for registries
//!   authFile: /etc/capstan/registry/.dockerconfigjson
//!   requireDigest: true          # refuse references without @sha256:…
//!   maxBytes: 67108864           # the largest plugin layer pulled
//! verify:                        # every plugin must be signed (cosign) by one of these keys
//!   keys: [release.pub]
//! plugins:
//!   - path: echo.wasm            # relative to this file, or oci://REGISTRY/REPO:TAG@sha256:…
//!     name: echo-blue              # run under this name instead of the plugin's own
//!     concurrency: 8
//!     resync: 5m
//!     limits: { deadline: 500ms, memory: 33554432, memoryTotal: 134217728, responseBytes: 1048576, maxChildren: 10 }
//!     allowClusterKinds: [Namespace]
//!     allowNamespaces: [team-a]    # for a cluster-scoped parent's children
//!     allowSecrets: false          # may it declare Secret (parent or child)?
//!     allowOwnKind: false          # may it make children of its own parent kind?
//!     allowOwnNamespace: false     # may a Namespace parent's children go into that Namespace?
//!     settings: { image: busybox } # the plugin's own settings, which it checks at load
//!     selector: { matchLabels: { tier: web } } # only these parents (default: all)
//!     canary:                      # a candidate for the parents a label selector picks
//!       path: echo-v2.wasm
//!       selector: { matchLabels: { canary: "true" } }
//!     mode: live                   # or shadow: run beside the live plugin of this name,
//!                                  # writing nothing, and report where it would differ
//!     verify: { keys: [team-a.pub] } # this entry's keys instead of the global ones
//! ```

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use schemars::JsonSchema;
use serde::Deserialize;

use crate::engine::Limits;

/// The whole file.
#[derive(Clone, Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// Plugins to run.
    #[serde(default)]
    pub plugins: Vec<PluginConfig>,
    /// How plugins named by registry reference are pulled.
    #[serde(default)]
    pub registry: crate::registry::Settings,
    /// Keys every plugin must be signed by, unless its entry names its own; a plugin from a
    /// file carries no signature and is refused under a policy.
    #[serde(default)]
    pub verify: Option<crate::registry::Policy>,
}

/// One plugin's settings; anything unset takes the command-line default.
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PluginConfig {
    /// The `.wasm` file, relative to the config file, or a registry reference
    /// (`oci://REGISTRY/REPOSITORY[:TAG][@sha256:DIGEST]`).
    pub path: PathBuf,
    /// The name to run the plugin under instead of its own, so one file may run twice
    /// (with other settings); its children are labelled and its metrics named with it.
    #[serde(default)]
    pub name: Option<String>,
    /// Sandbox limits of each call.
    #[serde(default)]
    pub limits: Limits,
    /// Reconciles running at once.
    pub concurrency: Option<u16>,
    /// Reconcile every parent at least this often.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<String>")]
    pub resync: Option<Duration>,
    /// Cluster-scoped child kinds this plugin may create.
    #[serde(default)]
    pub allow_cluster_kinds: Vec<String>,
    /// Namespaces where a plugin with a cluster-scoped parent may create children, and
    /// any plugin read related objects (`"*"`: every namespace).
    #[serde(default)]
    pub allow_namespaces: Vec<String>,
    /// The plugin may declare Secret as its parent or a child kind.
    #[serde(default)]
    pub allow_secrets: bool,
    /// The plugin may declare its own parent kind as a child kind.
    #[serde(default)]
    pub allow_own_kind: bool,
    /// A plugin of Namespaces may put children into the Namespace it reconciles.
    #[serde(default)]
    pub allow_own_namespace: bool,
    /// The plugin's own settings (a mapping), which it checks when loaded.
    #[serde(default)]
    pub settings: Option<serde_json::Value>,
    /// Live (the default), or a shadow of the live plugin of the same name.
    #[serde(default)]
    pub mode: Mode,
    /// Only the parents this label selector picks (`matchLabels`, `matchExpressions`):
    /// the others are never watched, so never reconciled; all of them by default.
    #[serde(default)]
    #[schemars(schema_with = "label_selector")]
    pub selector: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
    /// How existing children that differ from the plugin's answer are updated, per child
    /// kind (`Kind` or `plural.group`): `InPlace` (the default), `OnDelete` (left as they
    /// are until deleted, then created anew), `Recreate` (deleted, then created anew), or
    /// `RollingInPlace`/`RollingRecreate` (one child per reconcile); or, as Metacontroller
    /// writes it, `{method, statusChecks: {conditions: [{type, status, reason}]}}`: each
    /// child at the answer must hold those conditions before the next one is updated.
    #[serde(default)]
    pub updates: std::collections::BTreeMap<String, crate::controller::Update>,
    /// A candidate version for some parents.
    #[serde(default)]
    pub canary: Option<CanaryConfig>,
    /// Keys this plugin (and its canary) must be signed by, instead of the global ones.
    #[serde(default)]
    pub verify: Option<crate::registry::Policy>,
}

/// A canary: another file of the same plugin, for the parents a label selector picks.
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CanaryConfig {
    /// The candidate `.wasm`, relative to the config file, or a registry reference. Same kinds as the stable file;
    /// run under the same name, settings and limits.
    pub path: PathBuf,
    /// Which parents it reconciles (a Kubernetes label selector: `matchLabels`,
    /// `matchExpressions`).
    #[schemars(schema_with = "label_selector")]
    pub selector: k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
}

/// How a plugin entry runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, serde::Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// It reconciles and writes.
    #[default]
    Live,
    /// It reconciles beside the live plugin of its name (as `<name>-shadow`) on the same
    /// caches, writes nothing, and reports where it would differ: the
    /// `capstan_shadow_divergent_objects` and `capstan_shadow_divergences_total` metrics and
    /// a rate-limited `shadow diverges` line per object.
    Shadow,
}

/// A Kubernetes label selector's schema (k8s-openapi's types carry none without its
/// `schemars` feature, which would derive one for every API type the host links).
fn label_selector(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
            "matchExpressions": {"type": "array", "items": {
                "type": "object",
                "required": ["key", "operator"],
                "properties": {
                    "key": {"type": "string"},
                    "operator": {"enum": ["In", "NotIn", "Exists", "DoesNotExist"]},
                    "values": {"type": "array", "items": {"type": "string"}}
                }
            }}
        }
    })
}

impl PluginConfig {
    /// A plugin at `path` with every setting at its default.
    pub fn at(path: PathBuf) -> Self {
        PluginConfig {
            path,
            name: None,
            limits: Limits::default(),
            concurrency: None,
            resync: None,
            allow_cluster_kinds: Vec::new(),
            allow_namespaces: Vec::new(),
            allow_secrets: false,
            allow_own_kind: false,
            allow_own_namespace: false,
            settings: None,
            mode: Mode::Live,
            selector: None,
            updates: Default::default(),
            canary: None,
            verify: None,
        }
    }
}

/// Read and check a config file; plugin paths come back absolute or relative to the cwd.
pub fn load(path: &Path) -> anyhow::Result<Config> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read config {}", path.display()))?;
    let mut config = parse(&text).map_err(|e| anyhow::anyhow!("{}: {e:#}", path.display()))?;
    let base = path.parent().unwrap_or(Path::new("."));
    for plugin in &mut config.plugins {
        plugin.path = beside(base, &plugin.path);
        if let Some(canary) = &mut plugin.canary {
            canary.path = beside(base, &canary.path);
        }
    }
    let registry = &mut config.registry;
    let keys = config
        .plugins
        .iter_mut()
        .filter_map(|p| p.verify.as_mut())
        .chain(config.verify.as_mut())
        .flat_map(|policy| policy.keys.iter_mut());
    for file in registry
        .ca_files
        .iter_mut()
        .chain(registry.auth_file.as_mut())
        .chain(keys)
    {
        *file = base.join(&*file);
    }
    Ok(config)
}

/// `path` relative to the config file's directory; a registry reference as it is.
fn beside(base: &Path, path: &Path) -> PathBuf {
    match path.to_str() {
        Some(text) if crate::registry::is_reference(text) => path.to_path_buf(),
        _ => base.join(path),
    }
}

/// The registry reference an entry's path is, if it is one (checked when the file is read).
pub fn reference(path: &Path) -> Option<crate::registry::PluginRef> {
    let text = path.to_str().filter(|t| crate::registry::is_reference(t))?;
    crate::registry::PluginRef::parse(text).ok()
}

/// Read and check a config's text; plugin paths stay as written.
pub fn parse(text: &str) -> anyhow::Result<Config> {
    let config: Config =
        serde_saphyr::from_str_with_options(text, yaml_options()).map_err(|e| anyhow::anyhow!("{e}"))?;
    anyhow::ensure!(
        config.verify.as_ref().is_none_or(|p| !p.keys.is_empty()),
        "verify names no key"
    );
    for plugin in &config.plugins {
        let canary = plugin.canary.as_ref().map(|c| &c.path);
        for source in std::iter::once(&plugin.path).chain(canary) {
            if let Some(text) = source.to_str().filter(|t| crate::registry::is_reference(t)) {
                crate::registry::PluginRef::parse(text)?;
            }
        }
        if let Some(policy) = &plugin.verify {
            anyhow::ensure!(
                !policy.keys.is_empty(),
                "{}: verify names no key",
                plugin.path.display()
            );
            anyhow::ensure!(
                reference(&plugin.path).is_some(),
                "{}: verify is for a plugin from a registry (oci://…); a file carries no signature",
                plugin.path.display()
            );
        }
        for ns in &plugin.allow_namespaces {
            crate::validate::namespace_grant(ns)
                .map_err(|e| anyhow::anyhow!("{}: allowNamespaces: {e}", plugin.path.display()))?;
        }
        if plugin.concurrency == Some(0) {
            anyhow::bail!("concurrency of {} must be at least 1", plugin.path.display());
        }
        if let Some(selector) = &plugin.selector {
            parent_labels(selector)
                .map_err(|e| anyhow::anyhow!("{}: selector: {e}", plugin.path.display()))?;
        }
        if let Some(canary) = &plugin.canary {
            kube::core::Selector::try_from(canary.selector.clone())
                .map_err(|e| anyhow::anyhow!("canary of {}: selector: {e}", plugin.path.display()))?;
            anyhow::ensure!(
                plugin.mode == Mode::Live,
                "{}: a shadow has no canary",
                plugin.path.display()
            );
        }
    }
    Ok(config)
}

/// A label selector as the label query the parents' watch takes.
pub fn parent_labels(
    selector: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
) -> anyhow::Result<String> {
    Ok(kube::core::Selector::try_from(selector.clone())?.to_string())
}

/// YAML errors as one line (position and cause), without a drawn snippet of the input:
/// errors end up in one-line messages and logs.
pub fn yaml_options() -> serde_saphyr::Options {
    let mut options = serde_saphyr::Options::default();
    options.with_snippet = false;
    options
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> anyhow::Result<Config> {
        let dir = std::env::temp_dir().join(format!("capstan-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let file = dir.join(format!("c{}.yaml", text.len()));
        std::fs::write(&file, text)?;
        load(&file)
    }

    #[test]
    fn full_entry_parses_with_paths_relative_to_the_file() {
        let c = parse(
            "plugins:\n- path: echo.wasm\n  concurrency: 8\n  resync: 5m\n  limits: {deadline: 500ms, memory: 1048576}\n  allowClusterKinds: [Namespace]\n",
        )
        .unwrap();
        let p = &c.plugins[0];
        assert!(p.path.ends_with("echo.wasm") && p.path.is_absolute());
        assert_eq!(p.resync, Some(Duration::from_secs(300)));
        assert_eq!(p.limits.deadline, Duration::from_millis(500));
        assert_eq!(
            p.limits.max_children,
            Limits::default().max_children,
            "unset limits keep defaults"
        );
        assert_eq!(p.allow_cluster_kinds, ["Namespace"]);
    }

    #[test]
    fn typos_and_malformed_yaml_are_errors() {
        assert!(
            parse("plugins:\n- path: a.wasm\n  concurency: 3\n")
                .unwrap_err()
                .to_string()
                .contains("concurency")
        );
        assert!(parse("plugins: [unclosed").is_err());
        assert!(parse("plugins:\n- path: a.wasm\n  concurrency: 0\n").is_err());
        let bad = parse("plugins:\n- path: a.wasm\n  allowNamespaces: [team-*]\n").unwrap_err();
        assert!(bad.to_string().contains("allowNamespaces"), "{bad}");
        let every = parse("plugins:\n- path: a.wasm\n  allowNamespaces: [\"*\"]\n").unwrap();
        assert_eq!(every.plugins[0].allow_namespaces, ["*"]);
    }

    #[test]
    fn verify_keys_are_relative_to_the_file_and_only_for_references() {
        let c = parse(
            "verify: {keys: [release.pub]}\nplugins:\n- path: oci://r.example/p/echo:1\n  verify: {keys: [team.pub]}\n",
        )
        .unwrap();
        let global = &c.verify.as_ref().unwrap().keys[0];
        assert!(global.is_absolute() && global.ends_with("release.pub"));
        assert!(c.plugins[0].verify.as_ref().unwrap().keys[0].ends_with("team.pub"));
        let on_file = parse("plugins:\n- path: a.wasm\n  verify: {keys: [k.pub]}\n").unwrap_err();
        assert!(on_file.to_string().contains("carries no signature"), "{on_file}");
        assert!(parse("verify: {keys: []}\nplugins: []\n").is_err());
    }
}
