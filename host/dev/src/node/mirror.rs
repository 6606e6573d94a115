//! The real node's image mirror: the images it was given, served by a CNCF Distribution
//! registry on loopback that containerd asks first for their registries (`docker.io`,
//! `registry.k8s.io`). A pod whose pull policy is `Always` — any `image: busybox`, whose
//! tag is `latest` — then resolves its image there instead of failing offline.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde_json::Value;

/// The mirror's files under the node's dir.
pub(crate) struct Mirror {
    pub dir: PathBuf,
    pub port: u16,
}

impl Mirror {
    /// The registry's storage: Distribution's filesystem layout.
    fn storage(&self) -> PathBuf {
        self.dir.join("storage")
    }

    /// containerd's `config_path`: a `hosts.toml` per registry host.
    pub fn hosts_dir(dir: &Path) -> PathBuf {
        dir.join("certs.d")
    }

    fn config(&self) -> PathBuf {
        self.dir.join("config.yml")
    }

    /// The registry's command line.
    pub fn args(&self) -> Vec<String> {
        vec!["serve".into(), self.config().display().to_string()]
    }

    /// Stores the OCI image-layout `archives` as the registry serves them, writes its
    /// config and, for each registry host the images name, where containerd finds them.
    pub fn write(&self, archives: &[PathBuf]) -> Result<()> {
        std::fs::create_dir_all(&self.dir).with_context(|| format!("creating {}", self.dir.display()))?;
        let mut hosts = Vec::new();
        for archive in archives {
            for host in self.store(archive)? {
                if !hosts.contains(&host) {
                    hosts.push(host);
                }
            }
        }
        let config = format!(
            "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {:?}\nhttp:\n  addr: 127.0.0.1:{}\n",
            self.storage().display().to_string(),
            self.port
        );
        std::fs::write(self.config(), config)
            .with_context(|| format!("writing {}", self.config().display()))?;
        for host in hosts {
            let dir = Self::hosts_dir(&self.dir).join(&host);
            std::fs::create_dir_all(&dir)?;
            let upstream = if host == "docker.io" {
                "registry-1.docker.io"
            } else {
                &host
            };
            let toml = format!(
                "server = \"https://{upstream}\"\n\n[host.\"http://127.0.0.1:{}\"]\n  capabilities = [\"pull\", \"resolve\"]\n",
                self.port
            );
            std::fs::write(dir.join("hosts.toml"), toml)?;
        }
        Ok(())
    }

    /// Stores one archive's blobs and tags; returns the registry hosts its names use.
    fn store(&self, archive: &Path) -> Result<Vec<String>> {
        let blobs = read_layout(archive)?;
        let index: Value = serde_json::from_slice(blobs.get("index.json").context("no index.json")?)?;
        let root = self.storage().join("docker/registry/v2");
        for (name, bytes) in &blobs {
            if let Some(hex) = name.strip_prefix("blobs/sha256/") {
                let at = root.join("blobs/sha256").join(&hex[..2.min(hex.len())]).join(hex);
                std::fs::create_dir_all(&at)?;
                std::fs::write(at.join("data"), bytes)?;
            }
        }
        let mut hosts = Vec::new();
        for m in index["manifests"].as_array().into_iter().flatten() {
            let (Some(name), Some(digest)) = (
                m["annotations"]["io.containerd.image.name"].as_str(),
                m["digest"].as_str(),
            ) else {
                continue;
            };
            let (host, repository, tag) = split_reference(name)?;
            let manifest = blob(&blobs, digest)?;
            let manifest: Value = serde_json::from_slice(manifest)?;
            let repo = root.join("repositories").join(&repository);
            let link = |path: PathBuf, digest: &str| -> Result<()> {
                std::fs::create_dir_all(&path)?;
                Ok(std::fs::write(path.join("link"), digest)?)
            };
            let layers = std::iter::once(&manifest["config"])
                .chain(manifest["layers"].as_array().into_iter().flatten());
            for d in layers.filter_map(|l| l["digest"].as_str()) {
                link(repo.join("_layers").join(d.replace(':', "/")), d)?;
            }
            link(
                repo.join("_manifests/revisions").join(digest.replace(':', "/")),
                digest,
            )?;
            link(repo.join("_manifests/tags").join(&tag).join("current"), digest)?;
            link(
                repo.join("_manifests/tags")
                    .join(&tag)
                    .join("index")
                    .join(digest.replace(':', "/")),
                digest,
            )?;
            hosts.push(host);
        }
        Ok(hosts)
    }
}

/// Every file of an OCI image-layout archive, by path.
fn read_layout(archive: &Path) -> Result<BTreeMap<String, Vec<u8>>> {
    let file = std::fs::File::open(archive).with_context(|| format!("opening {}", archive.display()))?;
    let mut out = BTreeMap::new();
    for entry in tar::Archive::new(file).entries()? {
        let mut entry = entry?;
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let path = entry.path()?.display().to_string();
        let mut bytes = Vec::new();
        entry.read_to_end(&mut bytes)?;
        out.insert(path.trim_start_matches("./").to_string(), bytes);
    }
    Ok(out)
}

fn blob<'a>(blobs: &'a BTreeMap<String, Vec<u8>>, digest: &str) -> Result<&'a [u8]> {
    let path = digest.replace("sha256:", "blobs/sha256/");
    blobs
        .get(&path)
        .map(Vec::as_slice)
        .with_context(|| format!("no blob {digest}"))
}

/// (registry host, repository, tag) of a full reference such as
/// `docker.io/library/busybox:latest`.
fn split_reference(name: &str) -> Result<(String, String, String)> {
    let (host, rest) = name
        .split_once('/')
        .filter(|(h, _)| h.contains('.') || h.contains(':'))
        .with_context(|| format!("image name {name} names no registry host"))?;
    let Some((repository, tag)) = rest.rsplit_once(':').filter(|(_, t)| !t.contains('/')) else {
        bail!("image name {name} has no tag");
    };
    Ok((host.to_string(), repository.to_string(), tag.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_split_into_host_repository_and_tag() {
        let (h, r, t) = split_reference("docker.io/library/busybox:latest").unwrap();
        assert_eq!(
            (h.as_str(), r.as_str(), t.as_str()),
            ("docker.io", "library/busybox", "latest")
        );
        let (h, r, t) = split_reference("registry.k8s.io/pause:3.10").unwrap();
        assert_eq!(
            (h.as_str(), r.as_str(), t.as_str()),
            ("registry.k8s.io", "pause", "3.10")
        );
        assert!(split_reference("busybox:latest").is_err());
        assert!(split_reference("docker.io/library/busybox").is_err());
    }
}
