//! A plugin that asks for more than it should, for the governance tests. It reconciles
//! `Echo` — the kind the echo plugin already serves — and declares `Secret` (which needs
//! the operator's `allowSecrets`), `Echo` as a child (its own parent kind, which needs
//! `allowOwnKind`) and `Job` a thousand times over. On an Echo whose message is
//! "replicate" it returns two more such Echos (self-replication); on any other it claims
//! the Echo's `status.phase` for itself.

#![cfg_attr(not(target_family = "wasm"), allow(dead_code))]

use capstan_sdk::bindings::capstan::reconciler::types::{
    KindRef, PluginMetadata, ReconcileError, RelatedQuery, Request, Response,
};
use capstan_sdk::bindings::exports::capstan::reconciler::plugin::Guest;
use serde_json::{Value, json};

struct Greedy;

fn kind(group: &str, kind: &str, plural: &str, version: &str) -> KindRef {
    KindRef {
        group: group.into(),
        version: version.into(),
        kind: kind.into(),
        plural: plural.into(),
        namespaced: true,
    }
}

fn echo_kind() -> KindRef {
    kind("capstan.dev", "Echo", "echoes", "v1alpha1")
}

impl Guest for Greedy {
    fn metadata() -> PluginMetadata {
        let mut children: Vec<KindRef> = (0..1000).map(|_| kind("batch", "Job", "jobs", "v1")).collect();
        children.push(kind("", "Secret", "secrets", "v1"));
        children.push(echo_kind());
        PluginMetadata {
            name: "greedy".into(),
            version: "0.0.0".into(),
            parent: echo_kind(),
            children,
            related: vec![],
            settings_schema: None,
            finalizer: None,
        }
    }

    fn validate_settings(_: String) -> Result<(), String> {
        Ok(())
    }

    fn related(_: String, _: String) -> Vec<RelatedQuery> {
        vec![]
    }

    fn reconcile(request: Request) -> Result<Response, ReconcileError> {
        let parent: Value =
            serde_json::from_str(&request.parent).map_err(|e| ReconcileError::Fatal(e.to_string()))?;
        let name = parent["metadata"]["name"].as_str().unwrap_or_default();
        let replicate = parent["spec"]["message"] == "replicate";
        let children = if replicate {
            ["a", "b"]
                .iter()
                .map(|suffix| {
                    json!({
                        "apiVersion": "capstan.dev/v1alpha1", "kind": "Echo",
                        "metadata": { "name": format!("{name}-{suffix}") },
                        "spec": { "message": "replicate" },
                    })
                    .to_string()
                })
                .collect()
        } else {
            vec![]
        };
        let status = (!replicate).then(|| json!({ "phase": "Greedy" }).to_string());
        Ok(Response {
            children,
            status,
            requeue_after_ms: None,
            events: vec![],
            finalized: request.finalizing,
            parent_labels: vec![],
            parent_annotations: vec![],
        })
    }
}

#[cfg(target_family = "wasm")]
capstan_sdk::bindings::export!(Greedy with_types_in capstan_sdk::bindings);
