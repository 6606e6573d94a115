//! The committed CRD YAML (the plugin's and the Helm chart's copy) is generated from the
//! Rust type; this fails when either is stale.
//! Regenerate with `CAPSTAN_BLESS=1 cargo test -p scheduled-echo --lib`.

use crate::ScheduledEcho;
use kube::CustomResourceExt;

#[test]
fn committed_crd_matches_the_rust_type() {
    let generated = format!(
        "# Generated from plugins/scheduled-echo/src/lib.rs by `CAPSTAN_BLESS=1 cargo test -p scheduled-echo --lib`; do not edit.\n{}",
        serde_saphyr::to_string(&ScheduledEcho::crd()).unwrap()
    );
    capstan_sdk::testing::assert_generated(concat!(env!("CARGO_MANIFEST_DIR"), "/crd.yaml"), &generated);
    // The Helm chart ships the same CRD (helm installs crds/ before anything else).
    capstan_sdk::testing::assert_generated(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../charts/capstan/crds/scheduledechoes.capstan.dev.yaml"
        ),
        &generated,
    );
}

#[test]
fn crd_requires_message_and_schedule_and_has_a_status_subresource() {
    let crd = serde_json::to_value(ScheduledEcho::crd()).unwrap();
    assert_eq!(crd["metadata"]["name"], "scheduledechoes.capstan.dev");
    assert_eq!(crd["spec"]["scope"], "Namespaced");
    let version = &crd["spec"]["versions"][0];
    assert_eq!(version["name"], "v1alpha1");
    let schema = &version["schema"]["openAPIV3Schema"]["properties"];
    let spec = &schema["spec"];
    assert_eq!(spec["required"], serde_json::json!(["message", "schedule"]));
    assert_eq!(spec["properties"]["message"]["minLength"], 1);
    assert_eq!(spec["properties"]["schedule"]["type"], "string");
    let last = &schema["status"]["properties"]["lastScheduleTime"];
    assert_eq!(last["type"], "string");
    assert_eq!(last["format"], "date-time");
    assert!(version["subresources"]["status"].is_object());
    let columns: Vec<(&str, &str)> = version["additionalPrinterColumns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["name"].as_str().unwrap(), c["jsonPath"].as_str().unwrap()))
        .collect();
    assert_eq!(
        columns,
        [
            ("Message", ".spec.message"),
            ("Schedule", ".spec.schedule"),
            ("Last Schedule", ".status.lastScheduleTime"),
            ("Age", ".metadata.creationTimestamp"),
        ]
    );
}
