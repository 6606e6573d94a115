//! Offline is online: each refusal `capstan run` makes on the real local control plane,
//! `capstan test` makes offline, in the same words — Secrets or the plugin's own parent
//! kind declared without the operator's grant, a cluster-scoped child kind of a
//! namespaced parent, a built-in kind declared with the wrong scope, and an event reason
//! the host would not record.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use capstan::dev::Plane;
use capstan_tests::host::{Host, eventually, hostile_crd, hostile_resource, mount};
use capstan_tests::{arg, capstan, echo_fixture, plugin, workspace};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use serde_json::json;

/// The words of a refusal: what follows the plugin file's path that starts the line.
fn words(line: &str) -> String {
    let line = line.trim().trim_start_matches("error: ");
    line.split_once(".wasm: ").map_or(line, |(_, w)| w).to_string()
}

/// `capstan test PLUGIN` with `flags`, refused before the plugin is called: exit 2 with
/// one line on stderr; its words.
fn offline(name: &str, flags: &[&str]) -> String {
    let (wasm, parent) = (plugin(name), echo_fixture("echo.yaml"));
    let out = capstan(&[&["test", arg(&wasm), "--parent", arg(&parent)][..], flags].concat());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{name} {flags:?}: {stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    words(&stderr)
}

/// A directory of its own for one `capstan run`.
fn scratch(case: &str) -> PathBuf {
    std::env::temp_dir().join(format!("capstan-parity-{case}-{}", std::process::id()))
}

/// `capstan run --config` on `name` alone, with the config entry's `grants` (YAML lines):
/// refused at load, so it exits 2; the words of its last stderr line.
fn online_at_load(plane: &Plane, name: &str, grants: &str) -> Result<String> {
    let dir = scratch(name);
    mount(&[name], &dir)?;
    let config = dir.join("config.yaml");
    std::fs::write(&config, format!("plugins:\n  - path: {name}.wasm\n{grants}"))?;
    let log = dir.join("host.log");
    let mut host = Host::start(plane, &["--config", arg(&config)], &log, &[])?;
    let status = host.wait(Duration::from_secs(120))?;
    let text = std::fs::read_to_string(&log)?;
    assert_eq!(status.code(), Some(2), "{text}");
    let last = text.lines().last().context("capstan run said nothing")?;
    std::fs::remove_dir_all(dir).ok();
    Ok(words(last))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_and_cluster_scoped_children_are_refused_at_load_in_the_same_words() -> Result<()> {
    let plane = Plane::shared().await?;
    // greedy declares Secret and its own parent kind (Echo) as children.
    let secrets = offline("greedy", &[]);
    assert!(secrets.starts_with("plugin greedy declares Secret"), "{secrets}");
    assert_eq!(online_at_load(plane, "greedy", "")?, secrets);

    let own_kind = offline("greedy", &["--allow-secrets"]);
    assert!(own_kind.contains("declares its own parent kind"), "{own_kind}");
    assert_eq!(
        online_at_load(plane, "greedy", "    allowSecrets: true\n")?,
        own_kind
    );
    let granted = capstan(&[
        "test",
        arg(&plugin("greedy")),
        "--parent",
        arg(&echo_fixture("echo.yaml")),
        "--allow-secrets",
        "--allow-own-kind",
    ]);
    assert_ne!(granted.status.code(), Some(2), "both grants load it");

    // A ClusterRole child of namespaced ConfigMaps: no grant makes it collectable.
    let orphans = offline("misdeclared-orphans", &["--allow-cluster-kind", "ClusterRole"]);
    assert!(orphans.contains("OwnerRefInvalidNamespace"), "{orphans}");
    let grant = "    allowClusterKinds: [ClusterRole]\n";
    assert_eq!(online_at_load(plane, "misdeclared-orphans", grant)?, orphans);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_built_in_kind_declared_with_the_wrong_scope_is_refused_as_discovery_refuses_it() -> Result<()> {
    let plane = Plane::shared().await?;
    let refused = offline("misdeclared", &[]);
    assert_eq!(
        refused,
        "kind ClusterRoleBinding.rbac.authorization.k8s.io/v1 is declared namespaced but the API server serves it cluster-scoped"
    );
    let ns = plane.namespace("parity-scope").await?;
    let dir = scratch("scope");
    mount(&["misdeclared"], &dir)?;
    let args = ["--plugins", arg(&dir), "--namespace", &ns];
    let host = Host::start(plane, &args, &dir.join("host.log"), &[])?;
    let online = eventually("discovery's refusal", Duration::from_secs(60), async || {
        Ok(host
            .log()
            .into_iter()
            .find(|l| l["message"] == "plugin not running; the other plugins run; retrying")
            .and_then(|l| l["error"].as_str().map(String::from)))
    })
    .await?;
    assert_eq!(online, refused);
    drop(host);
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_reason_the_host_would_not_record_is_refused_in_the_same_words() -> Result<()> {
    let fixture = workspace().join("tests/fixtures/hostile-reason.yaml");
    let out = capstan(&["test", arg(&plugin("hostile")), "--parent", arg(&fixture)]);
    assert_eq!(out.status.code(), Some(1), "a refused response is a plugin bug");
    let doc: serde_json::Value = serde_saphyr::from_slice(&out.stdout)?;
    let offline = doc["error"]["refused"].as_str().unwrap_or_default().to_string();
    assert!(
        offline.starts_with("event 0: reason \"failed job 7\""),
        "{offline}"
    );

    let plane = Plane::shared().await?;
    plane.install_crds(&[hostile_crd()?]).await?;
    let ns = plane.namespace("parity-reason").await?;
    let dir = scratch("reason");
    let _host = capstan_tests::host::start_host(plane, &["hostile"], &ns, &dir)?;
    let client = plane.client().await?;
    let hostiles: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &hostile_resource());
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "capstan.dev/v1alpha1", "kind": "Hostile",
        "metadata": {"name": "h"}, "spec": {"mode": "reason", "arg": "failed job 7"},
    }))?;
    hostiles.create(&PostParams::default(), &object).await?;
    let events: Api<Event> = Api::namespaced(client, &ns);
    let note = eventually(
        "the InvalidResponse Warning",
        Duration::from_secs(60),
        async || {
            Ok(events
                .list(&ListParams::default())
                .await?
                .items
                .into_iter()
                .find(|e| e.reason.as_deref() == Some("InvalidResponse"))
                .and_then(|e| e.note))
        },
    )
    .await?;
    assert_eq!(note, format!("nothing applied: {offline}"));
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}

#[test]
fn words_drop_only_the_plugin_path() {
    assert_eq!(
        words("error: /x/p.wasm: plugin p declares Secret"),
        "plugin p declares Secret"
    );
    assert_eq!(
        words("kind K is declared namespaced"),
        "kind K is declared namespaced"
    );
}
