//! The contract as users meet it: plugins built against 0.1 and 0.2 still run unchanged
//! (their goldens, and a 0.1 plugin beside newer ones in one host on the real plane);
//! settings checked by the plugin at load; related objects chosen per parent and
//! followed; `now` in goldens; a cluster-scoped parent (Namespace) with namespaced
//! children; a parent's own labels set by its plugin (0.3).

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use anyhow::{Context, Result};
use capstan::dev::Plane;
use capstan_tests::host::{
    Host, echo_resource, eventually, first_listed, hostile_crd, hostile_resource, install_plugin_crd,
    scheduled_echo_resource, start_host,
};
use capstan_tests::{arg, capstan, echo_fixture, plugin, workspace};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{ConfigMap, LimitRange, Namespace, ResourceQuota};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

/// The Echo built against 0.1, kept as it was built (`tests/fixtures/echo-0.1/`).
fn old(name: &str) -> PathBuf {
    workspace().join("tests/fixtures/echo-0.1").join(name)
}

fn new(name: &str) -> PathBuf {
    workspace().join("tests/fixtures/echo-0.2").join(name)
}

fn succeeded(case: &str, out: &Output) {
    assert!(
        out.status.success(),
        "{case}: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_0_1_echo_passes_its_old_goldens_unchanged() {
    let cases: [(&str, &str, &[&str]); 6] = [
        ("new", "echo.yaml", &[]),
        ("running", "echo.yaml", &["job-running.yaml"]),
        ("succeeded", "echo-running.yaml", &["job-succeeded.yaml"]),
        ("failed", "echo-running.yaml", &["job-failed.yaml"]),
        ("changed", "echo-changed.yaml", &["job-succeeded.yaml"]),
        ("empty", "echo-empty.yaml", &[]),
    ];
    let wasm = old("echo.wasm");
    for (case, parent, children) in cases {
        let (parent, expect) = (old(parent), old(&format!("golden/{case}.yaml")));
        let children: Vec<PathBuf> = children.iter().map(|c| old(c)).collect();
        let mut args = vec![
            "test",
            arg(&wasm),
            "--parent",
            arg(&parent),
            "--expect",
            arg(&expect),
        ];
        if !children.is_empty() {
            args.push("--children");
            args.extend(children.iter().map(|c| arg(c)));
        }
        succeeded(case, &capstan(&args));
    }
}

#[test]
fn a_plugin_says_which_contract_it_speaks_and_a_0_1_plugin_takes_no_settings() {
    let report = |wasm: &Path| -> serde_json::Value {
        let out = capstan(&["inspect", arg(wasm)]);
        succeeded("inspect", &out);
        serde_saphyr::from_slice(&out.stdout).unwrap()
    };
    assert_eq!(report(&old("echo.wasm"))["wit"], "capstan:reconciler@0.1.0");
    let current = report(&plugin("echo"));
    assert_eq!(current["wit"], capstan::engine::WIT_PACKAGE);
    assert_eq!(current["related"][0]["kind"], "ConfigMap", "{current}");
    let schema = &current["settingsSchema"]["properties"];
    for setting in ["image", "backoffLimit", "ttlSecondsAfterFinished"] {
        assert!(schema.get(setting).is_some(), "{setting} in {current}");
    }

    let settings = new("settings.yaml");
    let out = capstan(&[
        "test",
        arg(&old("echo.wasm")),
        "--parent",
        arg(&old("echo.yaml")),
        "--settings",
        arg(&settings),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("capstan:reconciler@0.1.0, which takes no settings"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
}

/// `capstan test` of today's Echo against its golden `case` in `tests/golden/echo/`.
fn echo_golden(case: &str, parent: &Path, extra: &[&str]) {
    let (echo, expect) = (
        plugin("echo"),
        workspace().join(format!("tests/golden/echo/{case}.yaml")),
    );
    let args = [
        &[
            "test",
            arg(&echo),
            "--parent",
            arg(parent),
            "--expect",
            arg(&expect),
        ][..],
        extra,
    ]
    .concat();
    succeeded(case, &capstan(&args));
}

#[test]
fn goldens_with_settings_related_objects_and_now() {
    let now = "2026-11-24T09:30:00Z";
    // Settings shape the Job; the default image (no settings) is the old goldens' busybox.
    echo_golden(
        "settings",
        &echo_fixture("echo.yaml"),
        &["--settings", arg(&new("settings.yaml")), "--now", now],
    );
    // The message comes from the Echo's ConfigMap in its own namespace, not another's.
    let configmaps = new("configmaps.yaml");
    echo_golden(
        "message-from",
        &new("echo-message-from.yaml"),
        &["--related", arg(&configmaps), "--now", now],
    );
    // No ConfigMap: a Warning, no Job, and a Ready=False condition stamped with `now`.
    echo_golden(
        "message-from-missing",
        &new("echo-message-from.yaml"),
        &["--now", now],
    );

    let out = capstan(&[
        "test",
        arg(&plugin("echo")),
        "--parent",
        arg(&echo_fixture("echo.yaml")),
        "--settings",
        arg(&new("settings-invalid.yaml")),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("settings refused") && stderr.contains("backoffLimit"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
}

/// A `--config` file in `dir` running each named test plugin with its entry's other keys.
fn write_config(dir: &Path, plugins: &[(&str, serde_json::Value)]) -> Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let entries: Vec<serde_json::Value> = plugins
        .iter()
        .map(|(name, entry)| {
            let file = dir.join(format!("{name}.wasm"));
            std::fs::copy(plugin(name), &file)?;
            let mut entry = entry.clone();
            entry["path"] = json!(file);
            Ok(entry)
        })
        .collect::<Result<_>>()?;
    let config = dir.join("config.yaml");
    std::fs::write(&config, serde_json::to_string(&json!({ "plugins": entries }))?)?;
    Ok(config)
}

/// A ScheduledEcho, a plugin of today's contract beside the others in these tests.
fn tick() -> Result<DynamicObject> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "capstan.dev/v1alpha1", "kind": "ScheduledEcho",
        "metadata": {"name": "tick"}, "spec": {"message": "tick", "schedule": "*/5 * * * *"},
    }))?)
}

/// The Echo's Job names, sorted.
async fn job_names(jobs: &Api<Job>) -> Result<Vec<String>> {
    let mut names: Vec<String> = jobs
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|j| j.metadata.name)
        .collect();
    names.sort();
    Ok(names)
}

fn command(job: &Job) -> Vec<String> {
    let spec = job
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .expect("a pod spec");
    spec.containers[0].command.clone().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_follows_the_config_map_it_reads_its_message_from() -> Result<()> {
    let plane = Plane::shared().await?;
    install_plugin_crd(plane, "echo").await?;
    let ns = plane.namespace("contract-from").await?;
    let dir = std::env::temp_dir().join(format!("capstan-contract-{ns}"));
    let settings = json!({"image": "busybox", "backoffLimit": 1, "ttlSecondsAfterFinished": 3600});
    let config = write_config(&dir, &[("echo", json!({ "settings": settings }))])?;
    let _host = Host::start(
        plane,
        &["--config", arg(&config), "--namespace", &ns],
        &dir.join("host.log"),
        &[],
    )?;
    let client = plane.client().await?;
    let echoes: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &echo_resource());
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);

    let cm: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "greetings"}, "data": {"morning": "good morning"}}),
    )?;
    maps.create(&PostParams::default(), &cm).await?;
    let echo: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "capstan.dev/v1alpha1", "kind": "Echo", "metadata": {"name": "greeting"},
        "spec": {"messageFrom": {"configMapKeyRef": {"name": "greetings", "key": "morning"}}},
    }))?;
    echoes.create(&PostParams::default(), &echo).await?;
    let first = first_listed("the Echo's Job", &jobs, Duration::from_secs(60)).await?;
    assert_eq!(command(&first), ["echo", "good morning"]);
    let spec = first.spec.as_ref().unwrap();
    assert_eq!(
        (spec.backoff_limit, spec.ttl_seconds_after_finished),
        (Some(1), Some(3600)),
        "the operator's settings"
    );
    eventually(
        "status Succeeded and Ready",
        Duration::from_secs(90),
        async || {
            let s = echoes.get("greeting").await?.data["status"].clone();
            let ready = s["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True" && c["observedGeneration"] == 1);
            Ok((s["phase"] == "Succeeded" && ready).then_some(()))
        },
    )
    .await?;

    // Editing the ConfigMap, not the Echo, re-runs it: a new Job, the old one pruned.
    let edit = json!({"data": {"morning": "good morning again"}});
    maps.patch("greetings", &PatchParams::default(), &Patch::Merge(&edit))
        .await?;
    let old_name = first.metadata.name.clone().unwrap();
    let second = eventually("the new Job alone", Duration::from_secs(60), async || {
        let names = job_names(&jobs).await?;
        Ok((names.len() == 1 && names[0] != old_name).then(|| names[0].clone()))
    })
    .await?;
    assert_eq!(command(&jobs.get(&second).await?), ["echo", "good morning again"]);

    // Deleting it: a Warning on the Echo and no Job at all.
    maps.delete("greetings", &DeleteParams::default()).await?;
    eventually("no Job", Duration::from_secs(60), async || {
        Ok(job_names(&jobs).await?.is_empty().then_some(()))
    })
    .await?;
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let warning = eventually(
        "a Warning naming the ConfigMap",
        Duration::from_secs(30),
        async || {
            let list = events.list(&ListParams::default()).await?.items;
            Ok(list.into_iter().find(|e| {
                e.type_.as_deref() == Some("Warning")
                    && e.note.as_deref().is_some_and(|n| n.contains("greetings"))
            }))
        },
    )
    .await?;
    assert_eq!(
        warning.regarding.and_then(|r| r.name).as_deref(),
        Some("greeting")
    );
    let status = echoes.get("greeting").await?.data["status"].clone();
    let ready = status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready")
        .cloned();
    assert_eq!(
        ready.as_ref().map(|c| c["status"].clone()),
        Some(json!("False")),
        "{status}"
    );
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_settings_refuse_that_plugin_at_start_with_its_own_message() -> Result<()> {
    let plane = Plane::shared().await?;
    install_plugin_crd(plane, "echo").await?;
    install_plugin_crd(plane, "scheduled-echo").await?;
    let ns = plane.namespace("contract-settings").await?;
    let dir = std::env::temp_dir().join(format!("capstan-contract-{ns}"));
    let config = write_config(
        &dir,
        &[
            ("echo", json!({"settings": {"backoffLimit": -1}})),
            ("scheduled-echo", json!({})),
        ],
    )?;
    let host = Host::start(
        plane,
        &["--config", arg(&config), "--namespace", &ns],
        &dir.join("host.log"),
        &[],
    )?;
    let line = eventually("the refusal in the log", Duration::from_secs(30), async || {
        Ok(host
            .log()
            .into_iter()
            .find(|l| l.to_string().contains("settings refused") && l.to_string().contains("backoffLimit")))
    })
    .await?;
    assert!(line.to_string().contains("echo.wasm"), "names the file: {line}");
    // The rest of the host serves on.
    let client = plane.client().await?;
    let parents: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &scheduled_echo_resource());
    parents.create(&PostParams::default(), &tick()?).await?;
    let cron_jobs: Api<CronJob> = Api::namespaced(client, &ns);
    first_listed("the other plugin's CronJob", &cron_jobs, Duration::from_secs(60)).await?;
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_0_1_echo_runs_unchanged_beside_todays_plugins_in_one_host() -> Result<()> {
    let plane = Plane::shared().await?;
    install_plugin_crd(plane, "echo").await?;
    install_plugin_crd(plane, "scheduled-echo").await?;
    let ns = plane.namespace("contract-old").await?;
    let dir = std::env::temp_dir().join(format!("capstan-contract-{ns}"));
    std::fs::create_dir_all(&dir)?;
    std::fs::copy(old("echo.wasm"), dir.join("echo.wasm"))?;
    std::fs::copy(plugin("scheduled-echo"), dir.join("scheduled-echo.wasm"))?;
    let _host = Host::start(
        plane,
        &["--plugins", arg(&dir), "--namespace", &ns],
        &dir.join("host.log"),
        &[],
    )?;
    let client = plane.client().await?;
    let echoes: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &echo_resource());
    echoes
        .create(
            &PostParams::default(),
            &capstan_tests::host::echo("hello", "from 0.1")?,
        )
        .await?;
    let parents: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &scheduled_echo_resource());
    parents.create(&PostParams::default(), &tick()?).await?;

    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let job = first_listed("the 0.1 Echo's Job", &jobs, Duration::from_secs(60)).await?;
    assert_eq!(command(&job), ["echo", "from 0.1"]);
    eventually(
        "the 0.1 Echo's status Succeeded",
        Duration::from_secs(90),
        async || {
            let e = echoes.get("hello").await?;
            Ok((e.data["status"]["phase"] == "Succeeded").then_some(()))
        },
    )
    .await?;
    let cron_jobs: Api<CronJob> = Api::namespaced(client, &ns);
    first_listed("the 0.2 plugin's CronJob", &cron_jobs, Duration::from_secs(60)).await?;
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}

/// The namespace-defaults children in `ns`: (quotas, limit ranges, network policies).
async fn defaults_in(client: &kube::Client, ns: &str) -> Result<(usize, usize, usize)> {
    let lp = ListParams::default().labels("capstan.dev/plugin=namespace-defaults");
    Ok((
        Api::<ResourceQuota>::namespaced(client.clone(), ns)
            .list(&lp)
            .await?
            .items
            .len(),
        Api::<LimitRange>::namespaced(client.clone(), ns)
            .list(&lp)
            .await?
            .items
            .len(),
        Api::<NetworkPolicy>::namespaced(client.clone(), ns)
            .list(&lp)
            .await?
            .items
            .len(),
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_defaults_follow_the_label_on_cluster_scoped_namespaces() -> Result<()> {
    let plane = Plane::shared().await?;
    let (a, b) = (
        plane.namespace("contract-nsd-a").await?,
        plane.namespace("contract-nsd-b").await?,
    );
    let dir = std::env::temp_dir().join(format!("capstan-contract-{a}"));
    // The operator's grant to write into the Namespace reconciled; without it every child
    // is refused (plugins/namespace-defaults' own tests show that).
    let entry = json!({"allowOwnNamespace": true});
    let config = write_config(&dir, &[("namespace-defaults", entry)])?;
    // Cluster-wide: the parent kind is cluster-scoped.
    let host = Host::start(plane, &["--config", arg(&config)], &dir.join("host.log"), &[])?;
    let client = plane.client().await?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let label = |on: bool| json!({"metadata": {"labels": {"capstan.dev/defaults": if on { json!("true") } else { json!(null) }}}});
    for ns in [&a, &b] {
        namespaces
            .patch(ns, &PatchParams::default(), &Patch::Merge(&label(true)))
            .await?;
    }
    for ns in [&a, &b] {
        eventually(
            "a quota, a limit range and a network policy",
            Duration::from_secs(60),
            async || Ok((defaults_in(&client, ns).await? == (1, 1, 1)).then_some(())),
        )
        .await
        .with_context(|| {
            format!(
                "in {ns}; host log: {:?}",
                host.log().iter().rev().take(5).collect::<Vec<_>>()
            )
        })?;
    }
    let quota = Api::<ResourceQuota>::namespaced(client.clone(), &a)
        .list(&ListParams::default().labels("capstan.dev/plugin=namespace-defaults"))
        .await?
        .items
        .remove(0);
    let owner = &quota.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("Namespace", a.as_str()),
        "owned by its Namespace"
    );

    // The label goes: that Namespace's defaults are pruned, the other's stay.
    namespaces
        .patch(&a, &PatchParams::default(), &Patch::Merge(&label(false)))
        .await?;
    eventually(
        "no defaults left in the unlabelled namespace",
        Duration::from_secs(60),
        async || Ok((defaults_in(&client, &a).await? == (0, 0, 0)).then_some(())),
    )
    .await?;
    assert_eq!(defaults_in(&client, &b).await?, (1, 1, 1));
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_version_that_refuses_the_settings_is_refused_and_the_old_one_keeps_serving() -> Result<()> {
    let plane = Plane::shared().await?;
    install_plugin_crd(plane, "echo").await?;
    let ns = plane.namespace("contract-reload").await?;
    let dir = std::env::temp_dir().join(format!("capstan-contract-{ns}"));
    let image = "registry.example.com/tools/busybox:1.37";
    let config = write_config(&dir, &[("echo", json!({"settings": {"image": image}}))])?;
    let args = [
        "--config",
        arg(&config),
        "--namespace",
        &ns,
        "--hot-reload",
        "--reload-interval",
        "300ms",
    ];
    let host = Host::start(plane, &args, &dir.join("host.log"), &[])?;
    let client = plane.client().await?;
    let echoes: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &echo_resource());
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let image_of = |job: &Job| {
        let spec = job.spec.as_ref().and_then(|s| s.template.spec.as_ref());
        spec.and_then(|s| s.containers[0].image.clone())
            .unwrap_or_default()
    };
    echoes
        .create(
            &PostParams::default(),
            &capstan_tests::host::echo("before", "before")?,
        )
        .await?;
    let first = first_listed("the first Job", &jobs, Duration::from_secs(60)).await?;
    assert_eq!(image_of(&first), image, "the operator's image");

    // Echo built against 0.1 takes no settings: as a new version of this file it is
    // refused with that reason, and the running version (with its settings) serves on.
    let staged = dir.join(".echo.wasm.tmp");
    std::fs::copy(old("echo.wasm"), &staged)?;
    std::fs::rename(&staged, dir.join("echo.wasm"))?;
    let refusal = eventually("the refused reload", Duration::from_secs(30), async || {
        Ok(host
            .log()
            .into_iter()
            .find(|l| l["message"] == "new plugin file refused; the running version keeps serving"))
    })
    .await?;
    assert!(refusal.to_string().contains("takes no settings"), "{refusal}");
    echoes
        .create(
            &PostParams::default(),
            &capstan_tests::host::echo("after", "after")?,
        )
        .await?;
    let second = eventually("the second Echo's Job", Duration::from_secs(60), async || {
        let list = jobs.list(&ListParams::default()).await?.items;
        Ok(list.into_iter().find(|j| command(j) == ["echo", "after"]))
    })
    .await?;
    assert_eq!(
        image_of(&second),
        image,
        "still the old version, with its settings"
    );
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}

/// Contract 0.3: an answer sets and removes its parent's own labels, and leaves the labels
/// it does not name as anyone set them; a key the host keeps, a value the API server would
/// refuse, or a key named twice writes nothing of the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_sets_and_removes_its_parents_own_labels_and_nothing_else() -> Result<()> {
    let plane = Plane::shared().await?;
    plane.install_crds(&[hostile_crd()?]).await?;
    let ns = plane.namespace("contract-labels").await?;
    let dir = std::env::temp_dir().join(format!("capstan-labels-{ns}"));
    let _host = start_host(plane, &["hostile"], &ns, &dir)?;
    let client = plane.client().await?;
    let hostiles: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &hostile_resource());
    let cases = [
        ("tier", "tier=web,old-"),
        ("reserved", "capstan.dev/plugin=other"),
        ("bad", "tier=not valid"),
        ("twice", "tier=a,tier=b"),
    ];
    for (name, arg) in cases {
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "capstan.dev/v1alpha1", "kind": "Hostile",
            "metadata": {"name": name, "labels": {"team": "a", "old": "x"}},
            "spec": {"mode": "label", "arg": arg},
        }))?;
        hostiles.create(&PostParams::default(), &object).await?;
    }
    let labels_of = async |name: &str| -> Result<Vec<(String, String)>> {
        let labels = hostiles.get(name).await?.metadata.labels.unwrap_or_default();
        Ok(labels.into_iter().collect())
    };
    let pairs = |p: &[(&str, &str)]| -> Vec<(String, String)> {
        p.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    };
    eventually(
        "the plugin's labels on its parent",
        Duration::from_secs(60),
        async || {
            let have = labels_of("tier").await?;
            Ok((have == pairs(&[("team", "a"), ("tier", "web")])).then_some(()))
        },
    )
    .await?;

    // A new answer changes the label it names, and only that one.
    let arg = |a: &str| json!({"spec": {"arg": a}});
    hostiles
        .patch("tier", &PatchParams::default(), &Patch::Merge(&arg("tier=db")))
        .await?;
    eventually(
        "the label the new answer sets",
        Duration::from_secs(60),
        async || {
            let have = labels_of("tier").await?;
            Ok((have == pairs(&[("team", "a"), ("tier", "db")])).then_some(()))
        },
    )
    .await?;

    // The refused answers wrote nothing: neither their child nor any label.
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    eventually(
        "a Warning on each refused answer",
        Duration::from_secs(60),
        async || {
            let list = events.list(&ListParams::default()).await?.items;
            let warned = |name: &str, reason: &str| {
                list.iter().any(|e| {
                    e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                        && e.reason.as_deref() == Some(reason)
                        && e.note.as_deref().is_some_and(|n| n.contains("parent label"))
                })
            };
            let all = warned("reserved", "InvalidResponse")
                && warned("bad", "InvalidResponse")
                && warned("twice", "PluginFault");
            Ok(all.then_some(()))
        },
    )
    .await?;
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    for name in ["reserved", "bad", "twice"] {
        assert_eq!(
            labels_of(name).await?,
            pairs(&[("old", "x"), ("team", "a")]),
            "{name}"
        );
        assert!(
            config_maps.get_opt(&format!("{name}-0")).await?.is_none(),
            "{name}"
        );
    }
    assert!(config_maps.get_opt("tier-0").await?.is_some());
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}

/// Echo as built against 0.2 (`tests/fixtures/echo-0.2/echo.wasm`, never rebuilt) passes
/// today's Echo goldens unchanged through the 0.2 adapter.
#[test]
fn a_0_2_echo_passes_todays_goldens_unchanged() {
    let dir = std::env::temp_dir().join(format!("capstan-echo-0.2-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let project = format!(
        "[plugin]\nname = \"echo\"\nlanguage = \"rust\"\nbuild = \"true\"\noutput = {:?}\ncases = {:?}\n",
        new("echo.wasm"),
        workspace().join("tests/golden/echo/cases.toml"),
    );
    std::fs::write(dir.join("capstan.toml"), project).unwrap();
    let out = std::process::Command::new(capstan_tests::capstan_bin())
        .arg("test")
        .current_dir(&dir)
        .output()
        .unwrap();
    succeeded("capstan test", &out);
    let cases = std::fs::read_to_string(workspace().join("tests/golden/echo/cases.toml")).unwrap();
    let n = cases.matches("[[case]]").count();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("{n} cases: {n} passed, 0 failed")),
        "{stdout}"
    );
    std::fs::remove_dir_all(dir).ok();
}
