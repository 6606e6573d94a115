//! One-layer OCI image-layout archives, written without a container engine or registry:
//! a layer tar, a config, a manifest and an index naming the image, all by sha256.
//! Every timestamp is zero and every owner explicit, so the same files give the same digest.

use std::path::Path;

use anyhow::{Context, Result};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// The files of an image's one layer, in the order they are added.
#[derive(Default)]
pub(crate) struct Layer {
    builder: Option<tar::Builder<Vec<u8>>>,
}

impl Layer {
    fn builder(&mut self) -> &mut tar::Builder<Vec<u8>> {
        self.builder.get_or_insert_with(|| tar::Builder::new(Vec::new()))
    }

    fn header(kind: tar::EntryType, mode: u32, owner: u32, size: u64) -> tar::Header {
        let mut h = tar::Header::new_ustar();
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_uid(owner.into());
        h.set_gid(owner.into());
        h.set_size(size);
        h.set_mtime(0);
        h
    }

    /// A directory, e.g. `("tmp", 0o1777, 0)`.
    pub fn dir(&mut self, path: &str, mode: u32, owner: u32) -> Result<&mut Self> {
        let mut h = Self::header(tar::EntryType::Directory, mode, owner, 0);
        self.builder()
            .append_data(&mut h, format!("{path}/"), std::io::empty())?;
        Ok(self)
    }

    /// A regular file owned by root.
    pub fn file(&mut self, path: &str, mode: u32, bytes: &[u8]) -> Result<&mut Self> {
        let mut h = Self::header(tar::EntryType::Regular, mode, 0, bytes.len() as u64);
        self.builder().append_data(&mut h, path, bytes)?;
        Ok(self)
    }

    /// A regular file with the content of `from` (symlinks followed).
    pub fn copy(&mut self, path: &str, mode: u32, from: &Path) -> Result<&mut Self> {
        let bytes = std::fs::read(from).with_context(|| format!("reading {}", from.display()))?;
        self.file(path, mode, &bytes)
    }

    /// A symbolic link `path` → `target`.
    pub fn symlink(&mut self, path: &str, target: &str) -> Result<&mut Self> {
        let mut h = Self::header(tar::EntryType::Symlink, 0o777, 0, 0);
        self.builder().append_link(&mut h, path, target)?;
        Ok(self)
    }

    pub(crate) fn finish(mut self) -> Result<Vec<u8>> {
        self.builder();
        Ok(self.builder.take().expect("just made").into_inner()?)
    }
}

/// What runs, as whom, and what the image says about itself (the OCI config's `config`).
#[derive(Debug, Clone, Default)]
pub(crate) struct Config {
    pub user: String,
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    pub env: Vec<String>,
    pub exposed_ports: Vec<u16>,
    pub labels: Vec<(String, String)>,
}

/// A built image: the archive's bytes and the manifest's digest.
pub(crate) struct Archive {
    pub bytes: Vec<u8>,
    pub digest: String,
}

fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(bytes))
}

fn descriptor(media_type: &str, bytes: &[u8]) -> Value {
    json!({ "mediaType": media_type, "digest": sha256(bytes), "size": bytes.len() })
}

/// Writes the OCI image-layout archive of `layer` + `config`, named by every reference in
/// `names` (containerd's `io.containerd.image.name` and the OCI `ref.name`).
pub(crate) fn archive(layer: Layer, config: &Config, names: &[String]) -> Result<Archive> {
    let layer = layer.finish()?;
    let exposed: serde_json::Map<String, Value> = config
        .exposed_ports
        .iter()
        .map(|p| (format!("{p}/tcp"), json!({})))
        .collect();
    let labels: serde_json::Map<String, Value> =
        config.labels.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
    let image_config = serde_json::to_vec(&json!({
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "User": config.user,
            "Entrypoint": config.entrypoint,
            "Cmd": config.cmd,
            "Env": config.env,
            "ExposedPorts": exposed,
            "Labels": labels,
            "WorkingDir": "/",
        },
        "rootfs": { "type": "layers", "diff_ids": [sha256(&layer)] },
    }))?;
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": descriptor("application/vnd.oci.image.config.v1+json", &image_config),
        "layers": [descriptor("application/vnd.oci.image.layer.v1.tar", &layer)],
    }))?;
    let manifests: Vec<Value> = names
        .iter()
        .map(|name| {
            let mut d = descriptor("application/vnd.oci.image.manifest.v1+json", &manifest);
            d["annotations"] = json!({
                "io.containerd.image.name": name,
                "org.opencontainers.image.ref.name": name,
            });
            d
        })
        .collect();
    let index = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": manifests,
    }))?;
    let mut out = Layer::default();
    out.file("oci-layout", 0o644, br#"{"imageLayoutVersion":"1.0.0"}"#)?;
    out.dir("blobs", 0o755, 0)?.dir("blobs/sha256", 0o755, 0)?;
    for blob in [&layer, &image_config, &manifest] {
        let name = sha256(blob).replace("sha256:", "blobs/sha256/");
        out.file(&name, 0o644, blob)?;
    }
    out.file("index.json", 0o644, &index)?;
    Ok(Archive {
        bytes: out.finish()?,
        digest: sha256(&manifest),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image() -> Archive {
        let mut layer = Layer::default();
        layer
            .dir("tmp", 0o1777, 0)
            .unwrap()
            .file("etc/passwd", 0o644, b"root:x:0:0::/:/bin/sh\n")
            .unwrap();
        layer.symlink("bin/sh", "busybox").unwrap();
        let config = Config {
            user: "65532:65532".into(),
            ..Config::default()
        };
        archive(layer, &config, &["example.com/a:1".into()]).unwrap()
    }

    #[test]
    fn archives_are_reproducible_and_name_their_blobs_by_digest() {
        let (a, b) = (image(), image());
        assert_eq!(a.digest, b.digest);
        assert_eq!(a.bytes, b.bytes);
        let mut entries = tar::Archive::new(a.bytes.as_slice());
        let mut index = None;
        let mut blobs = 0;
        for entry in entries.entries().unwrap() {
            let mut entry = entry.unwrap();
            let path = entry.path().unwrap().display().to_string();
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut entry, &mut bytes).unwrap();
            if let Some(hex) = path.strip_prefix("blobs/sha256/").filter(|h| !h.is_empty()) {
                assert_eq!(sha256(&bytes), format!("sha256:{hex}"));
                blobs += 1;
            }
            if path == "index.json" {
                index = Some(serde_json::from_slice::<Value>(&bytes).unwrap());
            }
        }
        assert_eq!(blobs, 3);
        let index = index.expect("index.json");
        assert_eq!(index["manifests"][0]["digest"], a.digest.as_str());
        assert_eq!(
            index["manifests"][0]["annotations"]["io.containerd.image.name"],
            "example.com/a:1"
        );
    }
}
