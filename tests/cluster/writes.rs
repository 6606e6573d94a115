//! Writes that mean what they say, on the real plane: a status shared by two plugins
//! (and a user) is written by each only when its own fields change; a child someone
//! deletes at once is made again within a resync; a first convergence writes each child
//! and each status once, as the API server counts them; a restart writes nothing and
//! loses or repeats no Event.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use capstan::dev::{Plane, PlaneConfig};
use capstan_tests::governance::Case;
use capstan_tests::host::{echo, echo_resource, eventually, install_plugin_crd, sample, start_host};
use capstan_tests::requests::{requests, settled};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::api::{DynamicObject, PostParams};
use serde_json::json;

/// How long Echo and the plugins may take to converge.
const CONVERGE: Duration = Duration::from_secs(180);
/// How long the shared status is watched while someone else keeps changing it.
const SOAK: Duration = Duration::from_secs(60);

/// Two plugins own one field each of the same parents' status, and a user changes a
/// third every five seconds: every change wakes both plugins, and neither writes (its
/// own field still holds), so neither is taken for ping-pong.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_plugins_sharing_a_status_write_only_their_own_changes() -> Result<()> {
    let entries = "- path: hostile.wasm\n- path: hostile-twin.wasm\n";
    let case = Case::start("writes-shared", &["hostile", "hostile-twin"], entries, &[], 1).await?;
    case.hostile("shared", 2, "own-field", json!({})).await?;
    let names = ["shared-0", "shared-1"];
    eventually("both fields on both parents", CONVERGE, async || {
        for name in names {
            let status = &case.hostiles().get(name).await?.data["status"];
            if status["hostile"] != "steady" || status["hostile-twin"] != "steady" {
                return Ok(None);
            }
        }
        Ok(Some(()))
    })
    .await?;
    let writes = |plugin: &str| format!(r#"capstan_api_writes_total{{plugin="{plugin}"}}"#);
    let settled = async || -> Result<(f64, f64)> {
        Ok((
            case.metric(&writes("hostile")).await?,
            case.metric(&writes("hostile-twin")).await?,
        ))
    };
    // Settled: the finalizers, children and first status writes are in.
    let mut before = settled().await?;
    for _ in 0..30 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = settled().await?;
        if now == before {
            break;
        }
        before = now;
    }
    let start = std::time::Instant::now();
    let mut tick = 0;
    while start.elapsed() < SOAK {
        tick += 1;
        for name in names {
            let patch = json!({"status": {"external": tick}});
            case.hostiles()
                .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    let after = settled().await?;
    ensure!(
        after == before,
        "writes (hostile, hostile-twin) went from {before:?} to {after:?} while only the user's field changed"
    );
    for name in names {
        for reason in ["WriteLoop", "WriteRate", "StatusConflict"] {
            let events = case.events_of(name, reason).await?;
            ensure!(events.is_empty(), "{name}: {reason}: {events:?}");
        }
        let status = &case.hostiles().get(name).await?.data["status"];
        ensure!(status["external"] == tick, "{status}");
    }
    println!("shared status: {tick} outside changes over {SOAK:?}, 0 plugin writes");
    let report = case.measure("hostile", Duration::from_secs(1)).await?;
    case.stop(report, &Default::default())?;
    Ok(())
}

/// A child deleted by someone else the moment it appears is made again within one resync,
/// however the delete interleaves with the reconcile that made it: a reconcile that wrote
/// is never taken for a quiet one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_deleted_at_once_is_made_again_within_a_resync() -> Result<()> {
    let entries = "- path: hostile.wasm\n  resync: 3s\n";
    let case = Case::start("writes-recreate", &["hostile"], entries, &[], 1).await?;
    let config_maps: Api<ConfigMap> = Api::namespaced(case.client.clone(), &case.ns);
    let mine = ListParams::default().labels("capstan.dev/plugin=hostile");
    case.hostile("janitor", 1, "ok", json!({})).await?;
    // Delete the child as soon as it shows, several times over.
    for round in 0..3 {
        let child = eventually(&format!("the child, round {round}"), CONVERGE, async || {
            Ok(config_maps.list(&mine).await?.items.pop())
        })
        .await?;
        let name = child.metadata.name.clone().context("named")?;
        config_maps.delete(&name, &DeleteParams::default()).await?;
        let uid = child.metadata.uid.clone();
        eventually(
            &format!("the child made again, round {round}"),
            Duration::from_secs(10),
            async || {
                let again = config_maps.get_opt(&name).await?;
                Ok(again.filter(|c| c.metadata.uid != uid).map(|_| ()))
            },
        )
        .await?;
    }
    let report = case.measure("hostile", Duration::from_secs(1)).await?;
    case.stop(report, &Default::default())?;
    Ok(())
}

/// A restart over a thousand converged Echos: every parent is reconciled once from the
/// fresh caches, and nothing is written — no child, no status, no event — and no
/// reconcile of the honest plugin is put off for its CPU share (charged in CPU time, a
/// restart sweep of Echo costs milliseconds of it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_over_a_thousand_converged_echos_writes_and_defers_nothing() -> Result<()> {
    const ECHOES: usize = 1000;
    let mut case = Case::start("writes-restart", &[], "", &[], ECHOES).await?;
    case.converged(Duration::from_secs(600)).await?;
    case.host.signal(libc::SIGTERM);
    let exit = case.host.wait(Duration::from_secs(30))?;
    ensure!(exit.code() == Some(0), "the first host exited with {exit:?}");
    case.add_host(&["echo"], "- path: echo.wasm\n")?;
    let reconciles = r#"controller_runtime_reconcile_total{controller="echo",result="success"}"#;
    eventually("every Echo reconciled after the restart", CONVERGE, async || {
        Ok((case.metric(reconciles).await? >= ECHOES as f64).then_some(()))
    })
    .await?;
    let events_before = case
        .count_events(|e| e.reporting_controller.as_deref() == Some("capstan-echo"))
        .await?;
    let writes = case.metric(r#"capstan_api_writes_total{plugin="echo"}"#).await?;
    let deferred = case
        .metric(r#"controller_runtime_reconcile_total{controller="echo",result="requeue_after"}"#)
        .await?;
    // Which wait put them off, should any be: the share, or something the restart wrote
    // (every cause the host counts, as it names them), and the CPU the sweep was charged.
    let metrics = case.host.metrics().await?;
    let causes: Vec<&str> = metrics
        .lines()
        .filter(|l| {
            l.starts_with(r#"capstan_reconcile_put_off_total{plugin="echo""#)
                || l.starts_with(r#"capstan_wasm_cpu_seconds_total{plugin="echo""#)
        })
        .collect();
    let causes = causes.join(", ");
    println!("restart over {ECHOES} converged Echos: {writes} writes, {deferred} put off ({causes})");
    ensure!(writes == 0.0, "the restarted host wrote {writes} times");
    // Every Echo went Pending → Succeeded once: one Event per transition, none repeated
    // (a series count above one would be a repeat), none lost, before and after.
    for reason in ["JobPending", "JobSucceeded"] {
        let events = case
            .events_where(|e| {
                e.reason.as_deref() == Some(reason)
                    && e.reporting_controller.as_deref() == Some("capstan-echo")
            })
            .await?;
        let mut per_echo = std::collections::HashMap::new();
        for e in &events {
            let name = e
                .regarding
                .as_ref()
                .and_then(|r| r.name.clone())
                .unwrap_or_default();
            *per_echo.entry(name).or_insert(0) += e.series.as_ref().map_or(1, |s| s.count);
        }
        ensure!(
            per_echo.len() == ECHOES,
            "{} of {ECHOES} Echos have a {reason} Event",
            per_echo.len()
        );
        let repeated: Vec<_> = per_echo.iter().filter(|(_, n)| **n != 1).collect();
        ensure!(
            repeated.is_empty(),
            "{reason} recorded more than once: {repeated:?}"
        );
    }
    let events_after = case
        .count_events(|e| e.reporting_controller.as_deref() == Some("capstan-echo"))
        .await?;
    ensure!(
        events_after == events_before,
        "Events {events_before} before the restart, {events_after} after"
    );
    ensure!(
        deferred == 0.0,
        "{deferred} reconciles put off after the restart ({causes})"
    );
    Ok(())
}

/// Parents created before the host starts, on a plane of this test's own (so the API
/// server's counts are the host's alone): at first convergence each gets exactly one
/// child write and one status write (a reconcile woken by the host's own writes waits
/// for the caches to show them instead of writing again), no single-object read, and one
/// Event for its one transition, written after its children and status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_convergence_writes_each_child_and_status_once() -> Result<()> {
    const ECHOES: usize = 300;
    let plane = Plane::start(PlaneConfig::api_only()).await?;
    install_plugin_crd(&plane, "echo").await?;
    let ns = plane.namespace("writes-first").await?;
    let client = plane.client().await?;
    let echoes: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &echo_resource());
    futures::stream::iter(0..ECHOES)
        .map(|i| {
            let echoes = echoes.clone();
            async move {
                echoes
                    .create(&PostParams::default(), &echo(&format!("e{i}"), "hello")?)
                    .await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(16)
        .try_collect::<()>()
        .await?;
    let before = requests(&client).await?;
    let dir = std::env::temp_dir().join(format!("capstan-writes-first-{ns}"));
    let host = start_host(&plane, &["echo"], &ns, &dir)?;
    eventually("every Echo has a status", CONVERGE, async || {
        let list = echoes.list(&ListParams::default()).await?;
        Ok(list
            .items
            .iter()
            .all(|e| !e.data["status"]["observedGeneration"].is_null())
            .then_some(()))
    })
    .await?;
    let plural = echo_resource().plural;
    let after = settled(&client, &plural, &["jobs"], Duration::from_secs(2), CONVERGE).await?;
    let served = after.since(&before);
    let traffic = served.traffic(&plural, &["jobs"]);
    println!(
        "first convergence of {ECHOES} Echos, as the API server counts: {:?}",
        served.all()
    );
    let n = ECHOES as f64;
    ensure!(
        traffic.children == n,
        "{} child writes for {ECHOES} Echos",
        traffic.children
    );
    ensure!(
        traffic.status == n,
        "{} status writes for {ECHOES} Echos",
        traffic.status
    );
    ensure!(
        traffic.parent == 0.0,
        "{} writes of the Echos themselves",
        traffic.parent
    );
    ensure!(traffic.reads == 0.0, "{} single-object reads", traffic.reads);
    ensure!(
        traffic.events == n,
        "{} event writes for {ECHOES} transitions",
        traffic.events
    );
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let pending = events
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("JobPending") && e.series.is_none())
        .count();
    ensure!(
        pending == ECHOES,
        "{pending} JobPending Events (one per Echo, no series)"
    );
    // Echo reads a ConfigMap: `related` is asked once per Echo, though each was reconciled
    // again after its status write (which `related` is not shown).
    let metrics = host.metrics().await?;
    let calls = |call: &str| {
        sample(
            &metrics,
            &format!(r#"capstan_wasm_dispatch_seconds_count{{plugin="echo",call="{call}"}}"#),
        )
    };
    let (reconciles, related) = (calls("reconcile"), calls("related"));
    ensure!(
        reconciles > n,
        "{reconciles} reconciles of {ECHOES} Echos: none after a status write"
    );
    ensure!(related == n, "{related} related calls for {ECHOES} Echos");
    Ok(())
}
