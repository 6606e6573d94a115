//! The Python files of an imported controller's project: `controller.py` wiring the hooks
//! (unchanged under `hooks/`) to the SDK's Metacontroller adapter, `app.py` exporting it,
//! the build script.

use std::path::PathBuf;

use anyhow::Context;

use super::controller::Imported;
use super::kinds::Kind;
use super::project::File;

/// The Python files of the project for `imported`; `sdk_path` is the SDK directory the
/// build takes.
pub(super) fn files(imported: &Imported, sdk_path: &str) -> anyhow::Result<Vec<(PathBuf, File)>> {
    let fill = |t: &str| super::project::fill(t, imported, sdk_path);
    Ok(vec![
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
        (PathBuf::from("README.md"), File::Text(fill(README))),
        (
            PathBuf::from(".gitignore"),
            File::Text("build/\n__pycache__/\n".into()),
        ),
    ])
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
    version={version},
    status_schema=json.loads({status_schema}),{selectors}
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
        status_schema = json(&serde_json::to_string(&i.status_schema)?)?,
    ))
}
