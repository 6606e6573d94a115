//! Which plugins a host runs and with what options: the config file's entries, then every
//! other `*.wasm` in the plugin directory with the host's defaults. A file that does not
//! load (or asks for what it was not granted) is that file's trouble alone.

use std::path::{Path, PathBuf};

use anyhow::Context;

use super::references::References;

use crate::config::{self, PluginConfig};
use crate::controller::Options;
use crate::engine::{Engine, Plugin};
use crate::{reload, supervisor};

/// The plugins that loaded, with their options, and the files that did not, with why.
#[derive(Default)]
pub(super) struct Loaded {
    pub plugins: Vec<(PathBuf, Plugin, Options)>,
    pub broken: Vec<(PathBuf, String)>,
    /// The config's registry references, for hot reload to follow.
    pub references: Option<References>,
}

/// Load every configured plugin; fails only when nothing is left to run. A second file
/// of a plugin name is refused like a file that does not load.
pub(super) fn load(
    engine: &Engine,
    (config, dir): (Option<&PathBuf>, Option<&PathBuf>),
    pull_dir: Option<&Path>,
    defaults: &Options,
) -> anyhow::Result<Loaded> {
    let mut loaded = Loaded::default();
    let entries = entries(config, dir, pull_dir, &mut loaded)?;
    let pulls_failed: Vec<PathBuf> = loaded.broken.iter().map(|(p, _)| p.clone()).collect();
    for e in entries {
        if pulls_failed.contains(&e.path) {
            continue;
        }
        let mut options = options(&e, defaults)?;
        let loading = engine.load_file(&e.path, e.limits.clone());
        let plugin = loading
            .and_then(|p| p.with_settings(&options.settings))
            .and_then(|p| as_entry_says(p, &e, &mut options));
        let plugin = match plugin {
            Ok(plugin) => plugin,
            Err(err) => {
                loaded.broken.push((e.path, err.to_string()));
                continue;
            }
        };
        if let Err(why) = capstan_contract::declared::declared(plugin.metadata(), &options.allow) {
            loaded.broken.push((e.path, why));
            continue;
        }
        options.canary = e
            .canary
            .as_ref()
            .and_then(|c| canary(engine, &e, c, &plugin, &options));
        loaded.plugins.push((e.path, plugin, options));
    }
    // A plugin that does not load is that plugin's trouble alone, unless nothing is left.
    if loaded.plugins.is_empty()
        && let Some((path, err)) = loaded.broken.first()
    {
        anyhow::bail!("{}: {err}", path.display());
    }
    one_file_per_name(&mut loaded);
    Ok(loaded)
}

/// The plugin under the entry's name; a shadow under `<name>-shadow`, previewing the
/// live plugin of that name.
fn as_entry_says(
    plugin: Plugin,
    e: &PluginConfig,
    options: &mut Options,
) -> Result<Plugin, crate::engine::LoadError> {
    if e.mode != config::Mode::Shadow {
        return plugin.named(options.name.as_deref());
    }
    let live = options
        .name
        .clone()
        .unwrap_or_else(|| plugin.metadata().name.clone());
    let shadow = format!("{live}-shadow");
    options.preview = Some(std::sync::Arc::new(crate::preview::Preview::shadow(&live)));
    options.name = Some(shadow.clone());
    plugin.named(Some(&shadow))
}

/// The entry's canary, loaded as its stable version is (name, settings, limits) and of
/// the same kinds; one that cannot be is said in one line, and the stable version serves
/// every parent.
fn canary(
    engine: &Engine,
    e: &PluginConfig,
    c: &config::CanaryConfig,
    stable: &Plugin,
    options: &Options,
) -> Option<crate::controller::Canary> {
    let loaded = engine
        .load_file(&c.path, e.limits.clone())
        .and_then(|p| p.with_settings(&options.settings))
        .and_then(|p| p.named(Some(&stable.metadata().name)))
        .map_err(|err| err.to_string())
        .and_then(|p| same_kinds(stable, &p).map(|()| p));
    let selector = kube::core::Selector::try_from(c.selector.clone()).map_err(|err| err.to_string());
    match (loaded, selector) {
        (Ok(plugin), Ok(selector)) => {
            let m = plugin.metadata();
            tracing::info!(plugin = %m.name, version = %m.version, canary = %c.path.display(), selector = %selector, "canary loaded");
            Some(crate::controller::Canary {
                plugin: std::sync::Arc::new(plugin),
                selector,
            })
        }
        (Err(why), _) | (_, Err(why)) => {
            tracing::warn!(plugin = %stable.metadata().name, canary = %c.path.display(), error = %why, "canary refused; the stable version reconciles every parent");
            None
        }
    }
}

/// A candidate must declare what its stable version declares: the host's watches and RBAC
/// were made from that.
fn same_kinds(stable: &Plugin, candidate: &Plugin) -> Result<(), String> {
    let (a, b) = (stable.metadata(), candidate.metadata());
    if a.parent == b.parent
        && a.children == b.children
        && a.related == b.related
        && a.finalizer == b.finalizer
    {
        Ok(())
    } else {
        Err("it declares other kinds or another finalizer than the stable version".into())
    }
}

/// The config file's entries (their registry references pulled; a failed pull goes to
/// `loaded.broken`), then every other `*.wasm` of `dir` with default settings.
fn entries(
    config: Option<&PathBuf>,
    dir: Option<&PathBuf>,
    pull_dir: Option<&Path>,
    loaded: &mut Loaded,
) -> anyhow::Result<Vec<PluginConfig>> {
    let mut entries: Vec<PluginConfig> = match config {
        Some(path) => {
            let mut config = config::load(path)?;
            let (references, broken) = References::resolve(path, &mut config, pull_dir);
            loaded.references = references;
            loaded.broken.extend(broken);
            config.plugins
        }
        None => Vec::new(),
    };
    if let Some(dir) = dir {
        let paths = reload::wasm_files(dir)
            .with_context(|| format!("cannot read plugin directory {}", dir.display()))?;
        anyhow::ensure!(!paths.is_empty(), "no *.wasm plugins in {}", dir.display());
        let configured: Vec<PathBuf> = entries
            .iter()
            .filter_map(|e| e.path.canonicalize().ok())
            .collect();
        for path in paths {
            if !path.canonicalize().is_ok_and(|p| configured.contains(&p)) {
                entries.push(PluginConfig::at(path));
            }
        }
    }
    anyhow::ensure!(!entries.is_empty(), "no plugins configured");
    Ok(entries)
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
    if let Some(ns) = &defaults.namespace
        && let Some(outside) = e.allow_namespaces.iter().find(|n| *n != ns)
    {
        anyhow::bail!(
            "{}: allowNamespaces names {outside}, outside --namespace {ns}",
            e.path.display()
        );
    }
    options
        .allow
        .namespaces
        .extend(e.allow_namespaces.iter().cloned());
    options.allow.namespaces.dedup();
    options.allow.own_namespace = e.allow_own_namespace;
    options.settings = e.settings.clone().unwrap_or_default();
    options.allow.secrets = e.allow_secrets;
    options.allow.own_kind = e.allow_own_kind;
    Ok(options)
}

/// One plugin per name: a later file of a name already loaded is refused alone, naming
/// both files. Concurrency is not summed against the pool: plugins share it fairly.
fn one_file_per_name(loaded: &mut Loaded) {
    let mut kept: Vec<(PathBuf, Plugin, Options)> = Vec::new();
    for (path, plugin, options) in std::mem::take(&mut loaded.plugins) {
        let name = plugin.metadata().name.as_str();
        match kept.iter().find(|(_, p, _)| p.metadata().name == name) {
            Some((holder, ..)) => {
                let why = supervisor::name_taken(name, &holder.display().to_string(), &path);
                loaded.broken.push((path, why));
            }
            None => kept.push((path, plugin, options)),
        }
    }
    loaded.plugins = kept;
}
