//! The hostile-plugin suite: each way a plugin can make others pay for it, on the real
//! plane beside Echo. For every item the host keeps Echo converged (every Echo's Job, its
//! status Succeeded and unchanged while measured), stays within a stated budget of peak
//! RSS, CPU and API writes per second on the plugin's behalf (printed), and exits on
//! SIGTERM within a pod's grace period. The plugins are `tests/plugins/hostile` (its mode
//! chosen per object) and `tests/plugins/greedy` (it declares what needs grants).

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use capstan_tests::governance::{Budget, Case, Report};
use capstan_tests::host::{eventually, http_get};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

/// How long each case is measured once Echo has converged.
const WINDOW: Duration = Duration::from_secs(10);
/// Echos each case keeps converged.
const ECHOES: usize = 3;
/// How long Echo may take to converge.
const CONVERGE: Duration = Duration::from_secs(180);

fn hostile_entry(extra: &str) -> String {
    format!("- path: hostile.wasm\n{extra}")
}

/// Item 1: a plugin that blocks in a host call (a 30 s sleep, a hundred times over) is
/// over at once on its own virtual clock; nothing it calls outlives its deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_host_calls_cannot_outlive_the_deadline() -> Result<()> {
    let entry = hostile_entry("  limits: {deadline: 500ms}\n");
    let case = Case::start("gov-sleep", &["hostile"], &entry, &[], ECHOES).await?;
    case.hostile("sleeper", 3, "sleep", json!({"arg": "100", "requeueMs": 0}))
        .await?;
    eventually("3000 s slept by each sleeper", CONVERGE, async || {
        let list = case.hostiles().list(&ListParams::default()).await?.items;
        Ok((list.len() == 3 && list.iter().all(|h| h.data["status"]["sleptMs"] == 3_000_000)).then_some(()))
    })
    .await?;
    let report = case.measure("hostile", WINDOW).await?;
    let deadlines = case
        .metric(r#"capstan_wasm_faults_total{plugin="hostile",cause="deadline"}"#)
        .await?;
    ensure!(deadlines == 0.0, "sleeping hit the deadline {deadlines} times");
    case.stop(report, &Budget::default())?;
    Ok(())
}

/// Item 2: clocks and entropy are deterministic: the wall clock stands at the epoch and
/// two calls hash alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clocks_and_entropy_are_deterministic() -> Result<()> {
    let case = Case::start("gov-time", &["hostile"], &hostile_entry(""), &[], ECHOES).await?;
    case.hostile("clock", 2, "time", json!({})).await?;
    let statuses = eventually("both clocks read", CONVERGE, async || {
        let list = case.hostiles().list(&ListParams::default()).await?.items;
        let statuses: Vec<_> = list.iter().map(|h| h.data["status"].clone()).collect();
        Ok((statuses.len() == 2 && statuses.iter().all(|s| s["hash"].is_string())).then_some(statuses))
    })
    .await?;
    ensure!(statuses.iter().all(|s| s["wallNanos"] == 0), "{statuses:?}");
    ensure!(statuses[0]["hash"] == statuses[1]["hash"], "{statuses:?}");
    let report = case.measure("hostile", WINDOW).await?;
    case.stop(report, &Budget::default())?;
    Ok(())
}

/// Item 3: a plugin that spins most of a second per call and requeues at once gets its
/// CPU share (here half a core) and the requeue floor, and Echo's calls never time out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spinning_plugin_gets_its_cpu_share_and_no_more() -> Result<()> {
    let entry = hostile_entry("  concurrency: 4\n  limits: {cpuMillicores: 500}\n");
    let case = Case::start("gov-cpu", &["hostile"], &entry, &[], ECHOES).await?;
    case.hostile("spinner", 2, "spin", json!({"requeueMs": 0}))
        .await?;
    case.hostile("eager", 2, "ok", json!({"requeueMs": 0})).await?;
    let reconciles = r#"controller_runtime_reconcile_total{controller="hostile",result="success"}"#;
    case.converged(CONVERGE).await?;
    let before = case.metric(reconciles).await?;
    let report = case.measure("hostile", WINDOW).await?;
    let rate = (case.metric(reconciles).await? - before) / WINDOW.as_secs_f64();
    // Two eager objects at the 1 s floor, two spinners within half a core.
    ensure!(rate <= 6.0, "{rate:.1} reconciles/s");
    let echo_faults = case
        .metric(r#"capstan_wasm_faults_total{plugin="echo",cause="deadline"}"#)
        .await?;
    ensure!(echo_faults == 0.0, "Echo timed out {echo_faults} times");
    let budget = Budget {
        share_cores: 0.5,
        ..Budget::default()
    };
    case.stop(report, &budget)?;
    Ok(())
}

/// Item 4: sixteen memory bombs at once hold the plugin's memory total (128 MiB) and no
/// more, and the memory comes back once they are gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_bombs_hold_their_plugins_total_and_give_it_back() -> Result<()> {
    let entry = hostile_entry("  concurrency: 16\n");
    let case = Case::start("gov-memory", &["hostile"], &entry, &[], ECHOES).await?;
    case.hostile("hog", 16, "memory", json!({"requeueMs": 0})).await?;
    let ooms = r#"capstan_wasm_faults_total{plugin="hostile",cause="out_of_memory"}"#;
    eventually(
        "three memory faults per bomb (their event bursts spent)",
        CONVERGE,
        async || Ok((case.metric(ooms).await? >= 48.0).then_some(())),
    )
    .await?;
    let report = case.measure("hostile", WINDOW).await?;
    case.hostiles()
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await?;
    let peak = report.peak_rss_mib;
    let after = eventually(
        "RSS given back after the burst",
        Duration::from_secs(60),
        async || {
            let rss = capstan_tests::governance::usage(case.host.pid())?.rss_mib;
            Ok((rss <= 160.0).then_some(rss))
        },
    )
    .await?;
    println!("hostile gov-memory: RSS {peak:.0} MiB at peak, {after:.0} MiB after the bombs are gone");
    stop_with_echos_memory_untouched(case, report).await
}

/// Echo's call memory is its own (its total untouched by the hostile plugin's), and the
/// host stayed within the memory bombs' budget: 320 MiB.
async fn stop_with_echos_memory_untouched(case: Case, report: Report) -> Result<()> {
    let echo_ooms = case
        .metric(r#"capstan_wasm_faults_total{plugin="echo",cause="out_of_memory"}"#)
        .await?;
    ensure!(echo_ooms == 0.0, "Echo ran out of memory {echo_ooms} times");
    let budget = Budget {
        rss_mib: 320.0,
        ..Budget::default()
    };
    case.stop(report, &budget).map(drop)
}

/// Sixteen calls at once answering just under 4 MiB of `{"a":0}` each (~350 MiB of parsed
/// maps per answer): the trees are counted before any is built and held from the
/// plugin's memory total (128 MiB), so every answer is refused as the plugin's fault, the
/// host stays within the budget the memory bombs are held to, and Echo is untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiny_json_values_at_concurrency_16_stay_within_the_plugins_total() -> Result<()> {
    let entry = hostile_entry("  concurrency: 16\n");
    let case = Case::start("gov-fanout", &["hostile"], &entry, &[], ECHOES).await?;
    case.hostile("maps", 16, "fanout", json!({"requeueMs": 0}))
        .await?;
    let refused = r#"capstan_wasm_faults_total{plugin="hostile",cause="out_of_memory"}"#;
    eventually("every answer refused", CONVERGE, async || {
        Ok((case.metric(refused).await? >= 16.0).then_some(()))
    })
    .await?;
    let report = case.measure("hostile", WINDOW).await?;
    println!("hostile gov-fanout: RSS {:.0} MiB at peak", report.peak_rss_mib);
    stop_with_echos_memory_untouched(case, report).await
}

/// Item 4, at load: what a plugin is measured to need must fit the host's budget. Hostile,
/// configured to take 64 MiB responses, holds that much lift allowance in every call: it
/// is refused with the reason, and Echo (about 5 MiB an instance) runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_that_does_not_fit_the_memory_budget_is_refused_at_load() -> Result<()> {
    let case = Case::start(
        "gov-budget",
        &["hostile"],
        &hostile_entry("  limits: {responseBytes: 67108864}\n"),
        &["--memory-budget", "48Mi"],
        ECHOES,
    )
    .await?;
    let report = case.measure("hostile", WINDOW).await?;
    let refused = case
        .host
        .log()
        .into_iter()
        .find(|l| l["message"] == "plugin not loaded; the other plugins run")
        .context("a refusal logged")?;
    let error = refused["error"].as_str().unwrap_or_default();
    ensure!(
        error.starts_with("plugin hostile needs ")
            && error.contains(
                "(what one instance was measured to hold) and the host's memory budget of 48 MiB has"
            ),
        "{error}"
    );
    let addr = case.host.address("health probes").context("health address")?;
    let (status, body) = http_get(&addr, "/readyz")?;
    ensure!(
        status.contains("503") && body.contains("--memory-budget"),
        "{status}\n{body}"
    );
    case.stop(report, &Budget::default())?;
    Ok(())
}

/// Item 5: events and logs. A plugin that records a hundred events of new reasons per call
/// and requeues at once gets ten per object (then one a minute); one that logs 16 MiB per
/// call, with newlines and terminal escapes, is cut to its log budget and forges no line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_and_logs_are_budgeted_and_plugin_text_cannot_forge_a_line() -> Result<()> {
    let case = Case::start("gov-noise", &["hostile"], &hostile_entry(""), &[], ECHOES).await?;
    case.hostile("spammer", 2, "events", json!({"requeueMs": 0}))
        .await?;
    case.hostile("logger", 2, "log", json!({"requeueMs": 0})).await?;
    let dropped = r#"capstan_events_dropped_total{plugin="hostile",cause="budget"}"#;
    eventually("events dropped", CONVERGE, async || {
        Ok((case.metric(dropped).await? > 0.0).then_some(()))
    })
    .await?;
    let report = case.measure("hostile", WINDOW).await?;
    for i in 0..2 {
        let name = format!("spammer-{i}");
        let events = case
            .count_events(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name.as_str())
                    && e.reason.as_deref().is_some_and(|r| r.starts_with("Spam"))
            })
            .await?;
        // Ten at once, then one a minute: the case lasts well under two minutes.
        ensure!(events <= 12, "{name} recorded {events} events");
    }
    let log = std::fs::read_to_string(case.dir.join("host.log"))?;
    for line in log.lines() {
        let parsed: serde_json::Value =
            serde_json::from_str(line).with_context(|| format!("a forged line: {line:.200}"))?;
        ensure!(parsed["message"] != "forged", "a forged line: {line:.200}");
        ensure!(!line.contains('\u{1b}'), "a terminal escape reached the log");
    }
    // The burst (256 KiB) and 16 KiB/s for the case's life, plus the host's own lines.
    ensure!(report.log_bytes <= 4 << 20, "{} bytes of log", report.log_bytes);
    case.stop(report, &Budget::default())?;
    Ok(())
}

/// Items 6, 8 and 9 with the operator's grants: greedy declares a Job a thousand times
/// (one watch), claims the status of Echos that echo already serves (refused: a status
/// field belongs to the plugin that set it first), and replicates itself (its creations
/// wait at its rate).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_greedy_plugin_gets_one_watch_per_kind_no_status_of_others_and_slow_replication() -> Result<()> {
    let mut case = Case::start("gov-greedy", &[], "", &[], ECHOES).await?;
    case.converged(CONVERGE).await?;
    case.add_host(
        &["greedy"],
        "- path: greedy.wasm\n  allowSecrets: true\n  allowOwnKind: true\n  limits: {creationsPerSecond: 2}\n",
    )?;
    let started = eventually("greedy started", CONVERGE, async || {
        Ok(case
            .host
            .log()
            .into_iter()
            .find(|l| l["message"] == "controller started" && l["plugin"] == "greedy"))
    })
    .await?;
    ensure!(started["child_kinds"] == 3, "{started}");
    eventually("a StatusConflict on e0", CONVERGE, async || {
        Ok(case.events_of("e0", "StatusConflict").await?.pop())
    })
    .await?;
    let echo = capstan_tests::host::echo("r", "replicate")?;
    case.echoes().create(&PostParams::default(), &echo).await?;
    let report = case.measure("greedy", WINDOW).await?;
    let replicas = case
        .echoes()
        .list(&ListParams::default().labels("capstan.dev/plugin=greedy"))
        .await?
        .items
        .len();
    // The user's Echo makes its two on its own allowance; the replicas, made by a plugin,
    // have none: twice the rate at once, then the rate, over the window and the
    // convergence before.
    ensure!(replicas <= 2 + 4 + 2 * 30, "{replicas} replicas");
    ensure!(replicas >= 2, "greedy did not replicate at all");
    let waited = case
        .metric(r#"capstan_reconcile_put_off_total{plugin="greedy",cause="creation_rate"}"#)
        .await?;
    ensure!(
        waited > 0.0,
        "the replicas' creations never waited for the budget"
    );
    let conflicts = case
        .metric(r#"capstan_status_conflicts_total{plugin="greedy"}"#)
        .await?;
    ensure!(conflicts >= ECHOES as f64, "{conflicts} status conflicts");
    let budget = Budget {
        writes_per_s: 8.0,
        ..Budget::default()
    };
    let ns = case.ns.clone();
    let client = case.client.clone();
    case.stop(report, &budget)?;
    // Replicas are many Jobs on a shared plane: leave nothing behind.
    kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(client)
        .delete(&ns, &DeleteParams::default())
        .await?;
    Ok(())
}

/// Item 7: a plugin that declares Secret is not started without the operator's grant, and
/// says which grant; Echo runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_need_the_operators_grant() -> Result<()> {
    let case = Case::start("gov-secrets", &["greedy"], "- path: greedy.wasm\n", &[], ECHOES).await?;
    let report = case.measure("greedy", WINDOW).await?;
    let addr = case.host.address("health probes").context("health address")?;
    let (status, body) = http_get(&addr, "/readyz")?;
    ensure!(
        status.contains("503") && body.contains("allowSecrets"),
        "{status}\n{body}"
    );
    let writes = case
        .metric(r#"capstan_api_writes_total{plugin="greedy"}"#)
        .await?;
    ensure!(writes == 0.0, "greedy wrote {writes} times");
    case.stop(report, &Budget::default())?;
    Ok(())
}

/// Item 8, ping-pong: a plugin that flips its status or its child between two answers
/// (each write waking the next) is caught after three rewrites and then writes once a
/// minute per object, with a `WriteLoop` Warning; one that feeds itself ever new content
/// (a counter) has its writes spaced ten seconds apart, with a `WriteRate` Warning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_ping_pong_is_caught_and_backed_off() -> Result<()> {
    let case = Case::start("gov-flip", &["hostile"], &hostile_entry(""), &[], ECHOES).await?;
    case.hostile("flipper", 2, "flip", json!({})).await?;
    case.hostile("flopper", 2, "flip-child", json!({})).await?;
    case.hostile("counter", 2, "counter", json!({})).await?;
    let warnings = [
        ("flipper-0", "WriteLoop"),
        ("flipper-1", "WriteLoop"),
        ("flopper-0", "WriteLoop"),
        ("flopper-1", "WriteLoop"),
        ("counter-0", "WriteRate"),
        ("counter-1", "WriteRate"),
    ];
    for (name, reason) in warnings {
        eventually(&format!("a {reason} on {name}"), CONVERGE, async || {
            Ok(case.events_of(name, reason).await?.pop())
        })
        .await?;
    }
    let report = case.measure("hostile", WINDOW).await?;
    // Two counters with two objects each, one write per object every ten seconds.
    let budget = Budget {
        writes_per_s: 1.0,
        ..Budget::default()
    };
    case.stop(report, &budget)?;
    Ok(())
}

/// Item 10: a plugin that never finishes its cleanup: after `finalizerTimeout` a
/// `FinalizerStuck` Warning names the way out, and the annotation lets go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finalizer_the_plugin_never_releases_has_an_escape_hatch() -> Result<()> {
    let entry = hostile_entry("  limits: {finalizerTimeout: 2s}\n");
    let case = Case::start("gov-finalizer", &["hostile"], &entry, &[], ECHOES).await?;
    case.hostile("holder", 1, "hold", json!({})).await?;
    eventually("the finalizer on holder-0", CONVERGE, async || {
        let holder = case.hostiles().get("holder-0").await?;
        Ok((!holder.metadata.finalizers.unwrap_or_default().is_empty()).then_some(()))
    })
    .await?;
    case.hostiles()
        .delete("holder-0", &DeleteParams::default())
        .await?;
    let stuck = eventually(
        "FinalizerStuck on holder-0",
        Duration::from_secs(60),
        async || Ok(case.events_of("holder-0", "FinalizerStuck").await?.pop()),
    )
    .await?;
    let note = stuck.note.unwrap_or_default();
    ensure!(note.contains("capstan.dev/release-finalizer=true"), "{note}");
    ensure!(case.hostiles().get_opt("holder-0").await?.is_some(), "still held");
    let release = json!({"metadata": {"annotations": {"capstan.dev/release-finalizer": "true"}}});
    case.hostiles()
        .patch("holder-0", &PatchParams::default(), &Patch::Merge(&release))
        .await?;
    eventually("holder-0 gone", Duration::from_secs(60), async || {
        Ok(case.hostiles().get_opt("holder-0").await?.is_none().then_some(()))
    })
    .await?;
    let report = case.measure("hostile", WINDOW).await?;
    case.stop(report, &Budget::default())?;
    Ok(())
}
