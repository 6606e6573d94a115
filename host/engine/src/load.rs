//! Turning bytes into a plugin: what kind of Wasm it is, whether it speaks our WIT
//! version, and whether its metadata makes sense — each failure one readable line.

use wasmtime::component::Component;

use super::bindings::{OLDER_VERSIONS, PLUGIN_EXPORT, PLUGIN_EXPORT_PREFIX, WIT_PACKAGE, WIT_VERSION};
use super::cache::CompileCache;
use super::text::one_line;
use capstan_contract::{dns1123_label, dns1123_subdomain, printable};

use capstan_contract::{Kind, Metadata};

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
    #[error(
        "plugin implements {found}, but this host serves {WIT_PACKAGE}{}",
        older_served()
    )]
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
    /// The plugin refused its settings (its own message).
    #[error("settings refused: {0}")]
    Settings(String),
    /// `metadata()` answered nonsense.
    #[error("invalid metadata: {0}")]
    InvalidMetadata(String),
    /// The configured limits are not allowed.
    #[error("invalid limits: {0}")]
    Limits(String),
    /// What the plugin was measured to need does not fit the host's memory budget.
    #[error("{0}")]
    Budget(String),
}

/// Check what the bytes are, then compile the component (or take it from `cache`); with
/// the contract version it exports.
pub(crate) fn compile(
    engine: &wasmtime::Engine,
    cache: Option<&CompileCache>,
    bytes: &[u8],
) -> Result<(Component, &'static str), LoadError> {
    // Binary only: the host is built without wasmtime's `wat` (text) parser.
    if !bytes.starts_with(b"\0asm") || bytes.len() < 8 {
        return Err(LoadError::NotWasm);
    } else if bytes[4..8] == [1, 0, 0, 0] {
        return Err(LoadError::CoreModule);
    }
    let component = match cache {
        Some(cache) => cache.component(engine, bytes),
        None => Component::new(engine, bytes),
    }
    .map_err(|e| LoadError::Invalid(one_line(&format!("{e:#}"))))?;
    let version = check_exports(&component, engine)?;
    Ok((component, version))
}

/// The older versions served, as the rest of a list after the current one:
/// `, 0.2.0 and 0.1.0`.
fn older_served() -> String {
    match OLDER_VERSIONS.split_last() {
        None => String::new(),
        Some((last, [])) => format!(" and {last}"),
        Some((last, rest)) => format!(", {} and {last}", rest.join(", ")),
    }
}

/// Name the WIT version problem before the linker reports a less helpful type mismatch.
fn check_exports(component: &Component, engine: &wasmtime::Engine) -> Result<&'static str, LoadError> {
    let ty = component.component_type();
    let names: Vec<&str> = ty.exports(engine).map(|(name, _)| name).collect();
    if names.contains(&PLUGIN_EXPORT) {
        return Ok(WIT_VERSION);
    }
    for version in OLDER_VERSIONS {
        if names.contains(&format!("{PLUGIN_EXPORT_PREFIX}@{version}").as_str()) {
            return Ok(version);
        }
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

/// Most child kinds one plugin may declare: each is a watch and a cache in the host.
pub const MAX_CHILD_KINDS: usize = 32;
/// Longest plugin version string.
const MAX_VERSION: usize = 64;

/// Names and kinds must be usable as label values, field managers and API paths, and
/// small: a plugin's metadata ends up in every log line and metric of it. A child kind
/// declared twice is kept once (each would cost a watch).
pub(crate) fn validate_metadata(m: &mut Metadata) -> Result<(), LoadError> {
    let bad = |msg: String| Err(LoadError::InvalidMetadata(msg));
    if !is_dns_label(&m.name) {
        return bad(format!(
            "name {:?} must be a DNS label (lower-case alphanumerics and '-', at most 63)",
            printable(&m.name)
        ));
    }
    if m.version.is_empty() || m.version.len() > MAX_VERSION || m.version.contains(char::is_control) {
        return bad(format!(
            "version {:?} must be 1 to {MAX_VERSION} printable characters",
            printable(&m.version)
        ));
    }
    let mut seen = std::collections::HashSet::new();
    m.children.retain(|k| seen.insert(k.clone()));
    if m.children.len() > MAX_CHILD_KINDS {
        return bad(format!(
            "{} child kinds declared; at most {MAX_CHILD_KINDS}",
            m.children.len()
        ));
    }
    let mut seen = std::collections::HashSet::new();
    m.related.retain(|k| seen.insert(k.clone()));
    if m.related.len() > MAX_CHILD_KINDS {
        return bad(format!(
            "{} related kinds declared; at most {MAX_CHILD_KINDS}",
            m.related.len()
        ));
    }
    for kind in std::iter::once(&m.parent).chain(&m.children).chain(&m.related) {
        check_kind(kind).map_err(LoadError::InvalidMetadata)?;
    }
    if let Some(f) = &m.finalizer
        && !is_qualified_name(f)
    {
        return bad(format!(
            "finalizer {:?} must be a qualified name such as example.com/cleanup",
            printable(f)
        ));
    }
    Ok(())
}

/// `prefix/name` as Kubernetes finalizers are: a DNS subdomain prefix and a name of at
/// most 63 alphanumerics, '-', '_' or '.'.
fn is_qualified_name(s: &str) -> bool {
    let Some((prefix, name)) = s.split_once('/') else {
        return false;
    };
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    name_ok && dns1123_subdomain(prefix).is_ok()
}

fn check_kind(k: &Kind) -> Result<(), String> {
    if k.kind.is_empty() || k.version.is_empty() || k.plural.is_empty() {
        return Err(format!(
            "kind {} needs kind, version and plural",
            printable(&k.kind)
        ));
    }
    let group_ok = k.group.is_empty() || dns1123_subdomain(&k.group).is_ok();
    let kind_ok = k.kind.len() <= 63 && k.kind.chars().all(|c| c.is_ascii_alphanumeric());
    if !group_ok || !kind_ok || !is_dns_label(&k.version) {
        return Err(format!(
            "kind {}.{}/{} is not a valid group, version and kind",
            printable(&k.kind),
            printable(&k.group),
            printable(&k.version)
        ));
    }
    if !is_dns_label(&k.plural) {
        return Err(format!(
            "plural {:?} of {} must be lower-case",
            printable(&k.plural),
            k.kind
        ));
    }
    Ok(())
}

fn is_dns_label(s: &str) -> bool {
    dns1123_label(s).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(kind: &str, plural: &str) -> Kind {
        Kind {
            group: "batch".into(),
            version: "v1".into(),
            kind: kind.into(),
            plural: plural.into(),
            namespaced: true,
        }
    }

    fn metadata() -> Metadata {
        Metadata {
            name: "p".into(),
            version: "1.0.0".into(),
            parent: Kind {
                group: "example.com".into(),
                ..kind("Parent", "parents")
            },
            children: vec![kind("Job", "jobs")],
            related: vec![],
            settings_schema: None,
            finalizer: Some("example.com/cleanup".into()),
        }
    }

    fn refused(change: impl FnOnce(&mut Metadata)) -> String {
        let mut m = metadata();
        change(&mut m);
        validate_metadata(&mut m).unwrap_err().to_string()
    }

    #[test]
    fn repeated_child_kinds_are_kept_once_and_capped() {
        let mut m = metadata();
        m.children = vec![kind("Job", "jobs"); 1000];
        validate_metadata(&mut m).unwrap();
        assert_eq!(m.children.len(), 1, "1000 copies of Job are one watch");
        let e = refused(|m| {
            m.children = (0..40)
                .map(|i| kind(&format!("K{i}"), &format!("k{i}")))
                .collect()
        });
        assert!(e.contains("40 child kinds"), "{e}");
    }

    #[test]
    fn metadata_strings_are_small_and_printable() {
        let huge = format!("example.com/{}", "f".repeat(1 << 20));
        let e = refused(|m| m.finalizer = Some(huge));
        assert!(
            e.contains("finalizer") && e.len() < 300,
            "a short message: {} bytes",
            e.len()
        );
        assert!(refused(|m| m.finalizer = Some("no-slash".into())).contains("finalizer"));
        assert!(refused(|m| m.version = "1\n2026 INFO forged".into()).contains("version"));
        assert!(refused(|m| m.version = "v".repeat(65)).contains("version"));
        assert!(refused(|m| m.children[0].kind = "Job\n".into()).contains("not a valid"));
        assert!(refused(|m| m.children[0].group = "Batch".into()).contains("not a valid"));
        assert!(refused(|m| m.children[0].plural = "jobs/status".into()).contains("plural"));
        assert!(validate_metadata(&mut metadata()).is_ok());
    }
}
