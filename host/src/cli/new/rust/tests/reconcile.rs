//! The reconcile logic, natively: `cargo test`, no Wasm.

use capstan_sdk::testing::Fixture;
use k8s_openapi::api::core::v1::ConfigMap;
use {{crate}}::{{{Kind}}Reconciler, {{Kind}}Status};

fn fixture(name: &str) -> String {
    format!("{}/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn a_new_{{crate}}_wants_a_config_map_with_its_greeting() {
    let response = Fixture::load(fixture("{{name}}.yaml"))
        .unwrap()
        .reconcile::<{{Kind}}Reconciler>()
        .unwrap();
    let maps: Vec<ConfigMap> = response.children_of().unwrap();
    assert_eq!(maps.len(), 1);
    let data = maps[0].data.clone().unwrap_or_default();
    assert_eq!(data["greeting"], "hello");
    let status: {{Kind}}Status = response.status_as().unwrap().expect("a status");
    assert_eq!(status.conditions[0].status, "True");
    assert_eq!(response.events.len(), 1, "one event the first time");
}

#[test]
fn an_empty_greeting_is_fatal() {
    let parent = serde_json::json!({
        "apiVersion": "example.com/v1alpha1", "kind": "{{Kind}}",
        "metadata": {"name": "x", "namespace": "demo", "generation": 1},
        "spec": {"greeting": " "},
    });
    let error = Fixture::new(parent).reconcile::<{{Kind}}Reconciler>().unwrap_err();
    assert!(error.to_string().contains("spec.greeting is empty"), "{error}");
}
