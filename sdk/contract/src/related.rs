//! Related objects: what a plugin asks to read for one parent, checked against what it
//! declared, and which objects answer it. The host answers from its caches and the SDK's
//! fixtures from files, with the same rules.

use serde::{Deserialize, Serialize};

use crate::names::printable;
use crate::{Kind, LabelSelector, Metadata};

/// Most queries one `related` answer may hold.
pub const MAX_QUERIES: usize = 32;
/// Most names all queries of one answer may list together.
pub const MAX_NAMES: usize = 256;

/// Which objects of one related kind a parent needs (`related-query` in the WIT).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RelatedQuery {
    /// API group of a declared related kind.
    pub group: String,
    /// Kind of a declared related kind.
    pub kind: String,
    /// Namespace to read from; `None` is the parent's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Which objects.
    pub selector: Selector,
}

/// How a query picks objects.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Selector {
    /// These names.
    Names(Vec<String>),
    /// A label selector in text form.
    Labels(String),
}

/// A query that passed the checks: its declared kind, the namespace it reads (`None` for a
/// cluster-scoped kind) and its parsed selector.
#[derive(Clone, Debug)]
pub struct Resolved {
    /// Index of the kind in `Metadata::related`.
    pub kind: usize,
    /// The namespace read, for namespaced kinds.
    pub namespace: Option<String>,
    /// The objects' names, for a by-name query.
    pub names: Option<Vec<String>>,
    /// The label selector, for a by-label query.
    pub labels: Option<LabelSelector>,
}

impl Resolved {
    /// True when an object with this namespace, name and labels answers the query.
    pub fn matches(
        &self,
        namespace: Option<&str>,
        name: &str,
        labels: &std::collections::BTreeMap<String, String>,
    ) -> bool {
        namespace == self.namespace.as_deref()
            && self.names.as_ref().is_none_or(|n| n.iter().any(|n| n == name))
            && self.labels.as_ref().is_none_or(|s| s.matches(labels))
    }
}

/// Check a plugin's queries for a parent in `parent_namespace`: each names a declared
/// related kind, a namespaced parent reads only its own namespace, a cluster-scoped
/// parent names the namespace it reads, selectors parse, and the answer is small.
pub fn resolve(
    metadata: &Metadata,
    parent_namespace: Option<&str>,
    queries: &[RelatedQuery],
) -> Result<Vec<Resolved>, String> {
    if queries.len() > MAX_QUERIES {
        return Err(format!(
            "{} related queries; at most {MAX_QUERIES}",
            queries.len()
        ));
    }
    let names: usize = queries
        .iter()
        .map(|q| match &q.selector {
            Selector::Names(n) => n.len(),
            Selector::Labels(_) => 0,
        })
        .sum();
    if names > MAX_NAMES {
        return Err(format!(
            "related queries name {names} objects; at most {MAX_NAMES}"
        ));
    }
    queries
        .iter()
        .map(|q| one(metadata, parent_namespace, q))
        .collect()
}

fn one(metadata: &Metadata, parent_namespace: Option<&str>, q: &RelatedQuery) -> Result<Resolved, String> {
    let kind = metadata
        .related
        .iter()
        .position(|k| k.group == q.group && k.kind == q.kind)
        .ok_or_else(|| {
            format!(
                "related query for {}: not a declared related kind",
                describe(&q.group, &q.kind)
            )
        })?;
    let declared: &Kind = &metadata.related[kind];
    let namespace = if !declared.namespaced {
        None
    } else {
        match (parent_namespace, q.namespace.as_deref()) {
            (Some(own), None) => Some(own.to_string()),
            (Some(own), Some(asked)) if asked == own => Some(own.to_string()),
            (Some(own), Some(asked)) => {
                return Err(format!(
                    "related query for {}: namespace {:?} is not the parent's namespace {own:?}",
                    declared.kind,
                    printable(asked)
                ));
            }
            (None, Some(asked)) => {
                crate::dns1123_label(asked).map_err(|e| format!("related query namespace {e}"))?;
                Some(asked.to_string())
            }
            (None, None) => {
                return Err(format!(
                    "related query for namespaced {} from a cluster-scoped parent must name its namespace",
                    declared.kind
                ));
            }
        }
    };
    let (names, labels) = match &q.selector {
        Selector::Names(names) => {
            for n in names {
                crate::object_name(declared, n)
                    .map_err(|e| format!("related query for {}: {e}", declared.kind))?;
            }
            (Some(names.clone()), None)
        }
        Selector::Labels(text) => (None, Some(LabelSelector::parse(text)?)),
    };
    Ok(Resolved {
        kind,
        namespace,
        names,
        labels,
    })
}

fn describe(group: &str, kind: &str) -> String {
    if group.is_empty() {
        printable(kind)
    } else {
        format!("{}.{}", printable(kind), printable(group))
    }
}

/// The objects of `candidates` that answer `queries`, in query order, each once: what a
/// request's `related` holds. Candidates are JSON objects with `apiVersion` and `kind`.
pub fn select(
    metadata: &Metadata,
    resolved: &[Resolved],
    candidates: &[serde_json::Value],
) -> Vec<serde_json::Value> {
    let mut out: Vec<serde_json::Value> = Vec::new();
    for q in resolved {
        let kind = &metadata.related[q.kind];
        for c in candidates.iter().filter(|c| kind.matches(c)) {
            let meta = &c["metadata"];
            let labels = crate::selector::labels_of(c);
            let ns = meta["namespace"].as_str().filter(|_| kind.namespaced);
            let name = meta["name"].as_str().unwrap_or_default();
            if q.matches(ns, name, &labels) && !out.contains(c) {
                out.push(c.clone());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn kind(group: &str, kind: &str, namespaced: bool) -> Kind {
        Kind {
            group: group.into(),
            version: "v1".into(),
            kind: kind.into(),
            plural: format!("{}s", kind.to_lowercase()),
            namespaced,
        }
    }

    fn metadata() -> Metadata {
        Metadata {
            name: "p".into(),
            version: "1".into(),
            parent: kind("example.com", "Parent", true),
            children: vec![],
            related: vec![kind("", "ConfigMap", true), kind("", "Namespace", false)],
            settings_schema: None,
            finalizer: None,
        }
    }

    fn query(kind: &str, namespace: Option<&str>, selector: Selector) -> RelatedQuery {
        RelatedQuery {
            group: "".into(),
            kind: kind.into(),
            namespace: namespace.map(Into::into),
            selector,
        }
    }

    #[test]
    fn queries_read_declared_kinds_in_the_parents_namespace_only() {
        let m = metadata();
        let names = |n: &[&str]| Selector::Names(n.iter().map(|s| s.to_string()).collect());
        let ok = resolve(&m, Some("a"), &[query("ConfigMap", None, names(&["x"]))]).unwrap();
        assert_eq!(ok[0].namespace.as_deref(), Some("a"));
        let e = resolve(&m, Some("a"), &[query("ConfigMap", Some("b"), names(&["x"]))]).unwrap_err();
        assert!(e.contains("not the parent's namespace"), "{e}");
        let e = resolve(&m, Some("a"), &[query("Secret", None, names(&["x"]))]).unwrap_err();
        assert!(e.contains("not a declared related kind"), "{e}");
        let e = resolve(&m, None, &[query("ConfigMap", None, names(&["x"]))]).unwrap_err();
        assert!(e.contains("must name its namespace"), "{e}");
        let e = resolve(&m, Some("a"), &[query("ConfigMap", None, names(&["../x"]))]).unwrap_err();
        assert!(e.contains("ConfigMap"), "{e}");
        let cluster = resolve(&m, Some("a"), &[query("Namespace", Some("z"), names(&["a"]))]).unwrap();
        assert_eq!(
            cluster[0].namespace, None,
            "a cluster-scoped kind has no namespace"
        );
        let many = vec![query("ConfigMap", None, names(&["x"])); MAX_QUERIES + 1];
        assert!(resolve(&m, Some("a"), &many).unwrap_err().contains("at most"));
    }

    #[test]
    fn selection_is_by_kind_namespace_name_and_labels_each_object_once() {
        let m = metadata();
        let cm = |ns: &str, name: &str, app: &str| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"namespace": ns, "name": name, "labels": {"app": app}}})
        };
        let candidates = vec![
            cm("a", "x", "web"),
            cm("b", "x", "web"),
            cm("a", "y", "db"),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}}),
        ];
        let queries = [
            query(
                "ConfigMap",
                None,
                Selector::Names(vec!["x".into(), "missing".into()]),
            ),
            query("ConfigMap", None, Selector::Labels("app in (web,db)".into())),
            query("Namespace", None, Selector::Names(vec!["a".into()])),
        ];
        let resolved = resolve(&m, Some("a"), &queries).unwrap();
        let picked = select(&m, &resolved, &candidates);
        let names: Vec<_> = picked
            .iter()
            .map(|o| {
                format!(
                    "{}/{}",
                    o["kind"].as_str().unwrap(),
                    o["metadata"]["name"].as_str().unwrap()
                )
            })
            .collect();
        assert_eq!(names, ["ConfigMap/x", "ConfigMap/y", "Namespace/a"]);
    }
}
