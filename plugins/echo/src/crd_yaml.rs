//! The committed CRD YAML (the plugin's and the Helm chart's copy) is generated from the
//! Rust type; this fails when either is stale.
//! Regenerate with `CAPSTAN_BLESS=1 cargo test -p echo --lib`.

use crate::Echo;
use kube::CustomResourceExt;

#[test]
fn committed_crd_matches_the_rust_type() {
    let generated = format!(
        "# Generated from plugins/echo/src/lib.rs by `CAPSTAN_BLESS=1 cargo test -p echo --lib`; do not edit.\n{}",
        serde_saphyr::to_string(&Echo::crd()).unwrap()
    );
    capstan_sdk::testing::assert_generated(concat!(env!("CARGO_MANIFEST_DIR"), "/crd.yaml"), &generated);
    // The Helm chart ships the same CRD (helm installs crds/ before anything else).
    capstan_sdk::testing::assert_generated(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../charts/capstan/crds/echoes.capstan.dev.yaml"
        ),
        &generated,
    );
}

#[test]
fn crd_requires_one_non_empty_message_source_and_has_a_status_subresource() {
    let crd = serde_json::to_value(Echo::crd()).unwrap();
    let version = &crd["spec"]["versions"][0];
    let spec = &version["schema"]["openAPIV3Schema"]["properties"]["spec"];
    assert_eq!(spec["properties"]["message"]["minLength"], 1);
    let key_ref = &spec["properties"]["messageFrom"]["properties"]["configMapKeyRef"];
    assert_eq!(key_ref["required"], serde_json::json!(["key", "name"]));
    assert_eq!(
        spec["x-kubernetes-validations"][0]["rule"], "has(self.message) != has(self.messageFrom)",
        "the API server refuses an Echo with both or neither"
    );
    assert!(version["subresources"]["status"].is_object());
    let conditions =
        &version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["conditions"];
    assert_eq!(
        conditions["x-kubernetes-list-map-keys"],
        serde_json::json!(["type"])
    );
    let columns: Vec<&str> = version["additionalPrinterColumns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(columns, ["Message", "Phase", "Ready", "Age"]);
    assert_eq!(crd["spec"]["scope"], "Namespaced");
}
