//! Turning bytes into a plugin: what kind of Wasm it is, whether it speaks our WIT
//! version, and whether its metadata makes sense — each failure one readable line.

use wasmtime::component::Component;

use super::bindings::{PLUGIN_EXPORT, PLUGIN_EXPORT_PREFIX, WIT_PACKAGE};
use super::cache::CompileCache;
use super::types::{Kind, Metadata};

/// Why a plugin could not be loaded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("cannot read {0}: {1}")]
    Read(String, String),
    /// Not WebAssembly at all.
    #[error("not a WebAssembly file (no \\0asm header)")]
    NotWasm,
    /// A core module, not a component.
    #[error(
        "a core WebAssembly module, not a component: build the plugin for wasm32-wasip2 (cargo build --target wasm32-wasip2)"
    )]
    CoreModule,
    /// The component failed validation or compilation.
    #[error("invalid component: {0}")]
    Invalid(String),
    /// Built against another version of the contract.
    #[error("plugin implements {found}, but this host implements {WIT_PACKAGE}")]
    WitVersion {
        /// The package version the plugin exports.
        found: String,
    },
    /// Does not export the plugin interface, or exports it with the wrong shape.
    #[error("component does not export {PLUGIN_EXPORT} correctly: {0}")]
    Exports(String),
    /// Imports something the sandbox does not provide.
    #[error("plugin needs an import the sandbox does not provide: {0}")]
    Imports(String),
    /// `metadata()` failed.
    #[error("metadata() failed: {0}")]
    Metadata(String),
    /// `metadata()` answered nonsense.
    #[error("invalid metadata: {0}")]
    InvalidMetadata(String),
    /// The configured limits are not allowed.
    #[error("invalid limits: {0}")]
    Limits(String),
}

/// Check what the bytes are, then compile the component (or take it from `cache`).
pub(crate) fn compile(
    engine: &wasmtime::Engine,
    cache: Option<&CompileCache>,
    bytes: &[u8],
) -> Result<Component, LoadError> {
    if bytes.starts_with(b"(") || bytes.starts_with(b";;") {
        // WAT text; wasmtime parses it, which tests and experiments rely on.
    } else if !bytes.starts_with(b"\0asm") || bytes.len() < 8 {
        return Err(LoadError::NotWasm);
    } else if bytes[4..8] == [1, 0, 0, 0] {
        return Err(LoadError::CoreModule);
    }
    let component = match cache {
        Some(cache) => cache.component(engine, bytes),
        None => Component::new(engine, bytes),
    }
    .map_err(|e| LoadError::Invalid(one_line(&format!("{e:#}"))))?;
    check_exports(&component, engine)?;
    Ok(component)
}

/// Name the WIT version problem before the linker reports a less helpful type mismatch.
fn check_exports(component: &Component, engine: &wasmtime::Engine) -> Result<(), LoadError> {
    let ty = component.component_type();
    let names: Vec<&str> = ty.exports(engine).map(|(name, _)| name).collect();
    if names.contains(&PLUGIN_EXPORT) {
        return Ok(());
    }
    if let Some(other) = names.iter().find(|n| n.starts_with(PLUGIN_EXPORT_PREFIX)) {
        let version = other.split_once('@').map_or("an unversioned package", |(_, v)| v);
        return Err(LoadError::WitVersion {
            found: format!("capstan:reconciler@{version}"),
        });
    }
    let listed = if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    };
    Err(LoadError::Exports(format!("it exports {listed}")))
}

/// Explain a failed link: an import the sandbox lacks, or a mismatched export.
pub(crate) fn link_error(
    component: &Component,
    engine: &wasmtime::Engine,
    err: wasmtime::Error,
) -> LoadError {
    let ty = component.component_type();
    let provided = |name: &str| name.starts_with("wasi:") || name.starts_with("capstan:reconciler/");
    if let Some((name, _)) = ty.imports(engine).find(|(name, _)| !provided(name)) {
        return LoadError::Imports(name.to_string());
    }
    LoadError::Imports(one_line(&format!("{err:#}")))
}

/// Names and kinds must be usable as label values, field managers and API paths.
pub(crate) fn validate_metadata(m: &Metadata) -> Result<(), LoadError> {
    let bad = |msg: String| Err(LoadError::InvalidMetadata(msg));
    if !is_dns_label(&m.name) {
        return bad(format!(
            "name {:?} must be a DNS label (lower-case alphanumerics and '-', at most 63)",
            m.name
        ));
    }
    for kind in std::iter::once(&m.parent).chain(&m.children) {
        check_kind(kind).map_err(LoadError::InvalidMetadata)?;
    }
    if let Some(f) = &m.finalizer
        && (f.is_empty() || !f.contains('/'))
    {
        return bad(format!(
            "finalizer {f:?} must be a qualified name such as example.com/cleanup"
        ));
    }
    Ok(())
}

fn check_kind(k: &Kind) -> Result<(), String> {
    if k.kind.is_empty() || k.version.is_empty() || k.plural.is_empty() {
        return Err(format!("kind {k:?} needs kind, version and plural"));
    }
    if k.plural
        .chars()
        .any(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'))
    {
        return Err(format!("plural {:?} of {} must be lower-case", k.plural, k.kind));
    }
    Ok(())
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}
