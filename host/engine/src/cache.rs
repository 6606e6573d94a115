//! Compiled components kept on disk, so a restart, a second replica or a `capstan test`
//! run skips Cranelift: compiling a 1 MB component takes about a second on two cores and
//! most of a small host's peak memory, while loading it back is a memory map.
//!
//! Entries are wasmtime's own precompiled format (`Engine::precompile_component`),
//! named by the SHA-256 of the component and a hash of everything in the engine that
//! affects compiled code, so a changed plugin, wasmtime upgrade or engine setting misses.
//! wasmtime's `cache` feature was not used: it decompresses entries into anonymous
//! memory (what this cache exists to avoid), needs zstd's C build, and runs a worker thread.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};
use wasmtime::component::Component;

/// Entries not used for this long are removed when a new one is written.
const UNUSED_FOR: Duration = Duration::from_secs(14 * 24 * 3600);

/// A directory of precompiled components. Whoever can write to it can run code in the
/// host, so [`CompileCache::open`] insists it is private to this user.
#[derive(Clone, Debug)]
pub(crate) struct CompileCache {
    dir: PathBuf,
}

/// Make `dir` (and its parents) if missing, private to this user; refuse one that others
/// could write to or that another user owns: the compile cache and the pulled plugins
/// hold what runs as code in the host.
pub fn private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent)?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        other => other?,
    }
    let meta = std::fs::metadata(dir)?;
    let mode = meta.permissions().mode() & 0o777;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if !meta.is_dir() {
        return Err(std::io::Error::other("not a directory"));
    }
    if meta.uid() != euid || mode & 0o022 != 0 {
        return Err(std::io::Error::other(format!(
            "not private to this user (owner uid {}, mode {mode:o}); its files would run as code in the host",
            meta.uid()
        )));
    }
    Ok(())
}

impl CompileCache {
    /// Use `dir`, creating it private to this user; refuse one that others could write to,
    /// since a planted entry would run as code in the host.
    pub(crate) fn open(dir: &Path) -> std::io::Result<CompileCache> {
        private_dir(dir)?;
        Ok(CompileCache {
            dir: dir.to_path_buf(),
        })
    }

    /// The compiled component for `bytes`, from disk when present, else compiled and stored.
    pub(crate) fn component(&self, engine: &wasmtime::Engine, bytes: &[u8]) -> wasmtime::Result<Component> {
        let path = self.entry(engine, bytes);
        if path.exists() {
            // SAFETY: entries are only ever written below by `precompile_component` for
            // this engine's settings (the name says so) and renamed into place whole;
            // wasmtime still checks the header and compatibility and errors otherwise.
            match unsafe { Component::deserialize_file(engine, &path) } {
                Ok(component) => {
                    let _ = std::fs::File::options()
                        .write(true)
                        .open(&path)
                        .and_then(|f| f.set_modified(SystemTime::now()));
                    tracing::debug!(entry = %path.display(), "compiled component from cache");
                    return Ok(component);
                }
                Err(e) => tracing::warn!(entry = %path.display(), "unusable cache entry, recompiling: {e:#}"),
            }
        }
        let started = std::time::Instant::now();
        let compiled = engine.precompile_component(bytes)?;
        tracing::info!(elapsed = ?started.elapsed(), "compiled component");
        if let Err(e) = self.store(&path, &compiled) {
            tracing::warn!(dir = %self.dir.display(), "cannot write compile cache: {e}");
            // SAFETY: the bytes were produced just now by this engine.
            return unsafe { Component::deserialize(engine, &compiled) };
        }
        drop(compiled);
        self.evict_unused();
        // SAFETY: written just now by this engine; mapping the file keeps the code in the
        // page cache instead of the heap.
        unsafe { Component::deserialize_file(engine, &path) }
    }

    fn entry(&self, engine: &wasmtime::Engine, bytes: &[u8]) -> PathBuf {
        let mut settings = std::hash::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut settings);
        env!("CARGO_PKG_VERSION").hash(&mut settings);
        let wasm = Sha256::digest(bytes);
        let wasm: String = wasm.iter().map(|b| format!("{b:02x}")).collect();
        self.dir.join(format!("{wasm}-{:016x}.cwasm", settings.finish()))
    }

    /// Write through a temporary file of this writer's own and rename, so readers never see
    /// half an entry even when several threads or hosts compile the same component at once.
    fn store(&self, path: &Path, compiled: &[u8]) -> std::io::Result<()> {
        static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = path.with_extension(format!("tmp.{}.{n}", std::process::id()));
        std::fs::write(&tmp, compiled)?;
        std::fs::rename(&tmp, path).inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })
    }

    /// Entries of replaced plugins would otherwise pile up across hot reloads.
    fn evict_unused(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let now = SystemTime::now();
        for entry in entries.flatten() {
            let path = entry.path();
            let stale = entry
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| now.duration_since(t).unwrap_or_default() > UNUSED_FOR);
            if stale && path.extension().is_some_and(|e| e == "cwasm") {
                // Mapped entries stay valid after unlinking, so a running host is unaffected.
                let _ = std::fs::remove_file(&path);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn component() -> Vec<u8> {
        wat::parse_str("(component (core module (func (export \"f\"))))").unwrap()
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("capstan-cache-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn entries(dir: &Path) -> Vec<PathBuf> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect()
    }

    #[test]
    fn the_directory_is_created_private_and_a_shared_one_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = temp_dir("private");
        CompileCache::open(&dir.join("cache")).unwrap();
        let mode = std::fs::metadata(dir.join("cache")).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        let shared = dir.join("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = CompileCache::open(&shared).unwrap_err().to_string();
        assert!(err.contains("not private to this user"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn second_load_reads_the_entry_the_first_wrote() {
        let dir = temp_dir("hit");
        let engine = wasmtime::Engine::default();
        let cache = CompileCache::open(&dir).unwrap();
        cache.component(&engine, &component()).unwrap();
        let written = entries(&dir);
        assert_eq!(written.len(), 1, "{written:?}");
        let before = std::fs::metadata(&written[0]).unwrap().modified().unwrap();
        std::thread::sleep(Duration::from_millis(20));
        cache.component(&engine, &component()).unwrap();
        assert_eq!(entries(&dir), written, "a hit writes no new entry");
        let after = std::fs::metadata(&written[0]).unwrap().modified().unwrap();
        assert!(after > before, "a hit marks the entry used");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn concurrent_compiles_of_one_component_all_load() {
        let dir = temp_dir("race");
        let engine = wasmtime::Engine::default();
        let cache = CompileCache::open(&dir).unwrap();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| cache.component(&engine, &component()).unwrap());
            }
        });
        assert_eq!(entries(&dir).len(), 1, "no temporary files left behind");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn other_engine_settings_or_bytes_miss() {
        let dir = temp_dir("miss");
        let cache = CompileCache::open(&dir).unwrap();
        let plain = wasmtime::Engine::default();
        let mut config = wasmtime::Config::new();
        config.epoch_interruption(true);
        let epoch = wasmtime::Engine::new(&config).unwrap();
        cache.component(&plain, &component()).unwrap();
        cache.component(&epoch, &component()).unwrap();
        cache
            .component(&plain, &wat::parse_str("(component (core module))").unwrap())
            .unwrap();
        assert_eq!(entries(&dir).len(), 3);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_corrupt_entry_is_recompiled_and_replaced() {
        let dir = temp_dir("corrupt");
        let engine = wasmtime::Engine::default();
        let cache = CompileCache::open(&dir).unwrap();
        cache.component(&engine, &component()).unwrap();
        let entry = entries(&dir).remove(0);
        std::fs::write(&entry, b"not an ELF file").unwrap();
        cache.component(&engine, &component()).unwrap();
        assert!(std::fs::metadata(&entry).unwrap().len() > 100, "entry rewritten");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn entries_unused_for_weeks_are_evicted_on_the_next_write() {
        let dir = temp_dir("evict");
        let engine = wasmtime::Engine::default();
        let cache = CompileCache::open(&dir).unwrap();
        cache.component(&engine, &component()).unwrap();
        let old = entries(&dir).remove(0);
        let weeks_ago = SystemTime::now() - UNUSED_FOR - Duration::from_secs(60);
        std::fs::File::options()
            .write(true)
            .open(&old)
            .unwrap()
            .set_modified(weeks_ago)
            .unwrap();
        cache
            .component(&engine, &wat::parse_str("(component (core module))").unwrap())
            .unwrap();
        let left = entries(&dir);
        assert_eq!(left.len(), 1);
        assert_ne!(left[0], old);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
