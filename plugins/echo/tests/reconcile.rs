//! Echo's reconcile logic, run natively through the SDK's testing harness on the same
//! fixtures the Wasm golden tests use.

use capstan_sdk::testing::Fixture;
use capstan_sdk::{EventType, ReconcileError};
use echo::{EchoReconciler, EchoStatus, Phase};
use k8s_openapi::api::batch::v1::Job;

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
    let s = status(&r);
    assert_eq!(s.phase, Some(Phase::Pending));
    assert_eq!(s.observed_generation, Some(1));
    assert_eq!(s.job_name, job.metadata.name);
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
