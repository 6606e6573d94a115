//! A plugin whose parent is cluster-scoped (core `Namespace`): each Namespace gets a
//! ConfigMap `tenant-<namespace>` in the namespace named by its annotation
//! `tenant.capstan.dev/into` (default: the Namespace itself). Only namespaces the operator
//! allows may receive one. A Namespace annotated `tenant.capstan.dev/role` also gets a
//! ClusterRole `tenant-<namespace>`: a cluster-scoped child, which a cluster-scoped parent
//! may have where the operator allows the kind. `metadata()` prints to stdout, which a
//! host must survive.

#![cfg_attr(not(target_family = "wasm"), allow(dead_code))]

use capstan_sdk::bindings::capstan::reconciler::types::{
    KindRef, PluginMetadata, ReconcileError, RelatedQuery, Request, Response,
};
use capstan_sdk::bindings::exports::capstan::reconciler::plugin::Guest;
use serde_json::{Value, json};

struct Tenant;

impl Guest for Tenant {
    fn metadata() -> PluginMetadata {
        println!("tenant plugin: reading metadata");
        let kind = |group: &str, kind: &str, plural: &str, namespaced| KindRef {
            group: group.into(),
            version: "v1".into(),
            kind: kind.into(),
            plural: plural.into(),
            namespaced,
        };
        PluginMetadata {
            name: "tenant".into(),
            version: "0.0.0".into(),
            parent: kind("", "Namespace", "namespaces", false),
            children: vec![
                kind("", "ConfigMap", "configmaps", true),
                kind("rbac.authorization.k8s.io", "ClusterRole", "clusterroles", false),
            ],
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
        let into = parent["metadata"]["annotations"]["tenant.capstan.dev/into"]
            .as_str()
            .unwrap_or(name);
        let child = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": { "name": format!("tenant-{name}"), "namespace": into },
            "data": { "tenant": name },
        });
        let mut children = vec![child.to_string()];
        if !parent["metadata"]["annotations"]["tenant.capstan.dev/role"].is_null() {
            let role = json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": { "name": format!("tenant-{name}") },
                "rules": [],
            });
            children.push(role.to_string());
        }
        Ok(Response {
            children,
            status: None,
            requeue_after_ms: None,
            events: vec![],
            finalized: request.finalizing,
            parent_labels: vec![],
            parent_annotations: vec![],
        })
    }
}

#[cfg(target_family = "wasm")]
capstan_sdk::bindings::export!(Tenant with_types_in capstan_sdk::bindings);
