//! The Rust files of an imported controller whose hooks are Jsonnet (jsonnetd's): a crate
//! whose `src/lib.rs` wires the hooks (unchanged under `hooks/`, each evaluated in the
//! component by jrsonnet, as jsonnetd evaluates it) to the SDK's Metacontroller adapter,
//! built by cargo for `wasm32-wasip2` against the SDK the binary carries.

use std::path::PathBuf;

use anyhow::Context;

use super::controller::Imported;
use super::hooks::HookFile;
use super::kinds::Kind;
use super::project::File;

/// The Rust files of the project for `imported`, whose hooks' ConfigMaps hold
/// `hook_files`; `sdk_path` is the SDK directory.
pub(super) fn files(
    imported: &Imported,
    hook_files: &[PathBuf],
    sdk_path: &str,
) -> anyhow::Result<Vec<(PathBuf, File)>> {
    let fill = |t: &str| {
        super::project::fill(t, imported, sdk_path)
            .replace("{{crate}}", &imported.name.replace('-', "_"))
            .replace("{{version}}", env!("CARGO_PKG_VERSION"))
    };
    Ok(vec![
        (PathBuf::from("capstan.toml"), File::Text(fill(CAPSTAN_TOML))),
        (PathBuf::from("Cargo.toml"), File::Text(fill(CARGO_TOML))),
        (PathBuf::from("src/jsonnet.rs"), File::Text(JSONNET_RS.into())),
        (
            PathBuf::from("src/lib.rs"),
            File::Text(lib_rs(imported, hook_files)?),
        ),
        (PathBuf::from("README.md"), File::Text(fill(README))),
        (
            PathBuf::from(".gitignore"),
            File::Text("build/\ntarget/\n".into()),
        ),
    ])
}

const CAPSTAN_TOML: &str = r#"# Made by `capstan import metacontroller`: the hooks in hooks/ run in-process.
[plugin]
name = "{{name}}"
language = "rust"
# Copied out of cargo's target directory, wherever CARGO_TARGET_DIR puts it.
build = "cargo build --profile plugin --target wasm32-wasip2 && mkdir -p build && cp \"${CARGO_TARGET_DIR:-target}/wasm32-wasip2/plugin/{{crate}}.wasm\" build/{{name}}.wasm"
output = "build/{{name}}.wasm"
"#;

const CARGO_TOML: &str = r#"[package]
name = "{{name}}"
version = "0.1.0"
edition = "2024"
publish = false

[lib]
crate-type = ["cdylib", "rlib"]

[dependencies]
capstan-sdk = { version = "{{version}}", path = "{{sdk-path}}" }
# A Jsonnet evaluator in Rust, compiled into the component: what jsonnetd was.
jrsonnet-evaluator = "=0.4.2"
serde_json = "1"

# What `capstan build` builds with: small components that compile fast when the host
# loads them.
[profile.plugin]
inherits = "release"
opt-level = 2
lto = true
codegen-units = 1
strip = true
panic = "abort"
debug = false
"#;

const README: &str = r#"# {{name}}

Metacontroller's {{kind}} `{{name}}`, imported by `capstan import metacontroller`.
Its Jsonnet hooks are in `hooks/`, unchanged; `src/lib.rs` evaluates each in-process as
jsonnetd would (the request its top-level argument `request`) through
`capstan_sdk::metacontroller` (no socket, no Deployment, no Service).

    capstan build                      # build/{{name}}.wasm (needs the wasm32-wasip2 target)
    kubectl apply -f crds.yaml         # the example's CRDs, if it has any
    capstan run --config run.yaml      # reconcile with it
"#;

/// The hooks' evaluation, as jsonnetd evaluates a file.
const JSONNET_RS: &str = r#"//! Jsonnet hooks as jsonnetd runs them: the file is a function, called with the hook's
//! request as its top-level argument `request`; the value it returns is the response.
//! An evaluation error is retried, as Metacontroller retries a hook that answered 500.
//! `import` and `importstr` read the hooks' other files, by the name each has in `hooks/`
//! (jsonnetd's working directory: the ConfigMap mounted there).

use std::path::{Component, Path, PathBuf};
use std::rc::Rc;

use capstan_sdk::ReconcileError;
use capstan_sdk::metacontroller::Hook;
use jrsonnet_evaluator::error::{Error, Result};
use jrsonnet_evaluator::{EvaluationState, IStr, ImportResolver};

thread_local! {
    // One evaluator (and its parsed standard library) for the instance's life.
    static STATE: EvaluationState = {
        let state = EvaluationState::default();
        state.with_stdlib();
        state.set_import_resolver(Box::new(Files(crate::HOOK_FILES)));
        state
    };
}

/// The hooks' files, compiled in: (name, text).
struct Files(&'static [(&'static str, &'static str)]);

impl Files {
    fn text(&self, path: &Path) -> Option<&'static str> {
        self.0.iter().find(|(name, _)| Path::new(name) == path).map(|(_, text)| *text)
    }
}

impl ImportResolver for Files {
    fn resolve_file(&self, from: &Path, path: &Path) -> Result<Rc<Path>> {
        let mut resolved = PathBuf::new();
        for part in from.join(path).components() {
            match part {
                Component::CurDir => {}
                Component::ParentDir => {
                    resolved.pop();
                }
                other => resolved.push(other),
            }
        }
        match self.text(&resolved) {
            Some(_) => Ok(resolved.into()),
            None => Err(Error::ImportFileNotFound(from.to_owned(), path.to_owned()).into()),
        }
    }

    fn load_file_contents(&self, resolved: &Path) -> Result<IStr> {
        (self.text(resolved).map(IStr::from))
            .ok_or_else(|| Error::ResolvedFileNotFound(resolved.to_owned()).into())
    }

    unsafe fn as_any(&self) -> &dyn std::any::Any {
        unimplemented!("the hooks' files are not exposed to bindings")
    }
}

/// The hook `source` (the file `file`) as a function of the request.
pub fn hook(source: &'static str, file: &'static str) -> Hook {
    Box::new(move |request| {
        let request = serde_json::to_string(&request)?;
        let answer = STATE.with(|state| {
            let value = state.run_in_state(|| {
                state.add_tla_code("request".into(), request.into())?;
                let value = state.evaluate_snippet_raw(Rc::from(Path::new(file)), source.into())?;
                let value = state.with_tla(value)?;
                state.manifest(value)
            });
            value.map_err(|e| state.stringify_err(&e))
        });
        let answer = answer.map_err(|e| ReconcileError::retry(format!("{file}: {e}")))?;
        serde_json::from_str(&answer)
            .map_err(|e| ReconcileError::retry(format!("{file} answered with JSON that does not parse: {e}")))
    })
}
"#;

fn kind_literal(k: &Kind) -> anyhow::Result<String> {
    let s = |v: &str| serde_json::to_string(v);
    Ok(format!(
        "kind({}, {}, {}, {}, {})",
        s(&k.group)?,
        s(&k.version)?,
        s(&k.kind)?,
        s(&k.plural)?,
        k.namespaced
    ))
}

/// A hook's `jsonnet::hook(...)` expression, reading the file at build time.
fn hook_call(hook: &HookFile) -> anyhow::Result<String> {
    let file = hook.script.file_name().context("a hook without a file name")?;
    let file = serde_json::to_string(&file.to_string_lossy())?;
    Ok(format!(
        "jsonnet::hook(include_str!(concat!(\"../hooks/\", {file})), {file})"
    ))
}

fn optional_hook(hook: Option<&HookFile>) -> anyhow::Result<String> {
    Ok(match hook {
        Some(h) => format!("Some({})", hook_call(h)?),
        None => "None".into(),
    })
}

/// JSON as a Rust expression parsed at start.
fn json_literal(value: &serde_json::Value) -> anyhow::Result<String> {
    Ok(format!("json({:?})", serde_json::to_string(value)?))
}

/// The hooks' files as `(name, include_str!(…))` pairs, what `import` may read.
fn hook_files_literal(hook_files: &[PathBuf]) -> anyhow::Result<String> {
    let mut out = String::new();
    for f in hook_files {
        let name = f.file_name().context("a hook file without a name")?;
        let name = serde_json::to_string(&name.to_string_lossy())?;
        out.push_str(&format!(
            "\n    ({name}, include_str!(concat!(\"../hooks/\", {name}))),"
        ));
    }
    Ok(out)
}

fn lib_rs(i: &Imported, hook_files: &[PathBuf]) -> anyhow::Result<String> {
    let mut metadata = format!("Metadata::new({:?}, \"0.1.0\")", i.name);
    for k in &i.children {
        metadata.push_str(&format!("\n            .child_kind({})", kind_literal(k)?));
    }
    for k in &i.related {
        metadata.push_str(&format!("\n            .related_kind({})", kind_literal(k)?));
    }
    if let Some(f) = i.finalizer() {
        metadata.push_str(&format!("\n            .finalizer({f:?})"));
    }
    let shape = match &i.decorator {
        Some((labels, annotations)) => format!(
            "Shape::Decorator {{\n            labels: {},\n            annotations: {},\n        }}",
            json_literal(labels)?,
            json_literal(annotations)?
        ),
        None => "Shape::Composite".into(),
    };
    let status_schema = match &i.status_schema {
        serde_json::Value::Null => "None".to_string(),
        schema => format!("Some({})", json_literal(schema)?),
    };
    Ok(format!(
        r#"//! Metacontroller's {kind} {name}, imported by `capstan import metacontroller`.
//! Its hooks are in hooks/, unchanged: each is evaluated as jsonnetd evaluates it.

mod jsonnet;

use std::sync::OnceLock;

use capstan_sdk::metacontroller::{{Controller, Shape}};
use capstan_sdk::{{KindRef, Metadata}};

fn kind(group: &str, version: &str, kind: &str, plural: &str, namespaced: bool) -> KindRef {{
    KindRef {{
        group: group.into(),
        version: version.into(),
        kind: kind.into(),
        plural: plural.into(),
        namespaced,
    }}
}}

/// The files of the hooks' ConfigMaps, which `import` and `importstr` may name.
const HOOK_FILES: &[(&str, &str)] = &[{files}
];

fn json(text: &str) -> serde_json::Value {{
    serde_json::from_str(text).expect("the importer wrote this JSON")
}}

/// The controller, made once per instance.
fn controller() -> &'static Controller {{
    static CONTROLLER: OnceLock<Controller> = OnceLock::new();
    CONTROLLER.get_or_init(|| Controller {{
        controller: {controller},
        metadata: {metadata},
        parent: {parent},
        shape: {shape},
        sync: {sync},
        finalize: {finalize},
        customize: {customize},
        version: {version:?}.parse().expect("the importer checked the version"),
        status_schema: {status_schema},
    }})
}}

capstan_sdk::export_metacontroller!(controller);
"#,
        kind = i.kind(),
        name = i.name,
        controller = json_literal(&i.controller)?,
        parent = kind_literal(&i.parent)?,
        sync = hook_call(&i.sync)?,
        finalize = optional_hook(i.finalize.as_ref())?,
        customize = optional_hook(i.customize.as_ref())?,
        version = i.version,
        files = hook_files_literal(hook_files)?,
    ))
}
