//! Bundles this version's SDKs into the binary — the Rust crate and its contract, the
//! Python and JavaScript packages, the WIT — so `capstan new` gives a project an SDK that
//! needs no checkout and no registry that publishes one (`cli::new::bundle` extracts it).
//! Writes `$OUT_DIR/sdk_bundle.rs`: a slice of (path from the workspace root, bytes).

use std::path::{Path, PathBuf};

/// What a plugin project builds against, from the workspace root: sources and manifests,
/// never tests, lock files or what a local run left behind.
const TREES: &[&str] = &[
    "Cargo.toml",
    "wit",
    "sdk/Cargo.toml",
    "sdk/src",
    "sdk/contract/Cargo.toml",
    "sdk/contract/src",
    "sdk/python/pyproject.toml",
    "sdk/python/README.md",
    "sdk/python/src",
    "sdk/js/package.json",
    "sdk/js/README.md",
    "sdk/js/src",
    "sdk/js/types",
    "sdk/js/wit",
];

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for tree in TREES {
        let path = root.join(tree);
        println!("cargo::rerun-if-changed={}", path.display());
        collect(&path, tree, &mut files);
    }
    files.sort();
    let mut out = String::from("&[\n");
    for (relative, absolute) in &files {
        out.push_str(&format!("    ({relative:?}, include_bytes!({absolute:?})),\n"));
    }
    out.push_str("]\n");
    let dest = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("sdk_bundle.rs");
    std::fs::write(dest, out).expect("write sdk_bundle.rs");
}

/// Every file under `path` (or `path` itself), as (relative path, absolute path).
fn collect(path: &Path, relative: &str, files: &mut Vec<(String, String)>) {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    if name == "__pycache__" || name == "node_modules" || name.ends_with(".pyc") {
        return;
    }
    if path.is_dir() {
        let entries = std::fs::read_dir(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for entry in entries.flatten() {
            let child = entry.file_name().to_string_lossy().into_owned();
            collect(&entry.path(), &format!("{relative}/{child}"), files);
        }
    } else if path.is_file() {
        let absolute = path
            .canonicalize()
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        files.push((relative.to_string(), absolute.to_string_lossy().into_owned()));
    } else {
        panic!("{}: missing from the SDK bundle's sources", path.display());
    }
}
