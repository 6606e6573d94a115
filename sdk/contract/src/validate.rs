//! The host never trusts a plugin: every response is checked against what the plugin
//! declared before a single write.

use std::collections::HashSet;

use crate::names::{object_name, printable};
use crate::place::namespace;
use crate::{APPLIED_ANNOTATION, Kind, MANAGED_BY, Metadata, PLUGIN_LABEL, ParentMetadata};

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
#[error("{subject}: {reason}")]
pub struct Refusal {
    /// What in the response is at fault: `child 0 (Kind/name)` or `event 0`.
    pub subject: String,
    /// What is wrong.
    pub reason: String,
}

/// What the operator lets a plugin do beyond the parent's own namespace; a plugin cannot
/// grant itself any of it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Allowances {
    /// Cluster-scoped child kinds the plugin may create (`Kind` or `plural.group`).
    pub cluster_kinds: Vec<String>,
    /// Namespaces where children of a cluster-scoped parent may be created, and where any
    /// parent may read related objects besides its own namespace (none by default);
    /// [`ANY_NAMESPACE`] grants every namespace.
    pub namespaces: Vec<String>,
    /// A Namespace parent's children may live in the Namespace it reconciles: what a
    /// namespace-defaults plugin needs, granted because it lets the plugin write into
    /// every Namespace it is shown (kube-system too). Reading related objects there needs it too.
    pub own_namespace: bool,
    /// The plugin may declare Secret as its parent, a child or a related kind (`allowSecrets`).
    pub secrets: bool,
    /// The plugin may declare its own parent kind as a child kind (`allowOwnKind`).
    pub own_kind: bool,
}

/// The grant of every namespace (`allowNamespaces: ["*"]`): what a controller that
/// propagates objects across namespaces, as Metacontroller's do, needs.
pub const ANY_NAMESPACE: &str = "*";

/// Checks one namespace grant: a namespace's name, or [`ANY_NAMESPACE`].
pub fn namespace_grant(ns: &str) -> Result<(), String> {
    if ns == ANY_NAMESPACE {
        Ok(())
    } else {
        crate::dns1123_label(ns)
    }
}

impl Allowances {
    /// True when children may go into, and related objects be read from, namespace `ns`.
    pub fn namespace(&self, ns: &str) -> bool {
        self.namespaces.iter().any(|a| a == ns || a == ANY_NAMESPACE)
    }

    /// True when `kind` is one of the cluster-scoped child kinds granted.
    pub(crate) fn cluster_kind(&self, kind: &Kind) -> bool {
        self.cluster_kinds.iter().any(|k| kind.is_named(k))
    }
}

/// What of a response is checked besides its children.
pub struct Rest<'a, R> {
    /// Its events' reasons.
    pub event_reasons: R,
    /// The labels and annotations it sets on its parent.
    pub parent: &'a ParentMetadata,
}

/// Check a whole response for a parent in `parent_namespace` before anything of it is
/// written: its desired children (see [`children`]), its events' reasons (see
/// [`crate::events::reason`]), then the labels and annotations it sets on the parent
/// (see [`ParentMetadata::check`]). `capstan run`, `capstan test` and the SDK's fixtures
/// all call this, so they refuse the same responses with the same words.
pub fn response<'a, R: IntoIterator<Item = &'a str>>(
    metadata: &Metadata,
    parent_namespace: Option<&str>,
    desired: Vec<serde_json::Value>,
    rest: Rest<'_, R>,
    allow: &Allowances,
) -> Result<Vec<Child>, Refusal> {
    let children = children(metadata, parent_namespace, desired, allow)?;
    for (index, reason) in rest.event_reasons.into_iter().enumerate() {
        crate::events::reason(reason).map_err(|reason| Refusal {
            subject: format!("event {index}"),
            reason,
        })?;
    }
    rest.parent.check()?;
    Ok(children)
}

/// Check every desired child of a response for a parent in `parent_namespace`.
///
/// Children must be of a declared kind, carry a name the API server would accept for
/// that kind (checked here because names become URL paths), live in the parent's
/// namespace (a cluster-scoped parent's children only in namespaces `allow` lists;
/// cluster-scoped children only of cluster-scoped parents, and only of kinds `allow`
/// lists), be free of owner references and of Capstan's own labels and annotations (the
/// host sets those), and be unique.
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
            let name = object["metadata"]["name"].as_str().unwrap_or_default();
            let subject = format!(
                "child {index} ({}/{})",
                object["kind"].as_str().unwrap_or("?"),
                printable(name)
            );
            let refuse = |reason: String| Refusal {
                subject: subject.clone(),
                reason,
            };
            let child = child(metadata, parent_namespace, object, allow).map_err(&refuse)?;
            if !seen.insert((child.kind.clone(), child.namespace.clone(), child.name.clone())) {
                return Err(refuse("appears twice".into()));
            }
            Ok(child)
        })
        .collect()
}

/// One desired child checked, with its namespace filled in.
fn child(
    metadata: &Metadata,
    parent_namespace: Option<&str>,
    mut object: serde_json::Value,
    allow: &Allowances,
) -> Result<Child, String> {
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let kind = metadata
        .children
        .iter()
        .find(|k| k.matches(&object))
        .ok_or_else(|| {
            format!(
                "{} {} is not a declared child kind",
                printable(object["apiVersion"].as_str().unwrap_or("?")),
                object["kind"].as_str().unwrap_or("?")
            )
        })?
        .clone();
    if name.is_empty() {
        return Err("metadata.name is missing".into());
    }
    object_name(&kind, &name).map_err(|e| format!("metadata.name {e}"))?;
    if !object["metadata"]["ownerReferences"].is_null() {
        return Err("carries ownerReferences; the host sets the owner".into());
    }
    reserved_keys(&object, &metadata.name)?;
    let namespace = namespace(&kind, &object, (&metadata.parent, parent_namespace), allow)?;
    if let Some(ns) = &namespace {
        object["metadata"]["namespace"] = ns.clone().into();
    }
    Ok(Child {
        kind,
        namespace,
        name,
        object,
    })
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
    fn cluster_scoped_children_need_an_explicit_allowance_and_a_cluster_scoped_parent() {
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n"}});
        let mut cluster = meta();
        cluster.parent.namespaced = false;
        let granted = |kinds: &[&str]| Allowances {
            cluster_kinds: kinds.iter().map(|s| s.to_string()).collect(),
            ..Allowances::default()
        };
        let refused = children(&cluster, None, vec![ns.clone()], &granted(&[])).unwrap_err();
        assert!(
            refused.reason.contains("not allowed for this plugin"),
            "{refused}"
        );
        let placed = children(&cluster, None, vec![ns.clone()], &granted(&["Namespace"])).unwrap();
        assert_eq!(placed[0].namespace, None);
        assert!(children(&cluster, None, vec![ns.clone()], &granted(&["namespaces."])).is_ok());
        // Under a namespaced parent no grant helps: Kubernetes would never collect it.
        let orphan = check(vec![ns], &["Namespace"]).unwrap_err();
        assert!(orphan.reason.contains("OwnerRefInvalidNamespace"), "{orphan}");
    }

    #[test]
    fn a_whole_response_is_refused_for_one_bad_event_reason() {
        let ok = response(
            &meta(),
            Some("a"),
            vec![cm("c", None)],
            Rest {
                event_reasons: ["JobCreated"],
                parent: &ParentMetadata::default(),
            },
            &Allowances::default(),
        );
        assert_eq!(ok.unwrap().len(), 1);
        let bad = response(
            &meta(),
            Some("a"),
            vec![cm("c", None)],
            Rest {
                event_reasons: ["JobCreated", "Failed-job-7"],
                parent: &ParentMetadata::default(),
            },
            &Allowances::default(),
        )
        .unwrap_err();
        assert_eq!(bad.subject, "event 1");
        assert!(
            bad.to_string().starts_with("event 1: reason \"Failed-job-7\""),
            "{bad}"
        );
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
        let every = Allowances {
            namespaces: vec![ANY_NAMESPACE.into()],
            ..Allowances::default()
        };
        let ok = children(&meta(), None, vec![cm("a", Some("kube-system"))], &every).unwrap();
        assert_eq!(ok[0].namespace.as_deref(), Some("kube-system"));
        assert!(
            children(&meta(), None, vec![cm("a", None)], &every).is_err(),
            "still named"
        );
        assert!(children(&meta(), None, vec![cm("a", Some("Bad_NS"))], &every).is_err());
        assert!(namespace_grant("*").is_ok() && namespace_grant("team-a").is_ok());
        assert!(namespace_grant("team-*").is_err() && namespace_grant("").is_err());
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
}
