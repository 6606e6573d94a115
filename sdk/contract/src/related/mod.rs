//! Related objects: what a plugin asks to read for one parent, checked against what it
//! declared, and which objects answer it. The host answers from its caches and the SDK's
//! fixtures from files, with the same rules.

use serde::{Deserialize, Serialize};

use crate::names::printable;
use crate::{Allowances, Kind, LabelSelector, Metadata};

mod shown;
pub use shown::shown;

/// Most queries one `related` answer may hold.
pub const MAX_QUERIES: usize = 32;
/// Most names all queries of one answer may list together.
pub const MAX_NAMES: usize = 256;
/// Most objects a request's `related` may hold. Names are capped by [`MAX_NAMES`], but a
/// label query selects what the cluster has, so the answer itself is bounded.
pub const MAX_RELATED: usize = 1024;
/// Most JSON text, in bytes, a request's `related` may hold: as much as a response.
pub const MAX_RELATED_BYTES: usize = 4 << 20;

/// The running size of an answer; refused past [`MAX_RELATED`] or [`MAX_RELATED_BYTES`],
/// the same offline and in the host.
#[derive(Debug, Default)]
pub struct Tally {
    objects: usize,
    bytes: usize,
}

impl Tally {
    /// Count one more selected object of `bytes` of JSON text.
    pub fn add(&mut self, bytes: usize) -> Result<(), String> {
        self.objects += 1;
        self.bytes = self.bytes.saturating_add(bytes);
        if self.objects > MAX_RELATED {
            return Err(format!(
                "related queries select more than {MAX_RELATED} objects; narrow the selector"
            ));
        }
        if self.bytes > MAX_RELATED_BYTES {
            return Err(format!(
                "related queries select more than {} MiB of objects; narrow the selector",
                MAX_RELATED_BYTES >> 20
            ));
        }
        Ok(())
    }
}

/// Which objects of one related kind a parent needs (`related-query` in the WIT).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RelatedQuery {
    /// API group of a declared related kind.
    pub group: String,
    /// Kind of a declared related kind.
    pub kind: String,
    /// Namespace to read from; `None` is the parent's, [`crate::ANY_NAMESPACE`] every
    /// namespace the parent may read.
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
    /// The namespace read, for namespaced kinds: [`crate::ANY_NAMESPACE`] when the
    /// operator grants every one and the query asked for every one.
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
        labels: &(impl crate::Labels + ?Sized),
    ) -> bool {
        (namespace == self.namespace.as_deref() || self.every_namespace())
            && self.names.as_ref().is_none_or(|n| n.iter().any(|n| n == name))
            && self.labels.as_ref().is_none_or(|s| s.matches(labels))
    }
}

impl Resolved {
    /// True when the query reads every namespace (the operator grants every one).
    pub fn every_namespace(&self) -> bool {
        self.namespace.as_deref() == Some(crate::ANY_NAMESPACE)
    }
}

/// The parent a plugin asks related objects for: its namespace (`None` for a
/// cluster-scoped parent) and name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parent<'a> {
    /// The namespace it lives in.
    pub namespace: Option<&'a str>,
    /// Its name.
    pub name: &'a str,
}

impl<'a> Parent<'a> {
    /// A parent read from a file, where the API server would have it (see
    /// [`crate::parent_namespace`]).
    pub fn of(metadata: &Metadata, parent: &'a serde_json::Value) -> Parent<'a> {
        let namespace = metadata.parent.namespaced.then(|| {
            parent["metadata"]["namespace"]
                .as_str()
                .filter(|ns| !ns.is_empty())
                .unwrap_or("default")
        });
        Parent {
            namespace,
            name: parent["metadata"]["name"].as_str().unwrap_or_default(),
        }
    }

    /// The namespace that is the parent's own: the one rule its children follow too
    /// ([`crate::home_namespace`]), so a Namespace parent reads the Namespace it names only
    /// with the operator's `allowOwnNamespace`, as it writes there only with it.
    fn own(&self, metadata: &Metadata, allow: &Allowances) -> Option<&'a str> {
        crate::home_namespace(metadata, self.namespace, self.name, allow)
    }
}

/// Check a plugin's queries for `parent`: each names a declared related kind, reads a
/// namespace the parent may read, has a selector that parses, and the answer is small.
///
/// A parent reads cluster-scoped kinds, and namespaced kinds in its own namespace (a
/// Namespace parent's own is the Namespace it names, with `allow.own_namespace`) and in
/// the namespaces the operator grants it (`allow.namespaces`: `allowNamespaces`, or the host's `--namespace`). The
/// grant only widens; nothing else is readable. A query that names no namespace reads
/// the parent's own; a cluster-scoped parent other than a Namespace has none, so its
/// queries must name one. A query for [`crate::ANY_NAMESPACE`] reads every namespace the
/// parent may read: all of them where the operator grants every one, else its own and
/// each one granted, a query apiece.
pub fn resolve(
    metadata: &Metadata,
    parent: Parent<'_>,
    queries: &[RelatedQuery],
    allow: &Allowances,
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
    let own = parent.own(metadata, allow);
    let mut out = Vec::new();
    for q in queries {
        let namespaced =
            (metadata.related.iter()).any(|k| k.group == q.group && k.kind == q.kind && k.namespaced);
        match q.namespace.as_deref() {
            Some(crate::ANY_NAMESPACE) if namespaced && !allow.namespace(crate::ANY_NAMESPACE) => {
                for ns in readable_namespaces(own, allow, q)? {
                    let each = RelatedQuery {
                        namespace: Some(ns),
                        ..q.clone()
                    };
                    out.push(one(metadata, own, &each, allow)?);
                }
            }
            _ => out.push(one(metadata, own, q, allow)?),
        }
    }
    Ok(out)
}

/// Each namespace a parent whose own is `own` may read, when the operator grants some
/// but not every one; none is the query's error.
fn readable_namespaces(
    own: Option<&str>,
    allow: &Allowances,
    q: &RelatedQuery,
) -> Result<Vec<String>, String> {
    let mut namespaces: Vec<String> = own.into_iter().map(str::to_string).collect();
    for ns in &allow.namespaces {
        if !namespaces.contains(ns) {
            namespaces.push(ns.clone());
        }
    }
    if namespaces.is_empty() {
        return Err(format!(
            "related query for {} in every namespace (\"*\"): a cluster-scoped parent reads none unless the operator grants them (allowNamespaces)",
            describe(&q.group, &q.kind)
        ));
    }
    Ok(namespaces)
}

fn one(
    metadata: &Metadata,
    own: Option<&str>,
    q: &RelatedQuery,
    allow: &Allowances,
) -> Result<Resolved, String> {
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
    let namespace = if declared.namespaced {
        Some(readable(declared, own, q.namespace.as_deref(), allow)?)
    } else {
        None
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

/// The namespace a query for namespaced `kind` reads, if the parent may read it.
fn readable(
    kind: &Kind,
    own: Option<&str>,
    asked: Option<&str>,
    allow: &Allowances,
) -> Result<String, String> {
    let Some(asked) = asked.or(own) else {
        return Err(format!(
            "related query for namespaced {} from a cluster-scoped parent must name its namespace",
            kind.kind
        ));
    };
    if asked == crate::ANY_NAMESPACE && allow.namespace(asked) {
        return Ok(asked.to_string());
    }
    crate::dns1123_label(asked).map_err(|e| format!("related query namespace {e}"))?;
    if Some(asked) == own || allow.namespace(asked) {
        return Ok(asked.to_string());
    }
    let own = own.map_or("a cluster-scoped parent has none".to_string(), |ns| {
        format!("{ns:?}")
    });
    Err(format!(
        "related query for {}: namespace {:?} is not the parent's namespace ({own}) nor one the operator lets it read (allowNamespaces or --namespace for capstan run, --allow-namespace for capstan test)",
        kind.kind,
        printable(asked)
    ))
}

fn describe(group: &str, kind: &str) -> String {
    if group.is_empty() {
        printable(kind)
    } else {
        format!("{}.{}", printable(kind), printable(group))
    }
}

/// The objects of `candidates` that answer `queries`, in query order, each once: what a
/// request's `related` holds, or why it would be too large ([`Tally`]). Candidates are
/// JSON objects with `apiVersion` and `kind`.
pub fn select(
    metadata: &Metadata,
    resolved: &[Resolved],
    candidates: &[serde_json::Value],
) -> Result<Vec<serde_json::Value>, String> {
    let mut out: Vec<serde_json::Value> = Vec::new();
    let mut tally = Tally::default();
    for q in resolved {
        let kind = &metadata.related[q.kind];
        for c in candidates.iter().filter(|c| kind.matches(c)) {
            let meta = &c["metadata"];
            let labels = crate::selector::labels_of(c);
            let ns = meta["namespace"].as_str().filter(|_| kind.namespaced);
            let name = meta["name"].as_str().unwrap_or_default();
            if q.matches(ns, name, &labels) && !out.contains(c) {
                tally.add(c.to_string().len())?;
                out.push(c.clone());
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
