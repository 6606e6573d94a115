//! The plugin project an imported controller with Python hooks becomes: the hooks'
//! files unchanged under `hooks/`, `controller.py` wiring them to the SDK's
//! Metacontroller adapter, `app.py` exporting it, and `run.yaml` for `capstan run`.

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::Value;

use super::controller::Imported;
use super::kinds::Kind;

/// One file of the project: its path under the project and its text or source file.
pub(super) enum File {
    Text(String),
    Copy(PathBuf),
}

/// Every file of the project for `imported`, whose hooks' ConfigMaps hold `hook_files`;
/// `sdk_path` is the SDK directory the build takes.
pub(super) fn project(
    imported: &Imported,
    hook_files: &[PathBuf],
    crds: &[Value],
    sdk_path: &str,
) -> anyhow::Result<Vec<(PathBuf, File)>> {
    let name = &imported.name;
    let fill = |t: &str| {
        t.replace("{{name}}", name)
            .replace("{{kind}}", imported.kind())
            .replace("{{sdk-path}}", sdk_path)
    };
    let mut files = vec![
        (PathBuf::from("capstan.toml"), File::Text(fill(CAPSTAN_TOML))),
        (
            PathBuf::from("build.sh"),
            File::Text(fill(super::super::new::PYTHON_BUILD)),
        ),
        (PathBuf::from("app.py"), File::Text(APP.into())),
        (
            PathBuf::from("controller.py"),
            File::Text(controller_py(imported)?),
        ),
        (PathBuf::from("run.yaml"), File::Text(run_yaml(imported))),
        (PathBuf::from("README.md"), File::Text(fill(README))),
        (
            PathBuf::from(".gitignore"),
            File::Text("build/\n__pycache__/\n".into()),
        ),
    ];
    if !crds.is_empty() {
        let docs: Vec<String> = crds
            .iter()
            .map(serde_json::to_string_pretty)
            .collect::<Result<_, _>>()?;
        files.push((
            PathBuf::from("crds.yaml"),
            File::Text(docs.join("\n---\n") + "\n"),
        ));
    }
    for file in hook_files {
        let base = file.file_name().context("a hook file without a name")?;
        files.push((Path::new("hooks").join(base), File::Copy(file.clone())));
    }
    Ok(files)
}

const CAPSTAN_TOML: &str = r#"# Made by `capstan import metacontroller`: the hooks in hooks/ run in-process.
[plugin]
name = "{{name}}"
language = "python"
# componentize-py, from $COMPONENTIZE_PY or PATH; see build.sh.
build = "sh build.sh"
output = "build/{{name}}.wasm"
"#;

const APP: &str = r#""""The Wasm entry module componentize-py builds (build.sh): the imported controller."""

from capstan_sdk.wit import export

from controller import PLUGIN

Plugin = export(PLUGIN)
"#;

const README: &str = r#"# {{name}}

Metacontroller's {{kind}} `{{name}}`, imported by `capstan import metacontroller`.
Its hooks' scripts are in `hooks/`, unchanged; `controller.py` runs them in-process through
`capstan_sdk.metacontroller` (no socket, no Deployment, no Service).

    capstan build                      # build/{{name}}.wasm (needs componentize-py)
    kubectl apply -f crds.yaml         # the example's CRDs, if it has any
    capstan run --config run.yaml      # reconcile with it
"#;

fn kind_literal(k: &Kind) -> anyhow::Result<String> {
    let s = |v: &str| serde_json::to_string(v);
    Ok(format!(
        "KindRef({}, {}, {}, {}, namespaced={})",
        s(&k.group)?,
        s(&k.version)?,
        s(&k.kind)?,
        s(&k.plural)?,
        if k.namespaced { "True" } else { "False" }
    ))
}

fn kinds_literal(kinds: &[Kind]) -> anyhow::Result<String> {
    let items = kinds
        .iter()
        .map(kind_literal)
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(format!(
        "({}{})",
        items.join(", "),
        if items.len() == 1 { "," } else { "" }
    ))
}

fn hook_call(hook: Option<&super::hooks::HookFile>) -> anyhow::Result<String> {
    let Some(hook) = hook else {
        return Ok("None".into());
    };
    let file = hook.script.file_name().context("a hook without a file name")?;
    Ok(format!(
        "_hook({}, {})",
        serde_json::to_string(&file.to_string_lossy())?,
        serde_json::to_string(&hook.url_path)?
    ))
}

/// A Decorator's selector arguments, as Python: JSON text parsed at import.
fn selectors(i: &Imported) -> anyhow::Result<String> {
    let Some((labels, annotations)) = &i.decorator else {
        return Ok(String::new());
    };
    let arg = |v: &serde_json::Value| -> anyhow::Result<String> {
        Ok(format!(
            "json.loads({})",
            serde_json::to_string(&serde_json::to_string(v)?)?
        ))
    };
    Ok(format!(
        "\n    parent_selector={},\n    annotation_selector={},",
        arg(labels)?,
        arg(annotations)?
    ))
}

fn controller_py(i: &Imported) -> anyhow::Result<String> {
    let json = |v: &str| serde_json::to_string(v);
    Ok(format!(
        r#""""Metacontroller's {kind} {name}, imported by `capstan import metacontroller`.

Its hooks' scripts are in hooks/, unchanged: each runs as `python hooks/SCRIPT` would, with
an in-process stand-in for http.server (capstan_sdk.http_hook).
"""

import json
import os

from capstan_sdk import KindRef, Metadata, http_hook
from capstan_sdk.metacontroller import {class_name}, webhook

HERE = os.path.dirname(os.path.abspath(__file__))
CONTROLLER = json.loads({controller})
PARENT = {parent}
CHILDREN = {children}
RELATED = {related}
FINALIZER = {finalizer}

_scripts = {{}}


def _hook(script, url_path):
    if script not in _scripts:
        _scripts[script] = http_hook.load(os.path.join(HERE, "hooks", script))
    return webhook(_scripts[script], url_path)


def _metadata():
    meta = Metadata({name_lit}, "0.1.0", parent=PARENT)
    for kind in CHILDREN:
        meta = meta.child(kind)
    for kind in RELATED:
        meta = meta.related(kind)
    return meta.with_finalizer(FINALIZER) if FINALIZER else meta


PLUGIN = {class_name}(
    CONTROLLER,
    _metadata(),
    sync={sync},
    finalize={finalize},
    customize={customize},
    version={version},{selectors}
)
"#,
        name = i.name,
        kind = i.kind(),
        class_name = if i.decorator.is_some() {
            "Decorator"
        } else {
            "Composite"
        },
        selectors = selectors(i)?,
        name_lit = json(&i.name)?,
        controller = json(&serde_json::to_string(&i.controller)?)?,
        parent = kind_literal(&i.parent)?,
        children = kinds_literal(&i.children)?,
        related = kinds_literal(&i.related)?,
        finalizer = match i.finalizer() {
            Some(f) => json(&f)?,
            None => "None".into(),
        },
        sync = hook_call(Some(&i.sync))?,
        finalize = hook_call(i.finalize.as_ref())?,
        customize = hook_call(i.customize.as_ref())?,
        version = json(&i.version)?,
    ))
}

/// `capstan run --config run.yaml`: the plugin with the grants its controller's kinds
/// need (Metacontroller's RBAC gave it those kinds; here the operator sees them named).
fn run_yaml(i: &Imported) -> String {
    let mut out = format!(
        "# Made by `capstan import metacontroller`: review the grants below before running.\nplugins:\n- path: build/{}.wasm\n",
        i.name
    );
    let declared: Vec<&Kind> = std::iter::once(&i.parent)
        .chain(&i.children)
        .chain(&i.related)
        .collect();
    if declared.iter().any(|k| k.group.is_empty() && k.kind == "Secret") {
        out.push_str("  # The controller names Secrets.\n  allowSecrets: true\n");
    }
    let cluster: Vec<String> = i
        .children
        .iter()
        .filter(|k| !k.namespaced)
        .map(|k| k.kind.clone())
        .collect();
    if !cluster.is_empty() {
        out.push_str("  # Cluster-scoped children the controller names.\n  allowClusterKinds:\n");
        for c in cluster {
            out.push_str(&format!("  - {c}\n"));
        }
    }
    if !i.parent.namespaced && i.children.iter().any(|k| k.namespaced) {
        out.push_str(
            "  # A cluster-scoped parent's namespaced children go only where this allows.\n  allowNamespaces: []\n",
        );
    }
    if let Some(s) = i.resync_seconds {
        out.push_str(&format!(
            "  # spec.resyncPeriodSeconds\n  resync: {}ms\n",
            (s * 1000.0).round() as u64
        ));
    }
    out
}
