//! Pulled plugins on disk, by digest: `blobs/sha256/HEX.wasm` holds a layer and is named by
//! its own hash (checked again on every use, so a changed file is never run),
//! `manifests/sha256/HEX` says which layer a manifest pinned, and `links/NAME.wasm` is the
//! stable path a config entry's plugin is loaded (and hot-reloaded) from, flipped to a new
//! blob when the entry's reference changes.

use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The directory pulled plugins are kept in.
#[derive(Clone, Debug)]
pub struct Store {
    dir: PathBuf,
}

/// `sha256:HEX` of `bytes`.
pub fn sha256(bytes: &[u8]) -> String {
    let hash = Sha256::digest(bytes);
    let mut out = String::with_capacity(71);
    out.push_str("sha256:");
    for b in hash {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// The hex of a `sha256:HEX` digest, when it is one (nothing else may name a file).
fn hex(digest: &str) -> Option<&str> {
    let hex = digest.strip_prefix("sha256:")?;
    (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit())).then_some(hex)
}

impl Store {
    /// A store in `dir`, created private (0700) when missing; one others could write to is
    /// refused, since its files run as code.
    pub fn open(dir: &Path) -> anyhow::Result<Store> {
        for sub in [
            "",
            "blobs",
            "blobs/sha256",
            "manifests",
            "manifests/sha256",
            "links",
        ] {
            let path = dir.join(sub);
            capstan_engine::private_dir(&path)
                .map_err(|e| anyhow::anyhow!("pulled plugins in {}: {e}", path.display()))?;
        }
        Ok(Store {
            dir: dir.to_path_buf(),
        })
    }

    /// The layer a pulled manifest pinned, if it is here and intact.
    pub fn get(&self, manifest: &str) -> Option<PathBuf> {
        let index = self.dir.join("manifests/sha256").join(hex(manifest)?);
        let layer = std::fs::read_to_string(index).ok()?;
        let blob = self.blob(layer.trim())?;
        let bytes = std::fs::read(&blob).ok()?;
        (sha256(&bytes) == layer.trim()).then_some(blob)
    }

    /// Keep `bytes` as the layer `layer` of manifest `manifest`; the blob's path.
    pub fn put(&self, manifest: &str, layer: &str, bytes: &[u8]) -> anyhow::Result<PathBuf> {
        anyhow::ensure!(sha256(bytes) == layer, "layer does not match its digest {layer}");
        let blob = self
            .blob(layer)
            .ok_or_else(|| anyhow::anyhow!("{layer}: not a sha256 digest"))?;
        let index = self
            .dir
            .join("manifests/sha256")
            .join(hex(manifest).ok_or_else(|| anyhow::anyhow!("{manifest}: not a sha256 digest"))?);
        write_atomically(&blob, bytes)?;
        write_atomically(&index, layer.as_bytes())?;
        Ok(blob)
    }

    /// Point the stable path `links/NAME.wasm` at `blob`; the stable path.
    pub fn link(&self, name: &str, blob: &Path) -> anyhow::Result<PathBuf> {
        let link = self.link_path(name);
        let tmp = link.with_extension(format!("tmp{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(blob, &tmp)?;
        std::fs::rename(&tmp, &link)?;
        Ok(link)
    }

    /// The stable path of link `name` (`/` and other such characters made `_`).
    pub fn link_path(&self, name: &str) -> PathBuf {
        let safe: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        self.dir.join("links").join(format!("{safe}.wasm"))
    }

    fn blob(&self, layer: &str) -> Option<PathBuf> {
        Some(
            self.dir
                .join("blobs/sha256")
                .join(format!("{}.wasm", hex(layer)?)),
        )
    }
}

/// Write through a temporary file and a rename, so a reader never sees half a plugin.
fn write_atomically(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", tmp.display()))?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blob_is_found_by_manifest_and_refused_once_changed() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let manifest = sha256(b"manifest");
        let layer = sha256(b"\0asm plugin");
        assert!(store.get(&manifest).is_none());
        assert!(store.put(&manifest, &sha256(b"other"), b"\0asm plugin").is_err());
        let blob = store.put(&manifest, &layer, b"\0asm plugin").unwrap();
        assert_eq!(store.get(&manifest), Some(blob.clone()));
        let link = store.link("reg.example/echo", &blob).unwrap();
        assert_eq!(std::fs::read(&link).unwrap(), b"\0asm plugin");
        std::fs::write(&blob, b"\0asm tampered").unwrap();
        assert!(store.get(&manifest).is_none(), "a changed blob is not served");
        assert!(store.get("sha256:../../etc").is_none());
    }
}
