//! Trust in the apply path, against the real local control plane: what a plugin stops
//! returning leaves the cluster, nothing a plugin names is taken from another owner, a
//! cluster-scoped parent writes only where the operator allows, and one plugin's trouble
//! (an unserved kind, a file that prints or panics in `metadata()`) is its own.

use std::time::Duration;

use anyhow::{Context, Result};
use capstan::dev::{Plane, PlaneConfig};
use capstan_tests::host::{
    Host, echo, echo_resource, eventually, hostile_crd, hostile_resource, http_get, install_plugin_crd,
    mount, sample, start_host, start_host_with,
};
use capstan_tests::plugin;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

/// A `Hostile` object in mode `mode` with extra spec fields.
fn hostile(name: &str, mode: &str, spec: serde_json::Value) -> Result<DynamicObject> {
    let mut spec = spec;
    spec["mode"] = mode.into();
    Ok(serde_json::from_value(json!({
        "apiVersion": "capstan.dev/v1alpha1", "kind": "Hostile",
        "metadata": {"name": name}, "spec": spec,
    }))?)
}

/// Whether `events` hold a Warning with `reason` about the object named `name`.
async fn warned(events: &Api<Event>, name: &str, reason: &str) -> Result<Option<Event>> {
    Ok(events
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .find(|e| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                && e.type_.as_deref() == Some("Warning")
                && e.reason.as_deref() == Some(reason)
        }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_key_and_a_label_the_plugin_stops_sending_leave_the_child() -> Result<()> {
    let plane = Plane::shared().await?;
    plane.install_crds(&[hostile_crd()?]).await?;
    let ns = plane.namespace("trust-mirror").await?;
    let dir = std::env::temp_dir().join(format!("capstan-trust-{ns}"));
    let _host = start_host(plane, &["hostile"], &ns, &dir)?;
    let client = plane.client().await?;
    let hostiles: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &hostile_resource());
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let spec = json!({"data": {"keep": "1", "shape": "round"}, "labels": {"canary": "true"}});
    hostiles
        .create(&PostParams::default(), &hostile("m", "mirror", spec)?)
        .await?;
    eventually("the mirrored ConfigMap", Duration::from_secs(60), async || {
        let cm = config_maps.get_opt("m-0").await?;
        Ok(cm.filter(|c| {
            c.data
                .as_ref()
                .is_some_and(|d| d.get("shape").is_some_and(|v| v == "round"))
                && c.metadata
                    .labels
                    .as_ref()
                    .is_some_and(|l| l.contains_key("canary"))
        }))
    })
    .await?;

    // What `kubectl patch --type merge -p '{"spec":{"data":{"shape":null}}}'` does.
    let patch = json!({"spec": {"data": {"shape": null}, "labels": {"canary": null}}});
    hostiles
        .patch("m", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let cm = eventually(
        "the key and the label gone",
        Duration::from_secs(60),
        async || {
            let cm = config_maps.get("m-0").await?;
            let data = cm.data.clone().unwrap_or_default();
            let labels = cm.metadata.labels.clone().unwrap_or_default();
            Ok((!data.contains_key("shape") && !labels.contains_key("canary")).then_some(cm))
        },
    )
    .await?;
    assert_eq!(cm.data.unwrap()["keep"], "1", "what is still sent stays");
    let labels = cm.metadata.labels.unwrap();
    assert_eq!(
        labels["capstan.dev/plugin"], "hostile",
        "the host's own labels stay"
    );
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_of_another_owner_is_never_adopted() -> Result<()> {
    let plane = Plane::shared().await?;
    plane.install_crds(&[hostile_crd()?]).await?;
    let ns = plane.namespace("trust-adopt").await?;
    let dir = std::env::temp_dir().join(format!("capstan-trust-{ns}"));
    let host = start_host(plane, &["hostile"], &ns, &dir)?;
    let client = plane.client().await?;
    let hostiles: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &hostile_resource());
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);

    // A user's ConfigMap, and another parent's child.
    let precious: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "precious"}, "data": {"owner": "a user"},
    }))?;
    let created = config_maps.create(&PostParams::default(), &precious).await?;
    hostiles
        .create(&PostParams::default(), &hostile("first", "ok", json!({}))?)
        .await?;
    let first = eventually("first's ConfigMap", Duration::from_secs(60), async || {
        Ok(config_maps.get_opt("first-0").await?)
    })
    .await?;
    hostiles
        .create(
            &PostParams::default(),
            &hostile("thief", "adopt", json!({"arg": "precious"}))?,
        )
        .await?;
    hostiles
        .create(
            &PostParams::default(),
            &hostile("cuckoo", "adopt", json!({"arg": "first-0"}))?,
        )
        .await?;
    // A new child of its own, then the user's: refused as a whole (review L9).
    hostiles
        .create(
            &PostParams::default(),
            &hostile("half", "adopt-second", json!({"arg": "precious"}))?,
        )
        .await?;

    let event = eventually(
        "a ChildConflict Warning on thief",
        Duration::from_secs(60),
        async || warned(&events, "thief", "ChildConflict").await,
    )
    .await?;
    let note = event.note.unwrap_or_default();
    assert!(
        note.contains("ConfigMap") && note.contains("precious") && note.contains("no controller"),
        "the event names the object and its controller: {note}"
    );
    let event = eventually(
        "a ChildConflict Warning on cuckoo",
        Duration::from_secs(60),
        async || warned(&events, "cuckoo", "ChildConflict").await,
    )
    .await?;
    assert!(event.note.unwrap_or_default().contains("Hostile first"));
    eventually(
        "a ChildConflict Warning on half",
        Duration::from_secs(60),
        async || warned(&events, "half", "ChildConflict").await,
    )
    .await?;
    assert!(
        config_maps.get_opt("half-0").await?.is_none(),
        "a refused response wrote its first child"
    );

    // Nothing was written to either object.
    let after = config_maps.get("precious").await?;
    assert_eq!(after.data.unwrap()["owner"], "a user");
    assert!(after.metadata.owner_references.is_none() && after.metadata.labels.is_none());
    assert_eq!(
        after.metadata.resource_version, created.metadata.resource_version,
        "never written"
    );
    let first_after = config_maps.get("first-0").await?;
    assert_eq!(
        first_after.metadata.owner_references,
        first.metadata.owner_references
    );
    assert_eq!(first_after.data, first.data);
    let body = host.metrics().await?;
    assert!(
        sample(&body, r#"capstan_child_conflicts_total{plugin="hostile"}"#) >= 3.0,
        "{body}"
    );
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_scoped_parent_writes_only_into_allowed_namespaces() -> Result<()> {
    let plane = Plane::shared().await?;
    let client = plane.client().await?;
    let allowed = plane.namespace("tenant-a").await?;
    let other = plane.namespace("tenant-b").await?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    // `other` asks for its ConfigMap in kube-system.
    let patch = json!({"metadata": {"annotations": {"tenant.capstan.dev/into": "kube-system"}}});
    namespaces
        .patch(&other, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;

    let dir = std::env::temp_dir().join(format!("capstan-trust-{allowed}"));
    mount(&["tenant"], &dir)?;
    let config = dir.join("capstan.yaml");
    std::fs::write(
        &config,
        format!("plugins:\n- path: tenant.wasm\n  allowNamespaces: [{allowed}]\n"),
    )?;
    let _host = Host::start(
        plane,
        &["--config", config.to_str().unwrap()],
        &dir.join("host.log"),
        &[],
    )?;

    let mine: Api<ConfigMap> = Api::namespaced(client.clone(), &allowed);
    eventually(
        "the allowed namespace's ConfigMap",
        Duration::from_secs(60),
        async || Ok(mine.get_opt(&format!("tenant-{allowed}")).await?),
    )
    .await?;
    let events: Api<Event> = Api::all(client.clone());
    let event = eventually(
        "a refusal on the other Namespace",
        Duration::from_secs(60),
        async || warned(&events, &other, "InvalidResponse").await,
    )
    .await?;
    assert!(event.note.unwrap_or_default().contains("kube-system"));
    let system: Api<ConfigMap> = Api::namespaced(client.clone(), "kube-system");
    assert!(system.get_opt(&format!("tenant-{other}")).await?.is_none());
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unserved_plugin_waits_while_the_others_run_and_sigterm_always_ends_the_host() -> Result<()> {
    // A plane of its own: on the shared one, other tests install the kind meant to be unserved.
    let plane = &Plane::start(PlaneConfig::api_only()).await?;
    install_plugin_crd(plane, "echo").await?;
    let ns = plane.namespace("trust-unserved").await?;
    let dir = std::env::temp_dir().join(format!("capstan-trust-{ns}"));
    // Two plugins of concurrency 2 fill a pool of 4: calls wait for slots, never fault.
    let extra = [
        "--concurrency",
        "2",
        "--max-instances",
        "4",
        "--shutdown-timeout",
        "10s",
    ];
    let mut host = start_host_with(plane, &["echo", "hostile"], &ns, &dir, &extra)?;
    let client = plane.client().await?;
    let echoes: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &echo_resource());
    for i in 0..10 {
        echoes
            .create(&PostParams::default(), &echo(&format!("e{i}"), "served")?)
            .await?;
    }
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    eventually("a Job per Echo", Duration::from_secs(60), async || {
        Ok((jobs.list(&ListParams::default()).await?.items.len() == 10).then_some(()))
    })
    .await?;

    let health = eventually("the health address", Duration::from_secs(10), async || {
        Ok(host.address("health probes"))
    })
    .await?;
    let (status, body) = eventually(
        "hostile reported as waiting",
        Duration::from_secs(30),
        async || {
            let (status, body) = http_get(&health, "/readyz")?;
            Ok(body
                .contains("plugin hostile: not running")
                .then_some((status, body)))
        },
    )
    .await?;
    assert!(status.contains("503"), "{status}");
    assert!(
        body.contains("Hostile.capstan.dev/v1alpha1 is not served"),
        "{body}"
    );
    assert!(!body.contains("plugin echo"), "echo runs: {body}");
    assert!(!body.contains("Failed to parse"), "no kube noise: {body}");
    let metrics = host.metrics().await?;
    assert_eq!(sample(&metrics, r#"capstan_plugin_up{plugin="hostile"}"#), 0.0);
    assert_eq!(sample(&metrics, r#"capstan_plugin_up{plugin="echo"}"#), 1.0);
    assert_eq!(
        sample(
            &metrics,
            r#"capstan_wasm_faults_total{plugin="echo",cause="instantiate"}"#
        ),
        0.0,
        "a full pool makes calls wait, it does not fault them"
    );
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let faults = events.list(&ListParams::default()).await?.items;
    assert!(!faults.iter().any(|e| e.reason.as_deref() == Some("PluginFault")));

    // Its CRD appears: the plugin starts without a restart.
    plane.install_crds(&[hostile_crd()?]).await?;
    eventually("ready once hostile runs", Duration::from_secs(90), async || {
        Ok(http_get(&health, "/readyz")?.0.contains("200").then_some(()))
    })
    .await?;
    let hostiles: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &hostile_resource());
    hostiles
        .create(&PostParams::default(), &hostile("late", "ok", json!({}))?)
        .await?;
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    eventually(
        "the late plugin's ConfigMap",
        Duration::from_secs(60),
        async || Ok(config_maps.get_opt("late-0").await?),
    )
    .await?;
    assert_eq!(
        sample(&host.metrics().await?, r#"capstan_plugin_up{plugin="hostile"}"#),
        1.0
    );

    host.signal(libc::SIGTERM);
    assert_eq!(host.wait(Duration::from_secs(15))?.code(), Some(0));

    // SIGTERM right at start, before any cache has listed, ends it just the same.
    let early = dir.join("early");
    let mut host = start_host_with(plane, &["echo", "hostile"], &ns, &early, &extra)?;
    eventually(
        "the early host serving probes",
        Duration::from_secs(30),
        async || Ok(host.address("health probes")),
    )
    .await?;
    host.signal(libc::SIGTERM);
    assert_eq!(host.wait(Duration::from_secs(15))?.code(), Some(0));
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_reload_survives_plugins_that_print_or_panic_in_metadata() -> Result<()> {
    let plane = Plane::shared().await?;
    install_plugin_crd(plane, "echo").await?;
    let ns = plane.namespace("trust-reload").await?;
    let dir = std::env::temp_dir().join(format!("capstan-trust-{ns}"));
    let extra = ["--hot-reload", "--reload-interval", "300ms"];
    let mut host = start_host_with(plane, &["echo"], &ns, &dir, &extra)?;
    let health = eventually("the health address", Duration::from_secs(10), async || {
        Ok(host.address("health probes"))
    })
    .await?;
    eventually("ready", Duration::from_secs(60), async || {
        Ok(http_get(&health, "/readyz")?.0.contains("200").then_some(()))
    })
    .await?;

    // A new plugin whose metadata() prints (it is started), one whose metadata() panics
    // (refused), and echo.wasm replaced by the panicking one (refused; echo keeps serving).
    let put = |from: &str, to: &str| -> Result<()> {
        let tmp = dir.join(format!(".{to}.tmp"));
        std::fs::copy(plugin(from), &tmp)?;
        Ok(std::fs::rename(&tmp, dir.join(to))?)
    };
    put("tenant", "tenant.wasm")?;
    let client = plane.client().await?;
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    eventually(
        "the new plugin's ConfigMap",
        Duration::from_secs(60),
        async || Ok(config_maps.get_opt(&format!("tenant-{ns}")).await?),
    )
    .await?;
    put("broken-metadata", "broken.wasm")?;
    put("broken-metadata", "echo.wasm")?;
    eventually("both refused", Duration::from_secs(30), async || {
        let refused = host
            .log()
            .iter()
            .filter(|l| l["message"] == "new plugin file refused; the running version keeps serving")
            .count();
        Ok((refused >= 2).then_some(()))
    })
    .await?;
    let echoes: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &echo_resource());
    echoes
        .create(&PostParams::default(), &echo("after", "still served")?)
        .await?;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    eventually(
        "the old echo still serving",
        Duration::from_secs(60),
        async || Ok((!jobs.list(&ListParams::default()).await?.items.is_empty()).then_some(())),
    )
    .await?;
    assert!(http_get(&health, "/healthz")?.0.contains("200"));
    host.signal(libc::SIGTERM);
    assert_eq!(host.wait(Duration::from_secs(30))?.code(), Some(0), "no crash");
    let log = std::fs::read_to_string(dir.join("host.log"))?;
    assert!(!log.contains("Cannot start a runtime"), "{log}");
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_logs_where_it_listens_and_what_it_runs_at_the_default_level() -> Result<()> {
    let plane = Plane::shared().await?;
    install_plugin_crd(plane, "echo").await?;
    let ns = plane.namespace("trust-quiet").await?;
    let dir = std::env::temp_dir().join(format!("capstan-trust-{ns}"));
    mount(&["echo"], &dir)?;
    // No RUST_LOG: the default level.
    let args = ["--plugins", dir.to_str().context("utf-8")?, "--namespace", &ns];
    let mut host = Host::start(plane, &args, &dir.join("host.log"), &[("RUST_LOG", "")])?;
    eventually(
        "the addresses and the plugin logged",
        Duration::from_secs(60),
        async || {
            Ok((host.address("metrics").is_some()
                && host.address("health probes").is_some()
                && host
                    .log()
                    .iter()
                    .any(|l| l["message"] == "plugin loaded" && l["plugin"] == "echo"))
            .then_some(()))
        },
    )
    .await?;
    // The body is OpenMetrics text, and says so.
    let metrics = host.address("metrics").context("metrics address")?;
    let head = raw_head(&metrics, "/metrics")?;
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/openmetrics-text; version=1.0.0"),
        "{head}"
    );
    host.signal(libc::SIGTERM);
    assert_eq!(host.wait(Duration::from_secs(30))?.code(), Some(0));
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}

/// The status line and headers of a plain HTTP/1.0 GET.
fn raw_head(addr: &str, path: &str) -> Result<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr)?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut text = String::new();
    stream.read_to_string(&mut text)?;
    Ok(text.split("\r\n\r\n").next().unwrap_or_default().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_that_would_change_the_request_path_are_refused_before_any_request() -> Result<()> {
    let plane = Plane::shared().await?;
    plane.install_crds(&[hostile_crd()?]).await?;
    let ns = plane.namespace("trust-names").await?;
    let dir = std::env::temp_dir().join(format!("capstan-trust-{ns}"));
    let _host = start_host(plane, &["hostile"], &ns, &dir)?;
    let client = plane.client().await?;
    let hostiles: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &hostile_resource());
    let long = "a".repeat(300);
    let names = [
        ("query", "x?dryRun=All&fieldManager=evil"),
        ("sub", "victim/status"),
        ("long", long.as_str()),
    ];
    for (object, name) in names {
        hostiles
            .create(
                &PostParams::default(),
                &hostile(object, "bad-name", json!({"arg": name}))?,
            )
            .await?;
    }
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    for (object, _) in names {
        let event = eventually(
            "an InvalidResponse Warning",
            Duration::from_secs(60),
            async || warned(&events, object, "InvalidResponse").await,
        )
        .await?;
        let note = event.note.unwrap_or_default();
        assert!(
            note.contains("metadata.name") && note.contains("RFC 1123"),
            "{note}"
        );
    }
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    // (kube-controller-manager puts kube-root-ca.crt into every namespace.)
    let written = config_maps
        .list(&ListParams::default().labels("capstan.dev/plugin"))
        .await?;
    assert!(written.items.is_empty(), "nothing written: {:?}", written.items);
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}
