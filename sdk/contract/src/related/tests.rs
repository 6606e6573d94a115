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

fn names(n: &[&str]) -> Selector {
    Selector::Names(n.iter().map(|s| s.to_string()).collect())
}

fn in_ns(namespace: &str) -> Parent<'_> {
    Parent {
        namespace: Some(namespace),
        name: "p",
    }
}

#[test]
fn queries_read_declared_kinds_in_the_parents_namespace_only() {
    let m = metadata();
    let none = Allowances::default();
    let ok = resolve(&m, in_ns("a"), &[query("ConfigMap", None, names(&["x"]))], &none).unwrap();
    assert_eq!(ok[0].namespace.as_deref(), Some("a"));
    let refused = |q| resolve(&m, in_ns("a"), &[q], &none).unwrap_err();
    let e = refused(query("ConfigMap", Some("b"), names(&["x"])));
    assert!(e.contains("not the parent's namespace (\"a\")"), "{e}");
    let e = refused(query("Secret", None, names(&["x"])));
    assert!(e.contains("not a declared related kind"), "{e}");
    let e = refused(query("ConfigMap", None, names(&["../x"])));
    assert!(e.contains("ConfigMap"), "{e}");
    let cluster = resolve(
        &m,
        in_ns("a"),
        &[query("Namespace", Some("z"), names(&["a"]))],
        &none,
    )
    .unwrap();
    assert_eq!(
        cluster[0].namespace, None,
        "a cluster-scoped kind has no namespace"
    );
    let many = vec![query("ConfigMap", None, names(&["x"])); MAX_QUERIES + 1];
    assert!(
        resolve(&m, in_ns("a"), &many, &none)
            .unwrap_err()
            .contains("at most")
    );
}

#[test]
fn the_operators_grant_widens_what_a_parent_reads_and_never_narrows_it() {
    let mut m = metadata();
    let granted = Allowances {
        namespaces: vec!["shared".into()],
        ..Allowances::default()
    };
    let none = Allowances::default();
    let ask = |ns| [query("ConfigMap", Some(ns), names(&["x"]))];
    // A namespaced parent: its own namespace, and granted ones.
    assert!(resolve(&m, in_ns("a"), &ask("shared"), &none).is_err());
    assert!(resolve(&m, in_ns("a"), &ask("shared"), &granted).is_ok());
    assert!(resolve(&m, in_ns("a"), &ask("a"), &granted).is_ok());
    // A cluster-scoped parent: granted namespaces only, and it must name them.
    m.parent = kind("example.com", "Tenant", false);
    let cluster = Parent {
        namespace: None,
        name: "t",
    };
    let e = resolve(&m, cluster, &ask("kube-system"), &none).unwrap_err();
    assert!(e.contains("a cluster-scoped parent has none"), "{e}");
    assert!(resolve(&m, cluster, &ask("shared"), &granted).is_ok());
    let e = resolve(&m, cluster, &[query("ConfigMap", None, names(&["x"]))], &granted).unwrap_err();
    assert!(e.contains("must name its namespace"), "{e}");
    let every = Allowances {
        namespaces: vec![crate::ANY_NAMESPACE.into()],
        ..Allowances::default()
    };
    assert!(resolve(&m, cluster, &ask("kube-system"), &every).is_ok());
    assert!(resolve(&m, cluster, &[query("ConfigMap", None, names(&["x"]))], &every).is_err());
    // A Namespace parent: the Namespace it names only with `allowOwnNamespace`, the grant
    // its children need to go there (one rule; without it, every Namespace's Secrets
    // were readable by a plugin that could write into none of them).
    m.parent = kind("", "Namespace", false);
    let team = Parent {
        namespace: None,
        name: "team-a",
    };
    let unnamed = [query("ConfigMap", None, names(&["x"]))];
    let e = resolve(&m, team, &unnamed, &none).unwrap_err();
    assert!(e.contains("must name its namespace"), "{e}");
    assert!(resolve(&m, team, &ask("team-a"), &none).is_err());
    let own_granted = Allowances {
        own_namespace: true,
        ..Allowances::default()
    };
    let own = resolve(&m, team, &unnamed, &own_granted).unwrap();
    assert_eq!(own[0].namespace.as_deref(), Some("team-a"));
    assert!(resolve(&m, team, &ask("kube-system"), &own_granted).is_err());
    assert!(resolve(&m, team, &ask("shared"), &granted).is_ok());
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
    let resolved = resolve(&m, in_ns("a"), &queries, &Allowances::default()).unwrap();
    let picked = select(&m, &resolved, &candidates).unwrap();
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

#[test]
fn a_label_query_selects_at_most_the_answer_bound() {
    // Names are capped per answer; a label query selects what the cluster holds, so the
    // answer itself is bounded, in objects and in bytes (review M5).
    let m = metadata();
    let all = [query("ConfigMap", None, Selector::Labels("app=web".into()))];
    let resolved = resolve(&m, in_ns("a"), &all, &Allowances::default()).unwrap();
    let cm = |i: usize, data: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"namespace": "a", "name": format!("c{i}"), "labels": {"app": "web"}},
            "data": {"d": data}})
    };
    let many: Vec<_> = (0..=MAX_RELATED).map(|i| cm(i, "")).collect();
    assert_eq!(
        select(&m, &resolved, &many[..MAX_RELATED]).unwrap().len(),
        MAX_RELATED
    );
    let e = select(&m, &resolved, &many).unwrap_err();
    assert!(e.contains("more than 1024 objects"), "{e}");
    let big: Vec<_> = (0..5).map(|i| cm(i, &"x".repeat(1 << 20))).collect();
    let e = select(&m, &resolved, &big).unwrap_err();
    assert!(e.contains("more than 4 MiB"), "{e}");
}

/// `"*"` reads every namespace the parent may read: all of them under the grant of every
/// one (and any object of the kind answers), else its own and each granted, a query
/// apiece; a cluster-scoped parent granted none reads none, and says so.
#[test]
fn a_query_for_every_namespace_reads_what_the_parent_may_read() {
    let m = metadata();
    let q = |selector| query("ConfigMap", Some(crate::ANY_NAMESPACE), selector);
    let every = Allowances {
        namespaces: vec![crate::ANY_NAMESPACE.into()],
        ..Allowances::default()
    };
    let all = resolve(&m, in_ns("a"), &[q(names(&["x"]))], &every).unwrap();
    assert_eq!(all.len(), 1);
    assert!(all[0].every_namespace());
    let empty = std::collections::BTreeMap::<String, String>::new();
    assert!(all[0].matches(Some("z"), "x", &empty), "any namespace answers");
    assert!(!all[0].matches(Some("z"), "y", &empty));

    let some = Allowances {
        namespaces: vec!["b".into(), "a".into()],
        ..Allowances::default()
    };
    let each = resolve(&m, in_ns("a"), &[q(Selector::Labels("app=web".into()))], &some).unwrap();
    let read: Vec<_> = each.iter().map(|r| r.namespace.as_deref().unwrap()).collect();
    assert_eq!(read, ["a", "b"], "its own first, each namespace once");
    assert!(!each[0].matches(Some("c"), "x", &empty));

    let own_only = resolve(&m, in_ns("a"), &[q(names(&["x"]))], &Allowances::default()).unwrap();
    assert_eq!(own_only[0].namespace.as_deref(), Some("a"));

    let cluster = Parent {
        namespace: None,
        name: "p",
    };
    let e = resolve(&m, cluster, &[q(names(&["x"]))], &Allowances::default()).unwrap_err();
    assert!(
        e.contains("every namespace") && e.contains("allowNamespaces"),
        "{e}"
    );
    // A cluster-scoped kind has no namespace to read: one query, as without "*".
    let ns = resolve(
        &m,
        in_ns("a"),
        &[query("Namespace", Some(crate::ANY_NAMESPACE), names(&["x"]))],
        &some,
    )
    .unwrap();
    assert_eq!((ns.len(), ns[0].namespace.as_deref()), (1, None));
}
