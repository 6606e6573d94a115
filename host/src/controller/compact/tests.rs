use super::*;

#[test]
fn an_unchanged_child_is_told_from_its_compact_form_as_from_its_tree() {
    use crate::apply::{APPLIED_ANNOTATION, unchanged};
    let desired = serde_json::json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "j", "namespace": "ns", "labels": {"app": "echo"},
            "annotations": {APPLIED_ANNOTATION: "d1"},
            "ownerReferences": [{"apiVersion": "example.com/v1", "kind": "Echo", "name": "e",
                "uid": "u", "controller": true, "blockOwnerDeletion": true}]},
        "spec": {"backoffLimit": 2, "template": {"spec": {"containers": [{"name": "echo", "image": "busybox"}]}}},
    });
    // As the server holds it: the same, plus what the server and others set.
    let mut observed = desired.clone();
    observed["metadata"]["uid"] = "x".into();
    observed["metadata"]["resourceVersion"] = "7".into();
    observed["metadata"]["labels"]["batch.kubernetes.io/job-name"] = "j".into();
    observed["spec"]["completions"] = 1.into();
    observed["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = "Always".into();
    observed["status"] = serde_json::json!({"active": 1});
    type Edit = fn(&mut serde_json::Value);
    let edits: [(&str, Edit); 6] = [
        ("as applied", |_| {}),
        ("a value edited", |o| o["spec"]["backoffLimit"] = 3.into()),
        ("a label edited", |o| {
            o["metadata"]["labels"]["app"] = "other".into()
        }),
        ("another digest", |o| {
            o["metadata"]["annotations"][APPLIED_ANNOTATION] = "d0".into()
        }),
        (
            "a container added",
            |o| {
                o["spec"]["template"]["spec"]["containers"] =
                    serde_json::json!([{"name": "echo", "image": "busybox"}, {"name": "x"}])
            },
        ),
        ("the owner changed", |o| {
            o["metadata"]["ownerReferences"][0]["uid"] = "v".into()
        }),
    ];
    for (what, edit) in edits {
        let mut o = observed.clone();
        edit(&mut o);
        let compact = Compact::of(serde_json::from_value(o.clone()).unwrap());
        let (tree, cached) = (unchanged(&desired, &o), unchanged(&desired, &compact));
        assert_eq!(tree, cached, "{what}");
        assert_eq!(tree, what == "as applied", "{what}");
    }
}

#[test]
fn the_object_comes_back_whole_without_managed_fields() {
    let object: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "j", "namespace": "ns", "uid": "u",
            "managedFields": [{"manager": "capstan/echo", "operation": "Apply"}],
        },
        "spec": {"template": {"spec": {"containers": [{"name": "c"}]}}},
        "status": {"active": 1},
    }))
    .expect("a Job");
    let compact = Compact::of(object.clone());
    let value = compact.value().expect("shown");
    assert_eq!(
        value,
        serde_json::to_value(compact.object().expect("whole")).expect("serializes")
    );
    assert_eq!(value["spec"], object.data["spec"]);
    assert_eq!(value["status"]["active"], 1);
    assert_eq!(value["kind"], "Job");
    assert_eq!(value["metadata"]["uid"], "u");
    assert!(value["metadata"].get("managedFields").is_none());
    let again: Compact = serde_json::from_value(value).expect("deserializes");
    assert_eq!(
        again.object().expect("whole").data,
        compact.object().expect("whole").data
    );
}

#[test]
fn labels_and_annotations_are_kept_once_compact_and_read_from_there() {
    let object: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {
            "name": "j", "namespace": "ns",
            "labels": {"capstan.dev/plugin": "echo", "app": "web"},
            "annotations": {"capstan.dev/applied": "d1"},
        },
    }))
    .expect("a Job");
    let compact = Compact::of(object.clone());
    assert!(compact.metadata.labels.is_none() && compact.metadata.annotations.is_none());
    assert!(crate::apply::made_by(&compact, "echo"));
    assert!(!crate::apply::made_by(&compact, "other"));
    assert_eq!(compact.labels().get("app"), Some("web"));
    assert_eq!(compact.object().expect("whole").metadata, object.metadata);
    let unlabelled = Compact::of(DynamicObject::new(
        "u",
        &ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
    ));
    assert_eq!(unlabelled.labels().get("app"), None);
    assert!(
        unlabelled.object().expect("whole").metadata.labels.is_none(),
        "no labels stays no labels"
    );
}

/// The text a plugin gets is what serializing the whole object gives, every metadata
/// field included, but `managedFields` (kept in the cache for a status manager).
#[test]
fn the_request_text_is_the_object_without_managed_fields() {
    let object: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "capstan.dev/v1alpha1",
        "kind": "Echo",
        "metadata": {
            "annotations": {"a": "\"quoted\" ü"},
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "deletionGracePeriodSeconds": 30,
            "deletionTimestamp": "2026-01-02T00:00:00Z",
            "finalizers": ["capstan.dev/echo"],
            "generateName": "e-",
            "generation": 3,
            "labels": {"l": "v"},
            "managedFields": [{
                "manager": "capstan/echo", "operation": "Apply", "subresource": "status",
                "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {}},
            }],
            "name": "e-1",
            "namespace": "ns",
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "uid": "u0"}],
            "resourceVersion": "7",
            "selfLink": "/x",
            "uid": "u1",
        },
        "spec": {"message": "hi", "list": [1, 2.5, null, {"k": true}]},
        "status": {"observedGeneration": 3},
    }))
    .expect("an Echo");
    let compact = Compact::of(object);
    assert!(
        compact.metadata.managed_fields.is_some(),
        "the status manager is kept"
    );
    let mut whole = serde_json::to_value(compact.object().expect("whole")).expect("serializes");
    whole["metadata"]
        .as_object_mut()
        .expect("metadata")
        .remove("managedFields");
    assert_eq!(compact.json().expect("shown").value(), whole);
    assert_eq!(compact.json().expect("shown").text().find("managedFields"), None);

    let bare = Compact::of(DynamicObject {
        types: None,
        metadata: ObjectMeta {
            name: Some("n".into()),
            ..ObjectMeta::default()
        },
        data: serde_json::json!({}),
    });
    assert_eq!(bare.json().expect("shown").text(), r#"{"metadata":{"name":"n"}}"#);
}

#[test]
fn text_that_no_longer_parses_fails_instead_of_showing_less() {
    // Not reachable by construction today (the text is what serde wrote); if it ever were,
    // `{}` or a parent without its spec would read to a plugin as "no children" and prune.
    let mut compact = Compact::of(DynamicObject {
        types: None,
        metadata: ObjectMeta {
            name: Some("n".into()),
            ..ObjectMeta::default()
        },
        data: serde_json::json!({"spec": {"message": "hi"}}),
    });
    compact.rest = Arc::from(r#"{"spec": {"message": "#);
    assert!(compact.json().is_err(), "the request's text");
    assert!(compact.object().is_err(), "the parent's object");
    assert!(compact.value().is_err(), "the tree");
}

/// A reference made from a type resolved apart (another plugin's, a related watch's)
/// finds what a store keyed with another copy holds, and one of another kind does not.
#[test]
fn references_of_one_type_are_equal_shared_or_not() {
    use kube::api::GroupVersionKind;
    use kube::runtime::reflector::{ObjectRef, store::Writer};
    let echo = || {
        Type::from(ApiResource::from_gvk(&GroupVersionKind::gvk(
            "capstan.dev",
            "v1alpha1",
            "Echo",
        )))
    };
    let (one, other) = (echo(), echo());
    assert!(!Arc::ptr_eq(&one.0, &other.0));
    assert_eq!(one, other);
    let job = Type::from(ApiResource::from_gvk(&GroupVersionKind::gvk(
        "batch", "v1", "Job",
    )));
    assert_ne!(one, job);

    let mut writer = Writer::new(one.clone());
    let object = DynamicObject::new("e", &one).within("ns");
    writer.apply_watcher_event(&Event::Apply(Compact::of(object)));
    let store = writer.as_reader();
    assert!(store.get(&ObjectRef::new_with("e", other).within("ns")).is_some());
    assert!(store.get(&ObjectRef::new_with("e", job).within("ns")).is_none());
}
