//! One admission: whether a plugin file runs, and as what. The same rules apply to a
//! config entry at start, a file of `--plugins DIR` at start or when it appears, a file
//! refused and later rewritten, and a new version of a running plugin: the signature
//! policy, the entry's name and mode (`shadow`), its settings, its limits and its grants.
//! Each file keeps the [`Rules`] it was first given, so nothing a rewrite does can trade
//! them for the directory's defaults.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::config::{self, PluginConfig};
use crate::controller::{Canary, Options};
use crate::engine::{Engine, LoadError, Metadata, Plugin};

/// Why a file under a signature policy never runs, whatever its bytes.
pub const UNSIGNED: &str = "refused: a verify policy applies, and a plugin from a file carries no signature (use a signed oci:// reference)";

/// Whether a file must carry a verified signature to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signature {
    /// No policy applies.
    Free,
    /// A policy applies, and the file is the link a verified pull writes (and only a
    /// verified pull ever rewrites).
    Verified,
    /// A policy applies to a plain file: it is refused, now and after any rewrite.
    Missing,
}

impl Signature {
    /// What a policy (`policy`, the entry's own or the global one) means for a plugin
    /// pulled by reference (`pulled`) or read from a file.
    pub fn of(policy: bool, pulled: bool) -> Signature {
        match (policy, pulled) {
            (false, _) => Signature::Free,
            (true, true) => Signature::Verified,
            (true, false) => Signature::Missing,
        }
    }
}

/// The rules one plugin file runs under: its config entry (or the directory's defaults
/// for a file no entry names) and the options they make over the host's defaults.
#[derive(Clone)]
pub struct Rules {
    entry: PluginConfig,
    options: Options,
    signature: Signature,
}

impl Rules {
    /// The rules of config entry `entry`, over the host's `defaults`; an entry whose
    /// options contradict the host's (a namespace outside `--namespace`) fails here.
    pub fn new(entry: PluginConfig, defaults: &Options, signature: Signature) -> anyhow::Result<Rules> {
        let options = options(&entry, defaults)?;
        Ok(Rules {
            entry,
            options,
            signature,
        })
    }

    /// The rules of a file in the plugin directory that no entry names.
    pub fn dir_file(path: PathBuf, defaults: &Options, policy: bool) -> anyhow::Result<Rules> {
        Rules::new(PluginConfig::at(path), defaults, Signature::of(policy, false))
    }

    /// The file these rules are for.
    pub fn path(&self) -> &Path {
        &self.entry.path
    }

    /// The config entry.
    pub fn entry(&self) -> &PluginConfig {
        &self.entry
    }

    /// The plugin directory's rules, under the config's signature policy or none.
    pub fn under_policy(&self, policy: bool) -> Rules {
        let mut rules = self.clone();
        rules.signature = Signature::of(policy, false);
        rules
    }

    /// The same rules for another file (a new file of the plugin directory).
    pub fn for_file(&self, path: PathBuf) -> Rules {
        let mut rules = self.clone();
        rules.entry.path = path;
        rules
    }
}

/// Rules are the same when their entry and signature are: the options are made from them
/// over the host's defaults, which do not change while it runs.
impl PartialEq for Rules {
    fn eq(&self, other: &Rules) -> bool {
        self.entry == other.entry && self.signature == other.signature
    }
}

/// Whether `bytes`, the file of `rules`, runs: the plugin as the entry names it (a shadow
/// under `<name>-shadow`), its settings accepted, its declared kinds granted, with the
/// options it runs with; or why not, in one line.
pub fn admit(engine: &Engine, bytes: &[u8], rules: &Rules) -> Result<(Plugin, Options), String> {
    if rules.signature == Signature::Missing {
        return Err(UNSIGNED.to_string());
    }
    let mut options = rules.options.clone();
    let plugin = engine
        .load(bytes, rules.entry.limits.clone())
        .and_then(|p| p.with_settings(&options.settings))
        .and_then(|p| as_entry_says(p, &rules.entry, &mut options))
        .map_err(|e| e.to_string())?;
    capstan_contract::declared::declared(plugin.metadata(), &options.allow)?;
    Ok((plugin, options))
}

/// Whether `bytes`, the canary file of `rules`, runs beside `stable` (admitted with
/// `options`): loaded as its stable version is (the entry's name, settings and limits) and
/// declaring the same kinds and finalizer, which the host's watches and RBAC were made
/// from; or why not, in one line.
pub fn admit_canary(
    engine: &Engine,
    bytes: &[u8],
    rules: &Rules,
    stable: &Metadata,
    options: &Options,
) -> Result<Canary, String> {
    let Some(c) = &rules.entry.canary else {
        return Err("the entry names no canary".into());
    };
    if rules.signature == Signature::Missing {
        return Err(UNSIGNED.to_string());
    }
    let plugin = engine
        .load(bytes, rules.entry.limits.clone())
        .and_then(|p| p.with_settings(&options.settings))
        .and_then(|p| p.named(Some(&stable.name)))
        .map_err(|e| e.to_string())?;
    if !same_kinds(stable, plugin.metadata()) {
        return Err("it declares other kinds or another finalizer than the stable version".into());
    }
    let selector =
        kube::core::Selector::try_from(c.selector.clone()).map_err(|e| format!("canary selector: {e}"))?;
    Ok(Canary {
        plugin: Arc::new(plugin),
        selector,
    })
}

/// [`admit_canary`] of the entry's canary file; `None` when the entry names no canary.
pub fn admit_canary_file(
    engine: &Engine,
    rules: &Rules,
    stable: &Metadata,
    options: &Options,
) -> Option<Result<Canary, String>> {
    let path = &rules.entry.canary.as_ref()?.path;
    let admitted = std::fs::read(path)
        .map_err(|e| LoadError::Read(path.display().to_string(), e.to_string()).to_string())
        .and_then(|bytes| admit_canary(engine, &bytes, rules, stable, options));
    Some(admitted)
}

/// Whether `new` declares what `old` declares (parent, child and related kinds, finalizer):
/// the host's watches and RBAC were made from that. One rule for a canary beside its stable
/// version and for a new version swapped in place.
pub(crate) fn same_kinds(old: &Metadata, new: &Metadata) -> bool {
    old.parent == new.parent
        && old.children == new.children
        && old.related == new.related
        && old.finalizer == new.finalizer
}

/// [`admit`] of the file at `rules.path()`.
pub fn admit_file(engine: &Engine, rules: &Rules) -> Result<(Plugin, Options), String> {
    if rules.signature == Signature::Missing {
        return Err(UNSIGNED.to_string());
    }
    let path = rules.path();
    let bytes = std::fs::read(path)
        .map_err(|e| LoadError::Read(path.display().to_string(), e.to_string()).to_string())?;
    admit(engine, &bytes, rules)
}

/// [`admit`] on a blocking thread: compiling a plugin takes a while, and Wasmtime's WASI
/// output may block on a runtime of its own, which must not happen on an async worker.
pub async fn admit_blocking(
    engine: &Engine,
    bytes: Vec<u8>,
    rules: &Rules,
) -> Result<(Plugin, Options), String> {
    let (engine, rules) = (engine.clone(), Arc::new(rules.clone()));
    match tokio::task::spawn_blocking(move || admit(&engine, &bytes, &rules)).await {
        Ok(admitted) => admitted,
        Err(e) => Err(format!("loading failed: {e}")),
    }
}

/// The plugin under the entry's name; a shadow under `<name>-shadow`, previewing the
/// live plugin of that name.
fn as_entry_says(plugin: Plugin, e: &PluginConfig, options: &mut Options) -> Result<Plugin, LoadError> {
    if e.mode != config::Mode::Shadow {
        return plugin.named(options.name.as_deref());
    }
    let live = options
        .name
        .clone()
        .unwrap_or_else(|| plugin.metadata().name.clone());
    let shadow = format!("{live}-shadow");
    options.preview = Some(Arc::new(crate::preview::Preview::shadow(&live)));
    options.name = Some(shadow.clone());
    plugin.named(Some(&shadow))
}

/// The namespaces an entry grants: under `--namespace NS` only NS, which `*` stands for.
fn granted_namespaces(e: &PluginConfig, only: Option<&str>) -> anyhow::Result<Vec<String>> {
    let Some(only) = only else {
        return Ok(e.allow_namespaces.clone());
    };
    (e.allow_namespaces.iter())
        .map(|n| match n.as_str() {
            n if n == only || n == crate::validate::ANY_NAMESPACE => Ok(only.to_string()),
            outside => anyhow::bail!(
                "{}: allowNamespaces names {outside}, outside --namespace {only}",
                e.path.display()
            ),
        })
        .collect()
}

/// One entry's options: the host's defaults with the entry's own settings over them.
pub fn options(e: &PluginConfig, defaults: &Options) -> anyhow::Result<Options> {
    let mut options = defaults.clone();
    options.name.clone_from(&e.name);
    options.concurrency = e.concurrency.unwrap_or(options.concurrency);
    options.resync = e.resync.unwrap_or(options.resync);
    options.cpu_millicores = e.limits.cpu_millicores;
    options.creations_per_second = e.limits.creations_per_second;
    options.finalizer_timeout = e.limits.finalizer_timeout;
    options
        .allow
        .cluster_kinds
        .extend(e.allow_cluster_kinds.iter().cloned());
    options
        .allow
        .namespaces
        .extend(granted_namespaces(e, defaults.namespace.as_deref())?);
    options.allow.namespaces.dedup();
    options.allow.own_namespace = e.allow_own_namespace;
    options.settings = e.settings.clone().unwrap_or_default();
    if let Some(selector) = &e.selector {
        options.parent_labels = Some(config::parent_labels(selector)?);
    }
    options.updates.clone_from(&e.updates);
    options.allow.secrets = e.allow_secrets;
    options.allow.own_kind = e.allow_own_kind;
    Ok(options)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn under_one_namespace_the_grant_of_every_namespace_is_that_one() {
        let mut e = PluginConfig::at("p.wasm".into());
        e.allow_namespaces = vec!["*".into(), "team-a".into()];
        assert_eq!(granted_namespaces(&e, None).unwrap(), ["*", "team-a"]);
        assert_eq!(
            granted_namespaces(&e, Some("team-a")).unwrap(),
            ["team-a", "team-a"]
        );
        let e = granted_namespaces(&e, Some("team-b")).unwrap_err().to_string();
        assert!(
            e.contains("allowNamespaces names team-a, outside --namespace team-b"),
            "{e}"
        );
    }
}
