//! Echo → Job: each `Echo` custom resource becomes one Job that runs `echo <message>`.
//!
//! The message is `spec.message`, or a key of a ConfigMap in the Echo's namespace
//! (`spec.messageFrom.configMapKeyRef`), which Echo declares as a related kind so the host
//! reconciles the Echo again whenever that ConfigMap changes.
//!
//! The Job's name carries a hash of what goes into its pod template (the message and the
//! image): Job templates are immutable, so a changed message — edited in the Echo or in its
//! ConfigMap — yields a new Job and the host prunes the old one.

mod settings;
// The committed CRD YAML against the Rust type it is generated from (checked once, here:
// tests/plugins/echo-canary builds this source again with its `canary` feature).
#[cfg(all(test, not(feature = "canary")))]
mod crd_yaml;

use capstan_sdk::conditions::{self, Condition, Conditions};
use capstan_sdk::{
    Context, Event, Metadata, Observed, ObservedMeta, ReconcileError, Reconciler, Related, Response,
};
use k8s_openapi::api::batch::v1::{Job, JobSpec, JobStatus};
use k8s_openapi::api::core::v1::{ConfigMap, Container, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub use settings::{EchoSettings, IMAGE};

/// Retries of a failed echo before the Job is marked Failed, unless the settings say.
pub const BACKOFF_LIMIT: i32 = 2;
/// Reason of the Warning event and the Ready condition when the message's ConfigMap or
/// key is missing.
pub const MESSAGE_SOURCE_MISSING: &str = "MessageSourceMissing";
/// Kubernetes caps Job names at 63 characters (they become a Pod label value).
const MAX_JOB_NAME: usize = 63;

/// Print a message once, in a Job.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "capstan.dev",
    version = "v1alpha1",
    kind = "Echo",
    plural = "echoes",
    namespaced,
    status = "EchoStatus",
    printcolumn = r#"{"name":"Message","type":"string","jsonPath":".spec.message"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[x_kube(validation = Rule::new("has(self.message) != has(self.messageFrom)").message("give exactly one of message and messageFrom"))]
#[serde(rename_all = "camelCase")]
pub struct EchoSpec {
    /// The text the Job echoes; or give messageFrom.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub message: Option<String>,
    /// Where to read the text from instead: a key of a ConfigMap in the Echo's namespace.
    /// Editing that ConfigMap runs the echo again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_from: Option<MessageSource>,
}

/// Where an Echo's message comes from, instead of `spec.message`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MessageSource {
    /// A key of a ConfigMap in the Echo's namespace.
    pub config_map_key_ref: ConfigMapKeyRef,
}

/// One key of one ConfigMap.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct ConfigMapKeyRef {
    /// The ConfigMap's name.
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub name: String,
    /// The key in its `data`.
    #[schemars(length(min = 1, max = 253), regex(pattern = r"^[-._a-zA-Z0-9]+$"))]
    pub key: String,
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
    /// `Ready` is True once the echo has completed, False with the reason otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "capstan_sdk::conditions::schema")]
    pub conditions: Vec<Condition>,
}

/// Lifecycle of the Echo's Job.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum Phase {
    /// The Job does not exist yet or has not started (or cannot: see the Ready condition).
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
        Metadata::new("echo", env!("CARGO_PKG_VERSION"))
            .child::<Job>()
            .related::<ConfigMap>()
            .settings::<EchoSettings>()
    }

    fn related(echo: &Echo, _: &Context) -> Vec<Related> {
        // An invalid name is never asked for (the host would refuse the query): reconcile
        // reports it as the spec's error instead.
        let source = echo
            .spec
            .message_from
            .as_ref()
            .map(|s| &s.config_map_key_ref.name);
        source
            .filter(|name| capstan_contract::dns1123_subdomain(name).is_ok())
            .map(|name| Related::named::<ConfigMap>([name.clone()]))
            .into_iter()
            .collect()
    }

    fn reconcile(echo: Echo, ctx: &Context) -> Result<Response, ReconcileError> {
        let settings: EchoSettings = ctx.settings()?;
        let message = match message(&echo, ctx)? {
            Ok(message) => message,
            Err(missing) => return missing_source(&echo, ctx, missing),
        };
        let job = desired_job(&echo, &message, &settings)?;
        let job_name = job.metadata.name.clone();
        let observed = ctx
            // Only name and status: the full Job type would carry the pod template's
            // deserializers into the plugin for nothing.
            .children_as::<Job, Observed<JobStatus>>()?
            .into_iter()
            .find(|j| j.metadata.name == job_name);
        let phase = observed.map_or(Phase::Pending, |j| phase_of(&j.status.unwrap_or_default()));
        let described = format!("Job {} is {phase:?}", job_name.as_deref().unwrap_or_default());

        let mut conditions = conditions_of(&echo, ctx);
        conditions.ready(
            phase == Phase::Succeeded,
            &format!("Job{phase:?}"),
            described.clone(),
        );
        let mut response = Response::new().child(&job)?.status(&EchoStatus {
            job_name,
            phase: Some(phase),
            observed_generation: echo.metadata.generation,
            conditions: conditions.into_vec(),
        })?;
        let previous = echo.status.as_ref().and_then(|s| s.phase);
        if previous != Some(phase) {
            response = response.event(match phase {
                Phase::Failed => Event::warning("JobFailed", described),
                _ => Event::normal(format!("Job{phase:?}"), described),
            });
        }
        Ok(response)
    }
}

capstan_sdk::export!(EchoReconciler);

/// The message to echo: `Ok(Ok(text))`, `Ok(Err(why))` when its ConfigMap or key is
/// missing (which may change without the Echo changing), or a fatal error for a spec
/// that can never work.
fn message(echo: &Echo, ctx: &Context) -> Result<Result<String, String>, ReconcileError> {
    let from = match (&echo.spec.message, &echo.spec.message_from) {
        (Some(_), Some(_)) => {
            return Err(ReconcileError::fatal(
                "spec.message and spec.messageFrom are both set: give one",
            ));
        }
        (Some(m), None) if m.trim().is_empty() => {
            return Err(ReconcileError::fatal("spec.message is empty: nothing to echo"));
        }
        (Some(m), None) => return Ok(Ok(m.clone())),
        (None, None) => {
            return Err(ReconcileError::fatal(
                "neither spec.message nor spec.messageFrom is set: nothing to echo",
            ));
        }
        (None, Some(from)) => &from.config_map_key_ref,
    };
    capstan_contract::dns1123_subdomain(&from.name)
        .map_err(|e| ReconcileError::fatal(format!("spec.messageFrom.configMapKeyRef.name {e}")))?;
    let namespace = echo.metadata.namespace.as_deref().unwrap_or("default");
    let found = ctx
        // Name and data only: the rest of a ConfigMap is of no use here.
        .related_as::<ConfigMap, ConfigMapData>()?
        .into_iter()
        .find(|c| c.metadata.name.as_deref() == Some(from.name.as_str()));
    Ok(match found {
        None => Err(format!("ConfigMap {namespace}/{} not found", from.name)),
        Some(cm) => match cm.data.get(&from.key) {
            Some(text) => Ok(text.clone()),
            None => Err(format!(
                "ConfigMap {namespace}/{} has no key {:?}",
                from.name, from.key
            )),
        },
    })
}

/// What Echo reads of a related ConfigMap.
#[derive(Deserialize)]
struct ConfigMapData {
    #[serde(default)]
    metadata: ObservedMeta,
    #[serde(default)]
    data: BTreeMap<String, String>,
}

/// No message to echo: no Job (so an old one is pruned), Ready False with the reason, and
/// a Warning the first time this reason is reported.
fn missing_source(echo: &Echo, ctx: &Context, why: String) -> Result<Response, ReconcileError> {
    let reported = echo
        .status
        .as_ref()
        .and_then(|s| conditions::find(&s.conditions, conditions::READY))
        .is_some_and(|c| c.reason == MESSAGE_SOURCE_MISSING && c.message == why);
    let mut conditions = conditions_of(echo, ctx);
    conditions.ready(false, MESSAGE_SOURCE_MISSING, why.clone());
    let response = Response::new().status(&EchoStatus {
        job_name: None,
        phase: Some(Phase::Pending),
        observed_generation: echo.metadata.generation,
        conditions: conditions.into_vec(),
    })?;
    Ok(if reported {
        response
    } else {
        response.event(Event::warning(
            MESSAGE_SOURCE_MISSING,
            format!("{why}: no Job until it exists"),
        ))
    })
}

/// The Echo's conditions as last written, to update for this reconcile.
fn conditions_of(echo: &Echo, ctx: &Context) -> Conditions {
    let previous = echo
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    Conditions::new(previous, echo.metadata.generation, ctx.now())
}

/// The one Job an Echo wants for `message`: in the Echo's namespace, named for the Echo
/// and what its pod template holds.
pub fn desired_job(echo: &Echo, message: &str, settings: &EchoSettings) -> Result<Job, ReconcileError> {
    let name = echo
        .metadata
        .name
        .as_deref()
        .ok_or_else(|| ReconcileError::fatal("Echo has no metadata.name"))?;
    let hash = spec_hash(&serde_json::to_vec(&TemplateInputs {
        message,
        image: Some(settings.image.as_str()).filter(|i| *i != IMAGE),
    })?);
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
            backoff_limit: Some(settings.backoff_limit.unwrap_or(BACKOFF_LIMIT)),
            ttl_seconds_after_finished: settings.ttl_seconds_after_finished,
            template: PodTemplateSpec {
                metadata: None,
                spec: Some(PodSpec {
                    restart_policy: Some("Never".into()),
                    containers: vec![Container {
                        name: "echo".into(),
                        image: Some(settings.image.clone()),
                        command: Some(vec!["echo".into(), message.into()]),
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

/// What the Job's name hashes: the immutable pod template's inputs. Serialized as
/// `{"message": …}` alone for the default image — the bytes the 0.1 Echo hashed (its whole
/// spec), so Jobs keep their names across the upgrade. The Job's mutable fields
/// (`backoffLimit`, `ttlSecondsAfterFinished`) are left out: changing them updates the
/// Job in place instead of running the echo again.
#[derive(Serialize)]
struct TemplateInputs<'a> {
    message: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    image: Option<&'a str>,
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

/// 8 hex digits of FNV-1a over the serialized inputs: stable across builds and platforms,
/// which `std`'s randomly seeded hasher is not.
fn spec_hash(bytes: &[u8]) -> String {
    let hash = bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{:08x}", (hash ^ (hash >> 32)) as u32)
}
