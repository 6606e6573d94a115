//! Config entries that name their plugin by registry reference (`oci://…`): pulled at
//! start into the store and loaded from a stable link there. With hot reload, a changed
//! reference in the config file is pulled and its link flipped, which the supervisor then
//! sees as a replaced file (checked and swapped, or refused while the old version serves).
//! A pull that fails is that entry's trouble alone, said in one line.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::config::{self, Config, PluginConfig};
use crate::registry::{PluginRef, Registry};

/// The references of one config file, and what each link points at.
pub(super) struct References {
    config: PathBuf,
    text: String,
    registry: Registry,
    /// Each link's name and the reference it was last pulled from.
    current: BTreeMap<String, PluginRef>,
}

/// Every reference of these entries, each with the name of its link (the entry's name, or its
/// repository; `.canary` for a canary) and its entry's path, to point at the link.
fn sources(entries: &mut [PluginConfig]) -> Vec<(String, PluginRef, &mut PathBuf)> {
    let mut out = Vec::new();
    for entry in entries {
        let PluginConfig {
            name, path, canary, ..
        } = entry;
        if let Some(r) = config::reference(path) {
            out.push((name.clone().unwrap_or_else(|| r.repository()), r, path));
        }
        if let Some(c) = canary
            && let Some(r) = config::reference(&c.path)
        {
            let base = name.clone().unwrap_or_else(|| r.repository());
            out.push((format!("{base}.canary"), r, &mut c.path));
        }
    }
    out
}

impl References {
    /// Pull every reference in `config` (read from `file`) into `pull_dir` and point its entry
    /// at the pulled plugin; the entries whose pull failed, with why. `None` when the
    /// config names no reference.
    pub fn resolve(
        file: &Path,
        config: &mut Config,
        pull_dir: Option<&Path>,
    ) -> (Option<References>, Vec<(PathBuf, String)>) {
        let mut broken = Vec::new();
        let mut sources = sources(&mut config.plugins);
        if sources.is_empty() {
            return (None, broken);
        }
        let registry = pull_dir
            .ok_or_else(|| {
                anyhow::anyhow!("no place to keep pulled plugins: set --pull-dir or CAPSTAN_PULL_DIR")
            })
            .and_then(|dir| Registry::new(config.registry.clone(), dir));
        let registry = match registry {
            Ok(registry) => registry,
            Err(e) => {
                broken.extend(
                    sources
                        .iter()
                        .map(|(_, r, _)| (PathBuf::from(r.to_string()), format!("{e:#}"))),
                );
                return (None, broken);
            }
        };
        let mut current = BTreeMap::new();
        for (name, reference, path) in &mut sources {
            let pulled = registry.pull_blocking(reference).and_then(|p| {
                pulled(&p);
                registry.store().link(name, &p.path)
            });
            match pulled {
                Ok(link) => {
                    **path = link;
                    current.insert(name.clone(), reference.clone());
                }
                Err(e) => {
                    // A link left by an earlier run would start a version the config no longer names.
                    let link = registry.store().link_path(name);
                    let _ = std::fs::remove_file(&link);
                    broken.push((link.clone(), format!("{e:#}")));
                    **path = link;
                }
            }
        }
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let references = References {
            config: file.to_path_buf(),
            text,
            registry,
            current,
        };
        (Some(references), broken)
    }

    /// Pull the references the config file changed (with hot reload) and flip their links;
    /// a pull that fails leaves the running version and says why.
    pub async fn refresh(&mut self) {
        let Ok(text) = std::fs::read_to_string(&self.config) else {
            return;
        };
        if text == self.text {
            return;
        }
        self.text = text;
        let mut config = match config::load(&self.config) {
            Ok(config) => config,
            Err(e) => {
                return tracing::warn!(config = %self.config.display(), error = %format!("{e:#}"), "config not read; plugins keep running as they are");
            }
        };
        for (name, reference, _) in sources(&mut config.plugins) {
            if self.current.get(&name) == Some(&reference) {
                continue;
            }
            let store = self.registry.store().clone();
            let flipped = match self.registry.pull(&reference).await {
                Ok(p) => {
                    pulled(&p);
                    store.link(&name, &p.path)
                }
                Err(e) => Err(e),
            };
            match flipped {
                Ok(_) => {
                    self.current.insert(name, reference);
                }
                Err(e) => {
                    tracing::warn!(plugin = %name, reference = %reference, error = %format!("{e:#}"), "pull failed; the running version stays")
                }
            }
        }
    }
}

/// Say what a reference resolved to: a tag without a digest is pinned here, once.
fn pulled(p: &crate::registry::Pulled) {
    tracing::info!(reference = %p.reference, digest = %p.digest, path = %p.path.display(), fetched = p.fetched, "plugin pulled");
}
