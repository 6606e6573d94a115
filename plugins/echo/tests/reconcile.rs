//! Echo's reconcile logic, run natively through the SDK's testing harness on the same
//! fixtures the Wasm golden tests use.

use capstan_sdk::conditions::{self, Condition};
use capstan_sdk::testing::{Fixture, Selector, load_documents};
use capstan_sdk::{EventType, ReconcileError};
use echo::{EchoReconciler, EchoStatus, Phase};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::jiff::Timestamp;

fn fixture(name: &str) -> String {
    format!("{}/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn run(parent: &str, children: &[&str]) -> Result<capstan_sdk::Response, ReconcileError> {
    let mut f = Fixture::load(fixture(parent)).unwrap();
    for c in children {
        f = f.children_file(fixture(c)).unwrap();
    }
    f.reconcile::<EchoReconciler>()
}

fn status(r: &capstan_sdk::Response) -> EchoStatus {
    r.status_as::<EchoStatus>().unwrap().expect("status is set")
}

fn ready(r: &capstan_sdk::Response) -> Condition {
    let s = status(r);
    conditions::find(&s.conditions, "Ready")
        .expect("a Ready condition")
        .clone()
}

fn at(text: &str) -> Timestamp {
    text.parse().unwrap()
}

#[test]
fn new_echo_wants_one_job_in_its_namespace_running_echo() {
    let r = run("echo.yaml", &[]).unwrap();
    let jobs = r.children_of::<Job>().unwrap();
    assert_eq!(jobs.len(), 1);
    let job = &jobs[0];
    assert_eq!(job.metadata.namespace.as_deref(), Some("demo"));
    assert!(job.metadata.name.as_deref().unwrap().starts_with("hello-"));
    let labels = job.metadata.labels.as_ref().unwrap();
    assert_eq!(labels["app.kubernetes.io/managed-by"], "capstan");
    assert_eq!(labels["capstan.dev/plugin"], "echo");
    let spec = job.spec.as_ref().unwrap();
    assert_eq!(spec.backoff_limit, Some(echo::BACKOFF_LIMIT));
    let pod = spec.template.spec.as_ref().unwrap();
    assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
    assert_eq!(
        pod.containers[0].command.as_deref().unwrap(),
        ["echo", "hello, world"]
    );
    assert_eq!(pod.containers[0].image.as_deref(), Some(echo::IMAGE));
    assert_eq!(
        spec.ttl_seconds_after_finished, None,
        "only when the settings give one"
    );
    let s = status(&r);
    assert_eq!(s.phase, Some(Phase::Pending));
    assert_eq!(s.observed_generation, Some(1));
    assert_eq!(s.job_name, job.metadata.name);
    let ready = ready(&r);
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "JobPending")
    );
    assert_eq!(ready.observed_generation, Some(1));
}

#[test]
fn without_settings_the_job_is_the_one_echo_always_made() {
    // The name 0.1's Echo gave it (its golden tests), so Jobs survive the upgrade.
    let r = run("echo.yaml", &[]).unwrap();
    let job = &r.children_of::<Job>().unwrap()[0];
    assert_eq!(job.metadata.name.as_deref(), Some("hello-913fa3ac"));
    let explicit = Fixture::load(fixture("echo.yaml"))
        .unwrap()
        .settings("{image: busybox:1.37.0}")
        .unwrap()
        .reconcile::<EchoReconciler>()
        .unwrap();
    assert_eq!(explicit.children_json().unwrap(), r.children_json().unwrap());
}

#[test]
fn settings_shape_the_job() {
    let with = |settings: &str| {
        let r = Fixture::load(fixture("echo.yaml"))
            .unwrap()
            .settings(settings)
            .unwrap()
            .reconcile::<EchoReconciler>()
            .unwrap();
        r.children_of::<Job>().unwrap().remove(0)
    };
    let job = with(&std::fs::read_to_string(fixture("settings.yaml")).unwrap());
    let spec = job.spec.as_ref().unwrap();
    assert_eq!(spec.backoff_limit, Some(5));
    assert_eq!(spec.ttl_seconds_after_finished, Some(600));
    let pod = spec.template.spec.as_ref().unwrap();
    assert_eq!(
        pod.containers[0].image.as_deref(),
        Some("registry.example.com/tools/busybox:1.37")
    );
    // Another image is another (immutable) pod template: another Job. The retry and
    // cleanup knobs are mutable, so the Job keeps its name and is updated in place.
    assert_ne!(job.metadata.name.as_deref(), Some("hello-913fa3ac"));
    assert_eq!(
        with("{backoffLimit: 0, ttlSecondsAfterFinished: 0}")
            .metadata
            .name
            .as_deref(),
        Some("hello-913fa3ac")
    );
}

#[test]
fn invalid_settings_are_refused_naming_the_setting() {
    use capstan_sdk::testing::validate_settings;
    let refused = |settings: serde_json::Value| validate_settings::<EchoReconciler>(&settings).unwrap_err();
    assert_eq!(
        refused(serde_json::json!({"backoffLimit": -1})),
        "backoffLimit must be at least 0, got -1"
    );
    assert_eq!(
        refused(serde_json::json!({"ttlSecondsAfterFinished": -5})),
        "ttlSecondsAfterFinished must be at least 0, got -5"
    );
    assert_eq!(
        refused(serde_json::json!({"backoffLimit": "three"})),
        r#"backoffLimit: invalid type: string "three", expected i32"#
    );
    assert!(refused(serde_json::json!({"imag": "x"})).starts_with("unknown field `imag`"));
    assert!(refused(serde_json::json!({"image": "two words"})).contains("not an image reference"));
    assert_eq!(
        validate_settings::<EchoReconciler>(&serde_json::json!({})),
        Ok(())
    );
    // The fixture refuses them as the host would at load.
    let e = Fixture::load(fixture("echo.yaml"))
        .unwrap()
        .settings("backoffLimit: -1")
        .unwrap()
        .check::<EchoReconciler>()
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid settings: backoffLimit must be at least 0, got -1"
    );
}

fn from_config_maps(related: &str) -> Fixture {
    Fixture::load(fixture("echo-message-from.yaml"))
        .unwrap()
        .related(related)
        .unwrap()
        .now(at("2026-11-24T09:30:00Z"))
}

#[test]
fn message_from_reads_the_key_of_the_config_map_in_the_echos_namespace() {
    let f = from_config_maps(&std::fs::read_to_string(fixture("configmaps.yaml")).unwrap());
    let queries = f.related_queries::<EchoReconciler>();
    assert_eq!(queries.len(), 1, "{queries:?}");
    assert_eq!(
        (queries[0].kind.as_str(), &queries[0].namespace),
        ("ConfigMap", &None)
    );
    assert_eq!(queries[0].selector, Selector::Names(vec!["greetings".into()]));
    let r = f.reconcile::<EchoReconciler>().unwrap();
    let jobs = r.children_of::<Job>().unwrap();
    assert_eq!(jobs.len(), 1);
    let pod = jobs[0].spec.as_ref().unwrap().template.spec.clone().unwrap();
    assert_eq!(
        pod.containers[0].command.as_deref().unwrap(),
        ["echo", "good morning"]
    );
    assert!(jobs[0].metadata.name.as_deref().unwrap().starts_with("greeting-"));
    let s = status(&r);
    assert_eq!((s.phase, s.observed_generation), (Some(Phase::Pending), Some(3)));
    assert_eq!(s.job_name, jobs[0].metadata.name);
}

#[test]
fn editing_the_config_map_runs_a_new_job() {
    let job_for = |text: &str| {
        let cm = format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: greetings, namespace: demo}}\ndata: {{morning: {text}}}"
        );
        let r = from_config_maps(&cm).reconcile::<EchoReconciler>().unwrap();
        r.children_of::<Job>().unwrap().remove(0).metadata.name.unwrap()
    };
    assert_ne!(job_for("good morning"), job_for("good morning again"));
    assert_eq!(job_for("good morning"), job_for("good morning"));
}

#[test]
fn a_missing_config_map_warns_wants_no_job_and_says_why() {
    let r = from_config_maps("").reconcile::<EchoReconciler>().unwrap();
    assert!(r.children.is_empty(), "no Job, so an old one is pruned");
    assert_eq!(r.events.len(), 1);
    assert_eq!(r.events[0].event_type, EventType::Warning);
    assert_eq!(r.events[0].reason, echo::MESSAGE_SOURCE_MISSING);
    assert!(
        r.events[0].message.contains("ConfigMap demo/greetings not found"),
        "{}",
        r.events[0].message
    );
    let s = status(&r);
    assert_eq!((s.job_name, s.phase), (None, Some(Phase::Pending)));
    let condition = ready(&r);
    assert_eq!(
        (
            condition.status.as_str(),
            condition.reason.as_str(),
            condition.message.as_str()
        ),
        (
            "False",
            "MessageSourceMissing",
            "ConfigMap demo/greetings not found"
        )
    );
    assert_eq!(condition.observed_generation, Some(3));
    assert_eq!(condition.last_transition_time.0, at("2026-11-24T09:30:00Z"));

    // Reported once: the next reconcile, with that status, warns no more.
    let mut parent = load_documents(fixture("echo-message-from.yaml"))
        .unwrap()
        .remove(0);
    parent["status"] = serde_json::to_value(status(&r)).unwrap();
    let again = Fixture::new(parent).now(at("2026-11-24T10:00:00Z"));
    let r = again.reconcile::<EchoReconciler>().unwrap();
    assert!(r.events.is_empty(), "{:?}", r.events);
    assert_eq!(
        ready(&r).last_transition_time.0,
        at("2026-11-24T09:30:00Z"),
        "status unchanged"
    );
}

#[test]
fn a_missing_key_is_missing_too() {
    let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: greetings, namespace: demo}\ndata: {evening: good evening}";
    let r = from_config_maps(cm).reconcile::<EchoReconciler>().unwrap();
    assert!(r.children.is_empty());
    assert_eq!(r.events[0].reason, "MessageSourceMissing");
    assert_eq!(
        ready(&r).message,
        r#"ConfigMap demo/greetings has no key "morning""#
    );
}

#[test]
fn message_and_message_from_are_exclusive() {
    let both = "apiVersion: capstan.dev/v1alpha1\nkind: Echo\nmetadata: {name: both, namespace: d}\n\
                spec: {message: hi, messageFrom: {configMapKeyRef: {name: c, key: k}}}";
    let e = Fixture::parse(both)
        .unwrap()
        .reconcile::<EchoReconciler>()
        .unwrap_err();
    assert!(e.message().contains("both set"), "{e}");
    let neither =
        "apiVersion: capstan.dev/v1alpha1\nkind: Echo\nmetadata: {name: neither, namespace: d}\nspec: {}";
    let e = Fixture::parse(neither)
        .unwrap()
        .reconcile::<EchoReconciler>()
        .unwrap_err();
    assert!(
        matches!(&e, ReconcileError::Fatal(m) if m.contains("nothing to echo")),
        "{e}"
    );
}

#[test]
fn ready_changes_with_the_job_stamped_with_the_hosts_clock() {
    let now = at("2026-11-24T09:30:00Z");
    // Still succeeded: the condition keeps the time it became True.
    let r = Fixture::load(fixture("echo-ready.yaml"))
        .unwrap()
        .children_file(fixture("job-succeeded.yaml"))
        .unwrap()
        .now(now)
        .reconcile::<EchoReconciler>()
        .unwrap();
    let kept = ready(&r);
    assert_eq!(
        (kept.status.as_str(), kept.reason.as_str()),
        ("True", "JobSucceeded")
    );
    assert_eq!(kept.last_transition_time.0, at("2026-11-23T09:00:03Z"));
    // The Job failed since: Ready flips to False, now.
    let r = Fixture::load(fixture("echo-ready.yaml"))
        .unwrap()
        .children_file(fixture("job-failed.yaml"))
        .unwrap()
        .now(now)
        .reconcile::<EchoReconciler>()
        .unwrap();
    let flipped = ready(&r);
    assert_eq!(
        (flipped.status.as_str(), flipped.reason.as_str()),
        ("False", "JobFailed")
    );
    assert_eq!(flipped.last_transition_time.0, now);
    // Without a clock set, the fixture's fixed one.
    let r = run("echo.yaml", &[]).unwrap();
    assert_eq!(
        ready(&r).last_transition_time.0,
        at(capstan_sdk::testing::DEFAULT_NOW)
    );
}

#[test]
fn phase_follows_the_observed_job() {
    for (child, phase, event) in [
        ("job-running.yaml", Phase::Running, EventType::Normal),
        ("job-succeeded.yaml", Phase::Succeeded, EventType::Normal),
        ("job-failed.yaml", Phase::Failed, EventType::Warning),
    ] {
        let r = run("echo.yaml", &[child]).unwrap();
        assert_eq!(status(&r).phase, Some(phase), "{child}");
        assert_eq!(r.events.len(), 1, "{child}: one event on a phase change");
        assert_eq!(r.events[0].event_type, event, "{child}");
    }
}

#[test]
fn unchanged_phase_records_no_event() {
    let r = run("echo-running.yaml", &["job-running.yaml"]).unwrap();
    assert_eq!(status(&r).phase, Some(Phase::Running));
    assert!(r.events.is_empty());
}

#[test]
fn changed_message_wants_a_new_job_and_drops_the_old_one() {
    let old = run("echo.yaml", &[]).unwrap().children_of::<Job>().unwrap()[0].clone();
    let r = run("echo-changed.yaml", &["job-succeeded.yaml"]).unwrap();
    let jobs = r.children_of::<Job>().unwrap();
    assert_eq!(
        jobs.len(),
        1,
        "only the new Job is desired, so the host prunes the old one"
    );
    assert_ne!(jobs[0].metadata.name, old.metadata.name);
    let s = status(&r);
    assert_eq!(
        s.phase,
        Some(Phase::Pending),
        "the old Job's success does not count"
    );
    assert_eq!(s.observed_generation, Some(2));
}

#[test]
fn empty_message_is_fatal_and_wants_no_job() {
    let err = run("echo-empty.yaml", &[]).unwrap_err();
    assert!(
        matches!(&err, ReconcileError::Fatal(m) if m.contains("spec.message")),
        "{err}"
    );
}

#[test]
fn long_names_still_give_valid_job_names() {
    let yaml = format!(
        "apiVersion: capstan.dev/v1alpha1\nkind: Echo\nmetadata: {{name: {}, namespace: d}}\nspec: {{message: hi}}",
        "a".repeat(250)
    );
    let r = Fixture::parse(&yaml)
        .unwrap()
        .reconcile::<EchoReconciler>()
        .unwrap();
    let name = r.children_of::<Job>().unwrap()[0].metadata.name.clone().unwrap();
    assert!(name.len() <= 63, "{name}");
}

#[test]
fn an_invalid_config_map_name_is_never_asked_for_and_is_the_specs_error() {
    let text = "apiVersion: capstan.dev/v1alpha1\nkind: Echo\nmetadata: {name: bad, namespace: d}\n\
                spec: {messageFrom: {configMapKeyRef: {name: Greetings/x, key: k}}}";
    let f = Fixture::parse(text).unwrap();
    assert!(f.related_queries::<EchoReconciler>().is_empty());
    let e = f.reconcile::<EchoReconciler>().unwrap_err();
    assert!(
        matches!(&e, ReconcileError::Fatal(m) if m.starts_with("spec.messageFrom.configMapKeyRef.name \"Greetings/x\"")),
        "{e}"
    );
}
