use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use super::*;

fn kind(group: &str, kind: &str, plural: &str) -> KindRef {
    KindRef {
        group: group.into(),
        version: "v1".into(),
        kind: kind.into(),
        plural: plural.into(),
        namespaced: true,
    }
}

/// A hook answering `answer`, and the requests it was called with.
fn recorder(answer: Value) -> (Hook, Arc<Mutex<Vec<Value>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let hook: Hook = Box::new(move |request| {
        log.lock().unwrap().push(request);
        Ok(answer.clone())
    });
    (hook, seen)
}

fn controller(shape: Shape, sync: Hook, finalize: Option<Hook>) -> Controller {
    let metadata = Metadata::new("c", "0.1.0")
        .child_kind(kind("", "ConfigMap", "configmaps"))
        .related_kind(kind("", "Secret", "secrets"));
    Controller {
        controller: json!({"metadata": {"name": "c"}}),
        metadata,
        parent: kind("example.com", "Thing", "things"),
        shape,
        sync,
        finalize,
        customize: None,
        version: Version::V2,
        status_schema: None,
    }
}

fn config_map(name: &str) -> Box<serde_json::value::RawValue> {
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "ns"}});
    serde_json::value::to_raw_value(&cm).unwrap()
}

fn thing(labels: Value, annotations: Value) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Thing",
        "metadata": {"name": "t", "namespace": "ns", "generation": 3, "labels": labels, "annotations": annotations}})
}

#[test]
fn a_composite_is_called_as_metacontroller_calls_it_and_its_answer_applied() {
    let answer = json!({
        "children": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "child"}}],
        "status": {"ready": true},
        "resyncAfterSeconds": 1.5,
    });
    let (sync, seen) = recorder(answer);
    let c = controller(Shape::Composite, sync, None);
    let ctx = Context::new(vec![config_map("old")], false);
    let r = c.reconcile(thing(Value::Null, Value::Null), &ctx).unwrap();
    let request = &seen.lock().unwrap()[0];
    assert_eq!(
        request["children"]["ConfigMap.v1"]["ns/old"]["metadata"]["name"],
        "old"
    );
    assert_eq!(request["related"], json!({"Secret.v1": {}}));
    assert_eq!(request["finalizing"], false);
    assert_eq!(request["parent"]["metadata"]["name"], "t");
    let children = r.children_json().unwrap();
    assert_eq!(
        children[0]["metadata"]["namespace"], "ns",
        "placed in the parent's namespace"
    );
    assert_eq!(r.status, Some(json!({"ready": true, "observedGeneration": 3})));
    assert_eq!(r.requeue_after, Some(std::time::Duration::from_millis(1500)));
    assert!(!r.finalized && r.parent.is_empty());
}

#[test]
fn a_decorator_finalizes_a_target_it_no_longer_selects_and_sets_its_labels() {
    let answer = json!({
        "attachments": [],
        "labels": {"added": "x", "gone": null},
        "annotations": {"note": "hi"},
        "status": {"seen": true},
        "finalized": true,
    });
    let (sync, synced) = recorder(answer.clone());
    let (finalize, finalized) = recorder(answer);
    let shape = Shape::Decorator {
        labels: json!({"matchLabels": {"team": "a"}}),
        annotations: json!({"matchExpressions": [{"key": "watch", "operator": "Exists"}]}),
    };
    let c = controller(shape, sync, Some(finalize));
    let ctx = Context::new(vec![], false);
    let picked = c
        .reconcile(thing(json!({"team": "a"}), json!({"watch": ""})), &ctx)
        .unwrap();
    assert_eq!(synced.lock().unwrap().len(), 1);
    assert!(synced.lock().unwrap()[0].get("object").is_some());
    assert!(!picked.finalized, "finalized counts only when finalizing");
    assert_eq!(
        picked.status,
        Some(json!({"seen": true})),
        "the target keeps its observedGeneration"
    );
    assert_eq!(picked.parent.labels["added"].as_deref(), Some("x"));
    assert_eq!(picked.parent.labels["gone"], None);
    assert_eq!(picked.parent.annotations["note"].as_deref(), Some("hi"));

    let dropped = c
        .reconcile(thing(json!({"team": "b"}), json!({"watch": ""})), &ctx)
        .unwrap();
    assert_eq!(finalized.lock().unwrap()[0]["finalizing"], true);
    assert!(dropped.finalized);
    assert_eq!(synced.lock().unwrap().len(), 1, "sync is not called for it");

    let (sync, _) = recorder(json!({}));
    let shape = Shape::Decorator {
        labels: json!({"matchLabels": {"team": "a"}}),
        annotations: Value::Null,
    };
    let without_finalize = controller(shape, sync, None);
    let let_go = without_finalize
        .reconcile(thing(Value::Null, Value::Null), &ctx)
        .unwrap();
    assert!(let_go.finalized && let_go.children.is_empty());
}

#[test]
fn customize_rules_become_queries_of_declared_kinds() {
    let (sync, _) = recorder(json!({}));
    let mut c = controller(Shape::Composite, sync, None);
    let rules = json!({"relatedResources": [
        {"apiVersion": "v1", "resource": "secrets", "labelSelector": {"matchLabels": {"app": "web"}}},
        {"apiVersion": "v1", "resource": "secrets", "names": ["a"], "namespace": "other"},
    ]});
    c.customize = Some(recorder(rules).0);
    let queries = c.related(&thing(Value::Null, Value::Null)).unwrap();
    assert_eq!(queries[0].kind, "Secret");
    assert_eq!(
        queries[0].selector,
        capstan_contract::Selector::Labels("app=web".into())
    );
    assert_eq!(queries[0].namespace.as_deref(), Some("*"), "v2: every namespace");
    assert_eq!(
        queries[1].selector,
        capstan_contract::Selector::Names(vec!["a".into()])
    );
    assert_eq!(queries[1].namespace.as_deref(), Some("other"));
    c.version = Version::V1;
    assert_eq!(
        c.related(&thing(Value::Null, Value::Null)).unwrap()[0].namespace,
        None
    );

    let undeclared = json!({"relatedResources": [{"apiVersion": "v1", "resource": "pods"}]});
    c.customize = Some(recorder(undeclared).0);
    let e = c.related(&thing(Value::Null, Value::Null)).unwrap_err();
    assert!(
        e.message().contains("pods (v1) is not declared related"),
        "{}",
        e.message()
    );
}

#[test]
fn a_status_is_pruned_to_the_parents_schema() {
    let (sync, _) = recorder(json!({"status": {"count": 1, "extra": true}}));
    let mut c = controller(Shape::Composite, sync, None);
    c.status_schema = Some(json!({"type": "object", "properties": {"count": {}, "observedGeneration": {}}}));
    let r = c
        .reconcile(thing(Value::Null, Value::Null), &Context::new(vec![], false))
        .unwrap();
    assert_eq!(r.status, Some(json!({"count": 1, "observedGeneration": 3})));
}
