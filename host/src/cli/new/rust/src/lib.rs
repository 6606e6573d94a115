//! The {{Kind}} reconciler: a {{Kind}} with `spec.greeting` becomes a ConfigMap holding it.

use capstan_sdk::conditions::{Condition, Conditions};
use capstan_sdk::{Context, Event, Metadata, ReconcileError, Reconciler, Response};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What a {{Kind}} asks for.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "example.com",
    version = "v1alpha1",
    kind = "{{Kind}}",
    plural = "{{plural}}",
    namespaced,
    status = "{{Kind}}Status"
)]
#[serde(rename_all = "camelCase")]
pub struct {{Kind}}Spec {
    /// The text the ConfigMap holds.
    pub greeting: String,
}

/// What the plugin last saw.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct {{Kind}}Status {
    /// The generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready` once the ConfigMap holds the greeting.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "capstan_sdk::conditions::schema")]
    pub conditions: Vec<Condition>,
}

/// The plugin.
pub struct {{Kind}}Reconciler;

impl Reconciler for {{Kind}}Reconciler {
    type Parent = {{Kind}};

    fn metadata() -> Metadata {
        Metadata::new("{{name}}", env!("CARGO_PKG_VERSION")).child::<ConfigMap>()
    }

    fn reconcile(parent: {{Kind}}, ctx: &Context) -> Result<Response, ReconcileError> {
        let name = parent
            .metadata
            .name
            .clone()
            .ok_or_else(|| ReconcileError::fatal("{{Kind}} has no metadata.name"))?;
        if parent.spec.greeting.trim().is_empty() {
            return Err(ReconcileError::fatal("spec.greeting is empty"));
        }
        let config_map = ConfigMap {
            metadata: ObjectMeta {
                name: Some(format!("{name}-greeting")),
                namespace: parent.metadata.namespace.clone(),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([("greeting".into(), parent.spec.greeting.clone())])),
            ..ConfigMap::default()
        };
        let previous = parent.status.clone().unwrap_or_default().conditions;
        let was_ready = capstan_sdk::conditions::find(&previous, capstan_sdk::conditions::READY)
            .is_some_and(|c| c.status == "True");
        let mut conditions = Conditions::new(previous, parent.metadata.generation, ctx.now());
        conditions.ready(true, "Greeted", "the ConfigMap holds the greeting");
        let mut response = Response::new().child(&config_map)?.status(&{{Kind}}Status {
            observed_generation: parent.metadata.generation,
            conditions: conditions.into_vec(),
        })?;
        if !was_ready {
            response = response.event(Event::normal("Greeted", format!("ConfigMap {name}-greeting made")));
        }
        Ok(response)
    }
}

capstan_sdk::export!({{Kind}}Reconciler);
