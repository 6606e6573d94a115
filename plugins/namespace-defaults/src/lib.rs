//! Namespace → defaults: every Namespace labelled `capstan.dev/defaults: "true"` gets,
//! inside itself, a ResourceQuota, a LimitRange and a NetworkPolicy that denies all
//! ingress — the guard rails a platform team wants in every team's namespace.
//!
//! The label is opt-in on purpose: a plugin of Namespaces sees every Namespace, including
//! `kube-system`, where a quota or a deny-all policy would break the cluster. A Namespace
//! without the label (or with another value) gets no children, so removing the label
//! removes the objects: the host prunes what a response no longer holds. Each object can
//! be tuned or turned off in the settings ([`DefaultsSettings`]); a Namespace that is
//! being deleted gets none, since the API server refuses new objects in it.
//!
//! The children live in the Namespace they are for, which the host allows a Namespace
//! parent without any `allowNamespaces` grant.

mod quantity;
mod settings;

use std::collections::BTreeMap;

use capstan_sdk::kube_core;
use capstan_sdk::{Context, Event, Metadata, ObservedMeta, ReconcileError, Reconciler, Response};
use k8s_openapi::api::core::v1::{
    LimitRange, LimitRangeItem, LimitRangeSpec, Namespace, ResourceQuota, ResourceQuotaSpec,
};
use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicySpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

pub use settings::{DefaultsSettings, LABEL, LimitRangeSettings, QuotaSettings};

/// Name of the ResourceQuota and of the LimitRange in each Namespace.
pub const DEFAULTS: &str = "capstan-defaults";
/// Name of the NetworkPolicy in each Namespace.
pub const DENY_INGRESS: &str = "capstan-default-deny-ingress";

/// The namespace-defaults reconciler.
pub struct NamespaceDefaults;

impl Reconciler for NamespaceDefaults {
    type Parent = Namespace;

    fn metadata() -> Metadata {
        Metadata::new("namespace-defaults", env!("CARGO_PKG_VERSION"))
            .child::<ResourceQuota>()
            .child::<LimitRange>()
            .child::<NetworkPolicy>()
            .settings::<DefaultsSettings>()
    }

    fn reconcile(namespace: Namespace, ctx: &Context) -> Result<Response, ReconcileError> {
        let settings: DefaultsSettings = ctx.settings()?;
        let name = namespace
            .metadata
            .name
            .clone()
            .ok_or_else(|| ReconcileError::fatal("Namespace has no metadata.name"))?;
        // The status is the API server's: leave it untouched whatever happens.
        if !opted_in(&namespace, &settings.label) || terminating(&namespace) {
            return Ok(Response::new());
        }
        let mut response = Response::new();
        // Children not observed yet, named in the event that says they are being created.
        let mut missing = Vec::new();
        if settings.quota.enabled {
            response = response.child(&quota(&name, &settings.quota))?;
            if !has::<ResourceQuota>(ctx, DEFAULTS)? {
                missing.push(format!("ResourceQuota {DEFAULTS}"));
            }
        }
        if settings.limit_range.enabled {
            response = response.child(&limit_range(&name, &settings.limit_range))?;
            if !has::<LimitRange>(ctx, DEFAULTS)? {
                missing.push(format!("LimitRange {DEFAULTS}"));
            }
        }
        if settings.network_policy {
            response = response.child(&deny_ingress(&name))?;
            if !has::<NetworkPolicy>(ctx, DENY_INGRESS)? {
                missing.push(format!("NetworkPolicy {DENY_INGRESS}"));
            }
        }
        if !missing.is_empty() {
            response = response.event(Event::normal(
                "DefaultsApplied",
                format!("creating {} in namespace {name}", missing.join(", ")),
            ));
        }
        Ok(response)
    }
}

capstan_sdk::export!(NamespaceDefaults);

/// True when the Namespace carries `label` with the value "true".
pub fn opted_in(namespace: &Namespace, label: &str) -> bool {
    let labels = namespace.metadata.labels.as_ref();
    labels.and_then(|l| l.get(label)).map(String::as_str) == Some("true")
}

/// True when the Namespace is being deleted: the API server refuses new objects in it.
fn terminating(namespace: &Namespace) -> bool {
    let phase = namespace.status.as_ref().and_then(|s| s.phase.as_deref());
    namespace.metadata.deletion_timestamp.is_some() || phase == Some("Terminating")
}

/// True when an observed child of kind `K` is called `name`.
fn has<K>(ctx: &Context, name: &str) -> Result<bool, ReconcileError>
where
    K: kube_core::Resource<DynamicType = ()>,
    K::Scope: capstan_sdk::Scope,
{
    let children = ctx.children_as::<K, Named>()?;
    Ok(children.iter().any(|c| c.metadata.name.as_deref() == Some(name)))
}

/// Just the name of an observed child.
#[derive(serde::Deserialize)]
struct Named {
    #[serde(default)]
    metadata: ObservedMeta,
}

fn meta(namespace: &str, name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some(namespace.into()),
        ..ObjectMeta::default()
    }
}

fn quantities<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> BTreeMap<String, Quantity> {
    pairs
        .into_iter()
        .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
        .collect()
}

/// The Namespace's ResourceQuota.
pub fn quota(namespace: &str, settings: &QuotaSettings) -> ResourceQuota {
    ResourceQuota {
        metadata: meta(namespace, DEFAULTS),
        spec: Some(ResourceQuotaSpec {
            hard: Some(quantities(
                settings.hard.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            )),
            ..ResourceQuotaSpec::default()
        }),
        status: None,
    }
}

/// The Namespace's LimitRange: one item for containers.
pub fn limit_range(namespace: &str, settings: &LimitRangeSettings) -> LimitRange {
    let max: Vec<(&str, &str)> = [
        ("cpu", settings.max_cpu.as_deref()),
        ("memory", settings.max_memory.as_deref()),
    ]
    .into_iter()
    .filter_map(|(k, v)| Some((k, v?)))
    .collect();
    LimitRange {
        metadata: meta(namespace, DEFAULTS),
        spec: Some(LimitRangeSpec {
            limits: vec![LimitRangeItem {
                type_: "Container".into(),
                default: Some(quantities([
                    ("cpu", settings.default_cpu.as_str()),
                    ("memory", settings.default_memory.as_str()),
                ])),
                default_request: Some(quantities([
                    ("cpu", settings.default_request_cpu.as_str()),
                    ("memory", settings.default_request_memory.as_str()),
                ])),
                max: (!max.is_empty()).then(|| quantities(max)),
                ..LimitRangeItem::default()
            }],
        }),
    }
}

/// A NetworkPolicy selecting every pod of the Namespace for ingress with no rule that
/// admits anything: all ingress is denied until another policy allows it.
pub fn deny_ingress(namespace: &str) -> NetworkPolicy {
    NetworkPolicy {
        metadata: meta(namespace, DENY_INGRESS),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector::default()),
            policy_types: Some(vec!["Ingress".into()]),
            ..NetworkPolicySpec::default()
        }),
    }
}
