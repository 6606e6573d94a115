//! Echo → Job: each `Echo` custom resource becomes one Job that runs `echo <message>`.
//!
//! The Job's name carries a hash of the spec: Job templates are immutable, so a changed
//! message yields a new Job and the host prunes the old one.

use capstan_sdk::{Context, Event, Metadata, Observed, ReconcileError, Reconciler, Response};
use k8s_openapi::api::batch::v1::{Job, JobSpec, JobStatus};
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Image the Job runs; pinned so a reconcile is reproducible.
pub const IMAGE: &str = "busybox:1.37.0";
/// Retries of a failed echo before the Job is marked Failed.
pub const BACKOFF_LIMIT: i32 = 2;
/// Kubernetes caps Job names at 63 characters (they become a Pod label value).
const MAX_JOB_NAME: usize = 63;

/// Print a message once, in a Job.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "capstan.dev",
    version = "v1alpha1",
    kind = "Echo",
    plural = "echoes",
    namespaced,
    status = "EchoStatus",
    printcolumn = r#"{"name":"Message","type":"string","jsonPath":".spec.message"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
pub struct EchoSpec {
    /// The text the Job echoes.
    #[schemars(length(min = 1))]
    pub message: String,
}

/// Where the Echo's Job stands.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EchoStatus {
    /// Name of the Job for the current spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_name: Option<String>,
    /// Pending, Running, Succeeded or Failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// Lifecycle of the Echo's Job.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum Phase {
    /// The Job does not exist yet or has not started.
    Pending,
    /// The Job's Pod is running.
    Running,
    /// The echo completed.
    Succeeded,
    /// The Job gave up after its retries.
    Failed,
}

/// The Echo reconciler.
pub struct EchoReconciler;

impl Reconciler for EchoReconciler {
    type Parent = Echo;

    fn metadata() -> Metadata {
        Metadata::new("echo", env!("CARGO_PKG_VERSION")).child::<Job>()
    }

    fn reconcile(echo: Echo, ctx: &Context) -> Result<Response, ReconcileError> {
        if echo.spec.message.trim().is_empty() {
            return Err(ReconcileError::fatal("spec.message is empty: nothing to echo"));
        }
        let job = desired_job(&echo)?;
        let job_name = job.metadata.name.clone();
        let observed = ctx
            // Only name and status: the full Job type would carry the pod template's
            // deserializers into the plugin for nothing.
            .children_as::<Job, Observed<JobStatus>>()?
            .into_iter()
            .find(|j| j.metadata.name == job_name);
        let phase = observed.map_or(Phase::Pending, |j| phase_of(&j.status.unwrap_or_default()));

        let mut response = Response::new().child(&job)?.status(&EchoStatus {
            job_name,
            phase: Some(phase),
            observed_generation: echo.metadata.generation,
        })?;
        let previous = echo.status.as_ref().and_then(|s| s.phase);
        if previous != Some(phase) {
            let message = format!(
                "Job {} is {phase:?}",
                job.metadata.name.as_deref().unwrap_or_default()
            );
            response = response.event(match phase {
                Phase::Failed => Event::warning("JobFailed", message),
                _ => Event::normal(format!("Job{phase:?}"), message),
            });
        }
        Ok(response)
    }
}

capstan_sdk::export!(EchoReconciler);

/// The one Job an Echo wants: in the Echo's namespace, named for the Echo and its spec.
pub fn desired_job(echo: &Echo) -> Result<Job, ReconcileError> {
    let name = echo
        .metadata
        .name
        .as_deref()
        .ok_or_else(|| ReconcileError::fatal("Echo has no metadata.name"))?;
    let hash = spec_hash(&serde_json::to_vec(&echo.spec)?);
    let prefix: String = name.chars().take(MAX_JOB_NAME - hash.len() - 1).collect();
    let mut labels = BTreeMap::from([
        ("app.kubernetes.io/managed-by".to_string(), "capstan".to_string()),
        ("capstan.dev/plugin".to_string(), "echo".to_string()),
    ]);
    if cfg!(feature = "canary") {
        labels.insert("capstan.dev/canary".into(), "true".into());
    }
    Ok(Job {
        metadata: ObjectMeta {
            name: Some(format!("{}-{hash}", prefix.trim_end_matches(['-', '.']))),
            namespace: echo.metadata.namespace.clone(),
            labels: Some(labels),
            ..ObjectMeta::default()
        },
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
        status: None,
    })
}

/// Phase of an observed Job from its conditions and counters.
pub fn phase_of(status: &JobStatus) -> Phase {
    let condition = |t: &str| {
        status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == t && c.status == "True")
    };
    if condition("Complete") {
        Phase::Succeeded
    } else if condition("Failed") {
        Phase::Failed
    } else if status.active.unwrap_or(0) > 0 || status.start_time.is_some() {
        Phase::Running
    } else {
        Phase::Pending
    }
}

/// 8 hex digits of FNV-1a over the serialized spec: stable across builds and platforms,
/// which `std`'s randomly seeded hasher is not.
fn spec_hash(bytes: &[u8]) -> String {
    let hash = bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{:08x}", (hash ^ (hash >> 32)) as u32)
}
