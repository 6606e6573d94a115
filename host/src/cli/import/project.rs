//! The plugin project an imported controller becomes, whatever its hooks' language (whose
//! files `python` and `js` add): the hooks' files unchanged under `hooks/`, the example's
//! CRDs, `run.yaml` for `capstan run` with the grants its kinds need; and how a project's
//! files are filled in and written.

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::Value;

use super::controller::Imported;
use super::example::Example;
use super::kinds::Kind;

/// One file of the project: its text, or the file it is a copy of.
pub(super) enum File {
    Text(String),
    Copy(PathBuf),
}

/// The files of the project for `imported` that its hooks' language does not change:
/// `run.yaml`, the CRDs, and the hooks' files (from their ConfigMaps, `hook_files`,
/// copied or, held inline in a manifest, written).
pub(super) fn common(
    example: &Example,
    imported: &Imported,
    hook_files: &[PathBuf],
    crds: &[Value],
) -> anyhow::Result<Vec<(PathBuf, File)>> {
    let mut files = vec![(PathBuf::from("run.yaml"), File::Text(run_yaml(imported)))];
    files.extend(crds_file(crds)?);
    for file in hook_files {
        let base = file.file_name().context("a hook file without a name")?;
        let content = match example.inline(file) {
            Some(text) => File::Text(text.to_string()),
            None => File::Copy(file.clone()),
        };
        files.push((Path::new("hooks").join(base), content));
    }
    Ok(files)
}

/// `crds.yaml`: the example's CRDs, if it has any, as `kubectl apply -f` reads them.
fn crds_file(crds: &[Value]) -> anyhow::Result<Option<(PathBuf, File)>> {
    if crds.is_empty() {
        return Ok(None);
    }
    // YAML documents: kubectl reads a file that opens with `{` as JSON alone, and would
    // stop at the first `---`.
    let docs: Vec<String> = crds
        .iter()
        .map(serde_saphyr::to_string)
        .collect::<Result<_, _>>()?;
    Ok(Some((PathBuf::from("crds.yaml"), File::Text(docs.join("---\n")))))
}

/// A template's text with the controller's name and kind and the SDK's directory.
pub(super) fn fill(template: &str, imported: &Imported, sdk_path: &str) -> String {
    template
        .replace("{{name}}", &imported.name)
        .replace("{{kind}}", imported.kind())
        .replace("{{sdk-path}}", sdk_path)
}

/// Writes `files` under `out`.
pub(super) fn write(out: &Path, files: Vec<(PathBuf, File)>) -> anyhow::Result<()> {
    for (path, file) in files {
        let path = out.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
        }
        match file {
            File::Text(text) => std::fs::write(&path, text),
            File::Copy(from) => std::fs::copy(&from, &path).map(drop),
        }
        .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

/// The files of a directory of several controllers, each imported into its own
/// directory: a workspace of them (`capstan build` and `capstan test` there do each), one
/// `run.yaml` running them all, and the example's CRDs.
pub(super) fn workspace(imported: &[&Imported], crds: &[Value]) -> anyhow::Result<Vec<(PathBuf, File)>> {
    let names: Vec<String> = imported.iter().map(|i| format!("{:?}", i.name)).collect();
    let toml = format!(
        "# Made by `capstan import metacontroller`: one plugin project per controller.\n[workspace]\nmembers = [{}]\n",
        names.join(", ")
    );
    let mut run = String::from(RUN_HEADER);
    for i in imported {
        run.push_str(&plugin_entry(i, &format!("{}/", i.name)));
    }
    let mut files = vec![
        (PathBuf::from("capstan.toml"), File::Text(toml)),
        (PathBuf::from("run.yaml"), File::Text(run)),
    ];
    files.extend(crds_file(crds)?);
    Ok(files)
}

const RUN_HEADER: &str =
    "# Made by `capstan import metacontroller`: review the grants below before running.\nplugins:\n";

/// `capstan run --config run.yaml`: the plugin with the grants its controller's kinds
/// need (Metacontroller's RBAC gave it those kinds; here the operator sees them named).
fn run_yaml(i: &Imported) -> String {
    format!("{RUN_HEADER}{}", plugin_entry(i, ""))
}

/// The plugin's entry in `run.yaml`, its component under `dir`.
fn plugin_entry(i: &Imported, dir: &str) -> String {
    let mut out = format!("- path: {dir}build/{}.wasm\n", i.name);
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
    let children_elsewhere = !i.parent.namespaced && i.children.iter().any(|k| k.namespaced);
    let reads_elsewhere = i.related.iter().any(|k| k.namespaced);
    if children_elsewhere || reads_elsewhere {
        out.push_str(concat!(
            "  # Under Metacontroller this controller wrote children and read related objects in\n",
            "  # every namespace; narrow this to the namespaces it needs.\n",
            "  allowNamespaces: [\"*\"]\n",
        ));
    }
    if let Some(selector) = &i.parent_selector {
        out.push_str(&format!(
            "  # The parent rule's labelSelector.\n  selector: {selector}\n"
        ));
    }
    if !i.updates.is_empty() {
        out.push_str("  # Each child rule's updateStrategy.method (Metacontroller's default is OnDelete).\n  updates:\n");
        for (kind, update) in &i.updates {
            // A method, or a flow mapping of it and its status checks.
            out.push_str(&format!(
                "    {kind}: {}\n",
                update.as_str().map_or_else(|| update.to_string(), String::from)
            ));
        }
    }
    out.push_str(concat!(
        "  # Metacontroller's hook server runs for as long as the controller does: each call\n",
        "  # here runs in an instance an earlier call ended in, so what a hook keeps in memory\n",
        "  # carries over as it did there, and its runtime starts once, not on every call.\n",
        "  # Remove this for a fresh instance per call.\n",
        "  limits:\n    reuseInstances: true\n",
    ));
    if let Some(s) = i.resync_seconds {
        out.push_str(&format!(
            "  # spec.resyncPeriodSeconds\n  resync: {}ms\n",
            (s * 1000.0).round() as u64
        ));
    }
    out
}
