//! Which plugins a host runs and with what options: the config file's entries, then every
//! other `*.wasm` in the plugin directory with the host's defaults. A file that does not
//! load (or asks for what it was not granted) is that file's trouble alone.

use std::path::{Path, PathBuf};

use anyhow::Context;

use super::references::References;

use crate::admission::{self, Rules, Signature};
use crate::config::{self, Config, PluginConfig};
use crate::controller::Options;
use crate::engine::{Engine, Plugin};
use crate::{reload, supervisor};

/// The plugins that loaded, with their rules and options, and the files that did not,
/// with the rules they were refused under and why.
#[derive(Default)]
pub(super) struct Loaded {
    pub plugins: Vec<Admitted>,
    pub broken: Vec<(Rules, String)>,
    /// The config's registry references, for hot reload to follow.
    pub references: Option<References>,
    /// Whether the config's global signature policy applies to the directory's files.
    pub policy: bool,
}

/// A plugin file admitted to run, and its canary if it has one that runs.
pub(super) struct Admitted {
    pub rules: Rules,
    pub plugin: Plugin,
    pub options: Options,
    pub canary: Option<crate::controller::Canary>,
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
    let mut failed = Vec::new();
    for rules in entries(config, dir, pull_dir, defaults, &mut loaded, &mut failed)? {
        // A pull that failed is its entry's trouble: tried again, as a pull, when it changes.
        if let Some(at) = failed.iter().position(|(p, _)| p == rules.path()) {
            loaded.broken.push((rules, failed.remove(at).1));
            continue;
        }
        let (plugin, options) = match admission::admit_file(engine, &rules) {
            Ok(admitted) => admitted,
            Err(why) => {
                loaded.broken.push((rules, why));
                continue;
            }
        };
        let canary = admission::admit_canary_file(engine, &rules, plugin.metadata(), &options);
        let canary = canary.and_then(|c| supervisor::canary_admitted(&rules, plugin.metadata(), c));
        loaded.plugins.push(Admitted {
            rules,
            plugin,
            options,
            canary,
        });
    }
    // What is left failed without an entry of its own (a canary file under a policy): it
    // never runs, whatever it is rewritten to.
    for (path, why) in failed {
        let rules = Rules::new(PluginConfig::at(path), defaults, Signature::Missing)?;
        loaded.broken.push((rules, why));
    }
    // A plugin that does not load is that plugin's trouble alone, unless nothing is left.
    if loaded.plugins.is_empty()
        && let Some((rules, err)) = loaded.broken.first()
    {
        anyhow::bail!("{}: {err}", rules.path().display());
    }
    one_file_per_name(&mut loaded);
    Ok(loaded)
}

/// The rules of the config file's entries (their registry references pulled; a failed
/// pull goes to `failed`), then of every other `*.wasm` of `dir`, with the host's defaults
/// and the config's global signature policy.
fn entries(
    config: Option<&PathBuf>,
    dir: Option<&PathBuf>,
    pull_dir: Option<&Path>,
    defaults: &Options,
    loaded: &mut Loaded,
    failed: &mut Vec<(PathBuf, String)>,
) -> anyhow::Result<Vec<Rules>> {
    let mut entries: Vec<Rules> = Vec::new();
    if let Some(path) = config {
        let mut config = config::load(path)?;
        let pulled = pulled(&config);
        let (references, broken) = References::resolve(&mut config, pull_dir);
        loaded.references = references;
        failed.extend(broken);
        loaded.policy = config.verify.is_some();
        entries = rules(config, &pulled, defaults)?;
    }
    if let Some(dir) = dir {
        let paths = reload::wasm_files(dir)
            .with_context(|| format!("cannot read plugin directory {}", dir.display()))?;
        anyhow::ensure!(!paths.is_empty(), "no *.wasm plugins in {}", dir.display());
        let configured: Vec<PathBuf> = entries
            .iter()
            .filter_map(|e| e.path().canonicalize().ok())
            .collect();
        for path in paths {
            if !path.canonicalize().is_ok_and(|p| configured.contains(&p)) {
                entries.push(Rules::dir_file(path, defaults, loaded.policy)?);
            }
        }
    }
    anyhow::ensure!(!entries.is_empty(), "no plugins configured");
    Ok(entries)
}

/// Which entries of `config` name a registry reference, before their paths are pointed
/// at their links.
pub(super) fn pulled(config: &Config) -> Vec<bool> {
    (config.plugins.iter())
        .map(|e| config::reference(&e.path).is_some())
        .collect()
}

/// The rules of `config`'s entries (`pulled` says which came from a registry), over the
/// host's `defaults` and under the config's signature policy.
pub(super) fn rules(config: Config, pulled: &[bool], defaults: &Options) -> anyhow::Result<Vec<Rules>> {
    let policy = config.verify.is_some();
    (config.plugins.into_iter().zip(pulled))
        .map(|(e, pulled)| {
            let signature = Signature::of(e.verify.is_some() || policy, *pulled);
            Rules::new(e, defaults, signature)
        })
        .collect()
}

/// One plugin per name: a later file of a name already loaded is refused alone, naming
/// both files. Concurrency is not summed against the pool: plugins share it fairly.
fn one_file_per_name(loaded: &mut Loaded) {
    let mut kept: Vec<Admitted> = Vec::new();
    for admitted in std::mem::take(&mut loaded.plugins) {
        let name = admitted.plugin.metadata().name.as_str();
        match kept.iter().find(|a| a.plugin.metadata().name == name) {
            Some(holder) => {
                let holder = holder.rules.path().display().to_string();
                let why = supervisor::name_taken(name, &holder, admitted.rules.path());
                loaded.broken.push((admitted.rules, why));
            }
            None => kept.push(admitted),
        }
    }
    loaded.plugins = kept;
}
