use super::*;
use crate::controller::per_object::PerObject;
use capstan_contract::{Allowances, Metadata, RelatedQuery, Selector};
use kube::api::{ApiResource, DynamicObject};

fn kind(kind: &str, namespaced: bool) -> Kind {
    Kind {
        group: String::new(),
        version: "v1".into(),
        kind: kind.into(),
        plural: format!("{}s", kind.to_lowercase()),
        namespaced,
    }
}

fn remember(index: &PerObject, parent: &str, queries: &[RelatedQuery], answer: &[DynamicObject]) {
    let metadata = Metadata {
        name: "p".into(),
        version: "1".into(),
        parent: kind("Parent", true),
        children: vec![],
        related: vec![kind("ConfigMap", true), kind("Namespace", false)],
        settings_schema: None,
        finalizer: None,
    };
    let in_a = Parent {
        namespace: Some("a"),
        name: parent,
    };
    let entry = Entry {
        plugin: 1,
        resource_version: "1".into(),
        shown: 0,
        queries: Arc::new(resolve(&metadata, in_a, queries, &Default::default()).unwrap()),
        answer: Arc::new(answer.iter().map(|o| Arc::new(Compact::of(o.clone()))).collect()),
        changes: vec![],
    };
    index.with(&ObjectKey::new(Some("a"), parent), |p| p.related = Some(entry));
}

fn object(namespace: Option<&str>, name: &str, labels: &[(&str, &str)]) -> DynamicObject {
    let mut o = DynamicObject::new(
        name,
        &ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
    );
    o.metadata.namespace = namespace.map(Into::into);
    o.metadata.labels = Some(
        labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    o
}

#[test]
fn a_changed_object_wakes_exactly_the_parents_whose_queries_select_it() {
    let index = PerObject::default();
    let query = |kind: &str, selector: Selector| RelatedQuery {
        group: String::new(),
        kind: kind.into(),
        namespace: None,
        selector,
    };
    remember(
        &index,
        "by-name",
        &[query("ConfigMap", Selector::Names(vec!["cfg".into()]))],
        &[],
    );
    remember(
        &index,
        "by-label",
        &[query("ConfigMap", Selector::Labels("app=web".into()))],
        &[object(Some("a"), "web", &[("app", "web")])],
    );
    remember(
        &index,
        "its-namespace",
        &[query("Namespace", Selector::Names(vec!["a".into()]))],
        &[],
    );
    let woken = |kind, o: &DynamicObject| {
        let compact = Compact::of(o.clone());
        let mut names: Vec<String> = index
            .reading(kind, &compact)
            .into_iter()
            .map(|k| k.name)
            .collect();
        names.sort();
        names
    };
    assert_eq!(
        woken(0, &object(Some("a"), "cfg", &[("app", "web")])),
        ["by-label", "by-name"]
    );
    assert_eq!(woken(0, &object(Some("a"), "cfg", &[])), ["by-name"]);
    assert!(
        woken(0, &object(Some("b"), "cfg", &[("app", "web")])).is_empty(),
        "another namespace"
    );
    assert_eq!(woken(1, &object(None, "a", &[])), ["its-namespace"]);
    assert_eq!(
        woken(0, &object(Some("a"), "web", &[("app", "db")])),
        ["by-label"],
        "relabelled out of the selection it was read through"
    );
    index.forget(&ObjectKey::new(Some("a"), "by-name"));
    assert!(
        woken(0, &object(Some("a"), "cfg", &[])).is_empty(),
        "forgotten with its parent"
    );
}

/// A query for every namespace (the operator grants every one) reads the objects of every
/// namespace the cache holds: by name in each, by label all of them.
#[test]
fn a_query_for_every_namespace_reads_each_namespace_the_cache_holds() {
    let namespaces = Namespaces::default();
    for (ns, name) in [("a", "x"), ("b", "x"), ("b", "y")] {
        namespaces.take(&kube::runtime::watcher::Event::Apply(Compact::of(object(
            Some(ns),
            name,
            &[],
        ))));
    }
    let every = Allowances {
        namespaces: vec![capstan_contract::ANY_NAMESPACE.into()],
        ..Default::default()
    };
    let resolved = |selector| {
        let metadata = Metadata {
            name: "p".into(),
            version: "1".into(),
            parent: kind("Parent", true),
            children: vec![],
            related: vec![kind("ConfigMap", true)],
            settings_schema: None,
            finalizer: None,
        };
        let q = RelatedQuery {
            group: String::new(),
            kind: "ConfigMap".into(),
            namespace: Some(capstan_contract::ANY_NAMESPACE.into()),
            selector,
        };
        let parent = Parent {
            namespace: Some("a"),
            name: "p",
        };
        resolve(&metadata, parent, &[q], &every).unwrap().remove(0)
    };
    let sorted = |mut v: Vec<(Option<String>, String)>| {
        v.sort();
        v
    };
    let at = |ns: &str, name: &str| (Some(ns.to_string()), name.to_string());
    let by_name = resolved(Selector::Names(vec!["x".into()]));
    assert_eq!(
        sorted(candidates(&by_name, &namespaces)),
        [at("a", "x"), at("b", "x")]
    );
    let by_label = resolved(Selector::Labels(String::new()));
    assert_eq!(
        sorted(candidates(&by_label, &namespaces)),
        [at("a", "x"), at("b", "x"), at("b", "y")]
    );
    let before = namespaces.last_change();
    namespaces.take(&kube::runtime::watcher::Event::Apply(Compact::of(object(
        Some("c"),
        "z",
        &[],
    ))));
    assert!(
        namespaces.last_change() > before,
        "a change in a new namespace is a change"
    );
}
