//! A CompositeController or DecoratorController as a plugin: its kinds, hooks and
//! options, decided before anything is written.

use anyhow::{Context, bail};
use serde_json::Value;

use super::example::Example;
use super::hooks::{self, HookFile};
use super::kinds::{self, Kind};

/// What one imported controller becomes (one of them, for a DecoratorController with
/// several resource rules: a plugin has one parent kind).
#[derive(Clone, Debug)]
pub(super) struct Imported {
    /// The plugin's name: the controller's, or `CONTROLLER-RESOURCE` for one of a
    /// decorator's several resource rules.
    pub name: String,
    /// The controller object, as Metacontroller sends it to hooks.
    pub controller: Value,
    /// For a DecoratorController, its resource rule's label and annotation selectors.
    pub decorator: Option<(Value, Value)>,
    /// The parents' label selector (`parentResource.labelSelector`; none for a
    /// decorator, which checks its rule's itself): the host watches only those.
    pub parent_selector: Option<Value>,
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
    /// The parent's status schema, which the status written is pruned to.
    pub status_schema: Value,
    /// Each child kind's update strategy other than in place (`updates` in run.yaml):
    /// the key naming the kind, and the method (with its status checks).
    pub updates: Vec<(String, Value)>,
    /// What the controller says that the plugin does otherwise, one line each.
    pub differences: Vec<String>,
}

impl Imported {
    /// The finalizer Metacontroller puts on parents of a controller with a finalize hook
    /// (named for the controller, whichever of its resource rules picked the parent).
    pub fn finalizer(&self) -> Option<String> {
        let kind = if self.decorator.is_some() {
            "decorator"
        } else {
            "composite"
        };
        let controller = self.controller["metadata"]["name"].as_str().unwrap_or(&self.name);
        self.finalize
            .as_ref()
            .map(|_| format!("metacontroller.io/{kind}controller-{controller}"))
    }

    /// `CompositeController` or `DecoratorController`.
    pub fn kind(&self) -> &'static str {
        if self.decorator.is_some() {
            "DecoratorController"
        } else {
            "CompositeController"
        }
    }
}

/// The controllers to import: the one named, or every one in the directory.
pub(super) fn pick<'a>(example: &'a Example, name: Option<&str>) -> anyhow::Result<Vec<&'a Value>> {
    let mut all: Vec<&Value> = Vec::new();
    let found = example
        .of_kind("CompositeController")
        .chain(example.of_kind("DecoratorController"));
    for (path, c) in found {
        // One object in two files (a manifest and an all-in-one copy) is one controller,
        // as `kubectl apply` sees it; two that differ are refused.
        let same =
            |seen: &&&Value| seen["kind"] == c["kind"] && seen["metadata"]["name"] == c["metadata"]["name"];
        match all.iter().find(same) {
            Some(seen) if *seen == c => {}
            Some(_) => bail!(
                "{} {} is defined twice, differently (again in {})",
                c["kind"].as_str().unwrap_or_default(),
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
    match name {
        None if all.is_empty() => bail!("no CompositeController or DecoratorController in the directory"),
        None => Ok(all),
        Some(n) => {
            let picked = all.into_iter().find(|c| c["metadata"]["name"] == n);
            Ok(vec![picked.with_context(|| {
                format!("no controller {n} (there are: {})", names.join(", "))
            })?])
        }
    }
}

/// `controller` decided: kinds resolved, hooks found, related kinds from `related` (as
/// `APIVERSION/RESOURCE`) and the plurals the customize hook's source names. A
/// DecoratorController with several resource rules is one plugin per rule, each running
/// the same hooks for its rule's kind.
pub(super) fn import(
    example: &Example,
    controller: &Value,
    related: &[String],
) -> anyhow::Result<Vec<Imported>> {
    let first = import_first(example, controller, related)?;
    let spec = &controller["spec"];
    let rules = spec["resources"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    if first.decorator.is_none() || rules.len() < 2 {
        return Ok(vec![first]);
    }
    let crds = example.crds()?;
    rules
        .iter()
        .enumerate()
        .map(|(i, rule)| {
            let field = format!("spec.resources[{i}]");
            let parent = rule_kind(rule, &field, &crds)?;
            let name = format!("{}-{}", first.name, parent.plural);
            let mut differences = first.differences.clone();
            differences.push(format!(
                "{field}: each of the {} resource rules is a plugin of its own; this one, {name}, decorates {}",
                rules.len(),
                parent.plural
            ));
            Ok(Imported {
                name,
                decorator: Some(selectors(rule)),
                status_schema: kinds::status_schema(&parent, &crds),
                parent,
                differences,
                ..first.clone()
            })
        })
        .collect()
}

/// `controller` decided, its first resource rule the parent of a decorator.
fn import_first(example: &Example, controller: &Value, related: &[String]) -> anyhow::Result<Imported> {
    let name = controller["metadata"]["name"]
        .as_str()
        .context("the controller has no metadata.name")?
        .to_string();
    let spec = &controller["spec"];
    let crds = example.crds()?;
    let decorating = controller["kind"] == "DecoratorController";
    let (parent, decorator, parent_selector) = if decorating {
        // The plugin checks a decorator's selectors itself, so that it sees a target
        // stop matching and finalizes it; the host watches every object of the kind.
        let rule = target(spec)?;
        let kind = rule_kind(rule, "spec.resources[0]", &crds)?;
        (kind, Some(selectors(rule)), None)
    } else {
        let rule = &spec["parentResource"];
        let kind = rule_kind(rule, "spec.parentResource", &crds)?;
        (kind, None, labels_of(rule))
    };
    let field = if decorating {
        "attachments"
    } else {
        "childResources"
    };
    let children = spec[field]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
        .map(|(i, rule)| rule_kind(rule, &format!("spec.{field}[{i}]"), &crds))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let hook = |h: &str| -> anyhow::Result<Option<HookFile>> {
        match spec["hooks"].get(h) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => hooks::resolve(example, &format!("spec.hooks.{h}"), v).map(Some),
        }
    };
    let sync = hook("sync")?.context("spec.hooks.sync is missing")?;
    let (finalize, customize) = (hook("finalize")?, hook("customize")?);
    for (h, other) in [("finalize", &finalize), ("customize", &customize)] {
        if let Some(other) = other.as_ref().filter(|o| o.runtime != sync.runtime) {
            bail!(
                "spec.hooks.{h}: its hook is {} and sync's {}: one plugin has one language",
                other.runtime.language(),
                sync.runtime.language()
            );
        }
    }
    let version = spec["hooks"]["sync"]["version"]
        .as_str()
        .unwrap_or("v1")
        .to_string();
    if !["v1", "v2"].contains(&version.as_str()) {
        bail!("spec.hooks.sync.version {version}: Metacontroller's are v1 and v2");
    }
    let related = match &customize {
        Some(hook) => related_kinds(example, hook, related, &crds)?,
        None => Vec::new(),
    };
    let status_schema = kinds::status_schema(&parent, &crds);
    let updates = updates(spec, field, &children)?;
    let differences = differences(spec, field);
    Ok(Imported {
        name,
        controller: controller.clone(),
        decorator,
        parent_selector,
        parent,
        children,
        related,
        sync,
        finalize,
        customize,
        version,
        resync_seconds: spec["resyncPeriodSeconds"].as_f64(),
        status_schema,
        updates,
        differences,
    })
}

/// Metacontroller's update strategy of each child rule that is not in place (`OnDelete`
/// when it names none), as `run.yaml`'s `updates` takes it: the method, or the method with
/// its status checks. A kind is named by `Kind`, or by `plural.group` where two child
/// kinds share that name.
fn updates(spec: &Value, field: &str, children: &[Kind]) -> anyhow::Result<Vec<(String, Value)>> {
    let rules = spec[field].as_array().map(Vec::as_slice).unwrap_or_default();
    let mut out = Vec::new();
    for (i, (rule, kind)) in rules.iter().zip(children).enumerate() {
        let strategy = &rule["updateStrategy"];
        let method = strategy["method"].as_str().unwrap_or("OnDelete");
        let update = match method {
            "InPlace" => continue,
            "OnDelete" | "Recreate" => Value::from(method),
            "RollingInPlace" | "RollingRecreate" if strategy["statusChecks"].is_null() => Value::from(method),
            "RollingInPlace" | "RollingRecreate" => {
                serde_json::json!({"method": method, "statusChecks": strategy["statusChecks"]})
            }
            other => bail!(
                "spec.{field}[{i}].updateStrategy.method {other}: Metacontroller's are OnDelete, Recreate, InPlace, RollingRecreate and RollingInPlace"
            ),
        };
        let shared = children.iter().filter(|k| k.kind == kind.kind).count() > 1;
        let key = if shared {
            format!("{}.{}", kind.plural, kind.group)
        } else {
            kind.kind.clone()
        };
        out.push((key, update));
    }
    Ok(out)
}

/// What of `spec` the plugin does otherwise than Metacontroller: a rolling update keeps
/// no ControllerRevisions and sets no `Updated` condition on the parent, and no revision
/// history is kept.
fn differences(spec: &Value, field: &str) -> Vec<String> {
    let rules = spec[field].as_array().map(Vec::as_slice).unwrap_or_default();
    let mut out: Vec<String> = (rules.iter().enumerate())
        .filter_map(|(i, rule)| {
            let method = rule["updateStrategy"]["method"].as_str()?;
            method.starts_with("Rolling").then(|| {
                format!("spec.{field}[{i}].updateStrategy.method {method}: its children are rolled one at a time behind the status checks, but the parent's status gets no Updated condition")
            })
        })
        .collect();
    if !spec["parentResource"]["revisionHistory"].is_null() {
        out.push("spec.parentResource.revisionHistory: no revision history is kept".into());
    }
    out
}

/// A DecoratorController's first resource rule.
fn target(spec: &Value) -> anyhow::Result<&Value> {
    let rules = spec["resources"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    rules.first().context("spec.resources is empty")
}

/// A decorator's resource rule's (label, annotation) selectors.
fn selectors(rule: &Value) -> (Value, Value) {
    (rule["labelSelector"].clone(), rule["annotationSelector"].clone())
}

/// A composite's parent rule's `labelSelector`, when it selects anything: the host
/// watches only those parents.
fn labels_of(rule: &Value) -> Option<Value> {
    Some(rule["labelSelector"].clone()).filter(|s| s.as_object().is_some_and(|o| !o.is_empty()))
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

/// The kinds `customize` may ask for: those given, every known plural its source quotes
/// (Metacontroller learns them only from its answers; a plugin declares them), and
/// Namespace when it writes a `namespaceSelector`.
fn related_kinds(
    example: &Example,
    hook: &HookFile,
    given: &[String],
    crds: &[Value],
) -> anyhow::Result<Vec<Kind>> {
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
    let source = example.text(&hook.script)?;
    for kind in kinds::known(crds) {
        let quoted = [format!("'{}'", kind.plural), format!("\"{}\"", kind.plural)];
        if quoted.iter().any(|q| source.contains(q.as_str())) && !out.contains(&kind) {
            out.push(kind);
        }
    }
    // A rule's namespaceSelector is read through the Namespaces it selects.
    if source.contains("namespaceSelector")
        && let Some(namespaces) = kinds::resolve("v1", "namespaces", crds)
        && !out.contains(&namespaces)
    {
        out.push(namespaces);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn update_methods_map_to_the_host_s_and_the_rolling_ones_are_said_to_differ() {
        let spec = serde_json::json!({
            "parentResource": {"apiVersion": "v1", "resource": "x", "revisionHistory": {"fieldPaths": ["spec"]}},
            "childResources": [
                {"apiVersion": "v1", "resource": "pods", "updateStrategy": {"method": "RollingRecreate"}},
                {"apiVersion": "v1", "resource": "services", "updateStrategy": {"method": "InPlace"}},
                {"apiVersion": "v1", "resource": "configmaps"},
                {"apiVersion": "v1", "resource": "secrets", "updateStrategy": {"method": "Recreate"}},
            ],
        });
        let kind = |k: &str, plural: &str| Kind {
            group: String::new(),
            version: "v1".into(),
            kind: k.into(),
            plural: plural.into(),
            namespaced: true,
        };
        let children = [
            kind("Pod", "pods"),
            kind("Service", "services"),
            kind("ConfigMap", "configmaps"),
            kind("Secret", "secrets"),
        ];
        let pods = serde_json::json!({"method": "RollingRecreate", "statusChecks": {"conditions": [{"type": "Ready"}]}});
        let mut spec = spec;
        spec["childResources"][0]["updateStrategy"] = pods.clone();
        assert_eq!(
            updates(&spec, "childResources", &children).unwrap(),
            [
                ("Pod".to_string(), pods),
                ("ConfigMap".to_string(), "OnDelete".into()),
                ("Secret".to_string(), "Recreate".into()),
            ],
            "Metacontroller's default is OnDelete"
        );
        let said = differences(&spec, "childResources");
        assert_eq!(said.len(), 2, "{said:?}");
        assert!(said[0].starts_with("spec.childResources[0].updateStrategy.method RollingRecreate: its children are rolled one at a time"));
        assert!(said[1].contains("revisionHistory"));

        let unknown = serde_json::json!({"childResources": [
            {"apiVersion": "v1", "resource": "pods", "updateStrategy": {"method": "Sometimes"}},
        ]});
        let e = updates(&unknown, "childResources", &children[..1])
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("spec.childResources[0].updateStrategy.method Sometimes: Metacontroller's are"),
            "{e}"
        );
    }
}
