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

/// The references of one config file, and what each link points at.
pub(super) struct References {
    registry: Registry,
    /// The config's `registry:` section the registry was made from.
    settings: crate::registry::Settings,
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
    /// Pull every reference in `config` into `pull_dir` and point its entry at the pulled
    /// plugin; the entries whose pull failed, with why. `None` when the config names no
    /// reference. For the start, before any runtime runs.
    pub fn resolve(
        config: &mut Config,
        pull_dir: Option<&Path>,
    ) -> (Option<References>, Vec<(PathBuf, String)>) {
        let mut broken = Vec::new();
        if sources(&mut config.plugins, config.verify.as_ref(), &mut broken).is_empty() {
            return (None, broken);
        }
        let pulled = References::new(config, pull_dir).and_then(|mut references| {
            let failed = crate::registry::block_on(async { anyhow::Ok(references.pull(config).await) })?;
            Ok((references, failed))
        });
        match pulled {
            Ok((references, failed)) => {
                broken.extend(failed);
                (Some(references), broken)
            }
            Err(e) => {
                let global = config.verify.clone();
                let failed = sources(&mut config.plugins, global.as_ref(), &mut Vec::new())
                    .into_iter()
                    .map(|s| (PathBuf::from(s.reference.to_string()), format!("{e:#}")));
                broken.extend(failed);
                (None, broken)
            }
        }
    }

    /// The registry `config` names, its pulls kept in `pull_dir`; nothing pulled yet.
    pub fn new(config: &Config, pull_dir: Option<&Path>) -> anyhow::Result<References> {
        let dir = pull_dir.ok_or_else(|| {
            anyhow::anyhow!("no place to keep pulled plugins: set --pull-dir or CAPSTAN_PULL_DIR")
        })?;
        Ok(References {
            registry: Registry::new(config.registry.clone(), dir)?,
            settings: config.registry.clone(),
            current: BTreeMap::new(),
        })
    }

    /// Point every reference of `config` at its link, pulling (each within
    /// [`PULL_TIMEOUT`]) those that are new or changed since the last pull and flipping
    /// their links. A failed pull leaves a link an earlier pull made (its version serves
    /// on); one without any is listed with why, its stale link removed (a link left by an
    /// earlier run would start a version the config no longer names). Under a policy a
    /// canary file is listed too: a file carries no signature.
    pub async fn pull(&mut self, config: &mut Config) -> Vec<(PathBuf, String)> {
        let mut failed = Vec::new();
        let global = config.verify.clone();
        for source in sources(&mut config.plugins, global.as_ref(), &mut failed) {
            let link = self.registry.store().link_path(&source.name);
            *source.path = link.clone();
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
                Err(e) if self.current.contains_key(&source.name) => {
                    tracing::warn!(plugin = %source.name, reference = %source.reference, error = %format!("{e:#}"), "pull failed; the running version stays");
                }
                Err(e) => {
                    let _ = std::fs::remove_file(&link);
                    failed.push((link, format!("{e:#}")));
                }
            }
        }
        failed
    }
}

/// Point `config`'s references at their links, pulling what changed (the registry made
/// when the config names its first reference); the entries that failed, with why.
pub(super) async fn repull(
    references: &mut Option<References>,
    config: &mut Config,
    pull_dir: Option<&Path>,
) -> anyhow::Result<Vec<(PathBuf, String)>> {
    let named = |p: &Path| config::reference(p).is_some();
    let names_one =
        (config.plugins.iter()).any(|e| named(&e.path) || e.canary.as_ref().is_some_and(|c| named(&c.path)));
    // Changed `registry:` settings (credentials, CAs, plain HTTP, limits) make the
    // registry anew; what the links point at stays until a reference changes.
    if let Some(r) = references.as_mut()
        && r.settings != config.registry
    {
        let mut fresh = References::new(config, pull_dir)?;
        fresh.current = std::mem::take(&mut r.current);
        *r = fresh;
    }
    match references {
        Some(r) => Ok(r.pull(config).await),
        None if names_one => {
            let r = references.insert(References::new(config, pull_dir)?);
            Ok(r.pull(config).await)
        }
        None => {
            let (global, mut failed) = (config.verify.clone(), Vec::new());
            sources(&mut config.plugins, global.as_ref(), &mut failed);
            Ok(failed)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A changed `registry:` section makes the registry anew for the next pull, and what
    /// was pulled stays pulled: no reference is fetched again for it (this test has no
    /// registry to fetch from).
    #[tokio::test]
    async fn changed_registry_settings_make_the_registry_anew_and_keep_what_was_pulled() {
        let dir = tempfile::tempdir().unwrap();
        let reference = "oci://localhost:5000/echo:1";
        let text = format!("plugins:\n  - path: {reference}\n    name: echo\n");
        let mut config = config::parse(&text).unwrap();
        let mut references = Some(References::new(&config, Some(dir.path())).unwrap());
        let pulled = PluginRef::parse(reference).unwrap();
        if let Some(r) = references.as_mut() {
            r.current.insert("echo".into(), pulled.clone());
        }
        config.registry.plain_http = vec!["localhost:5000".into()];
        let failed = repull(&mut references, &mut config, Some(dir.path()))
            .await
            .unwrap();
        assert!(failed.is_empty(), "{failed:?}");
        let r = references.unwrap();
        assert_eq!(r.settings.plain_http, ["localhost:5000"]);
        assert_eq!(r.current.get("echo"), Some(&pulled));
        assert_eq!(config.plugins[0].path, r.registry.store().link_path("echo"));
    }
}
