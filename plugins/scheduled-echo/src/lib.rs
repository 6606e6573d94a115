//! ScheduledEcho → CronJob: each `ScheduledEcho` custom resource becomes one CronJob that
//! runs `echo <message>` on a cron schedule.
//!
//! Unlike echo's Job, a CronJob's spec is mutable, so the CronJob keeps one stable name and
//! a changed message or schedule updates it in place, keeping its history of runs.

pub mod schedule;
// The committed CRD YAML against the Rust type it is generated from.
#[cfg(test)]
mod crd_yaml;

use capstan_sdk::{Context, Event, Metadata, Observed, ReconcileError, Reconciler, Response};
use k8s_openapi::api::batch::v1::{CronJob, CronJobSpec, CronJobStatus, JobSpec, JobTemplateSpec};
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Image each run uses; pinned so a reconcile is reproducible.
pub const IMAGE: &str = "busybox:1.37.0";
/// Retries of a failed echo before that run's Job is marked Failed.
pub const BACKOFF_LIMIT: i32 = 2;
/// A run still going when the next is due makes the next one skip rather than pile up.
pub const CONCURRENCY_POLICY: &str = "Forbid";
/// Finished successful Jobs the CronJob keeps.
pub const SUCCESSFUL_JOBS_HISTORY_LIMIT: i32 = 3;
/// Failed Jobs the CronJob keeps, enough to inspect the latest failure.
pub const FAILED_JOBS_HISTORY_LIMIT: i32 = 1;
/// Kubernetes caps CronJob names at 52 characters: it appends 11 to name each Job, and
/// Job names must fit in a 63-character label value.
pub const MAX_CRON_JOB_NAME: usize = 52;

/// Print a message on a cron schedule, in a CronJob.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "capstan.dev",
    version = "v1alpha1",
    kind = "ScheduledEcho",
    plural = "scheduledechoes",
    namespaced,
    status = "ScheduledEchoStatus",
    printcolumn = r#"{"name":"Message","type":"string","jsonPath":".spec.message"}"#,
    printcolumn = r#"{"name":"Schedule","type":"string","jsonPath":".spec.schedule"}"#,
    printcolumn = r#"{"name":"Last Schedule","type":"date","jsonPath":".status.lastScheduleTime"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
pub struct ScheduledEchoSpec {
    /// The text each run echoes.
    #[schemars(length(min = 1))]
    pub message: String,
    /// When to run, in cron syntax: five fields (minute hour day-of-month month
    /// day-of-week) or a macro such as @daily; times are in the controller manager's zone.
    pub schedule: String,
}

/// Where the ScheduledEcho's CronJob stands.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScheduledEchoStatus {
    /// Name of the CronJob that runs the echo.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron_job_name: Option<String>,
    /// When the CronJob last started a run, as the CronJob reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "date_time")]
    pub last_schedule_time: Option<Time>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// k8s-openapi's `Time` has no schema without its schemars feature; it is an RFC 3339 string.
fn date_time(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "string", "format": "date-time", "nullable": true})
}

/// The ScheduledEcho reconciler.
pub struct ScheduledEchoReconciler;

impl Reconciler for ScheduledEchoReconciler {
    type Parent = ScheduledEcho;

    fn metadata() -> Metadata {
        Metadata::new("scheduled-echo", env!("CARGO_PKG_VERSION")).child::<CronJob>()
    }

    fn reconcile(echo: ScheduledEcho, ctx: &Context) -> Result<Response, ReconcileError> {
        if echo.spec.message.trim().is_empty() {
            return Err(ReconcileError::fatal("spec.message is empty: nothing to echo"));
        }
        schedule::validate(&echo.spec.schedule)
            .map_err(|e| ReconcileError::fatal(format!("spec.schedule {:?}: {e}", echo.spec.schedule)))?;
        let cron_job = desired_cron_job(&echo)?;
        let name = cron_job.metadata.name.clone();
        let observed = ctx
            .children_as::<CronJob, Observed<CronJobStatus>>()?
            .into_iter()
            .find(|c| c.metadata.name == name);

        let last_schedule_time = observed
            .as_ref()
            .and_then(|c| c.status.as_ref())
            .and_then(|s| s.last_schedule_time.clone());
        let mut response = Response::new().child(&cron_job)?.status(&ScheduledEchoStatus {
            cron_job_name: name.clone(),
            last_schedule_time,
            observed_generation: echo.metadata.generation,
        })?;
        if observed.is_none() {
            response = response.event(Event::normal(
                "CronJobCreated",
                format!(
                    "CronJob {} echoes on schedule {:?}",
                    name.unwrap_or_default(),
                    echo.spec.schedule
                ),
            ));
        }
        Ok(response)
    }
}

capstan_sdk::export!(ScheduledEchoReconciler);

/// The one CronJob a ScheduledEcho wants: in its namespace, under a name that depends only
/// on the ScheduledEcho's name.
pub fn desired_cron_job(echo: &ScheduledEcho) -> Result<CronJob, ReconcileError> {
    let parent = echo
        .metadata
        .name
        .as_deref()
        .ok_or_else(|| ReconcileError::fatal("ScheduledEcho has no metadata.name"))?;
    let labels = BTreeMap::from([
        ("app.kubernetes.io/managed-by".to_string(), "capstan".to_string()),
        ("capstan.dev/plugin".to_string(), "scheduled-echo".to_string()),
    ]);
    Ok(CronJob {
        metadata: ObjectMeta {
            name: Some(cron_job_name(parent)),
            namespace: echo.metadata.namespace.clone(),
            labels: Some(labels.clone()),
            ..ObjectMeta::default()
        },
        spec: CronJobSpec {
            schedule: echo.spec.schedule.clone(),
            concurrency_policy: Some(CONCURRENCY_POLICY.into()),
            successful_jobs_history_limit: Some(SUCCESSFUL_JOBS_HISTORY_LIMIT),
            failed_jobs_history_limit: Some(FAILED_JOBS_HISTORY_LIMIT),
            job_template: JobTemplateSpec {
                // The host labels only the CronJob; the Jobs it spawns get theirs from here.
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(JobSpec {
                    backoff_limit: Some(BACKOFF_LIMIT),
                    template: PodTemplateSpec {
                        metadata: None,
                        spec: Some(PodSpec {
                            restart_policy: Some("Never".into()),
                            containers: vec![Container {
                                name: "echo".into(),
                                image: Some(IMAGE.into()),
                                command: Some(vec!["echo".into(), echo.spec.message.clone()]),
                                ..Container::default()
                            }],
                            ..PodSpec::default()
                        }),
                    },
                    ..JobSpec::default()
                }),
            },
            ..CronJobSpec::default()
        },
        status: None,
    })
}

/// The CronJob name for a parent: the parent's own name when it fits in 52 characters.
///
/// A longer name is cut to a prefix plus a hash of the whole name, so two long names that
/// share their first 52 characters do not fight over one CronJob.
pub fn cron_job_name(parent: &str) -> String {
    if parent.len() <= MAX_CRON_JOB_NAME {
        return parent.to_string();
    }
    let hash = name_hash(parent.as_bytes());
    // Object names are ASCII, so byte and char counts agree.
    let prefix: String = parent.chars().take(MAX_CRON_JOB_NAME - hash.len() - 1).collect();
    format!("{}-{hash}", prefix.trim_end_matches(['-', '.']))
}

/// 8 hex digits of FNV-1a: stable across builds and platforms, which `std`'s randomly
/// seeded hasher is not.
fn name_hash(bytes: &[u8]) -> String {
    let hash = bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{:08x}", (hash ^ (hash >> 32)) as u32)
}
