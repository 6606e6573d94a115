//! Config entries that name their plugin by registry reference (`oci://…`): pulled at
//! start into the store and loaded from a stable link there. With hot reload, a changed
//! reference in the config file is pulled and its link flipped, which the supervisor then
//! sees as a replaced file (checked and swapped, or refused while the old version serves).
//! A pull that fails is that entry's trouble alone, said in one line.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::config::{self, Config, PluginConfig};
use crate::registry::{PluginRef, Policy, Registry, Verifier};
use std::time::Duration;

/// How long one pull of a changed reference may take (manifest, signature and layer): a
/// registry that stalls costs that reference this long, never the host's loops.
const PULL_TIMEOUT: Duration = Duration::from_secs(120);

/// Follow the config file's references in a task of its own, every `every`: a changed
/// one is pulled (each within [`PULL_TIMEOUT`]) and its link flipped, and then the
/// supervisor is asked to look at the files, so it sees the new link.
pub(crate) async fn follow(mut references: References, every: Duration, reload: impl Fn()) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        references.refresh().await;
        reload();
    }
}

/// The references of one config file, and what each link points at.
pub(super) struct References {
    config: PathBuf,
    text: String,
    registry: Registry,
    /// Each link's name and the reference it was last pulled from.
    current: BTreeMap<String, PluginRef>,
}

/// One plugin source named by reference: its link's name, the reference, the keys it must be
/// signed by, and its entry's path, to point at the link.
struct Source<'a> {
    name: String,
    reference: PluginRef,
    policy: Option<Policy>,
    path: &'a mut PathBuf,
}

/// Every reference of these entries, each with the name of its link (the entry's name, or its
/// repository; `.canary` for a canary). Under a policy a canary file is dropped into
/// `broken` (a file carries no signature); a stable file is refused by its admission.
fn sources<'a>(
    entries: &'a mut [PluginConfig],
    global: Option<&Policy>,
    broken: &mut Vec<(PathBuf, String)>,
) -> Vec<Source<'a>> {
    let mut out = Vec::new();
    for entry in entries {
        let policy = entry.verify.clone().or_else(|| global.cloned());
        if policy.is_some()
            && let Some(c) = entry.canary.take_if(|c| config::reference(&c.path).is_none())
        {
            broken.push((c.path, crate::admission::UNSIGNED.to_string()));
        }
        let PluginConfig {
            name, path, canary, ..
        } = entry;
        if let Some(reference) = config::reference(path) {
            out.push(Source {
                name: name.clone().unwrap_or_else(|| reference.repository()),
                reference,
                policy: policy.clone(),
                path,
            });
        }
        if let Some(c) = canary
            && let Some(reference) = config::reference(&c.path)
        {
            let base = name.clone().unwrap_or_else(|| reference.repository());
            out.push(Source {
                name: format!("{base}.canary"),
                reference,
                policy: policy.clone(),
                path: &mut c.path,
            });
        }
    }
    out
}

/// Pull `source` and check its signature under its policy; the plugin in the store.
async fn fetch(registry: &Registry, source: &Source<'_>) -> anyhow::Result<PathBuf> {
    let pulled = registry.pull(&source.reference).await?;
    if let Some(policy) = &source.policy {
        let verifier = Verifier::load(policy)?;
        let key = registry
            .verify(&pulled.reference, &pulled.digest, &verifier)
            .await?;
        tracing::info!(reference = %pulled.reference, key = %key, "plugin signature verified");
    }
    tracing::info!(reference = %pulled.reference, digest = %pulled.digest, path = %pulled.path.display(), fetched = pulled.fetched, "plugin pulled");
    Ok(pulled.path)
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
        let mut sources = sources(&mut config.plugins, config.verify.as_ref(), &mut broken);
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
                        .map(|s| (PathBuf::from(s.reference.to_string()), format!("{e:#}"))),
                );
                return (None, broken);
            }
        };
        let mut current = BTreeMap::new();
        for source in &mut sources {
            let pulled = crate::registry::block_on(fetch(&registry, source))
                .and_then(|path| registry.store().link(&source.name, &path));
            match pulled {
                Ok(link) => {
                    *source.path = link;
                    current.insert(source.name.clone(), source.reference.clone());
                }
                Err(e) => {
                    // A link left by an earlier run would start a version the config no longer names.
                    let link = registry.store().link_path(&source.name);
                    let _ = std::fs::remove_file(&link);
                    broken.push((link.clone(), format!("{e:#}")));
                    *source.path = link;
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
        let global = config.verify.clone();
        for source in sources(&mut config.plugins, global.as_ref(), &mut Vec::new()) {
            if self.current.get(&source.name) == Some(&source.reference) {
                continue;
            }
            let fetched = tokio::time::timeout(PULL_TIMEOUT, fetch(&self.registry, &source)).await;
            let flipped = match fetched {
                Ok(Ok(path)) => self.registry.store().link(&source.name, &path),
                Ok(Err(e)) => Err(e),
                Err(_) => Err(anyhow::anyhow!("no answer within {PULL_TIMEOUT:?}")),
            };
            match flipped {
                Ok(_) => {
                    self.current.insert(source.name, source.reference);
                }
                Err(e) => {
                    tracing::warn!(plugin = %source.name, reference = %source.reference, error = %format!("{e:#}"), "pull failed; the running version stays")
                }
            }
        }
    }
}
