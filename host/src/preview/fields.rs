//! A field-level difference of two objects: each leaf that would be set, changed or
//! removed, by its path (`spec.template.spec.containers[0].image`). What the API server
//! keeps for itself (resourceVersion, managedFields, timestamps, the host's digest) is
//! not a change anyone asked for and is left out.

use serde_json::Value;

use crate::apply::APPLIED_ANNOTATION;

/// One field that differs.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct FieldChange {
    /// Where, as `a.b[0].c`.
    pub path: String,
    /// The value now; `None` when the field would be added.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before: Option<Value>,
    /// The value it would have; `None` when the field would be removed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<Value>,
}

impl std::fmt::Display for FieldChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.before, &self.after) {
            (None, Some(a)) => write!(f, "+ {}: {a}", self.path),
            (Some(b), None) => write!(f, "- {}: {b}", self.path),
            (Some(b), Some(a)) => write!(f, "~ {}: {b} → {a}", self.path),
            (None, None) => write!(f, "  {}", self.path),
        }
    }
}

/// The fields that differ between `before` and `after`, bookkeeping left out.
pub fn changes(before: &Value, after: &Value) -> Vec<FieldChange> {
    let mut out = Vec::new();
    walk(String::new(), Some(before), Some(after), &mut out);
    out.retain(|c| !bookkeeping(&c.path));
    out
}

/// Fields the server or the host keep, which no plugin version changes on purpose.
fn bookkeeping(path: &str) -> bool {
    const SERVER: [&str; 7] = [
        "metadata.resourceVersion",
        "metadata.managedFields",
        "metadata.generation",
        "metadata.uid",
        "metadata.creationTimestamp",
        "metadata.selfLink",
        "status",
    ];
    let within = |prefix: &str| {
        path.strip_prefix(prefix)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
    };
    path.strip_prefix("metadata.annotations.") == Some(APPLIED_ANNOTATION) || SERVER.iter().any(|p| within(p))
}

/// Leaves are compared; a map or list on one side only is walked too, so an added or
/// removed object shows as its leaves (and its bookkeeping can be left out).
fn walk(path: String, before: Option<&Value>, after: Option<&Value>, out: &mut Vec<FieldChange>) {
    static EMPTY: std::sync::LazyLock<serde_json::Map<String, Value>> =
        std::sync::LazyLock::new(serde_json::Map::new);
    fn map(v: Option<&Value>) -> Option<&serde_json::Map<String, Value>> {
        match v {
            Some(Value::Object(m)) => Some(m),
            None => Some(&EMPTY),
            _ => None,
        }
    }
    fn list(v: Option<&Value>) -> Option<&[Value]> {
        match v {
            Some(Value::Array(l)) => Some(l.as_slice()),
            None => Some(&[]),
            _ => None,
        }
    }
    let containers = before.is_some_and(|b| b.is_object() || b.is_array())
        || after.is_some_and(|a| a.is_object() || a.is_array());
    if let (Some(b), Some(a), true) = (map(before), map(after), containers) {
        let mut keys: Vec<&String> = b.keys().chain(a.keys()).collect();
        keys.sort();
        keys.dedup();
        for k in keys {
            walk(join(&path, k), b.get(k), a.get(k), out);
        }
        return;
    }
    if let (Some(b), Some(a), true) = (list(before), list(after), containers) {
        for i in 0..b.len().max(a.len()) {
            walk(format!("{path}[{i}]"), b.get(i), a.get(i), out);
        }
        return;
    }
    match (before, after) {
        (Some(b), Some(a)) if b == a => {}
        (b, a) => out.push(FieldChange {
            path,
            before: b.cloned(),
            after: a.cloned(),
        }),
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// `live` with `desired` laid over it, as an apply by the same owner would leave it when
/// the server cannot be asked (no permission to dry-run): maps merge, anything else is
/// replaced. Server defaults of new fields are not known this way.
pub fn overlay(live: &Value, desired: &Value) -> Value {
    match (live, desired) {
        (Value::Object(l), Value::Object(d)) => {
            let mut merged = l.clone();
            for (k, v) in d {
                let next = l.get(k).map_or_else(|| v.clone(), |old| overlay(old, v));
                merged.insert(k.clone(), next);
            }
            Value::Object(merged)
        }
        (_, d) => d.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn changed_added_and_removed_leaves_are_named_by_path() {
        let before = json!({"metadata": {"name": "a", "resourceVersion": "1", "labels": {"x": "1"}},
            "spec": {"template": {"spec": {"containers": [{"image": "busybox", "args": ["a"]}]}}}});
        let after = json!({"metadata": {"name": "a", "resourceVersion": "9", "labels": {"y": "2"}},
            "spec": {"template": {"spec": {"containers": [{"image": "alpine", "args": ["a", "b"]}]}}}});
        let shown: Vec<String> = changes(&before, &after).iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "- metadata.labels.x: \"1\"",
                "+ metadata.labels.y: \"2\"",
                "+ spec.template.spec.containers[0].args[1]: \"b\"",
                "~ spec.template.spec.containers[0].image: \"busybox\" → \"alpine\"",
            ]
        );
    }

    #[test]
    fn a_new_object_shows_as_its_leaves_without_bookkeeping() {
        let after =
            json!({"metadata": {"name": "a", "uid": "u", "labels": {"x": "1"}}, "spec": {"args": ["a"]}});
        let shown: Vec<String> = changes(&json!({}), &after)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            shown,
            [
                "+ metadata.labels.x: \"1\"",
                "+ metadata.name: \"a\"",
                "+ spec.args[0]: \"a\"",
            ]
        );
    }

    #[test]
    fn bookkeeping_alone_is_no_change() {
        let digest = APPLIED_ANNOTATION.to_string();
        let before = json!({"metadata": {"annotations": {digest.clone(): "a"}, "managedFields": [{"manager": "x"}]},
            "status": {"active": 1}});
        let after = json!({"metadata": {"annotations": {digest: "b"}, "managedFields": []}, "status": {}});
        assert_eq!(changes(&before, &after), []);
    }

    #[test]
    fn an_overlay_keeps_what_the_desired_object_does_not_name() {
        let live = json!({"spec": {"a": 1, "b": {"c": 2}}, "status": {"x": 1}});
        let desired = json!({"spec": {"b": {"c": 3}}});
        assert_eq!(
            overlay(&live, &desired),
            json!({"spec": {"a": 1, "b": {"c": 3}}, "status": {"x": 1}})
        );
    }
}
