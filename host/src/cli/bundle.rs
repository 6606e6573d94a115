//! The SDKs this binary carries (`build.rs` bundles them): the Rust crate and its
//! contract, the Python and JavaScript packages and the WIT of this very version, laid out
//! as in a checkout (`sdk/`, `wit/`, the workspace manifest they inherit from). A project
//! that `capstan new` makes points at them once they are extracted into the user's cache,
//! so it builds with no checkout and nothing published; only the language toolchains come
//! from the package registries.

use std::path::{Path, PathBuf};

use anyhow::Context;
use sha2::Digest;

/// (path from the checkout's root, contents) of every bundled file.
const FILES: &[(&str, &[u8])] = include!(concat!(env!("OUT_DIR"), "/sdk_bundle.rs"));

/// The bundle's checkout-shaped root under `cache` (`$XDG_CACHE_HOME/capstan/sdk`, say),
/// extracted there first if no earlier run did: `ROOT/sdk` is what `--sdk` would name.
/// The directory is named by the version and the bundle's digest, so a binary built from
/// other sources never reads a stale copy, and is complete once it exists (renamed into
/// place).
pub fn extracted(cache: &Path) -> anyhow::Result<PathBuf> {
    let root = cache.join(format!("{}-{}", env!("CARGO_PKG_VERSION"), digest()));
    if root.join("sdk/Cargo.toml").is_file() {
        return Ok(root);
    }
    std::fs::create_dir_all(cache).with_context(|| format!("cannot create {}", cache.display()))?;
    // Written beside its place and renamed into it, so a run stopped half-way never
    // leaves a partial SDK where the next run would take it as whole.
    let partial = cache.join(format!(".extracting-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&partial);
    let written = write_all(&partial).and_then(|()| {
        std::fs::rename(&partial, &root).or_else(|e| {
            // Another run extracted it meanwhile: the same bytes.
            anyhow::ensure!(
                root.join("sdk/Cargo.toml").is_file(),
                "cannot move the SDK into {}: {e}",
                root.display()
            );
            Ok(())
        })
    });
    let _ = std::fs::remove_dir_all(&partial);
    written.map(|()| root)
}

/// A hex digest of every bundled path and file.
fn digest() -> String {
    let mut hash = sha2::Sha256::new();
    for (path, bytes) in FILES {
        hash.update(path.as_bytes());
        hash.update((bytes.len() as u64).to_le_bytes());
        hash.update(bytes);
    }
    let hex: String = hash.finalize().iter().map(|b| format!("{b:02x}")).collect();
    hex[..12].to_string()
}

/// Write the bundle under `root`, as a checkout has it.
fn write_all(root: &Path) -> anyhow::Result<()> {
    for (relative, bytes) in FILES {
        let path = root.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
        }
        let bytes = if *relative == "Cargo.toml" {
            std::borrow::Cow::Owned(workspace_manifest(bytes)?.into_bytes())
        } else {
            std::borrow::Cow::Borrowed(*bytes)
        };
        std::fs::write(&path, bytes).with_context(|| format!("cannot write {}", path.display()))?;
    }
    // The Rust crate finds the contract at `sdk/wit`, as in a checkout.
    std::os::unix::fs::symlink("../wit", root.join("sdk/wit"))
        .with_context(|| format!("cannot link {}", root.join("sdk/wit").display()))?;
    Ok(())
}

/// The checkout's workspace manifest with only the SDK's crates as members: the crates
/// inherit their version, edition and dependencies from it, and the bundle has no others.
fn workspace_manifest(bytes: &[u8]) -> anyhow::Result<String> {
    let text = std::str::from_utf8(bytes).context("the bundled Cargo.toml is not UTF-8")?;
    let mut found = false;
    let lines: Vec<&str> = text
        .lines()
        .map(|line| {
            if !found && line.trim_start().starts_with("members = [") && line.trim_end().ends_with(']') {
                found = true;
                r#"members = ["sdk", "sdk/contract"]"#
            } else {
                line
            }
        })
        .collect();
    anyhow::ensure!(found, "the bundled Cargo.toml has no one-line `members = [...]`");
    Ok(lines.join("\n") + "\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bundle_holds_every_sdk_and_extracts_once_as_a_checkout_does() {
        let cache = tempfile::tempdir().unwrap();
        let root = extracted(cache.path()).unwrap();
        for file in [
            "sdk/Cargo.toml",
            "sdk/src/lib.rs",
            "sdk/contract/Cargo.toml",
            "sdk/wit/reconciler.wit",
            "wit/reconciler.wit",
            "sdk/python/pyproject.toml",
            "sdk/python/src/capstan_sdk/__init__.py",
            "sdk/js/package.json",
            "sdk/js/wit/reconciler.wit",
        ] {
            assert!(root.join(file).is_file(), "{file} missing");
        }
        let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
        assert!(
            manifest.contains(r#"members = ["sdk", "sdk/contract"]"#),
            "{manifest}"
        );
        assert!(manifest.contains("[workspace.dependencies]"), "{manifest}");
        // The checkout's own files, byte for byte.
        let checkout = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        for file in ["sdk/src/lib.rs", "wit/reconciler.wit", "sdk/js/src/index.js"] {
            assert_eq!(
                std::fs::read(root.join(file)).unwrap(),
                std::fs::read(checkout.join(file)).unwrap(),
                "{file}"
            );
        }
        // A second call finds it, and nothing half-written is left beside it.
        std::fs::write(root.join("marker"), "").unwrap();
        assert_eq!(extracted(cache.path()).unwrap(), root);
        assert!(root.join("marker").is_file(), "not extracted again");
        let entries = std::fs::read_dir(cache.path()).unwrap().count();
        assert_eq!(entries, 1);
    }

    #[test]
    fn a_manifest_whose_members_span_lines_is_refused() {
        let error = workspace_manifest(b"[workspace]\nmembers = [\n  \"a\",\n]\n").unwrap_err();
        assert!(error.to_string().contains("members"), "{error}");
    }
}
