//! The JavaScript files of an imported controller's project: `controller.js` wiring the
//! hooks (unchanged under `hooks/`, fission-style functions) to the SDK's Metacontroller
//! adapter, and the build (rolldown, then componentize-js) against the SDK the binary
//! carries, so no package registry is needed but for the toolchain.

use std::path::PathBuf;

use anyhow::Context;

use super::controller::Imported;
use super::hooks::HookFile;
use super::kinds::Kind;
use super::project::File;

/// The JavaScript files of the project for `imported`; `sdk_path` is the SDK directory.
pub(super) fn files(imported: &Imported, sdk_path: &str) -> anyhow::Result<Vec<(PathBuf, File)>> {
    let fill = |t: &str| super::project::fill(t, imported, sdk_path);
    Ok(vec![
        (PathBuf::from("capstan.toml"), File::Text(fill(CAPSTAN_TOML))),
        (PathBuf::from("build.sh"), File::Text(fill(BUILD))),
        (PathBuf::from("rolldown.config.mjs"), File::Text(fill(ROLLDOWN))),
        (
            PathBuf::from("controller.js"),
            File::Text(controller_js(imported)?),
        ),
        (PathBuf::from("README.md"), File::Text(fill(README))),
        (PathBuf::from(".gitignore"), File::Text("build/\n".into())),
    ])
}

const CAPSTAN_TOML: &str = r#"# Made by `capstan import metacontroller`: the hooks in hooks/ run in-process.
[plugin]
name = "{{name}}"
language = "js"
# rolldown and componentize-js, from $CAPSTAN_JS_TOOLCHAIN or PATH; see build.sh.
build = "sh build.sh"
output = "build/{{name}}.wasm"
"#;

const BUILD: &str = r#"#!/usr/bin/env sh
# Builds build/{{name}}.wasm (what `capstan build` runs): bundles controller.js, the hooks
# and @capstan/sdk into one ES module (rolldown), then makes a component of the WIT world
# `reconciler` with componentize-js, every WASI feature of its engine disabled.
#
#   toolchain  CAPSTAN_JS_TOOLCHAIN, a directory holding componentize-js and rolldown
#              (Capstan's scripts/toolchain-js.sh prints one); else PATH.
#   SDK        CAPSTAN_SDK_JS, the @capstan/sdk directory; else the one the capstan
#              binary that imported this carries. Its wit/ is the contract.
set -eu
cd "$(dirname "$0")"

if [ -n "${CAPSTAN_JS_TOOLCHAIN:-}" ]; then
  PATH="$CAPSTAN_JS_TOOLCHAIN:$PATH"
fi
for tool in componentize-js rolldown; do
  command -v "$tool" >/dev/null || {
    echo "build.sh: $tool not found: set CAPSTAN_JS_TOOLCHAIN or put it on PATH" >&2
    exit 1
  }
done
CAPSTAN_SDK_JS="${CAPSTAN_SDK_JS:-{{sdk-path}}/js}"
[ -f "$CAPSTAN_SDK_JS/package.json" ] || { echo "build.sh: no SDK at $CAPSTAN_SDK_JS: set CAPSTAN_SDK_JS" >&2; exit 1; }
export CAPSTAN_SDK_JS

mkdir -p build
rolldown -c rolldown.config.mjs --logLevel warn >&2
componentize-js build/{{name}}.bundle.js --wit "$CAPSTAN_SDK_JS/wit" --world-name reconciler \
  --disable http fetch-event stdio random clocks \
  --out build/{{name}}.wasm >&2
echo "build/{{name}}.wasm"
"#;

const ROLLDOWN: &str = r#"// One ES module for componentize-js, which resolves no packages itself: controller.js,
// the hooks (CommonJS, as Metacontroller's nodejs server loads them) and @capstan/sdk
// from CAPSTAN_SDK_JS (set by build.sh).
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const sdk = process.env.CAPSTAN_SDK_JS;
if (!sdk) throw new Error('CAPSTAN_SDK_JS must name the SDK directory (build.sh sets it)');
const { capstanSdk } = await import(pathToFileURL(join(sdk, 'src/rolldown.js')).href);

export default {
  input: 'controller.js',
  // The host's interface is the component's import, wired by componentize-js.
  external: [/^capstan:/],
  plugins: [capstanSdk(sdk)],
  platform: 'neutral',
  output: { file: 'build/{{name}}.bundle.js', format: 'esm', codeSplitting: false },
};
"#;

const README: &str = r#"# {{name}}

Metacontroller's {{kind}} `{{name}}`, imported by `capstan import metacontroller`.
Its hooks are in `hooks/`, unchanged; `controller.js` runs them in-process through
`@capstan/sdk/metacontroller` as Metacontroller's nodejs server would (no socket, no
Deployment, no Service).

    capstan build                      # build/{{name}}.wasm (needs componentize-js, rolldown)
    kubectl apply -f crds.yaml         # the example's CRDs, if it has any
    capstan run --config run.yaml      # reconcile with it
"#;

fn kind_literal(k: &Kind) -> anyhow::Result<String> {
    Ok(format!(
        "kindRef({})",
        serde_json::json!({
            "group": k.group, "version": k.version, "kind": k.kind,
            "plural": k.plural, "namespaced": k.namespaced,
        })
    ))
}

fn kinds_literal(kinds: &[Kind]) -> anyhow::Result<String> {
    let items = kinds
        .iter()
        .map(kind_literal)
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(format!("[{}]", items.join(", ")))
}

/// The module name a hook's file is imported under, and its `fission(…)` call.
fn hook_call(hook: Option<&HookFile>, imports: &mut Vec<(String, String)>) -> anyhow::Result<String> {
    let Some(hook) = hook else {
        return Ok("undefined".into());
    };
    let file = hook.script.file_name().context("a hook without a file name")?;
    let file = format!("./hooks/{}", file.to_string_lossy());
    let name = match imports.iter().find(|(_, f)| *f == file) {
        Some((name, _)) => name.clone(),
        None => {
            let name = format!("hook{}", imports.len());
            imports.push((name.clone(), file));
            name
        }
    };
    Ok(format!(
        "fission({name}, {})",
        serde_json::to_string(&hook.url_path)?
    ))
}

fn controller_js(i: &Imported) -> anyhow::Result<String> {
    let mut imports = Vec::new();
    let sync = hook_call(Some(&i.sync), &mut imports)?;
    let finalize = hook_call(i.finalize.as_ref(), &mut imports)?;
    let customize = hook_call(i.customize.as_ref(), &mut imports)?;
    let hooks: String = (imports.iter())
        .map(|(name, file)| Ok(format!("import {name} from {};\n", serde_json::to_string(file)?)))
        .collect::<anyhow::Result<_>>()?;
    let (class, selectors) = match &i.decorator {
        Some((labels, annotations)) => (
            "Decorator",
            format!("\n  parentSelector: {labels},\n  annotationSelector: {annotations},"),
        ),
        None => ("Composite", String::new()),
    };
    let finalizer = match i.finalizer() {
        Some(f) => format!("\nmetadata.finalizer({});", serde_json::to_string(&f)?),
        None => String::new(),
    };
    Ok(format!(
        r#"// Metacontroller's {kind} {name}, imported by `capstan import metacontroller`.
// Its hooks are in hooks/, unchanged: each runs as Metacontroller's nodejs server runs it.
import {{ Metadata, kindRef }} from '@capstan/sdk';
import {{ exportPlugin }} from '@capstan/sdk/guest';
import {{ {class}, fission }} from '@capstan/sdk/metacontroller';

{hooks}
const CONTROLLER = {controller};
const PARENT = {parent};

const metadata = new Metadata({name_lit}, '0.1.0');
for (const kind of {children}) metadata.child(kind);
for (const kind of {related}) metadata.relatedKind(kind);{finalizer}

export const plugin = exportPlugin(
  new {class}({{
    controller: CONTROLLER,
    metadata,
    parent: PARENT,
    sync: {sync},
    finalize: {finalize},
    customize: {customize},
    version: {version},
    statusSchema: {status_schema},{selectors}
  }}),
);
"#,
        name = i.name,
        kind = i.kind(),
        name_lit = serde_json::to_string(&i.name)?,
        controller = serde_json::to_string(&i.controller)?,
        parent = kind_literal(&i.parent)?,
        children = kinds_literal(&i.children)?,
        related = kinds_literal(&i.related)?,
        version = serde_json::to_string(&i.version)?,
        status_schema = serde_json::to_string(&i.status_schema)?,
    ))
}
