use super::*;

#[test]
fn subset_ignores_server_defaults_but_not_changes() {
    let desired = json!({"spec": {"backoffLimit": 2, "template": {"spec": {"containers": [{"name": "a"}]}}}});
    let observed = json!({"spec": {"backoffLimit": 2, "completions": 1,
        "template": {"spec": {"containers": [{"name": "a", "imagePullPolicy": "IfNotPresent"}]}}}});
    assert!(is_subset(&desired, &observed));
    let changed = json!({"spec": {"backoffLimit": 3}});
    assert!(!is_subset(&changed, &observed));
    let extra_container =
        json!({"spec": {"template": {"spec": {"containers": [{"name": "a"}, {"name": "b"}]}}}});
    assert!(!is_subset(&extra_container, &observed));
}

fn child(object: Value) -> Child {
    Child {
        kind: crate::engine::Kind {
            group: String::new(),
            version: "v1".into(),
            kind: "ConfigMap".into(),
            plural: "configmaps".into(),
            namespaced: true,
        },
        namespace: Some("ns".into()),
        name: "c".into(),
        object,
    }
}

fn owned(object: Value) -> Value {
    let parent: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "Mirror",
        "metadata": {"name": "m", "namespace": "ns", "uid": "u1"},
    }))
    .unwrap();
    let ar = ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("example.com", "v1", "Mirror"),
        "mirrors",
    );
    let mut c = child(object);
    own(&mut c, &parent, &ar, "mirror");
    c.object
}

#[test]
fn an_apply_is_skipped_only_when_it_would_change_nothing() {
    let v1 = owned(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "c", "labels": {"canary": "true"}}, "data": {"a": "1", "b": "2"}}));
    // What the server holds after applying v1: v1 plus server-set fields.
    let mut observed = v1.clone();
    observed["metadata"]["uid"] = "x".into();
    observed["metadata"]["resourceVersion"] = "7".into();
    assert!(unchanged(&v1, &observed), "steady state writes nothing");

    // The plugin stops sending a data key and a label: every value it still sends is
    // observed, but the apply must run so the server drops the others.
    let v2 = owned(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "c"}, "data": {"a": "1"}}));
    let mut same_digest = v2.clone();
    same_digest["metadata"]["annotations"] = observed["metadata"]["annotations"].clone();
    assert!(
        is_subset(&same_digest, &observed),
        "a field-by-field check alone would skip it"
    );
    assert!(!unchanged(&v2, &observed));

    // Someone else changed a value the plugin sets.
    let mut drifted = observed.clone();
    drifted["data"]["a"] = "edited".into();
    assert!(!unchanged(&v1, &drifted));

    // A child from before digests (or one whose annotation was removed).
    let mut bare = observed.clone();
    bare["metadata"]["annotations"] = json!({});
    assert!(!unchanged(&v1, &bare));
}

#[test]
fn the_digest_depends_on_content_not_key_order() {
    let a: Value = serde_json::from_str(r#"{"x": 1, "y": {"b": 2, "a": 1}}"#).unwrap();
    let b: Value = serde_json::from_str(r#"{"y": {"a": 1, "b": 2}, "x": 1}"#).unwrap();
    assert_eq!(digest(&a), digest(&b));
    assert_ne!(digest(&a), digest(&json!({"x": 1})));
    assert_eq!(digest(&a).len(), 32);
}

#[test]
fn only_the_parent_and_plugin_that_made_a_child_control_it() {
    let object = |labels: Value, refs: Value| -> DynamicObject {
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "labels": labels, "ownerReferences": refs}}))
        .unwrap()
    };
    let ours = object(
        json!({"capstan.dev/plugin": "mirror"}),
        json!([{"apiVersion": "example.com/v1", "kind": "Mirror", "name": "m", "uid": "u1", "controller": true}]),
    );
    assert!(controlled_by(&ours, "u1", "mirror"));
    assert!(!controlled_by(&ours, "u2", "mirror"), "another parent's");
    assert!(
        !controlled_by(&ours, "u1", "other"),
        "another plugin's, on the same parent"
    );
    let users = object(json!({}), json!([]));
    assert!(!controlled_by(&users, "u1", "mirror"));
    assert_eq!(controller_of(&users), "no controller");
    assert_eq!(controller_of(&ours), "Mirror m (uid u1), plugin mirror");
}
