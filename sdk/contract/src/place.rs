//! Where a child goes: the namespace a parent lives in, as the API server would have it,
//! and the namespace each child of it may be placed in.

use crate::declared::NEVER_COLLECTED;
use crate::names::{dns1123_label, printable};
use crate::{Allowances, Kind, Metadata};

/// The namespace a child goes to, or why it may not go where it asks.
pub(crate) fn namespace(
    kind: &Kind,
    object: &serde_json::Value,
    parent: (&Kind, Option<&str>),
    allow: &Allowances,
) -> Result<Option<String>, String> {
    let (parent_kind, parent_namespace) = parent;
    let given = &object["metadata"]["namespace"];
    let given = match given {
        serde_json::Value::Null => None,
        serde_json::Value::String(ns) => Some(ns.as_str()),
        _ => return Err("metadata.namespace is not a string".into()),
    };
    if !kind.namespaced {
        if parent_kind.namespaced {
            return Err(format!(
                "{} is cluster-scoped and the parent is namespaced; {NEVER_COLLECTED}",
                kind.kind
            ));
        }
        if !allow.cluster_kind(kind) {
            return Err(format!(
                "{} is cluster-scoped and not allowed for this plugin",
                kind.kind
            ));
        }
        if let Some(ns) = given.filter(|ns| !ns.is_empty()) {
            return Err(format!(
                "{} is cluster-scoped but names namespace {}",
                kind.kind,
                printable(ns)
            ));
        }
        return Ok(None);
    }
    if let Some(ns) = given {
        dns1123_label(ns).map_err(|e| format!("metadata.namespace {e}"))?;
    }
    match (given, parent_namespace) {
        (None, Some(parent)) => Ok(Some(parent.to_string())),
        (Some(ns), Some(parent)) if ns == parent => Ok(Some(ns.to_string())),
        (Some(ns), Some(parent)) => Err(format!("namespace {ns} is not the parent's namespace {parent}")),
        (Some(ns), None) if allow.namespace(ns) => Ok(Some(ns.to_string())),
        (Some(ns), None) => Err(format!(
            "namespace {ns} is not allowed for children of this cluster-scoped parent (allowed: {})",
            if allow.namespaces.is_empty() {
                "none; the operator grants them: --namespace or allowNamespaces for capstan run, --allow-namespace for capstan test".to_string()
            } else {
                allow.namespaces.join(", ")
            }
        )),
        (None, None) => Err("a namespaced child of a cluster-scoped parent needs metadata.namespace".into()),
    }
}

/// The namespace a parent's children and related objects live in: the parent's own, or —
/// for a Namespace parent, which lives in none, and only with the operator's
/// [`Allowances::own_namespace`] — the Namespace itself (its name).
pub fn home_namespace<'a>(
    metadata: &Metadata,
    namespace: Option<&'a str>,
    name: &'a str,
    allow: &Allowances,
) -> Option<&'a str> {
    let is_namespace = metadata.parent.group.is_empty() && metadata.parent.kind == "Namespace";
    if is_namespace && allow.own_namespace && !name.is_empty() {
        Some(name)
    } else {
        namespace
    }
}

/// The namespace a parent object lives in, as the API server would have it: none for a
/// cluster-scoped parent kind (whatever the object says), its `metadata.namespace` for a
/// namespaced one, or `default` when the object names none — where `kubectl apply -f`
/// would create it. For objects read from files (`capstan test`, the SDK's fixtures);
/// `capstan run` takes the namespace of the object it watches.
pub fn parent_namespace<'a>(
    metadata: &Metadata,
    parent: &'a serde_json::Value,
    allow: &Allowances,
) -> Option<&'a str> {
    if !metadata.parent.namespaced {
        let name = parent["metadata"]["name"].as_str().unwrap_or_default();
        return home_namespace(metadata, None, name, allow);
    }
    Some(
        parent["metadata"]["namespace"]
            .as_str()
            .filter(|ns| !ns.is_empty())
            .unwrap_or("default"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::children;
    use serde_json::json;

    fn kind(group: &str, kind: &str, plural: &str, namespaced: bool) -> Kind {
        Kind {
            group: group.into(),
            version: "v1".into(),
            kind: kind.into(),
            plural: plural.into(),
            namespaced,
        }
    }

    fn meta() -> Metadata {
        Metadata {
            name: "p".into(),
            version: "0".into(),
            parent: kind("example.com", "Parent", "parents", true),
            children: vec![kind("", "ConfigMap", "configmaps", true)],
            related: vec![],
            settings_schema: None,
            finalizer: None,
        }
    }

    #[test]
    fn a_parent_read_from_a_file_is_where_the_api_server_would_have_it() {
        let namespaced = meta();
        let in_demo = json!({"metadata": {"name": "a", "namespace": "demo"}});
        let nowhere = json!({"metadata": {"name": "a"}});
        let none = Allowances::default();
        assert_eq!(parent_namespace(&namespaced, &in_demo, &none), Some("demo"));
        assert_eq!(parent_namespace(&namespaced, &nowhere, &none), Some("default"));
        let mut cluster = meta();
        cluster.parent.namespaced = false;
        assert_eq!(parent_namespace(&cluster, &in_demo, &none), None);
    }

    #[test]
    fn a_namespace_is_home_to_its_children_only_by_the_operators_grant() {
        let mut plugin = meta();
        plugin.parent = kind("", "Namespace", "namespaces", false);
        let team = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}});
        let quota = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "q"}});
        let none = Allowances::default();
        assert_eq!(parent_namespace(&plugin, &team, &none), None);
        assert!(children(&plugin, None, vec![quota.clone()], &none).is_err());
        let granted = Allowances {
            own_namespace: true,
            ..Allowances::default()
        };
        let home = parent_namespace(&plugin, &team, &granted);
        assert_eq!(home, Some("team-a"));
        let placed = children(&plugin, home, vec![quota], &granted).unwrap();
        assert_eq!(placed[0].namespace.as_deref(), Some("team-a"));
    }
}
