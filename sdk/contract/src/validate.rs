//! The host never trusts a plugin: every response is checked against what the plugin
//! declared before a single write.

use std::collections::HashSet;

use crate::names::{dns1123_label, object_name, printable};
use crate::{APPLIED_ANNOTATION, Kind, MANAGED_BY, Metadata, PLUGIN_LABEL};

/// A desired child that passed validation, with its namespace filled in.
#[derive(Clone, Debug, PartialEq)]
pub struct Child {
    /// Its declared kind.
    pub kind: Kind,
    /// Namespace (None for cluster-scoped kinds).
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
    /// The object as the plugin returned it (namespace filled in).
    pub object: serde_json::Value,
}

/// Why a response was refused; nothing of it is applied.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("child {index} ({what}): {reason}")]
pub struct Refusal {
    /// Position of the offending child in the response.
    pub index: usize,
    /// `Kind/name` of the child as far as known.
    pub what: String,
    /// What is wrong.
    pub reason: String,
}

/// What the operator lets a plugin do beyond the parent's own namespace; a plugin cannot
/// grant itself any of it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Allowances {
    /// Cluster-scoped child kinds the plugin may create (`Kind` or `plural.group`).
    pub cluster_kinds: Vec<String>,
    /// Namespaces where children of a cluster-scoped parent may be created (none by default).
    pub namespaces: Vec<String>,
    /// A Namespace parent's children (and namespaced related objects) may live in the
    /// Namespace it reconciles: what a namespace-defaults plugin needs, granted because
    /// it lets the plugin write into every Namespace it is shown (kube-system too).
    pub own_namespace: bool,
}

impl Allowances {
    fn cluster_kind(&self, kind: &Kind) -> bool {
        let qualified = format!("{}.{}", kind.plural, kind.group);
        self.cluster_kinds
            .iter()
            .any(|k| *k == kind.kind || *k == qualified)
    }
}

/// Check every desired child of a response for a parent in `parent_namespace`.
///
/// Children must be of a declared kind, carry a name the API server would accept for
/// that kind (checked here because names become URL paths), live in the parent's
/// namespace (a cluster-scoped parent's children only in namespaces `allow` lists;
/// cluster-scoped children only of kinds `allow` lists), be free of owner references and
/// of Capstan's own labels and annotations (the host sets those), and be unique.
pub fn children(
    metadata: &Metadata,
    parent_namespace: Option<&str>,
    desired: Vec<serde_json::Value>,
    allow: &Allowances,
) -> Result<Vec<Child>, Refusal> {
    let mut seen = HashSet::new();
    desired
        .into_iter()
        .enumerate()
        .map(|(index, object)| {
            let kind_name = object["kind"].as_str().unwrap_or("?");
            let name = object["metadata"]["name"].as_str().unwrap_or_default();
            let refuse = |reason: String| Refusal {
                index,
                what: format!("{kind_name}/{}", printable(name)),
                reason,
            };
            let kind = metadata
                .children
                .iter()
                .find(|k| k.matches(&object))
                .ok_or_else(|| {
                    refuse(format!(
                        "{} {kind_name} is not a declared child kind",
                        printable(object["apiVersion"].as_str().unwrap_or("?"))
                    ))
                })?
                .clone();
            if name.is_empty() {
                return Err(refuse("metadata.name is missing".into()));
            }
            object_name(&kind, name).map_err(|e| refuse(format!("metadata.name {e}")))?;
            if !object["metadata"]["ownerReferences"].is_null() {
                return Err(refuse("carries ownerReferences; the host sets the owner".into()));
            }
            reserved_keys(&object, &metadata.name).map_err(&refuse)?;
            let namespace = namespace(&kind, &object, parent_namespace, allow).map_err(&refuse)?;
            if !seen.insert((kind.clone(), namespace.clone(), name.to_string())) {
                return Err(refuse("appears twice".into()));
            }
            let name = name.to_string();
            let mut object = object;
            if let Some(ns) = &namespace {
                object["metadata"]["namespace"] = ns.clone().into();
            }
            Ok(Child {
                kind,
                namespace,
                name,
                object,
            })
        })
        .collect()
}

/// The namespace a child goes to, or why it may not go where it asks.
fn namespace(
    kind: &Kind,
    object: &serde_json::Value,
    parent_namespace: Option<&str>,
    allow: &Allowances,
) -> Result<Option<String>, String> {
    let given = &object["metadata"]["namespace"];
    let given = match given {
        serde_json::Value::Null => None,
        serde_json::Value::String(ns) => Some(ns.as_str()),
        _ => return Err("metadata.namespace is not a string".into()),
    };
    if !kind.namespaced {
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
        (Some(ns), None) if allow.namespaces.iter().any(|a| a == ns) => Ok(Some(ns.to_string())),
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

/// Capstan's labels and annotation are the host's to set: a plugin that sets them to
/// something else is trying to pass its child off as another plugin's.
fn reserved_keys(object: &serde_json::Value, plugin: &str) -> Result<(), String> {
    let meta = &object["metadata"];
    for (key, own) in [(MANAGED_BY.0, MANAGED_BY.1), (PLUGIN_LABEL, plugin)] {
        match &meta["labels"][key] {
            serde_json::Value::Null => {}
            v if v == own => {}
            v => return Err(format!("sets label {key}={v}, which only the host sets")),
        }
    }
    if !meta["annotations"][APPLIED_ANNOTATION].is_null() {
        return Err(format!(
            "sets annotation {APPLIED_ANNOTATION}, which only the host sets"
        ));
    }
    Ok(())
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
            children: vec![
                kind("", "ConfigMap", "configmaps", true),
                kind("", "Namespace", "namespaces", false),
            ],
            related: vec![],
            settings_schema: None,
            finalizer: None,
        }
    }

    fn check(objects: Vec<serde_json::Value>, allowed: &[&str]) -> Result<Vec<Child>, Refusal> {
        let allow = Allowances {
            cluster_kinds: allowed.iter().map(|s| s.to_string()).collect(),
            ..Allowances::default()
        };
        children(&meta(), Some("team-a"), objects, &allow)
    }

    fn cm(name: &str, ns: Option<&str>) -> serde_json::Value {
        let mut o = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}});
        if let Some(ns) = ns {
            o["metadata"]["namespace"] = ns.into();
        }
        o
    }

    #[test]
    fn declared_children_in_the_parent_namespace_pass_and_get_it_filled_in() {
        let ok = check(vec![cm("a", None), cm("b", Some("team-a"))], &[]).unwrap();
        assert_eq!(ok[0].namespace.as_deref(), Some("team-a"));
        assert_eq!(ok[0].object["metadata"]["namespace"], "team-a");
        assert_eq!(ok[1].name, "b");
    }

    #[test]
    fn undeclared_kinds_other_namespaces_and_owner_refs_are_refused() {
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}});
        assert!(
            check(vec![cm("a", None), secret], &[])
                .unwrap_err()
                .reason
                .contains("not a declared child kind")
        );
        assert!(
            check(vec![cm("a", Some("kube-system"))], &[])
                .unwrap_err()
                .reason
                .contains("not the parent's namespace")
        );
        let mut owned = cm("a", None);
        owned["metadata"]["ownerReferences"] = json!([{"uid": "x"}]);
        assert!(
            check(vec![owned], &[])
                .unwrap_err()
                .reason
                .contains("ownerReferences")
        );
        assert!(
            check(vec![cm("a", None), cm("a", None)], &[])
                .unwrap_err()
                .reason
                .contains("twice")
        );
        assert!(
            check(
                vec![json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}})],
                &[]
            )
            .is_err()
        );
    }

    #[test]
    fn cluster_scoped_children_need_an_explicit_allowance() {
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n"}});
        assert!(
            check(vec![ns.clone()], &[])
                .unwrap_err()
                .reason
                .contains("cluster-scoped")
        );
        assert_eq!(
            check(vec![ns.clone()], &["Namespace"]).unwrap()[0].namespace,
            None
        );
        assert!(check(vec![ns], &["namespaces."]).is_ok());
    }

    fn reason(result: Result<Vec<Child>, Refusal>) -> String {
        result.unwrap_err().reason
    }

    #[test]
    fn names_that_would_change_the_request_path_are_refused() {
        for bad in [
            "x?dryRun=All&fieldManager=evil",
            "victim/status",
            "..",
            "UPPER",
            "a%2Fb",
            "line\nbreak",
            "-leading",
        ] {
            let r = reason(check(vec![cm(bad, None)], &[]));
            assert!(r.contains("RFC 1123 subdomain"), "{bad}: {r}");
        }
        assert!(reason(check(vec![cm(&"a".repeat(300), None)], &[])).contains("at most 253"));
        let longest = [&"a".repeat(63), &"b".repeat(63), &"c".repeat(63), &"d".repeat(61)]
            .map(|s| s.as_str())
            .join(".");
        assert_eq!(longest.len(), 253);
        assert!(check(vec![cm(&longest, None)], &[]).is_ok());
        assert!(
            check(vec![cm(&"a".repeat(64), None)], &[]).is_err(),
            "a label is at most 63"
        );
        assert!(check(vec![cm("a.b-c.d1", None)], &[]).is_ok());
        let control = reason(check(vec![cm("a\u{1b}[2J", None)], &[]));
        assert!(control.contains("\\u{1b}"), "escaped in the message: {control}");
    }

    #[test]
    fn names_follow_the_rules_of_their_kind() {
        let service = kind("", "Service", "services", true);
        assert!(
            object_name(&service, "1abc").is_err(),
            "a Service name starts with a letter"
        );
        assert!(object_name(&service, "abc").is_ok());
        let namespace = kind("", "Namespace", "namespaces", false);
        assert!(object_name(&namespace, "a.b").is_err());
        let role = kind("rbac.authorization.k8s.io", "ClusterRole", "clusterroles", false);
        assert!(object_name(&role, "system:controller:x").is_ok());
        assert!(object_name(&role, "a/b").is_err());
        assert!(object_name(&role, "a?b").is_err());
        assert!(check(vec![cm("a", Some("Bad_NS"))], &[]).is_err());
    }

    #[test]
    fn a_cluster_scoped_parent_writes_only_into_namespaces_the_operator_allows() {
        let none = Allowances::default();
        let team_a = Allowances {
            namespaces: vec!["team-a".into()],
            ..Allowances::default()
        };
        let r = children(&meta(), None, vec![cm("a", Some("kube-system"))], &none).unwrap_err();
        assert!(r.reason.contains("not allowed"), "{}", r.reason);
        assert!(children(&meta(), None, vec![cm("a", Some("kube-system"))], &team_a).is_err());
        assert!(children(&meta(), None, vec![cm("a", None)], &team_a).is_err());
        let ok = children(&meta(), None, vec![cm("a", Some("team-a"))], &team_a).unwrap();
        assert_eq!(ok[0].namespace.as_deref(), Some("team-a"));
    }

    #[test]
    fn the_host_labels_and_annotation_cannot_be_set_by_a_plugin() {
        let mut stolen = cm("a", None);
        stolen["metadata"]["labels"] = json!({"capstan.dev/plugin": "other"});
        assert!(reason(check(vec![stolen], &[])).contains("capstan.dev/plugin"));
        let mut own = cm("a", None);
        own["metadata"]["labels"] =
            json!({"capstan.dev/plugin": "p", "app.kubernetes.io/managed-by": "capstan"});
        assert!(check(vec![own], &[]).is_ok(), "its own values are harmless");
        let mut forged = cm("a", None);
        forged["metadata"]["annotations"] = json!({"capstan.dev/applied": "0"});
        assert!(reason(check(vec![forged], &[])).contains("annotation"));
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
