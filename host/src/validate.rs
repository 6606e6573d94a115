//! The host never trusts a plugin: every response is checked against what the plugin
//! declared before a single write. Pure logic, shared by `capstan run` and `capstan test`.

use std::collections::HashSet;

use crate::engine::{Kind, Metadata};

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

/// Check every desired child of a response for a parent in `parent_namespace`.
///
/// Children must be of a declared kind, named, in the parent's namespace (cluster-scoped
/// only when `allowed_cluster_kinds` names the kind), free of owner references (the host
/// sets the only one), and unique.
pub fn children(
    metadata: &Metadata,
    parent_namespace: Option<&str>,
    desired: Vec<serde_json::Value>,
    allowed_cluster_kinds: &[String],
) -> Result<Vec<Child>, Refusal> {
    let mut seen = HashSet::new();
    desired
        .into_iter()
        .enumerate()
        .map(|(index, object)| {
            let kind_name = object["kind"].as_str().unwrap_or("?");
            let name = object["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let refuse = |reason: String| Refusal {
                index,
                what: format!("{kind_name}/{name}"),
                reason,
            };
            let kind = metadata
                .children
                .iter()
                .find(|k| k.matches(&object))
                .ok_or_else(|| {
                    refuse(format!(
                        "{} {kind_name} is not a declared child kind",
                        object["apiVersion"].as_str().unwrap_or("?")
                    ))
                })?
                .clone();
            if name.is_empty() {
                return Err(refuse("metadata.name is missing".into()));
            }
            if !object["metadata"]["ownerReferences"].is_null() {
                return Err(refuse("carries ownerReferences; the host sets the owner".into()));
            }
            let given = object["metadata"]["namespace"].as_str();
            let namespace = if kind.namespaced {
                match (given, parent_namespace) {
                    (None, Some(parent)) => Some(parent.to_string()),
                    (Some(ns), Some(parent)) if ns == parent => Some(ns.to_string()),
                    (Some(ns), Some(parent)) => {
                        return Err(refuse(format!(
                            "namespace {ns} is not the parent's namespace {parent}"
                        )));
                    }
                    (Some(ns), None) => Some(ns.to_string()),
                    (None, None) => {
                        return Err(refuse(
                            "a namespaced child of a cluster-scoped parent needs metadata.namespace".into(),
                        ));
                    }
                }
            } else {
                let qualified = format!("{}.{}", kind.plural, kind.group);
                if !allowed_cluster_kinds
                    .iter()
                    .any(|k| *k == kind.kind || *k == qualified)
                {
                    return Err(refuse(format!(
                        "{kind_name} is cluster-scoped and not allowed for this plugin"
                    )));
                }
                None
            };
            if !seen.insert((kind.clone(), name.clone())) {
                return Err(refuse("appears twice".into()));
            }
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
            finalizer: None,
        }
    }

    fn check(objects: Vec<serde_json::Value>, allowed: &[&str]) -> Result<Vec<Child>, Refusal> {
        let allowed: Vec<String> = allowed.iter().map(|s| s.to_string()).collect();
        children(&meta(), Some("team-a"), objects, &allowed)
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
}
