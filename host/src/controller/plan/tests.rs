use kube::api::DynamicObject;
use serde_json::json;

use super::*;

fn job() -> Kind {
    Kind {
        group: "batch".into(),
        version: "v1".into(),
        kind: "Job".into(),
        plural: "jobs".into(),
        namespaced: true,
    }
}

fn echo() -> (DynamicObject, ApiResource) {
    let parent = serde_json::from_value(json!({
        "apiVersion": "demo.capstan.dev/v1", "kind": "Echo",
        "metadata": {"name": "hello", "namespace": "ns", "uid": "parent-uid"},
        "status": {"phase": "Done"},
    }))
    .unwrap();
    let kind = ApiResource {
        group: "demo.capstan.dev".into(),
        version: "v1".into(),
        api_version: "demo.capstan.dev/v1".into(),
        kind: "Echo".into(),
        plural: "echoes".into(),
    };
    (parent, kind)
}

fn desired(name: &str, message: &str) -> Child {
    Child {
        kind: job(),
        namespace: Some("ns".into()),
        name: name.into(),
        object: json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"message": message},
        }),
    }
}

/// The object the API server holds after `child` (as planned) was written.
fn stored(child: &Child, uid: &str, version: &str) -> Observed {
    let mut object = child.object.clone();
    object["metadata"]["uid"] = uid.into();
    object["metadata"]["resourceVersion"] = version.into();
    let object = serde_json::from_value::<DynamicObject>(object).unwrap();
    Observed {
        kind: 0,
        object: Arc::new(Compact::of(object)),
    }
}

/// Plan `children` and `status` over `observed`, with `elsewhere` in the caches as
/// another parent's child.
fn planned(
    children: Vec<Child>,
    status: Option<Value>,
    observed: &[Observed],
    elsewhere: Option<&Observed>,
) -> Result<Plan, Box<Foreign>> {
    planned_with(Rule::default(), children, status, observed, elsewhere)
}

/// The update rule of `method`, without status checks.
fn rule(method: Method) -> Rule {
    Rule {
        method,
        ..Rule::default()
    }
}

/// The plan of `children` over `observed`, the Job kind's children updated by `update`.
fn updated(update: Rule, children: Vec<Child>, observed: &[Observed]) -> Plan {
    planned_with(update, children, None, observed, None).unwrap_or_else(|_| panic!("foreign"))
}

/// [`planned`], with the Job kind's children updated by `update`.
fn planned_with(
    update: Rule,
    children: Vec<Child>,
    status: Option<Value>,
    observed: &[Observed],
    elsewhere: Option<&Observed>,
) -> Result<Plan, Box<Foreign>> {
    let (parent, parent_kind) = echo();
    let kind = job();
    let inputs = Inputs {
        parent: &parent,
        parent_kind: &parent_kind,
        writer: "echo",
        kinds: &[(&kind, update)],
        observed,
    };
    let cached = |_: usize, key: &ObjectKey| {
        elsewhere
            .filter(|o| ObjectKey::of(&*o.object) == *key)
            .map(|o| o.object.clone())
    };
    plan(
        &inputs,
        children,
        (status.as_ref(), &ParentMetadata::default()),
        cached,
    )
}

fn actions(plan: &Plan) -> Vec<(&str, &Action)> {
    plan.children
        .iter()
        .map(|s| (s.child.name.as_str(), &s.action))
        .collect()
}

#[test]
fn a_new_child_is_created_owned_and_labelled_as_the_writer_s() {
    let plan = planned(vec![desired("a", "hi")], None, &[], None).unwrap_or_else(|_| panic!("foreign"));
    assert_eq!(actions(&plan), [("a", &Action::Create)]);
    let meta = &plan.children[0].child.object["metadata"];
    assert_eq!(meta["ownerReferences"][0]["uid"], "parent-uid");
    assert_eq!(meta["ownerReferences"][0]["kind"], "Echo");
    assert_eq!(meta["labels"][apply::PLUGIN_LABEL], "echo");
    assert_eq!(plan.children[0].digest().len(), 32);
    assert!(plan.prune.is_empty() && plan.status.is_none());
}

#[test]
fn an_observed_child_is_kept_while_it_holds_the_answer_and_updated_over_its_version_when_not() {
    let first = planned(vec![desired("a", "hi")], None, &[], None).unwrap_or_else(|_| panic!("foreign"));
    let observed = [stored(&first.children[0].child, "child-uid", "7")];
    let again =
        planned(vec![desired("a", "hi")], None, &observed, None).unwrap_or_else(|_| panic!("foreign"));
    assert_eq!(actions(&again), [("a", &Action::Keep)]);
    let changed =
        planned(vec![desired("a", "bye")], None, &observed, None).unwrap_or_else(|_| panic!("foreign"));
    let update = Action::Update {
        uid: "child-uid".into(),
        seen: "7".into(),
        held_by_create: false,
    };
    assert_eq!(actions(&changed), [("a", &update)]);
    assert!(again.prune.is_empty() && changed.prune.is_empty());
}

#[test]
fn an_observed_child_the_answer_no_longer_holds_is_pruned_as_observed() {
    let first = planned(vec![desired("a", "hi"), desired("b", "hi")], None, &[], None)
        .unwrap_or_else(|_| panic!("foreign"));
    let observed: Vec<_> = first
        .children
        .iter()
        .map(|s| stored(&s.child, &format!("{}-uid", s.child.name), "3"))
        .collect();
    let plan = planned(vec![desired("b", "hi")], None, &observed, None).unwrap_or_else(|_| panic!("foreign"));
    assert_eq!(actions(&plan), [("b", &Action::Keep)]);
    let pruned: Vec<_> = plan
        .prune
        .iter()
        .map(|o| ObjectKey::of(&*o.object).to_string())
        .collect();
    assert_eq!(pruned, ["ns/a"]);
    assert_eq!(plan.prune[0].object.uid().as_deref(), Some("a-uid"));
    assert_eq!(plan.prune[0].object.resource_version().as_deref(), Some("3"));
}

#[test]
fn a_name_another_parent_holds_refuses_the_whole_answer() {
    let other = planned(vec![desired("taken", "x")], None, &[], None).unwrap_or_else(|_| panic!("foreign"));
    let mut child = other.children[0].child.clone();
    child.object["metadata"]["ownerReferences"][0]["uid"] = "other-parent-uid".into();
    let holder = stored(&child, "someone-else", "1");
    let answer = vec![desired("mine", "x"), desired("taken", "x")];
    let Err(foreign) = planned(answer, Some(json!({"phase": "New"})), &[], Some(&holder)) else {
        panic!("a name held elsewhere was planned");
    };
    assert_eq!(foreign.child.name, "taken");
    assert_eq!(foreign.holder.uid().as_deref(), Some("someone-else"));
}

#[test]
fn a_child_of_this_parent_cached_after_its_children_were_observed_is_its_own() {
    let first = planned(vec![desired("a", "hi")], None, &[], None).unwrap_or_else(|_| panic!("foreign"));
    let landed = stored(&first.children[0].child, "child-uid", "4");
    let again = planned(vec![desired("a", "hi")], None, &[], Some(&landed))
        .unwrap_or_else(|_| panic!("its own child read as another's"));
    assert_eq!(actions(&again), [("a", &Action::Keep)]);
}

#[test]
fn a_status_is_planned_only_when_applying_it_would_change_something() {
    let same =
        planned(vec![], Some(json!({"phase": "Done"})), &[], None).unwrap_or_else(|_| panic!("foreign"));
    assert!(same.status.is_none());
    let new =
        planned(vec![], Some(json!({"phase": "Failed"})), &[], None).unwrap_or_else(|_| panic!("foreign"));
    assert_eq!(new.status, Some(json!({"phase": "Failed"})));
    let none = planned(vec![], None, &[], None).unwrap_or_else(|_| panic!("foreign"));
    assert!(none.status.is_none());
}

#[test]
fn a_child_of_a_kind_the_plugin_does_not_watch_is_not_planned() {
    let mut config = desired("c", "x");
    config.kind.kind = "ConfigMap".into();
    let plan = planned(vec![config], None, &[], None).unwrap_or_else(|_| panic!("foreign"));
    assert!(plan.children.is_empty());
}

#[test]
fn on_delete_keeps_a_child_that_differs_and_creates_one_that_is_gone() {
    let first = planned(vec![desired("a", "hi")], None, &[], None).unwrap_or_else(|_| panic!("foreign"));
    let observed = [stored(&first.children[0].child, "child-uid", "7")];
    let changed = updated(rule(Method::OnDelete), vec![desired("a", "bye")], &observed);
    assert_eq!(actions(&changed), [("a", &Action::Keep)]);
    assert!(changed.prune.is_empty());
    let gone = updated(rule(Method::OnDelete), vec![desired("a", "bye")], &[]);
    assert_eq!(actions(&gone), [("a", &Action::Create)]);
    // Nor is one cached but not yet observed updated.
    let cached = planned_with(
        rule(Method::OnDelete),
        vec![desired("a", "bye")],
        None,
        &[],
        Some(&observed[0]),
    )
    .unwrap_or_else(|_| panic!("its own child read as another's"));
    assert_eq!(actions(&cached), [("a", &Action::Keep)]);
}

#[test]
fn recreate_deletes_a_child_that_differs_as_observed_and_keeps_one_that_holds() {
    let first = planned(vec![desired("a", "hi")], None, &[], None).unwrap_or_else(|_| panic!("foreign"));
    let observed = [stored(&first.children[0].child, "child-uid", "7")];
    let same = updated(rule(Method::Recreate), vec![desired("a", "hi")], &observed);
    assert_eq!(actions(&same), [("a", &Action::Keep)]);
    assert!(same.prune.is_empty());
    let changed = updated(rule(Method::Recreate), vec![desired("a", "bye")], &observed);
    assert!(
        changed.children.is_empty(),
        "created only once the old one is gone"
    );
    assert_eq!(changed.prune.len(), 1);
    assert_eq!(changed.prune[0].object.uid().as_deref(), Some("child-uid"));
    assert_eq!(changed.prune[0].object.resource_version().as_deref(), Some("7"));
    // One already being deleted is waited for, not deleted again.
    let mut going = first.children[0].child.clone();
    going.object["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z".into();
    let going = [stored(&going, "child-uid", "8")];
    let waiting = updated(rule(Method::Recreate), vec![desired("a", "bye")], &going);
    assert_eq!(actions(&waiting), [("a", &Action::Keep)]);
    assert!(waiting.prune.is_empty());
}

/// Three observed Jobs at "hi", with the status `status` each.
fn three_jobs(status: Value) -> Vec<Observed> {
    let first = planned(
        vec![desired("a", "hi"), desired("b", "hi"), desired("c", "hi")],
        None,
        &[],
        None,
    )
    .unwrap_or_else(|_| panic!("foreign"));
    (first.children.iter())
        .map(|s| {
            let mut child = s.child.clone();
            child.object["status"] = status.clone();
            stored(&child, &format!("{}-uid", s.child.name), "3")
        })
        .collect()
}

#[test]
fn a_rolling_update_changes_one_child_per_reconcile_in_the_answer_s_order() {
    let observed = three_jobs(json!({}));
    let answer = || vec![desired("a", "bye"), desired("b", "bye"), desired("c", "bye")];
    let rolling = updated(rule(Method::RollingInPlace), answer(), &observed);
    let kinds: Vec<_> = rolling
        .children
        .iter()
        .map(|s| matches!(s.action, Action::Update { .. }))
        .collect();
    assert_eq!(kinds, [true, false, false], "a first, the others kept");
    // Once a is at the answer, b; recreating, b is pruned instead.
    let mut moved = observed.clone();
    moved[0] = stored(&rolling.children[0].child, "a-uid", "4");
    let next = updated(rule(Method::RollingRecreate), answer(), &moved);
    assert_eq!(actions(&next), [("a", &Action::Keep), ("c", &Action::Keep)]);
    assert_eq!(next.prune.len(), 1);
    assert_eq!(next.prune[0].object.uid().as_deref(), Some("b-uid"));
    // While b is gone (to be created), c waits.
    let gone = [moved[0].clone(), moved[2].clone()];
    let waiting = updated(rule(Method::RollingRecreate), answer(), &gone);
    assert_eq!(
        actions(&waiting),
        [("a", &Action::Keep), ("b", &Action::Create), ("c", &Action::Keep)]
    );
    assert!(waiting.prune.is_empty());
}

#[test]
fn a_rolling_update_waits_for_the_children_at_the_answer_to_pass_its_status_checks() {
    let checks: Rule = serde_json::from_value(json!({
        "method": "RollingInPlace",
        "statusChecks": {"conditions": [{"type": "Ready", "status": "True"}]},
    }))
    .unwrap();
    let answer = || vec![desired("a", "hi"), desired("b", "bye")];
    let updates = |plan: &Plan| {
        plan.children
            .iter()
            .filter(|s| matches!(s.action, Action::Update { .. }))
            .count()
    };
    let unready = three_jobs(json!({"conditions": [{"type": "Ready", "status": "False"}]}));
    let plan = updated(checks.clone(), answer(), &unready[..2]);
    assert_eq!(updates(&plan), 0, "a is at the answer but not Ready");
    let ready = three_jobs(json!({"conditions": [{"type": "Ready", "status": "True"}]}));
    let plan = updated(checks, answer(), &ready[..2]);
    assert_eq!(updates(&plan), 1, "a is Ready: b's turn");
    assert!(matches!(plan.children[1].action, Action::Update { .. }));
}

#[test]
fn a_child_at_the_answer_whose_fields_were_changed_is_applied_over_never_recreated() {
    let first = planned(vec![desired("a", "hi")], None, &[], None).unwrap_or_else(|_| panic!("foreign"));
    // Applied with this very answer; then someone (or the server) changed a field it set.
    let mut edited = first.children[0].child.clone();
    edited.object["spec"]["message"] = "edited".into();
    let observed = [stored(&edited, "child-uid", "5")];
    let recreate = updated(rule(Method::Recreate), vec![desired("a", "hi")], &observed);
    assert!(matches!(recreate.children[0].action, Action::Update { .. }));
    assert!(recreate.prune.is_empty(), "no new answer, nothing deleted");
    let rolling = updated(rule(Method::RollingRecreate), vec![desired("a", "hi")], &observed);
    assert!(matches!(rolling.children[0].action, Action::Update { .. }) && rolling.prune.is_empty());
    let on_delete = updated(rule(Method::OnDelete), vec![desired("a", "hi")], &observed);
    assert_eq!(actions(&on_delete), [("a", &Action::Keep)]);
}
