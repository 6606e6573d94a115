//! A bad new version of Echo, picked by its settings: `{"answer": "undeclared"}` answers
//! every Echo with a ConfigMap (a kind it never declared), `{"answer": "nothing"}` with no
//! child at all. It speaks the raw bindings, like the hostile plugin.

// Natively (a workspace-wide `cargo test`) nothing is exported, so nothing is used.
#![cfg_attr(not(target_family = "wasm"), allow(dead_code))]

use capstan_sdk::bindings::capstan::reconciler::types::{
    KindRef, PluginMetadata, ReconcileError, RelatedQuery, Request, Response,
};
use capstan_sdk::bindings::exports::capstan::reconciler::plugin::Guest;
use serde_json::{Value, json};

struct Rogue;

impl Guest for Rogue {
    fn metadata() -> PluginMetadata {
        PluginMetadata {
            name: "echo-rogue".into(),
            version: "0.0.0".into(),
            parent: kind("capstan.dev", "v1alpha1", "Echo", "echoes"),
            children: vec![kind("batch", "v1", "Job", "jobs")],
            related: vec![],
            settings_schema: None,
            finalizer: None,
        }
    }

    fn validate_settings(settings: String) -> Result<(), String> {
        let settings: Value = serde_json::from_str(&settings).map_err(|e| e.to_string())?;
        match settings["answer"].as_str() {
            Some("undeclared" | "nothing") => Ok(()),
            other => Err(format!("answer must be undeclared or nothing, not {other:?}")),
        }
    }

    fn related(_: String, _: String) -> Vec<RelatedQuery> {
        vec![]
    }

    fn reconcile(request: Request) -> Result<Response, ReconcileError> {
        let settings: Value = serde_json::from_str(&request.settings).unwrap_or(Value::Null);
        let parent: Value = serde_json::from_str(&request.parent).unwrap_or(Value::Null);
        let name = parent["metadata"]["name"].as_str().unwrap_or("echo");
        let children = match settings["answer"].as_str() {
            Some("undeclared") => vec![
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}})
                    .to_string(),
            ],
            _ => vec![],
        };
        Ok(Response {
            children,
            status: None,
            events: vec![],
            requeue_after_ms: None,
            finalized: false,
            parent_labels: vec![],
            parent_annotations: vec![],
        })
    }
}

fn kind(group: &str, version: &str, kind: &str, plural: &str) -> KindRef {
    KindRef {
        group: group.into(),
        version: version.into(),
        kind: kind.into(),
        plural: plural.into(),
        namespaced: true,
    }
}

capstan_sdk::bindings::export!(Rogue with_types_in capstan_sdk::bindings);
