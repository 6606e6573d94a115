//! Echo's real responses, from the fixtures its golden tests use, pass the checks every
//! `Fixture` applies — the host's own rules.

use capstan_sdk::testing::Fixture;
use echo::EchoReconciler;

fn fixture(name: &str) -> String {
    format!("{}/../plugins/echo/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn a_valid_echo_response_passes() {
    for (parent, children) in [
        ("echo.yaml", None),
        ("echo.yaml", Some("job-running.yaml")),
        ("echo-running.yaml", Some("job-succeeded.yaml")),
        ("echo-running.yaml", Some("job-failed.yaml")),
        ("echo-changed.yaml", Some("job-succeeded.yaml")),
    ] {
        let mut f = Fixture::load(fixture(parent)).unwrap();
        if let Some(c) = children {
            f = f.children_file(fixture(c)).unwrap();
        }
        let response = f
            .check::<EchoReconciler>()
            .unwrap_or_else(|e| panic!("{parent}: {e}"));
        assert_eq!(response.children.len(), 1, "{parent}: one Job");
    }
}

#[test]
fn echo_with_settings_and_a_related_config_map_passes_too() {
    let response = Fixture::load(fixture("echo-message-from.yaml"))
        .unwrap()
        .related_file(fixture("configmaps.yaml"))
        .unwrap()
        .settings_file(fixture("settings.yaml"))
        .unwrap()
        .check::<EchoReconciler>()
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(response.children.len(), 1, "one Job");
    // Without its ConfigMap: no Job at all, which passes as trivially.
    let missing = Fixture::load(fixture("echo-message-from.yaml"))
        .unwrap()
        .check::<EchoReconciler>()
        .unwrap();
    assert!(missing.children.is_empty());
}
