//! A plugin whose declarations the host refuses before ever calling it. It reconciles
//! ConfigMaps and returns nothing. Built plain, it declares ClusterRoleBinding as
//! namespaced — API discovery serves it cluster-scoped, so `capstan run` never starts it,
//! and `capstan test` knows the built-in kind's scope from k8s-openapi. Built with the
//! `orphans` feature (as `misdeclared-orphans`), it honestly declares ClusterRole, a
//! cluster-scoped kind, as a child of namespaced ConfigMaps: Kubernetes would never
//! garbage-collect such children, so no grant lets it load.

#![cfg_attr(not(target_family = "wasm"), allow(dead_code))]

use capstan_sdk::bindings::capstan::reconciler::types::{
    KindRef, PluginMetadata, ReconcileError, RelatedQuery, Request, Response,
};
use capstan_sdk::bindings::exports::capstan::reconciler::plugin::Guest;

struct Misdeclared;

fn kind(group: &str, kind: &str, plural: &str, namespaced: bool) -> KindRef {
    KindRef {
        group: group.into(),
        version: "v1".into(),
        kind: kind.into(),
        plural: plural.into(),
        namespaced,
    }
}

/// The misdeclared child kind and the plugin's name.
#[cfg(not(feature = "orphans"))]
fn child() -> (KindRef, &'static str) {
    let rbac = "rbac.authorization.k8s.io";
    (
        kind(rbac, "ClusterRoleBinding", "clusterrolebindings", true),
        "misdeclared",
    )
}

#[cfg(feature = "orphans")]
fn child() -> (KindRef, &'static str) {
    let rbac = "rbac.authorization.k8s.io";
    (
        kind(rbac, "ClusterRole", "clusterroles", false),
        "misdeclared-orphans",
    )
}

impl Guest for Misdeclared {
    fn metadata() -> PluginMetadata {
        let (child, name) = child();
        PluginMetadata {
            name: name.into(),
            version: "0.0.0".into(),
            parent: kind("", "ConfigMap", "configmaps", true),
            children: vec![child],
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
        Ok(Response {
            children: vec![],
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
capstan_sdk::bindings::export!(Misdeclared with_types_in capstan_sdk::bindings);
