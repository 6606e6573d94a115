//! ScheduledEcho's reconcile logic, run natively through the SDK's testing harness on the
//! same fixtures `capstan test` runs the Wasm build on.

use capstan_sdk::testing::Fixture;
use capstan_sdk::{EventType, ReconcileError, Response};
use k8s_openapi::api::batch::v1::CronJob;
use scheduled_echo::{ScheduledEchoReconciler, ScheduledEchoStatus};

fn fixture(name: &str) -> String {
    format!("{}/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn run(parent: &str, children: &[&str]) -> Result<Response, ReconcileError> {
    let mut f = Fixture::load(fixture(parent)).unwrap();
    for c in children {
        f = f.children_file(fixture(c)).unwrap();
    }
    f.reconcile::<ScheduledEchoReconciler>()
}

/// A parent named `name` with this spec, for cases that need no fixture file.
fn run_inline(name: &str, message: &str, schedule: &str) -> Result<Response, ReconcileError> {
    let parent = serde_json::json!({
        "apiVersion": "capstan.dev/v1alpha1",
        "kind": "ScheduledEcho",
        "metadata": {"name": name, "namespace": "demo", "generation": 1},
        "spec": {"message": message, "schedule": schedule},
    });
    Fixture::new(parent).reconcile::<ScheduledEchoReconciler>()
}

fn only_cron_job(r: &Response) -> CronJob {
    let cron_jobs = r.children_of::<CronJob>().unwrap();
    assert_eq!(r.children.len(), 1, "exactly one child");
    assert_eq!(cron_jobs.len(), 1, "the child is a CronJob");
    cron_jobs.into_iter().next().unwrap()
}

fn status(r: &Response) -> ScheduledEchoStatus {
    r.status_as::<ScheduledEchoStatus>()
        .unwrap()
        .expect("status is set")
}

fn fatal_message(r: Result<Response, ReconcileError>) -> String {
    match r {
        Err(ReconcileError::Fatal(m)) => m,
        other => panic!("expected a fatal error, got {other:?}"),
    }
}

#[test]
fn new_scheduled_echo_wants_one_cron_job_running_echo() {
    let r = run("scheduled-echo.yaml", &[]).unwrap();
    let cron_job = only_cron_job(&r);
    assert_eq!(cron_job.metadata.name.as_deref(), Some("nightly"));
    assert_eq!(cron_job.metadata.namespace.as_deref(), Some("demo"));
    let labels = cron_job.metadata.labels.as_ref().unwrap();
    assert_eq!(labels["app.kubernetes.io/managed-by"], "capstan");
    assert_eq!(labels["capstan.dev/plugin"], "scheduled-echo");

    let spec = &cron_job.spec;
    assert_eq!(spec.schedule, "30 2 * * *");
    assert_eq!(spec.concurrency_policy.as_deref(), Some("Forbid"));
    assert_eq!(spec.successful_jobs_history_limit, Some(3));
    assert_eq!(spec.failed_jobs_history_limit, Some(1));
    assert_eq!(spec.time_zone, None);
    let job_labels = spec.job_template.metadata.as_ref().unwrap().labels.as_ref();
    assert_eq!(
        job_labels,
        Some(labels),
        "the Jobs it spawns carry the same labels"
    );
    let job = spec.job_template.spec.as_ref().unwrap();
    assert_eq!(job.backoff_limit, Some(scheduled_echo::BACKOFF_LIMIT));
    let pod = job.template.spec.as_ref().unwrap();
    assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
    assert_eq!(pod.containers.len(), 1);
    assert_eq!(pod.containers[0].image.as_deref(), Some("busybox:1.37.0"));
    assert_eq!(
        pod.containers[0].command.as_deref().unwrap(),
        ["echo", "hello, world"]
    );

    let s = status(&r);
    assert_eq!(s.cron_job_name.as_deref(), Some("nightly"));
    assert_eq!(s.last_schedule_time, None);
    assert_eq!(s.observed_generation, Some(1));
    assert_eq!(r.events.len(), 1);
    assert_eq!(r.events[0].event_type, EventType::Normal);
    assert_eq!(r.events[0].reason, "CronJobCreated");
    assert!(r.events[0].message.contains("nightly"), "{}", r.events[0].message);
    assert_eq!(r.requeue_after, None);
}

#[test]
fn changed_schedule_updates_the_same_cron_job_in_place() {
    let before = only_cron_job(&run("scheduled-echo.yaml", &[]).unwrap());
    let r = run("scheduled-echo-changed.yaml", &["cronjob-scheduled.yaml"]).unwrap();
    let after = only_cron_job(&r);
    assert_eq!(after.metadata.name, before.metadata.name);
    assert_eq!(after.spec.schedule, "*/15 9-17 * * MON-FRI");
    assert_eq!(status(&r).observed_generation, Some(2));
    assert!(
        r.events.is_empty(),
        "the CronJob already exists: no creation event"
    );
}

#[test]
fn status_copies_last_schedule_time_from_the_observed_cron_job() {
    let r = run("scheduled-echo.yaml", &["cronjob-scheduled.yaml"]).unwrap();
    let s = status(&r);
    let time = serde_json::to_value(s.last_schedule_time).unwrap();
    assert_eq!(time, "2026-11-24T02:30:00Z");
    assert_eq!(s.cron_job_name.as_deref(), Some("nightly"));
    assert!(r.events.is_empty());
    assert_eq!(
        r.status.as_ref().unwrap()["lastScheduleTime"],
        "2026-11-24T02:30:00Z",
        "the status is written in the CRD's camelCase"
    );
}

#[test]
fn a_cron_job_of_another_name_is_not_ours_to_report() {
    let other = std::fs::read_to_string(fixture("cronjob-scheduled.yaml"))
        .unwrap()
        .replace("name: nightly\n  namespace", "name: weekly\n  namespace");
    let r = Fixture::load(fixture("scheduled-echo.yaml"))
        .unwrap()
        .children(&other)
        .unwrap()
        .reconcile::<ScheduledEchoReconciler>()
        .unwrap();
    assert_eq!(status(&r).last_schedule_time, None);
    assert_eq!(r.events.len(), 1, "ours is still missing");
    assert_eq!(only_cron_job(&r).metadata.name.as_deref(), Some("nightly"));
}

#[test]
fn invalid_schedule_fixture_is_fatal_and_names_the_bad_part() {
    assert_eq!(
        fatal_message(run("scheduled-echo-invalid.yaml", &[])),
        r#"spec.schedule "61 * * * *": minute 61 is out of range 0-59"#
    );
}

#[test]
fn invalid_schedules_are_fatal() {
    for (schedule, expected) in [
        ("", "is empty"),
        ("* * * *", "has 4 fields"),
        ("0 0 * * * *", "has 6 fields"),
        ("0 25 * * *", "hour 25 is out of range 0-23"),
        ("0 0 32 * *", "day-of-month 32 is out of range 1-31"),
        ("0 0 * 0 *", "month 0 is out of range 1-12"),
        ("0 0 * * 7", "day-of-week 7 is out of range 0-6"),
        ("*/0 * * * *", "minute step 0 is out of range 1-59"),
        ("10-5 * * * *", "minute range 10-5 is reversed"),
        (
            "0 0 * * FUN",
            "day-of-week \"FUN\" is not a number or a name SUN-SAT",
        ),
        ("0 0 * JANUARY *", "month \"JANUARY\" is not a number"),
        ("1,,2 * * * *", "has an empty item"),
        ("CRON_TZ=UTC 0 0 * * *", "time zone prefix CRON_TZ="),
        ("TZ=Europe/Paris 0 0 * * *", "time zone prefix TZ="),
        ("@every 1h", "unknown macro @every"),
        ("@daily 5", "macro @daily must stand alone"),
    ] {
        let message = fatal_message(run_inline("bad", "hi", schedule));
        let prefix = format!("spec.schedule {schedule:?}: ");
        assert!(message.starts_with(&prefix), "{message}");
        assert!(message.contains(expected), "{schedule:?}: {message}");
    }
}

#[test]
fn valid_schedules_with_macros_names_lists_and_steps_are_accepted() {
    for schedule in [
        "@yearly",
        "@annually",
        "@monthly",
        "@weekly",
        "@daily",
        "@midnight",
        "@hourly",
        "0 0 1 JAN,jul *",
        "0 9 * * MON-FRI",
        "0 9 * * sun,Sat",
        "*/5 * * * *",
        "0-30/10 8-18/2 1-15 2-11/3 1-5",
        "59 23 31 12 6",
    ] {
        let r = run_inline("ok", "hi", schedule).unwrap_or_else(|e| panic!("{schedule:?}: {e}"));
        assert_eq!(only_cron_job(&r).spec.schedule, schedule);
    }
}

#[test]
fn empty_message_is_fatal_and_wants_no_cron_job() {
    let message = fatal_message(run("scheduled-echo-empty.yaml", &[]));
    assert!(message.contains("spec.message"), "{message}");
    assert!(fatal_message(run_inline("blank", "   ", "@daily")).contains("spec.message"));
}

#[test]
fn long_names_give_stable_valid_distinct_cron_job_names() {
    let name_of = |parent: &str| {
        let r = run_inline(parent, "hi", "@hourly").unwrap();
        only_cron_job(&r).metadata.name.unwrap()
    };
    let exactly = "a".repeat(52);
    assert_eq!(name_of(&exactly), exactly, "52 characters fit as they are");

    let long_a = format!("{}-a", "x".repeat(60));
    let long_b = format!("{}-b", "x".repeat(60));
    let (a, b) = (name_of(&long_a), name_of(&long_b));
    assert!(a.len() <= 52 && b.len() <= 52, "{a} {b}");
    assert!(a.starts_with("xxxx"), "{a}");
    assert_ne!(a, b, "names sharing a long prefix do not collide");
    assert_eq!(a, name_of(&long_a), "the name is stable");

    let dashed = name_of(&format!("{}-{}", "y".repeat(42), "z".repeat(20)));
    assert!(
        !dashed.contains("--"),
        "no dangling dash before the hash: {dashed}"
    );
}
