//! Which finalizers on a parent are a plugin's. The running version declares one; an
//! earlier version may have declared another, and the parents it marked still carry that
//! one. So when the host puts a plugin's finalizer on a parent it also records, in
//! [`RECORD_ANNOTATION`], which name it put there for that plugin: a later version (or a
//! restarted host) reads it back and knows the parent is the plugin's to finalize.

use kube::ResourceExt;
use kube::api::DynamicObject;

use crate::engine::Metadata;

/// Where the host records, per plugin, the finalizer it put on the parent:
/// `plugin=finalizer` pairs, comma-separated (neither a plugin's name nor a finalizer
/// may hold `,` or `=`).
pub const RECORD_ANNOTATION: &str = "capstan.dev/finalizers";

/// The plugin's finalizers the parent carries: the declared one and the recorded one.
pub(super) fn on(parent: &DynamicObject, metadata: &Metadata) -> Vec<String> {
    let recorded = recorded(parent, &metadata.name);
    let ours = [metadata.finalizer.as_deref(), recorded.as_deref()];
    let mut on: Vec<String> = parent
        .finalizers()
        .iter()
        .filter(|f| ours.contains(&Some(f.as_str())))
        .cloned()
        .collect();
    on.dedup();
    on
}

/// The finalizers, and the record, a live parent is to be written with.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Change {
    pub finalizers: Vec<String>,
    pub record: Option<String>,
}

/// What a live parent should carry of the plugin's finalizers, if that is not what it
/// carries: the declared one (in place of an earlier version's), recorded; or, when the
/// running version declares none, not the earlier one either. A parent that carries the
/// declared finalizer already is left as it is, recorded or not, so a host upgrade or a
/// restart writes nothing.
pub(super) fn wanted(parent: &DynamicObject, metadata: &Metadata) -> Option<Change> {
    let list = parent.finalizers();
    let record = parent.annotations().get(RECORD_ANNOTATION).map(String::as_str);
    let declared = metadata.finalizer.as_deref();
    let stale = recorded(parent, &metadata.name).filter(|r| Some(r.as_str()) != declared && list.contains(r));
    let missing = declared.filter(|d| !list.iter().any(|f| f == d));
    if stale.is_none() && missing.is_none() {
        return None;
    }
    let mut finalizers: Vec<String> = list
        .iter()
        .filter(|f| Some(*f) != stale.as_ref())
        .cloned()
        .collect();
    finalizers.extend(missing.map(String::from));
    Some(Change {
        finalizers,
        record: Some(with(record.unwrap_or_default(), &metadata.name, declared)),
    })
}

/// The finalizer recorded for `plugin` on the parent.
fn recorded(parent: &DynamicObject, plugin: &str) -> Option<String> {
    pairs(parent.annotations().get(RECORD_ANNOTATION)?)
        .find(|(p, _)| *p == plugin)
        .map(|(_, f)| f.to_string())
}

fn pairs(record: &str) -> impl Iterator<Item = (&str, &str)> {
    record.split(',').filter_map(|pair| pair.split_once('='))
}

/// `record` with `plugin`'s entry set to `finalizer` (or removed, for none).
fn with(record: &str, plugin: &str, finalizer: Option<&str>) -> String {
    pairs(record)
        .filter(|(p, _)| *p != plugin)
        .map(|(p, f)| format!("{p}={f}"))
        .chain(finalizer.map(|f| format!("{plugin}={f}")))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectMeta;

    fn metadata(finalizer: Option<&str>) -> Metadata {
        let parent = crate::engine::Kind {
            group: "capstan.dev".into(),
            version: "v1alpha1".into(),
            kind: "Echo".into(),
            plural: "echoes".into(),
            namespaced: true,
        };
        Metadata {
            name: "echo".into(),
            version: "1".into(),
            parent,
            children: vec![],
            related: vec![],
            settings_schema: None,
            finalizer: finalizer.map(String::from),
        }
    }

    fn parent(finalizers: &[&str], record: Option<&str>) -> DynamicObject {
        DynamicObject {
            types: None,
            metadata: ObjectMeta {
                name: Some("p".into()),
                finalizers: Some(finalizers.iter().map(|f| f.to_string()).collect()),
                annotations: record.map(|r| [(RECORD_ANNOTATION.to_string(), r.to_string())].into()),
                ..ObjectMeta::default()
            },
            data: serde_json::Value::Null,
        }
    }

    #[test]
    fn a_renamed_finalizer_is_still_the_plugins_and_is_replaced_on_live_parents() {
        // v1 put `a/cleanup` on the parent and recorded it; v2 declares `b/cleanup`.
        let v2 = metadata(Some("b/cleanup"));
        let marked = parent(&["other/x", "a/cleanup"], Some("tenant=t/x,echo=a/cleanup"));
        assert_eq!(on(&marked, &v2), ["a/cleanup"], "held: its deletion waits for v2");
        assert_eq!(
            wanted(&marked, &v2),
            Some(Change {
                finalizers: vec!["other/x".into(), "b/cleanup".into()],
                record: Some("tenant=t/x,echo=b/cleanup".into()),
            })
        );
        // Once replaced, nothing more to write.
        let replaced = parent(&["other/x", "b/cleanup"], Some("tenant=t/x,echo=b/cleanup"));
        assert_eq!(wanted(&replaced, &v2), None);
        assert_eq!(on(&replaced, &v2), ["b/cleanup"]);
    }

    #[test]
    fn a_dropped_finalizer_is_taken_off_and_a_parent_without_one_gets_it_recorded() {
        let v3 = metadata(None);
        let marked = parent(&["a/cleanup"], Some("echo=a/cleanup"));
        assert_eq!(on(&marked, &v3), ["a/cleanup"]);
        assert_eq!(
            wanted(&marked, &v3),
            Some(Change {
                finalizers: Vec::new(),
                record: Some(String::new()),
            })
        );
        let v1 = metadata(Some("a/cleanup"));
        assert_eq!(
            wanted(&parent(&[], None), &v1),
            Some(Change {
                finalizers: vec!["a/cleanup".into()],
                record: Some("echo=a/cleanup".into()),
            })
        );
    }

    #[test]
    fn a_parent_that_carries_the_declared_finalizer_is_not_written_recorded_or_not() {
        // A host upgrade over parents marked before records existed writes nothing.
        let v1 = metadata(Some("a/cleanup"));
        assert_eq!(wanted(&parent(&["a/cleanup"], None), &v1), None);
        assert_eq!(wanted(&parent(&[], None), &metadata(None)), None);
        // Another plugin's record, and a finalizer nobody recorded, are not ours.
        let theirs = parent(&["t/x", "z/y"], Some("tenant=t/x"));
        assert!(on(&theirs, &v1).is_empty());
    }
}
