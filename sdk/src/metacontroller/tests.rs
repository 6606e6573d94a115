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

/// A v2 controller of cluster-scoped Regions whose customize answers one rule for Secrets
/// with `rule`'s fields, declaring `related` kinds.
fn by_namespaces(rule: Value, related: &[(&str, &str, &str, bool)]) -> (Controller, Arc<Mutex<Vec<Value>>>) {
    let (sync, seen) = recorder(json!({}));
    let mut c = controller(Shape::Composite, sync, None);
    let mut metadata = Metadata::new("c", "0.1.0");
    for (group, k, plural, namespaced) in related {
        metadata = metadata.related_kind(KindRef {
            namespaced: *namespaced,
            ..kind(group, k, plural)
        });
    }
    c.metadata = metadata;
    let mut rules = json!({"apiVersion": "v1", "resource": "secrets"});
    rules
        .as_object_mut()
        .unwrap()
        .extend(rule.as_object().unwrap().clone());
    c.customize = Some(recorder(json!({"relatedResources": [rules]})).0);
    (c, seen)
}

const SECRETS_AND_NAMESPACES: &[(&str, &str, &str, bool)] = &[
    ("", "Secret", "secrets", true),
    ("", "Namespace", "namespaces", false),
];

fn region() -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Region", "metadata": {"name": "eu"}})
}

fn raw(v: &Value) -> Box<serde_json::value::RawValue> {
    serde_json::value::to_raw_value(v).unwrap()
}

#[test]
fn a_namespace_selector_reads_the_namespaces_it_picks_and_its_kind_in_every_namespace() {
    let rule = json!({"namespaceSelector": {"matchLabels": {"team": "red"}}, "labelSelector": {"matchLabels": {"app": "web"}}});
    let (c, seen) = by_namespaces(rule, SECRETS_AND_NAMESPACES);
    let queries = c.related(&region()).unwrap();
    let shape: Vec<_> = (queries.iter())
        .map(|q| (q.kind.as_str(), q.selector.clone(), q.namespace.as_deref()))
        .collect();
    use capstan_contract::Selector::Labels;
    assert_eq!(
        shape,
        [
            ("Namespace", Labels("team=red".into()), None),
            ("Secret", Labels("app=web".into()), Some("*")),
        ]
    );
    // The host answers both; the hook sees the rule's objects in a picked namespace
    // alone, and no Namespace, which no rule asked for.
    let namespace = |name: &str, team: &str| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": {"team": team}}});
    let secret = |name: &str, ns: &str| json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": ns, "labels": {"app": "web"}}});
    let (inside, outside) = (secret("in", "red"), secret("out", "blue"));
    let related = [
        namespace("red", "red"),
        namespace("blue", "blue"),
        inside.clone(),
        outside,
    ];
    let ctx = Context::new(Vec::new(), false).with_related(related.iter().map(raw).collect());
    c.reconcile(region(), &ctx).unwrap();
    let request = &seen.lock().unwrap()[0];
    assert_eq!(
        request["related"],
        json!({"Secret.v1": {"red/in": inside}, "Namespace.v1": {}})
    );
}

#[test]
fn a_namespace_selector_is_refused_where_metacontroller_refuses_it() {
    let refused = |c: Controller, parent: Value, words: &str| {
        let e = c.related(&parent).unwrap_err();
        assert!(e.message().contains(words), "{}", e.message());
    };
    let selector = |extra: Value| {
        let mut rule = json!({"namespaceSelector": {}});
        rule.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        rule
    };
    let (c, _) = by_namespaces(selector(json!({"names": ["tls"]})), SECRETS_AND_NAMESPACES);
    refused(c, region(), "both names and a namespaceSelector");
    let (c, _) = by_namespaces(selector(json!({"namespace": "red"})), SECRETS_AND_NAMESPACES);
    refused(c, region(), "both a namespace and a namespaceSelector");
    let (mut c, _) = by_namespaces(selector(json!({})), SECRETS_AND_NAMESPACES);
    c.version = Version::V1;
    refused(
        c,
        thing(Value::Null, Value::Null),
        "namespaced parent in a v1 hook",
    );
    let (c, _) = by_namespaces(selector(json!({})), &SECRETS_AND_NAMESPACES[..1]);
    refused(c, region(), "declare v1 namespaces related");
    let roles = &[
        ("", "Secret", "secrets", false),
        ("", "Namespace", "namespaces", false),
    ];
    let (c, _) = by_namespaces(selector(json!({})), roles);
    refused(c, region(), "only for namespaced resources");
}
