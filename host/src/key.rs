//! The one key of an object of a known kind: its namespace (none when cluster-scoped) and
//! name. The work queue, backoff, event and write budgets and every log line use it,
//! shown as `namespace/name` or `name`.

use std::fmt;

/// Namespace and name of an object whose kind is known from context.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    /// `None` for a cluster-scoped object.
    pub namespace: Option<String>,
    /// The object's name.
    pub name: String,
}

impl ObjectKey {
    /// The key of `name` in `namespace`.
    pub fn new(namespace: Option<&str>, name: &str) -> Self {
        ObjectKey {
            namespace: namespace.map(str::to_string),
            name: name.to_string(),
        }
    }

    /// The key of a typed or dynamic object.
    pub fn of(object: &impl kube::Resource) -> Self {
        let meta = object.meta();
        ObjectKey {
            namespace: meta.namespace.clone(),
            name: meta.name.clone().unwrap_or_default(),
        }
    }

    /// The key of an object as JSON text, if it has a name: read without a tree of the
    /// whole object.
    pub fn from_text(object: &str) -> Option<Self> {
        let (namespace, name) = capstan_engine::names_in(object)?;
        Some(ObjectKey { namespace, name })
    }
}

/// `namespace/name` or `name`, as [`ObjectKey`] shows it.
impl From<&str> for ObjectKey {
    fn from(text: &str) -> Self {
        match text.split_once('/') {
            Some((ns, name)) => ObjectKey::new(Some(ns), name),
            None => ObjectKey::new(None, text),
        }
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{ns}/{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown_as_namespace_slash_name_or_name() {
        assert_eq!(ObjectKey::new(Some("ns"), "a").to_string(), "ns/a");
        assert_eq!(ObjectKey::new(None, "a").to_string(), "a");
        let json = r#"{"kind": "Echo", "metadata": {"namespace": "ns", "name": "a"}, "spec": {"x": [1]}}"#;
        assert_eq!(ObjectKey::from_text(json), Some(ObjectKey::new(Some("ns"), "a")));
        let cluster = r#"{"metadata": {"name": "a\"b", "namespace": null}}"#;
        assert_eq!(ObjectKey::from_text(cluster), Some(ObjectKey::new(None, "a\"b")));
        assert_eq!(ObjectKey::from_text(r#"{"metadata": {}}"#), None);
        assert_eq!(ObjectKey::from_text("[]"), None);
        assert_eq!(ObjectKey::from("ns/a"), ObjectKey::new(Some("ns"), "a"));
        assert_eq!(ObjectKey::from("a"), ObjectKey::new(None, "a"));
    }
}
