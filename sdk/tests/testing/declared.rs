//! A fixture refuses what `capstan run` refuses before it would ever call the plugin —
//! Secrets or its own parent kind without the operator's grant, a cluster-scoped child of
//! a namespaced parent — and responses with an event reason the host would not record,
//! in the host's own words (`capstan_contract`).

use capstan_sdk::testing::{Failure, Fixture};
use capstan_sdk::{Context, Event, Metadata, ReconcileError, Reconciler, Response};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::rbac::v1::ClusterRole;

/// Copies Secrets: parent and child are Secrets.
struct Copier;

impl Reconciler for Copier {
    type Parent = Secret;
    fn metadata() -> Metadata {
        Metadata::new("copier", "0.1.0").child::<Secret>()
    }
    fn reconcile(_: Secret, _: &Context) -> Result<Response, ReconcileError> {
        Ok(Response::new())
    }
}

/// Makes a ClusterRole for each ConfigMap: Kubernetes would never collect it.
struct Orphaner;

impl Reconciler for Orphaner {
    type Parent = ConfigMap;
    fn metadata() -> Metadata {
        Metadata::new("orphaner", "0.1.0").child::<ClusterRole>()
    }
    fn reconcile(_: ConfigMap, _: &Context) -> Result<Response, ReconcileError> {
        Ok(Response::new())
    }
}

/// Records an event whose reason is the parent's data `reason`.
struct Announcer;

impl Reconciler for Announcer {
    type Parent = ConfigMap;
    fn metadata() -> Metadata {
        Metadata::new("announcer", "0.1.0")
    }
    fn reconcile(cm: ConfigMap, _: &Context) -> Result<Response, ReconcileError> {
        let reason = cm.data.unwrap_or_default().remove("reason").unwrap_or_default();
        Ok(Response::new().event(Event::normal(reason, "announced")))
    }
}

fn declared(result: Result<Response, Failure>) -> String {
    match result {
        Err(Failure::Declared(m)) => m,
        other => panic!("expected the plugin refused, got {other:?}"),
    }
}

#[test]
fn secrets_and_its_own_kind_need_the_fixtures_grants() {
    let secret =
        Fixture::parse("apiVersion: v1\nkind: Secret\nmetadata: {name: s, namespace: demo}").unwrap();
    let refused = declared(secret.clone().check::<Copier>());
    assert!(refused.starts_with("plugin copier declares Secret"), "{refused}");
    let refused = declared(secret.clone().allow_secrets().check::<Copier>());
    assert_eq!(
        refused,
        "plugin copier declares its own parent kind Secret.v1 as a child; that needs the operator's grant (allowOwnKind: true for it in --config; --allow-own-kind for capstan test)"
    );
    assert!(secret.allow_secrets().allow_own_kind().check::<Copier>().is_ok());
}

#[test]
fn a_namespaced_parent_with_a_cluster_scoped_child_kind_is_refused_whatever_the_grants() {
    let cm = Fixture::parse("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: demo}").unwrap();
    let refused = declared(cm.allow_cluster_kind("ClusterRole").check::<Orphaner>());
    assert!(refused.contains("OwnerRefInvalidNamespace"), "{refused}");
}

#[test]
fn an_event_reason_the_host_would_not_record_refuses_the_response() {
    let with = |reason: &str| {
        Fixture::parse(&format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c, namespace: demo}}\ndata: {{reason: {reason:?}}}"
        ))
        .unwrap()
    };
    assert!(with("Announced").check::<Announcer>().is_ok());
    match with("failed job 7").check::<Announcer>() {
        Err(Failure::Refused(r)) => assert!(
            r.to_string()
                .starts_with("event 0: reason \"failed job 7\" is not CamelCase"),
            "{r}"
        ),
        other => panic!("expected a refusal, got {other:?}"),
    }
}
