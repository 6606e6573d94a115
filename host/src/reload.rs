//! Hot reload: notice when a plugin file is replaced, including Kubernetes' atomic
//! ConfigMap-volume swaps (a `..data` symlink flip, which inotify on the file misses).
//!
//! Files are polled: a cheap fingerprint (resolved path, size, mtime) each tick, and a
//! content hash only when that changes, so a touched-but-identical file is no reload.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// What the watcher last saw of one file.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Stamp {
    resolved: PathBuf,
    len: u64,
    modified: Option<SystemTime>,
}

fn stamp(path: &Path) -> Option<Stamp> {
    let resolved = path.canonicalize().ok()?;
    let meta = std::fs::metadata(&resolved).ok()?;
    Some(Stamp {
        resolved,
        len: meta.len(),
        modified: meta.modified().ok(),
    })
}

fn digest(bytes: &[u8]) -> u64 {
    let mut h = DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

/// Watches one plugin file for new content.
#[derive(Debug)]
pub struct FileWatch {
    path: PathBuf,
    stamp: Option<Stamp>,
    digest: Option<u64>,
}

impl FileWatch {
    /// Start watching `path` as it is now.
    pub fn new(path: PathBuf) -> Self {
        let stamp = stamp(&path);
        let digest = std::fs::read(&path).ok().map(|b| digest(&b));
        FileWatch { path, stamp, digest }
    }

    /// The watched path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The new content, if the file changed since the last call (or since `new`).
    pub fn changed(&mut self) -> Option<Vec<u8>> {
        let now = stamp(&self.path);
        if now.is_none() || now == self.stamp {
            // A missing file is mid-replacement or removed: keep serving the old version.
            return None;
        }
        let bytes = std::fs::read(&self.path).ok()?;
        self.stamp = now;
        let d = digest(&bytes);
        if Some(d) == self.digest {
            return None;
        }
        self.digest = Some(d);
        Some(bytes)
    }
}

/// The `*.wasm` files of a plugin directory, sorted.
pub fn wasm_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "wasm"))
        .collect();
    paths.sort();
    Ok(paths)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_new_content_once_and_ignores_identical_rewrites() {
        let dir = std::env::temp_dir().join(format!("capstan-reload-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("p.wasm");
        std::fs::write(&file, b"one").unwrap();
        let mut watch = FileWatch::new(file.clone());
        assert_eq!(watch.changed(), None);
        std::fs::write(&file, b"two!").unwrap();
        assert_eq!(watch.changed().as_deref(), Some(&b"two!"[..]));
        assert_eq!(watch.changed(), None);
        std::fs::write(&file, b"two!").unwrap();
        assert_eq!(watch.changed(), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn follows_a_configmap_style_symlink_flip() {
        let dir = std::env::temp_dir().join(format!("capstan-reload-link-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for v in ["v1", "v2"] {
            std::fs::create_dir_all(dir.join(v)).unwrap();
            std::fs::write(dir.join(v).join("p.wasm"), v).unwrap();
        }
        std::os::unix::fs::symlink("v1", dir.join("..data")).unwrap();
        std::os::unix::fs::symlink("..data/p.wasm", dir.join("p.wasm")).unwrap();
        let mut watch = FileWatch::new(dir.join("p.wasm"));
        std::fs::remove_file(dir.join("..data")).unwrap();
        std::os::unix::fs::symlink("v2", dir.join("..data")).unwrap();
        assert_eq!(watch.changed().as_deref(), Some(&b"v2"[..]));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
