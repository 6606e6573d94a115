//! A CompositeController as a plugin: its kinds, hooks and options, decided before
//! anything is written.

use anyhow::{Context, bail};
use serde_json::Value;

use super::example::Example;
use super::hooks::{self, HookFile};
use super::kinds::{self, Kind};

/// What one imported controller becomes.
#[derive(Debug)]
pub(super) struct Imported {
    /// The controller's name, the plugin's.
    pub name: String,
    /// The CompositeController object, as Metacontroller sends it to hooks.
    pub controller: Value,
    pub parent: Kind,
    pub children: Vec<Kind>,
    /// Kinds the `customize` hook may ask for.
    pub related: Vec<Kind>,
    pub sync: HookFile,
    pub finalize: Option<HookFile>,
    pub customize: Option<HookFile>,
    /// The hooks' request version, `v1` or `v2`.
    pub version: String,
    /// `spec.resyncPeriodSeconds`.
    pub resync_seconds: Option<f64>,
}

impl Imported {
    /// The finalizer Metacontroller puts on parents of a controller with a finalize hook.
    pub fn finalizer(&self) -> Option<String> {
        self.finalize
            .as_ref()
            .map(|_| format!("metacontroller.io/compositecontroller-{}", self.name))
    }
}

/// The controller to import: the one named, or the only one.
pub(super) fn pick<'a>(example: &'a Example, name: Option<&str>) -> anyhow::Result<&'a Value> {
    if let Some((path, d)) = example.of_kind("DecoratorController").next() {
        let n = d["metadata"]["name"].as_str().unwrap_or_default();
        bail!(
            "DecoratorController {n} ({}): not imported yet; only CompositeController is",
            path.display()
        );
    }
    let mut all: Vec<&Value> = Vec::new();
    for (path, c) in example.of_kind("CompositeController") {
        // One object in two files (a manifest and an all-in-one copy) is one controller,
        // as `kubectl apply` sees it; two that differ are refused.
        match all
            .iter()
            .find(|seen| seen["metadata"]["name"] == c["metadata"]["name"])
        {
            Some(seen) if *seen == c => {}
            Some(_) => bail!(
                "CompositeController {} is defined twice, differently (again in {})",
                c["metadata"]["name"].as_str().unwrap_or_default(),
                path.display()
            ),
            None => all.push(c),
        }
    }
    let names: Vec<&str> = all
        .iter()
        .filter_map(|c| c["metadata"]["name"].as_str())
        .collect();
    match (name, all.as_slice()) {
        (None, []) => bail!("no CompositeController in the directory"),
        (None, [one]) => Ok(one),
        (None, _) => bail!(
            "{} CompositeControllers ({}): pick one with --controller",
            all.len(),
            names.join(", ")
        ),
        (Some(n), _) => all
            .into_iter()
            .find(|c| c["metadata"]["name"] == n)
            .with_context(|| format!("no CompositeController {n} (there are: {})", names.join(", "))),
    }
}

/// `controller` decided: kinds resolved, hooks found, related kinds from `related` (as
/// `APIVERSION/RESOURCE`) and the plurals the customize hook's source names.
pub(super) fn import(example: &Example, controller: &Value, related: &[String]) -> anyhow::Result<Imported> {
    let name = controller["metadata"]["name"]
        .as_str()
        .context("the CompositeController has no metadata.name")?
        .to_string();
    let spec = &controller["spec"];
    let crds: Vec<Value> = example
        .of_kind("CustomResourceDefinition")
        .map(|(_, c)| c.clone())
        .collect();
    let parent = rule_kind(&spec["parentResource"], "spec.parentResource", &crds)?;
    let children = spec["childResources"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
        .map(|(i, rule)| rule_kind(rule, &format!("spec.childResources[{i}]"), &crds))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let hook = |h: &str| -> anyhow::Result<Option<HookFile>> {
        match spec["hooks"].get(h) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => hooks::resolve(example, &format!("spec.hooks.{h}"), v).map(Some),
        }
    };
    let sync = hook("sync")?.context("spec.hooks.sync is missing")?;
    let (finalize, customize) = (hook("finalize")?, hook("customize")?);
    let version = spec["hooks"]["sync"]["version"]
        .as_str()
        .unwrap_or("v1")
        .to_string();
    if !["v1", "v2"].contains(&version.as_str()) {
        bail!("spec.hooks.sync.version {version}: Metacontroller's are v1 and v2");
    }
    let related = match &customize {
        Some(hook) => related_kinds(hook, related, &crds)?,
        None => Vec::new(),
    };
    Ok(Imported {
        name,
        controller: controller.clone(),
        parent,
        children,
        related,
        sync,
        finalize,
        customize,
        version,
        resync_seconds: spec["resyncPeriodSeconds"].as_f64(),
    })
}

fn rule_kind(rule: &Value, field: &str, crds: &[Value]) -> anyhow::Result<Kind> {
    let api_version = rule["apiVersion"]
        .as_str()
        .with_context(|| format!("{field}.apiVersion is missing"))?;
    let resource = rule["resource"]
        .as_str()
        .with_context(|| format!("{field}.resource is missing"))?;
    kinds::resolve(api_version, resource, crds).with_context(|| {
        format!("{field}: {resource} in {api_version} is neither a CRD of the example nor a built-in kind the importer knows")
    })
}

/// The kinds `customize` may ask for: those given, and every known plural its source
/// quotes (Metacontroller learns them only from its answers; a plugin declares them).
fn related_kinds(hook: &HookFile, given: &[String], crds: &[Value]) -> anyhow::Result<Vec<Kind>> {
    let mut out = Vec::new();
    for g in given {
        let (api_version, resource) = g
            .rsplit_once('/')
            .with_context(|| format!("--related {g}: expected APIVERSION/RESOURCE, e.g. v1/configmaps"))?;
        out.push(
            kinds::resolve(api_version, resource, crds)
                .with_context(|| format!("--related {g}: not a kind the importer knows"))?,
        );
    }
    let source = std::fs::read_to_string(&hook.script)
        .with_context(|| format!("cannot read {}", hook.script.display()))?;
    for kind in kinds::known(crds) {
        let quoted = [format!("'{}'", kind.plural), format!("\"{}\"", kind.plural)];
        if quoted.iter().any(|q| source.contains(q.as_str())) && !out.contains(&kind) {
            out.push(kind);
        }
    }
    Ok(out)
}
