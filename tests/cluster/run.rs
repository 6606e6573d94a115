//! `capstan run` end to end against the real local control plane (controller-manager,
//! scheduler and kwok's fake node running, so Jobs really complete).

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result};
use capstan::dev::Plane;
use capstan_tests::host::{
    Host, echo_resource, eventually, first_listed, hostile_crd, hostile_resource, http_get,
    install_plugin_crd, sample, scheduled_echo_resource, start_host, start_host_with,
};
use capstan_tests::{capstan_bin, compile_cache, workspace};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_becomes_a_job_that_completes_and_follows_the_echo() -> Result<()> {
    let plane = Plane::shared().await?;
    let crd: CustomResourceDefinition = serde_saphyr::from_str(&std::fs::read_to_string(
        workspace().join("plugins/echo/crd.yaml"),
    )?)?;
    plane.install_crds(&[crd]).await?;
    let ns = plane.namespace("run-echo").await?;
    let dir = std::env::temp_dir().join(format!("capstan-run-{ns}"));
    let host = start_host(plane, &["echo"], &ns, &dir)?;
    let client = plane.client().await?;
    let echoes: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &echo_resource());
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);

    let echo: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "capstan.dev/v1alpha1", "kind": "Echo",
        "metadata": {"name": "hello"}, "spec": {"message": "hello from a test"},
    }))?;
    let created = echoes.create(&PostParams::default(), &echo).await?;
    let uid = created.metadata.uid.clone().unwrap();

    let job = first_listed("the Echo's Job", &jobs, Duration::from_secs(60)).await?;
    let owner = &job.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!((owner.kind.as_str(), owner.uid.as_str()), ("Echo", uid.as_str()));
    assert_eq!(
        (owner.controller, owner.block_owner_deletion),
        (Some(true), Some(true))
    );
    let labels = job.metadata.labels.clone().unwrap();
    assert_eq!(labels["app.kubernetes.io/managed-by"], "capstan");
    assert_eq!(labels["capstan.dev/plugin"], "echo");
    let container = &job
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0];
    assert_eq!(
        container.command.as_deref().unwrap(),
        ["echo", "hello from a test"]
    );

    let status = eventually("status Succeeded", Duration::from_secs(90), async || {
        let e = echoes.get("hello").await?;
        Ok((e.data["status"]["phase"] == "Succeeded").then(|| e.data["status"].clone()))
    })
    .await?;
    assert_eq!(status["observedGeneration"], 1);
    assert_eq!(status["jobName"].as_str(), job.metadata.name.as_deref());
    let complete = jobs.get(job.metadata.name.as_deref().unwrap()).await?;
    assert!(
        complete
            .status
            .unwrap()
            .conditions
            .unwrap()
            .iter()
            .any(|c| c.type_ == "Complete" && c.status == "True")
    );

    // A new message is a new Job; the old one is pruned.
    let patch = json!({"spec": {"message": "changed"}});
    echoes
        .patch("hello", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let old = job.metadata.name.clone().unwrap();
    let new = eventually("the new Job alone", Duration::from_secs(60), async || {
        let names: Vec<String> = jobs
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter_map(|j| j.metadata.name)
            .collect();
        Ok((names.len() == 1 && names[0] != old).then(|| names[0].clone()))
    })
    .await?;
    eventually("status of generation 2", Duration::from_secs(90), async || {
        let e = echoes.get("hello").await?;
        let s = &e.data["status"];
        Ok(
            (s["observedGeneration"] == 2 && s["jobName"] == new.as_str() && s["phase"] == "Succeeded")
                .then_some(()),
        )
    })
    .await?;

    // Operations endpoints: ready, and controller-runtime's metric names.
    let health = eventually(
        "the health address in the log",
        Duration::from_secs(10),
        async || Ok(host.address("health probes")),
    )
    .await?;
    assert!(http_get(&health, "/readyz")?.0.contains("200"));
    assert!(http_get(&health, "/healthz")?.0.contains("200"));
    let metrics = host.address("metrics").context("metrics address logged")?;
    let (status, body) = http_get(&metrics, "/metrics")?;
    assert!(status.contains("200"), "{status}");
    // The host's default concurrency, as the binary was started without `--concurrency`.
    let concurrency = format!(
        r#"controller_runtime_max_concurrent_reconciles{{controller="echo"}} {}"#,
        capstan::controller::Options::default().concurrency
    );
    for needle in [
        r#"controller_runtime_reconcile_total{controller="echo",result="success"}"#,
        "controller_runtime_reconcile_time_seconds_bucket",
        "capstan_wasm_dispatch_seconds_bucket",
        &concurrency,
        r#"workqueue_depth{name="echo"}"#,
        r#"workqueue_queue_duration_seconds_count{name="echo"}"#,
        r#"workqueue_work_duration_seconds_count{name="echo"}"#,
    ] {
        assert!(body.contains(needle), "{needle} missing from /metrics:\n{body}");
    }
    // Created, Job created, Job progressing, status written, message edited, ...: each
    // trigger while the key is not waiting is one add; every add is one reconcile start.
    let adds = sample(&body, r#"workqueue_adds_total{name="echo"}"#);
    let reconciles = sample(
        &body,
        r#"controller_runtime_reconcile_total{controller="echo",result="success"}"#,
    );
    assert!(adds >= 3.0, "workqueue_adds_total {adds}");
    let errors = sample(
        &body,
        r#"controller_runtime_reconcile_total{controller="echo",result="error"}"#,
    );
    // A reconcile that waited for the caches to show its parent's last writes.
    let waited = sample(
        &body,
        r#"controller_runtime_reconcile_total{controller="echo",result="requeue_after"}"#,
    );
    assert!(
        adds <= reconciles + errors + waited + 1.0,
        "adds {adds} vs reconciles {reconciles}"
    );

    // Deleting the Echo garbage-collects its Job.
    echoes.delete("hello", &DeleteParams::background()).await?;
    eventually("the Job to be collected", Duration::from_secs(60), async || {
        Ok(jobs
            .list(&ListParams::default())
            .await?
            .items
            .is_empty()
            .then_some(()))
    })
    .await?;
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}

/// `capstan run ARGS` must fail with exit 2 and one stderr line containing `needle`.
fn expect_one_line_exit_2(plane: &Plane, args: &[&str], needle: &str) -> Result<()> {
    let mut child = Command::new(capstan_bin())
        .arg("run")
        .args(args)
        .args(["--metrics-addr", "127.0.0.1:0", "--health-addr", "127.0.0.1:0"])
        .env("KUBECONFIG", plane.kubeconfig())
        .env("RUST_LOG", "off")
        .env("CAPSTAN_CACHE_DIR", compile_cache())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    // A host that does not fail must not hang the test.
    let start = std::time::Instant::now();
    while child.try_wait()?.is_none() {
        if start.elapsed() > Duration::from_secs(60) {
            child.kill()?;
            anyhow::bail!("{args:?}: still running after 60 s instead of exiting 2");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    assert!(stderr.contains(needle), "{args:?}: {stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_plugins_or_unserved_kinds_are_one_line_and_exit_2() -> Result<()> {
    // A plane of its own: on the shared one, other tests install the kind meant to be unserved.
    let plane = &Plane::start(capstan::dev::PlaneConfig::api_only()).await?;
    let dir = std::env::temp_dir().join(format!("capstan-run-bad-{}", std::process::id()));
    let core = dir.join("core");
    std::fs::create_dir_all(&core)?;
    std::fs::write(core.join("core.wasm"), b"\0asm\x01\0\0\0")?;
    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty)?;
    // (An unserved kind is no longer fatal: the plugin waits for it, see tests/cluster/trust.rs.)
    for (plugins, needle) in [
        (dir.join("missing"), "cannot read plugin directory"),
        (empty, "no *.wasm plugins"),
        (core, "not a component"),
    ] {
        expect_one_line_exit_2(plane, &["--plugins", plugins.to_str().unwrap()], needle)?;
    }
    let configs = [
        ("plugins: [unclosed", "config.yaml"),
        ("plugins:\n- path: echo.wasm\n  concurency: 2\n", "concurency"),
        ("plugins:\n- path: missing.wasm\n", "cannot read"),
    ];
    for (text, needle) in configs {
        let file = dir.join("config.yaml");
        std::fs::write(&file, text)?;
        expect_one_line_exit_2(plane, &["--config", file.to_str().unwrap()], needle)?;
    }
    // Lease timings that would let two leaders overlap are refused before anything starts.
    let echo_dir = dir.join("echo");
    capstan_tests::host::mount(&["echo"], &echo_dir)?;
    let plugins = echo_dir.to_str().unwrap();
    let overlap = [
        "--plugins",
        plugins,
        "--leader-elect",
        "--lease-duration",
        "10s",
        "--renew-deadline",
        "12s",
    ];
    expect_one_line_exit_2(plane, &overlap, "must be shorter than --lease-duration")?;
    // A plugin whose measured instance does not fit the memory budget, and nothing else to
    // run. (More concurrency than the instance pool is no error: plugins share the pool.)
    let crowded = ["--plugins", plugins, "--memory-budget", "1Mi"];
    expect_one_line_exit_2(
        plane,
        &crowded,
        "the host's memory budget of 1 MiB has 1 MiB left",
    )?;
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_responses_write_nothing_and_a_faulting_object_does_not_block_others() -> Result<()> {
    let plane = Plane::shared().await?;
    plane.install_crds(&[hostile_crd()?]).await?;
    let ns = plane.namespace("run-hostile").await?;
    let dir = std::env::temp_dir().join(format!("capstan-run-{ns}"));
    let host = start_host(plane, &["hostile"], &ns, &dir)?;
    let client = plane.client().await?;
    let resource = hostile_resource();
    let hostiles: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &resource);
    let modes = ["undeclared", "other-namespace", "cluster", "panic", "ok"];
    for mode in modes {
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "capstan.dev/v1alpha1", "kind": "Hostile",
            "metadata": {"name": mode}, "spec": {"mode": mode, "arg": ns},
        }))?;
        hostiles.create(&PostParams::default(), &object).await?;
    }

    // The well-behaved object converges although its neighbour traps on every try.
    let config_maps: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), &ns);
    eventually("the ok object's ConfigMap", Duration::from_secs(60), async || {
        Ok(config_maps.get_opt("ok-0").await?)
    })
    .await?;

    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), &ns);
    let reasons = eventually(
        "a Warning event on every bad object",
        Duration::from_secs(60),
        async || {
            let list = events.list(&ListParams::default()).await?.items;
            let warned = |name: &str, reason: &str| {
                list.iter().any(|e| {
                    e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                        && e.type_.as_deref() == Some("Warning")
                        && e.reason.as_deref() == Some(reason)
                })
            };
            let all = ["undeclared", "other-namespace", "cluster"]
                .iter()
                .all(|m| warned(m, "InvalidResponse"))
                && warned("panic", "PluginFault");
            Ok(all.then_some(list.len()))
        },
    )
    .await?;
    assert!(reasons >= 4);

    // Nothing of a refused response was written.
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), &ns);
    assert!(secrets.get_opt("stolen").await?.is_none());
    let system_cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), "kube-system");
    assert!(system_cms.get_opt("other-namespace-0").await?.is_none());
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    assert!(namespaces.get_opt(&format!("hostile-{ns}")).await?.is_none());

    // The faulting object backs off and retries, visibly.
    let metrics = host.address("metrics").context("metrics address logged")?;
    let body = eventually(
        "retries of the faulting object",
        Duration::from_secs(30),
        async || {
            let body = http_get(&metrics, "/metrics")?.1;
            let retried = body.lines().any(|l| {
                l.starts_with(r#"workqueue_retries_total{name="hostile"}"#)
                    && l.rsplit(' ')
                        .next()
                        .and_then(|v| v.parse::<f64>().ok())
                        .is_some_and(|v| v >= 3.0)
            });
            Ok(retried.then_some(body))
        },
    )
    .await?;
    // Both series exist from the plugin's start at 0: each must have counted.
    assert!(
        sample(
            &body,
            r#"capstan_wasm_faults_total{plugin="hostile",cause="panic"}"#
        ) >= 1.0,
        "{body}"
    );
    assert!(
        sample(
            &body,
            r#"capstan_plugin_response_refused_total{plugin="hostile"}"#
        ) >= 1.0,
        "{body}"
    );
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declared_finalizer_holds_deletion_until_the_plugin_says_finalized() -> Result<()> {
    let plane = Plane::shared().await?;
    plane.install_crds(&[hostile_crd()?]).await?;
    let ns = plane.namespace("run-finalizer").await?;
    let dir = std::env::temp_dir().join(format!("capstan-run-{ns}"));
    let _host = start_host(plane, &["hostile"], &ns, &dir)?;
    let client = plane.client().await?;
    let resource = hostile_resource();
    let hostiles: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &resource);
    for mode in ["ok", "hold"] {
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "capstan.dev/v1alpha1", "kind": "Hostile",
            "metadata": {"name": mode}, "spec": {"mode": mode},
        }))?;
        hostiles.create(&PostParams::default(), &object).await?;
    }
    let config_maps: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), &ns);
    for mode in ["ok", "hold"] {
        eventually(
            "the finalizer and the child",
            Duration::from_secs(60),
            async || {
                let parent = hostiles.get(mode).await?;
                let finalized = parent.finalizers().iter().any(|f| f == "capstan.dev/hostile");
                Ok((finalized && config_maps.get_opt(&format!("{mode}-0")).await?.is_some()).then_some(()))
            },
        )
        .await?;
        hostiles.delete(mode, &DeleteParams::default()).await?;
    }

    // The plugin lets go of "ok": it is gone. "hold" is finalizing but stays.
    eventually(
        "the ok object to be deleted",
        Duration::from_secs(60),
        async || Ok(hostiles.get_opt("ok").await?.is_none().then_some(())),
    )
    .await?;
    let held = eventually(
        "the held object's plugin call",
        Duration::from_secs(60),
        async || {
            let held = hostiles.get("hold").await?;
            let called = held.data["status"]["result"] == "finalizing in mode hold";
            Ok(called.then_some(held))
        },
    )
    .await?;
    assert!(held.metadata.deletion_timestamp.is_some());
    assert!(held.finalizers().iter().any(|f| f == "capstan.dev/hostile"));

    // Once the plugin says finalized, the finalizer goes and so does the object.
    let patch = json!({"spec": {"mode": "ok"}});
    hostiles
        .patch("hold", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    eventually(
        "the held object to be deleted",
        Duration::from_secs(60),
        async || Ok(hostiles.get_opt("hold").await?.is_none().then_some(())),
    )
    .await?;

    // A live parent the plugin holds nothing for ("release": finalized, no children)
    // carries no finalizer; once it makes a child the finalizer is on first, and it goes
    // again, with the child, when the plugin lets the parent go.
    let live: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "capstan.dev/v1alpha1", "kind": "Hostile",
        "metadata": {"name": "release"}, "spec": {"mode": "ok"},
    }))?;
    hostiles.create(&PostParams::default(), &live).await?;
    let holding = async |want: bool| {
        eventually(
            "the live parent's finalizer and child",
            Duration::from_secs(60),
            async || {
                let parent = hostiles.get("release").await?;
                let finalizer = parent.finalizers().iter().any(|f| f == "capstan.dev/hostile");
                let child = config_maps.get_opt("release-0").await?.is_some();
                Ok((finalizer == want && child == want).then_some(()))
            },
        )
        .await
    };
    holding(true).await?;
    let release = |mode: &str| json!({"spec": {"mode": mode}});
    hostiles
        .patch(
            "release",
            &PatchParams::default(),
            &Patch::Merge(&release("release")),
        )
        .await?;
    holding(false).await?;
    hostiles
        .patch("release", &PatchParams::default(), &Patch::Merge(&release("ok")))
        .await?;
    holding(true).await?;
    hostiles.delete("release", &DeleteParams::default()).await?;

    // A plugin that never lets go: an admin releases the finalizer with the annotation.
    let stuck: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "capstan.dev/v1alpha1", "kind": "Hostile",
        "metadata": {"name": "stuck"}, "spec": {"mode": "hold"},
    }))?;
    hostiles.create(&PostParams::default(), &stuck).await?;
    eventually(
        "the stuck object's finalizer",
        Duration::from_secs(60),
        async || {
            let parent = hostiles.get("stuck").await?;
            Ok(parent
                .finalizers()
                .iter()
                .any(|f| f == "capstan.dev/hostile")
                .then_some(()))
        },
    )
    .await?;
    hostiles.delete("stuck", &DeleteParams::default()).await?;
    let release = json!({"metadata": {"annotations": {"capstan.dev/release-finalizer": "true"}}});
    hostiles
        .patch("stuck", &PatchParams::default(), &Patch::Merge(&release))
        .await?;
    eventually(
        "the released object to be deleted",
        Duration::from_secs(60),
        async || Ok(hostiles.get_opt("stuck").await?.is_none().then_some(())),
    )
    .await?;
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), &ns);
    eventually(
        "a FinalizerReleased Warning",
        Duration::from_secs(30),
        async || {
            let list = events.list(&ListParams::default()).await?.items;
            Ok(list
                .iter()
                .any(|e| {
                    e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("stuck")
                        && e.reason.as_deref() == Some("FinalizerReleased")
                })
                .then_some(()))
        },
    )
    .await?;
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}

/// `capstan run` on Echo alone in `ns`, its config file entry `path: echo.wasm` followed by
/// `entry` (indented YAML lines); and the directory it runs from.
fn start_echo(plane: &Plane, ns: &str, entry: &str) -> Result<(Host, PathBuf)> {
    let dir = std::env::temp_dir().join(format!("capstan-run-{ns}"));
    std::fs::create_dir_all(&dir)?;
    let config = dir.join("capstan.yaml");
    std::fs::write(&config, format!("plugins:\n- path: echo.wasm\n{entry}"))?;
    let config = config.to_str().context("utf-8 path")?;
    Ok((
        start_host_with(plane, &["echo"], ns, &dir, &["--config", config])?,
        dir,
    ))
}

/// The creation budget holds back what creates without end, not a plugin with many
/// parents: 40 Echos of a user's under `creationsPerSecond: 1` (2 at once) get their Jobs
/// on their own allowances, and no reconcile is put off for a creation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_users_many_parents_create_their_children_however_low_the_plugins_rate() -> Result<()> {
    let plane = Plane::shared().await?;
    install_plugin_crd(plane, "echo").await?;
    let ns = plane.namespace("run-allowance").await?;
    let (host, _) = start_echo(plane, &ns, "  limits: {creationsPerSecond: 1}\n")?;
    let client = plane.client().await?;
    let echoes: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &echo_resource());
    for i in 0..40 {
        let echo = capstan_tests::host::echo(&format!("e{i}"), &format!("message {i}"))?;
        echoes.create(&PostParams::default(), &echo).await?;
    }
    let jobs: Api<Job> = Api::namespaced(client, &ns);
    eventually(
        "a Job for each of 40 Echos",
        Duration::from_secs(180),
        async || {
            let owners: std::collections::BTreeSet<String> = jobs
                .list(&ListParams::default())
                .await?
                .items
                .iter()
                .flat_map(|j| j.owner_references().iter().map(|o| o.name.clone()))
                .collect();
            Ok((owners.len() == 40).then_some(()))
        },
    )
    .await?;
    let metrics = host.address("metrics").context("metrics address logged")?;
    let body = http_get(&metrics, "/metrics")?.1;
    let put_off = r#"capstan_reconcile_put_off_total{plugin="echo",cause="creation_rate"}"#;
    assert!(body.contains(put_off), "the cause is exported:\n{body}");
    assert_eq!(
        sample(&body, put_off),
        0.0,
        "a creation of a user's parent waited"
    );
    echoes
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steady_state_is_quiet_a_full_resync_of_50_echos_writes_nothing() -> Result<()> {
    let plane = Plane::shared().await?;
    let crd: CustomResourceDefinition = serde_saphyr::from_str(&std::fs::read_to_string(
        workspace().join("plugins/echo/crd.yaml"),
    )?)?;
    plane.install_crds(&[crd]).await?;
    let ns = plane.namespace("run-quiet").await?;
    // The resync period comes from a config file entry for the plugin.
    let entry = "  resync: 3s\n  concurrency: 4\n";
    let (host, dir) = start_echo(plane, &ns, entry)?;
    let client = plane.client().await?;
    let echoes: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &echo_resource());
    for i in 0..50 {
        let echo: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "capstan.dev/v1alpha1", "kind": "Echo",
            "metadata": {"name": format!("e{i}")}, "spec": {"message": format!("message {i}")},
        }))?;
        echoes.create(&PostParams::default(), &echo).await?;
    }
    eventually("50 Echos Succeeded", Duration::from_secs(180), async || {
        let list = echoes.list(&ListParams::default()).await?.items;
        Ok(list
            .iter()
            .all(|e| e.data["status"]["phase"] == "Succeeded")
            .then_some(()))
    })
    .await?;
    let metrics = host.address("metrics").context("metrics address logged")?;
    let reconciles = r#"controller_runtime_reconcile_total{controller="echo",result="success"}"#;
    let writes = r#"capstan_api_writes_total{plugin="echo"}"#;
    // The baseline once the last status writes' watch events have settled: 50 more
    // reconciles (a full resync's worth) since every Echo was seen Succeeded, so every
    // reconcile that converged one (and recorded its events) has finished.
    let converged = sample(&http_get(&metrics, "/metrics")?.1, reconciles);
    let before = eventually(
        "a full resync after convergence",
        Duration::from_secs(90),
        async || {
            let body = http_get(&metrics, "/metrics")?.1;
            Ok((sample(&body, reconciles) >= converged + 50.0).then_some(body))
        },
    )
    .await?;
    // Two full resyncs: every Echo is reconciled again, so any write a resync makes has
    // been made by then.
    let after = eventually(
        "two full resyncs after the baseline",
        Duration::from_secs(90),
        async || {
            let body = http_get(&metrics, "/metrics")?.1;
            Ok((sample(&body, reconciles) >= sample(&before, reconciles) + 100.0).then_some(body))
        },
    )
    .await?;
    let resynced = sample(&after, reconciles) - sample(&before, reconciles);
    assert!(
        resynced >= 50.0,
        "a full resync reconciled only {resynced} objects"
    );
    assert_eq!(
        sample(&after, writes),
        sample(&before, writes),
        "steady state wrote to the API"
    );
    assert!(
        sample(&after, writes) >= 150.0,
        "sanity: convergence itself wrote (Job, status, events)"
    );
    // Nothing changed, so the resyncs found each Echo's inputs as its last quiet
    // reconcile left them and did not call the plugin.
    let unchanged = r#"capstan_reconcile_unchanged_total{plugin="echo"}"#;
    let skipped = sample(&after, unchanged) - sample(&before, unchanged);
    assert!(
        skipped >= 50.0,
        "only {skipped} of {resynced} resync reconciles skipped the plugin"
    );

    // After a restart the caches start from a list (whose items carry no type): statuses
    // stay Succeeded and a full resync still writes nothing.
    let mut host = host;
    host.signal(libc::SIGTERM);
    assert_eq!(host.wait(Duration::from_secs(30))?.code(), Some(0));
    let (host, _) = start_echo(plane, &ns, entry)?;
    let metrics = eventually("the new host's metrics", Duration::from_secs(30), async || {
        Ok(host.address("metrics"))
    })
    .await?;
    eventually(
        "two full resyncs after the restart",
        Duration::from_secs(60),
        async || {
            let body = http_get(&metrics, "/metrics")?.1;
            Ok((sample(&body, reconciles) >= 100.0).then_some(()))
        },
    )
    .await?;
    let body = http_get(&metrics, "/metrics")?.1;
    assert_eq!(sample(&body, writes), 0.0, "the restarted host wrote:\n{body}");
    let list = echoes.list(&ListParams::default()).await?.items;
    assert!(list.iter().all(|e| e.data["status"]["phase"] == "Succeeded"));
    // A changed input is never answered from memory: a deleted Job comes back.
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let name = echoes.get("e7").await?.data["status"]["jobName"]
        .as_str()
        .context("e7's status names its Job")?
        .to_string();
    let gone = jobs.get(&name).await?;
    jobs.delete(&name, &DeleteParams::background()).await?;
    eventually(
        "the deleted Job re-created",
        Duration::from_secs(60),
        async || {
            Ok(jobs
                .get_opt(&name)
                .await?
                .filter(|j| j.uid() != gone.uid())
                .map(|_| ()))
        },
    )
    .await?;
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduled_echo_becomes_a_cron_job_updated_in_place_beside_echo() -> Result<()> {
    let plane = Plane::shared().await?;
    let mut crds = Vec::new();
    for plugin in ["echo", "scheduled-echo"] {
        let text = std::fs::read_to_string(workspace().join("plugins").join(plugin).join("crd.yaml"))?;
        crds.push(serde_saphyr::from_str::<CustomResourceDefinition>(&text)?);
    }
    plane.install_crds(&crds).await?;
    let ns = plane.namespace("run-sched").await?;
    let dir = std::env::temp_dir().join(format!("capstan-run-{ns}"));
    let _host = start_host(plane, &["echo", "scheduled-echo"], &ns, &dir)?;
    let client = plane.client().await?;
    let resource = scheduled_echo_resource();
    let parents: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &resource);
    let cron_jobs: Api<k8s_openapi::api::batch::v1::CronJob> = Api::namespaced(client.clone(), &ns);
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "capstan.dev/v1alpha1", "kind": "ScheduledEcho",
        "metadata": {"name": "tick"}, "spec": {"message": "tick", "schedule": "*/5 * * * *"},
    }))?;
    let created = parents.create(&PostParams::default(), &object).await?;
    let first = first_listed("the CronJob", &cron_jobs, Duration::from_secs(60)).await?;
    let spec = first.spec.clone();
    assert_eq!(spec.schedule, "*/5 * * * *");
    assert_eq!(spec.concurrency_policy.as_deref(), Some("Forbid"));
    assert_eq!(
        first.metadata.owner_references.as_ref().unwrap()[0].uid,
        created.metadata.uid.clone().unwrap()
    );

    // A new schedule updates the same CronJob in place.
    let patch = json!({"spec": {"schedule": "0 * * * *"}});
    parents
        .patch("tick", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let updated = eventually(
        "the CronJob's new schedule",
        Duration::from_secs(60),
        async || {
            let list = cron_jobs.list(&ListParams::default()).await?.items;
            Ok(list.into_iter().find(|c| c.spec.schedule == "0 * * * *"))
        },
    )
    .await?;
    assert_eq!(
        updated.metadata.uid, first.metadata.uid,
        "updated in place, not replaced"
    );
    assert_eq!(cron_jobs.list(&ListParams::default()).await?.items.len(), 1);

    // An invalid schedule is fatal: a Warning event and the CronJob left as it was.
    let patch = json!({"spec": {"schedule": "61 * * * *"}});
    parents
        .patch("tick", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), &ns);
    let note = eventually("a ReconcileFailed event", Duration::from_secs(60), async || {
        let list = events.list(&ListParams::default()).await?.items;
        Ok(list
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("ReconcileFailed"))
            .and_then(|e| e.note))
    })
    .await?;
    assert!(note.contains("61"), "{note}");
    let kept = cron_jobs.get(updated.metadata.name.as_deref().unwrap()).await?;
    assert_eq!(kept.spec.schedule, "0 * * * *");
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}

/// `capstan run --record DIR` writes every dispatched reconcile; `capstan test --replay`
/// re-runs them: with the recorded version nothing differs (the determinism promise),
/// with a new version exactly the reconciles whose answer it changes are listed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recorded_reconciles_replay_identically_and_a_new_version_lists_its_changes() -> Result<()> {
    let plane = Plane::shared().await?;
    let crd: CustomResourceDefinition = serde_saphyr::from_str(&std::fs::read_to_string(
        workspace().join("plugins/echo/crd.yaml"),
    )?)?;
    plane.install_crds(&[crd]).await?;
    let ns = plane.namespace("run-record").await?;
    let dir = std::env::temp_dir().join(format!("capstan-run-{ns}"));
    let recordings = dir.join("recorded");
    let mut host = start_host_with(
        plane,
        &["echo"],
        &ns,
        &dir.join("plugins"),
        &["--record", recordings.to_str().context("utf-8")?],
    )?;
    let client = plane.client().await?;
    let echoes: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &echo_resource());
    // 40 with a message (a Job each) and 10 blank ones (a fatal error, whatever the version).
    for i in 0..50 {
        let message = if i < 40 {
            format!("message {i}")
        } else {
            "   ".to_string()
        };
        let echo: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "capstan.dev/v1alpha1", "kind": "Echo",
            "metadata": {"name": format!("e{i}")}, "spec": {"message": message},
        }))?;
        echoes.create(&PostParams::default(), &echo).await?;
    }
    eventually("100 reconciles recorded", Duration::from_secs(120), async || {
        let files = capstan::record::files(&recordings).unwrap_or_default();
        Ok((files.len() >= 100).then_some(()))
    })
    .await?;
    host.signal(libc::SIGTERM);
    host.wait(Duration::from_secs(30))?;
    let recorded: Vec<capstan::record::Recording> = capstan::record::files(&recordings)?
        .iter()
        .map(|(path, _)| capstan::record::Recording::read(path))
        .collect::<Result<_>>()?;
    assert!(recorded.len() >= 100, "{} recorded", recorded.len());
    let replay = |wasm: &std::path::Path| {
        Command::new(capstan_bin())
            .args([
                "test",
                "--replay",
                recordings.to_str().unwrap(),
                wasm.to_str().unwrap(),
            ])
            .env("CAPSTAN_CACHE_DIR", compile_cache())
            .output()
    };
    let same = replay(&capstan_tests::plugin("echo"))?;
    let out = String::from_utf8_lossy(&same.stdout);
    assert!(
        same.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&same.stderr)
    );
    let all = recorded.len();
    assert!(
        out.contains(&format!("{all} reconciles replayed: {all} unchanged, 0 changed")),
        "{out}"
    );
    // The canary labels its Jobs: every answer with a Job changes, no fatal one does.
    let with_jobs: std::collections::BTreeSet<String> = recorded
        .iter()
        .filter(|r| r.outcome["children"].as_array().is_some_and(|c| !c.is_empty()))
        .map(|r| r.object())
        .collect();
    assert_eq!(
        with_jobs.len(),
        40,
        "every Echo with a message was recorded with its Job"
    );
    let canary = replay(&capstan_tests::echo_canary())?;
    let out = String::from_utf8_lossy(&canary.stdout);
    assert_eq!(canary.status.code(), Some(1), "{out}");
    let listed: std::collections::BTreeSet<String> = out
        .lines()
        .filter_map(|l| l.strip_prefix("changed: ")?.split(' ').next().map(String::from))
        .collect();
    assert_eq!(listed, with_jobs, "{out}");
    assert!(
        out.contains("capstan.dev/canary"),
        "the diff shows the label: {out}"
    );
    let changed = recorded
        .iter()
        .filter(|r| r.outcome["children"].as_array().is_some_and(|c| !c.is_empty()))
        .count();
    assert!(
        out.contains(&format!(
            "{all} reconciles replayed: {} unchanged, {changed} changed",
            all - changed
        )),
        "{out}"
    );
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}

/// A child another tool relabels for a different plugin is that plugin's from then on:
/// the first plugin's cache lets it go (its parent is told), and a new version of the
/// parent that no longer wants it prunes only what it still holds — never the relabelled
/// object (review L11: the stale copy was pruned by UID alone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_relabelled_for_another_plugin_is_never_pruned_by_the_first() -> Result<()> {
    let plane = Plane::shared().await?;
    install_plugin_crd(plane, "echo").await?;
    let ns = plane.namespace("run-relabel").await?;
    let dir = std::env::temp_dir().join(format!("capstan-run-{ns}"));
    let _host = start_host(plane, &["echo"], &ns, &dir)?;
    let client = plane.client().await?;
    let echoes: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &echo_resource());
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let echo: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "capstan.dev/v1alpha1", "kind": "Echo",
        "metadata": {"name": "taken"}, "spec": {"message": "one"},
    }))?;
    echoes.create(&PostParams::default(), &echo).await?;
    let first = first_listed("the Echo's Job", &jobs, Duration::from_secs(60))
        .await?
        .name_any();

    // Another tool takes the Job: its plugin label now names someone else.
    let relabel = json!({"metadata": {"labels": {"capstan.dev/plugin": "another-tool"}}});
    jobs.patch(&first, &PatchParams::default(), &Patch::Merge(&relabel))
        .await?;
    // A new message wants a new Job and no longer the first.
    let patch = json!({"spec": {"message": "two"}});
    echoes
        .patch("taken", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    // The status of generation 2 is written by the reconcile that made the new Job and
    // pruned what it no longer wants, so by then the first Job's fate is decided.
    let second = eventually("status of generation 2", Duration::from_secs(90), async || {
        let e = echoes.get("taken").await?;
        let s = &e.data["status"];
        Ok((s["observedGeneration"] == 2 && s["jobName"] != first.as_str())
            .then(|| s["jobName"].as_str().map(String::from))
            .flatten())
    })
    .await?;
    assert!(jobs.get_opt(&second).await?.is_some(), "the new Job");
    let kept = jobs
        .get_opt(&first)
        .await?
        .context("the relabelled Job was pruned by the plugin it left")?;
    assert_eq!(kept.labels()["capstan.dev/plugin"], "another-tool");
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}

/// Another controller owns one condition of the Echo's `status.conditions` (a list-map by
/// `type`, the Kubernetes convention), so Echo's status never *looks* applied: the list is
/// longer than Echo's. The server holds Echo's part all the same, so its writes change
/// nothing: a full resync writes nothing, and the co-writer's changes never make a
/// `WriteLoop` of Echo's writes (review M2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_condition_list_shared_with_another_writer_is_quiet_and_never_a_write_loop() -> Result<()> {
    let plane = Plane::shared().await?;
    install_plugin_crd(plane, "echo").await?;
    let ns = plane.namespace("run-shared").await?;
    let (host, dir) = start_echo(plane, &ns, "  resync: 2s\n")?;
    let client = plane.client().await?;
    let echoes: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &echo_resource());
    let echo: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "capstan.dev/v1alpha1", "kind": "Echo",
        "metadata": {"name": "shared"}, "spec": {"message": "hi"},
    }))?;
    echoes.create(&PostParams::default(), &echo).await?;
    eventually("the Echo Succeeded", Duration::from_secs(90), async || {
        Ok((echoes.get("shared").await?.data["status"]["phase"] == "Succeeded").then_some(()))
    })
    .await?;

    // The co-writer applies its own condition, and changes it again and again.
    let audit = |n: usize| {
        json!({
            "apiVersion": "capstan.dev/v1alpha1", "kind": "Echo", "metadata": {"name": "shared"},
            "status": {"conditions": [{
                "type": "Audited", "status": if n.is_multiple_of(2) { "True" } else { "False" },
                "reason": "Checked", "message": format!("audit {n}"),
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }]},
        })
    };
    let auditor = PatchParams::apply("auditor").force();
    for n in 0..8 {
        echoes
            .patch_status("shared", &auditor, &Patch::Apply(&audit(n)))
            .await?;
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
    let metrics = host.address("metrics").context("metrics address logged")?;
    let reconciles = r#"controller_runtime_reconcile_total{controller="echo",result="success"}"#;
    let writes = r#"capstan_api_writes_total{plugin="echo"}"#;
    let loops = r#"capstan_write_loops_total{plugin="echo"}"#;
    let settled = sample(&http_get(&metrics, "/metrics")?.1, reconciles);
    let before = eventually(
        "a resync after the last change",
        Duration::from_secs(30),
        async || {
            let body = http_get(&metrics, "/metrics")?.1;
            Ok((sample(&body, reconciles) >= settled + 2.0).then_some(body))
        },
    )
    .await?;
    let after = eventually("three more resyncs", Duration::from_secs(30), async || {
        let body = http_get(&metrics, "/metrics")?.1;
        Ok((sample(&body, reconciles) >= sample(&before, reconciles) + 3.0).then_some(body))
    })
    .await?;
    assert_eq!(
        sample(&after, writes),
        sample(&before, writes),
        "resyncs of a status shared with another writer wrote"
    );
    assert_eq!(
        sample(&after, loops),
        0.0,
        "a co-writer's changes were taken for a fight"
    );
    // Both writers' conditions are there, each as its writer left it.
    let status = echoes.get("shared").await?.data["status"].clone();
    let types: Vec<&str> = status["conditions"]
        .as_array()
        .context("conditions")?
        .iter()
        .filter_map(|c| c["type"].as_str())
        .collect();
    assert!(types.contains(&"Ready") && types.contains(&"Audited"), "{status}");
    assert_eq!(status["phase"], "Succeeded");
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}
