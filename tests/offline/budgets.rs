//! Host memory and log text a hostile plugin could make the host spend on its behalf:
//! fresh 4 MiB event reasons, kept pollables, 64 MiB random-byte requests, millions of
//! empty strings, a 64 KiB panic message on every call. In the engine each is the
//! plugin's own fault, refused before the host holds much of it; on the real plane,
//! sixteen at once keep the host within its `--memory-budget` and the plugin within its
//! log budget, beside Echo (which stays converged); and `capstan test` of a plugin asking
//! for 64 MiB of random bytes peaks near an honest Echo.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use capstan_engine::{DispatchError, Engine, Fault, Limits, Plugin, Request};
use capstan_tests::governance::{Budget, Case};
use capstan_tests::host::eventually;
use capstan_tests::{arg, capstan_bin, compile_cache, echo_fixture, plugin};
use serde_json::json;

/// The host's memory budget in these cases: room for Echo and hostile each to use its
/// whole default total (128 MiB) above the floors they reserve at load.
const MEMORY_BUDGET_MIB: f64 = 256.0;
/// A plugin's log budget by default: a burst, then a rate.
const LOG_BURST: u64 = 256 << 10;
const LOG_RATE: u64 = 4096;
/// How long each case is measured once Echo has converged.
const WINDOW: Duration = Duration::from_secs(10);
/// How long the first calls and Echo may take.
const CONVERGE: Duration = Duration::from_secs(180);

fn hostile() -> Plugin {
    let engine = Engine::new(Default::default()).expect("an engine");
    engine
        .load_file(&plugin("hostile"), Limits::default())
        .expect("hostile loads")
}

fn call(p: &Plugin, mode: &str) -> Result<capstan_engine::Response, DispatchError> {
    p.reconcile(&Request {
        parent: json!({
            "apiVersion": "capstan.dev/v1alpha1", "kind": "Hostile",
            "metadata": {"name": mode, "namespace": "budgets"}, "spec": {"mode": mode},
        })
        .into(),
        ..Request::default()
    })
}

fn fault(p: &Plugin, mode: &str) -> Fault {
    match call(p, mode) {
        Err(DispatchError::Fault(f)) => f,
        other => panic!(
            "{mode}: expected a fault, got {:?}",
            other.map(|r| r.children.len())
        ),
    }
}

/// Calls at once of hostile's `spin` mode (about 50 ms of spinning each, so they overlap
/// on any machine), started together; the faults, each said on stderr.
fn spin_at_once(p: &Plugin, at_once: usize) -> usize {
    let start = std::sync::Barrier::new(at_once);
    let faults = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..at_once {
            s.spawn(|| {
                start.wait();
                let spun = p.reconcile(&Request {
                    parent: json!({
                        "apiVersion": "capstan.dev/v1alpha1", "kind": "Hostile",
                        "metadata": {"name": "spin", "namespace": "budgets"},
                        "spec": {"mode": "spin", "arg": "50"},
                    })
                    .into(),
                    ..Request::default()
                });
                if let Err(e) = spun {
                    eprintln!("{e}");
                    faults.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            });
        }
    });
    faults.into_inner()
}

/// What the instance pool keeps resident between calls (each warm slot's first pages,
/// kept for speed) is counted in the host's memory budget: after eight calls at once the
/// budget holds more than the floor reserved at load, and no more than eight slots keep.
#[test]
fn the_pools_warm_slots_after_a_burst_count_in_the_memory_budget() {
    let engine = Engine::new(Default::default()).expect("an engine");
    let p = engine
        .load_file(&plugin("hostile"), Limits::default())
        .expect("hostile loads");
    let (_, before) = engine.memory_budget();
    const AT_ONCE: usize = 8;
    assert_eq!(spin_at_once(&p, AT_ONCE), 0);
    let (_, after) = engine.memory_budget();
    assert!(
        after > before,
        "the warm slots are counted: {before} → {after} bytes"
    );
    // Each slot keeps at most 2 MiB of linear memory and 64 KiB per table resident.
    assert!(
        after - before <= AT_ONCE * (3 << 20),
        "no more than the burst's slots keep: {before} → {after} bytes"
    );
}

/// Memory waits as CPU does: eight calls at once of a plugin whose total holds only two
/// instances of its measured size wait in line for it, and none faults.
#[test]
fn calls_past_the_plugins_memory_total_wait_for_it_instead_of_faulting() {
    let engine = Engine::new(Default::default()).expect("an engine");
    let limits = Limits {
        memory: 12 << 20,
        memory_total: 12 << 20,
        ..Limits::default()
    };
    let p = engine
        .load_file(&plugin("hostile"), limits)
        .expect("hostile loads");
    assert_eq!(
        spin_at_once(&p, 8),
        0,
        "calls faulted instead of waiting for memory"
    );
}

#[test]
fn kept_pollables_fill_the_resource_table_and_trap() {
    let p = hostile();
    let f = fault(&p, "pollables");
    assert!(
        matches!(&f, Fault::Trap(t) if t.contains("resource table has no free keys")),
        "{f:?}"
    );
    assert!(call(&p, "ok").is_ok(), "the next call is served");
}

#[test]
fn random_bytes_are_at_most_a_mebibyte_a_call() {
    let p = hostile();
    let f = fault(&p, "random");
    assert!(
        matches!(&f, Fault::Trap(t) if t.contains("exceeds limit 1048576")),
        "{f:?}"
    );
}

#[test]
fn millions_of_empty_strings_are_refused_before_the_host_copies_them() {
    let p = hostile();
    let limits = Limits::default();
    // What the largest response within the limits takes: its text, each child and event.
    let allowance = limits.response_bytes + limits.max_children * 24 + 1000 * 56;
    assert_eq!(fault(&p, "empty-strings"), Fault::TooMuchData(allowance));
    assert_eq!(fault(&p, "empty-strings").cause(), "response_too_large");
    assert!(call(&p, "ok").is_ok(), "the next call is served");
}

#[test]
fn a_64k_panic_message_is_repeated_as_one_line_of_at_most_512_characters() {
    let p = hostile();
    let error = call(&p, "panic-64k").expect_err("it panics").to_string();
    let Fault::Panic(message) = fault(&p, "panic-64k") else {
        panic!("a panic fault")
    };
    assert!(
        message.starts_with("ppp") && message.ends_with('…'),
        "{message:.80}"
    );
    assert_eq!(message.chars().count(), 513, "512 and an ellipsis");
    assert!(error.len() < 600, "{} bytes: {error:.80}", error.len());
}

/// Peak RSS (MiB) of one `capstan test` of `wasm` on `parent`, from `wait4`'s rusage of
/// that child alone (the tests' own cargo builds are children too).
fn peak_rss_of_capstan_test(wasm: &str, parent: &str) -> Result<f64> {
    let child = Command::new(capstan_bin())
        .args(["test", wasm, "--parent", parent])
        .env_remove("RUST_LOG")
        .env("CAPSTAN_CACHE_DIR", compile_cache())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 writes one through a valid pointer.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child, which nothing else waits for.
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    ensure!(pid > 0, "wait4: {}", std::io::Error::last_os_error());
    Ok(usage.ru_maxrss as f64 / 1024.0)
}

#[test]
fn capstan_test_of_a_random_bytes_plugin_peaks_near_an_honest_echo() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let parent = dir.path().join("random.yaml");
    std::fs::write(
        &parent,
        "apiVersion: capstan.dev/v1alpha1\nkind: Hostile\nmetadata: {name: r, namespace: d}\nspec: {mode: random}\n",
    )?;
    let (echo, hostile) = (plugin("echo"), plugin("hostile"));
    let echo_parent = echo_fixture("echo.yaml");
    let runs = [(arg(&echo), arg(&echo_parent)), (arg(&hostile), arg(&parent))];
    // The first runs fill the compile cache, so both are measured loading from it.
    for (wasm, parent) in runs {
        peak_rss_of_capstan_test(wasm, parent)?;
    }
    let honest = peak_rss_of_capstan_test(runs[0].0, runs[0].1)?;
    let random = peak_rss_of_capstan_test(runs[1].0, runs[1].1)?;
    println!("capstan test peak RSS: Echo {honest:.0} MiB, random bytes {random:.0} MiB");
    ensure!(random <= 3.0 * honest, "{random:.0} MiB, over 3 × {honest:.0}");
    // Asking for 64 MiB at once cost the host that much before the 1 MiB cap.
    ensure!(random <= honest + 16.0, "{random:.0} MiB, Echo {honest:.0}");
    Ok(())
}

/// Sixteen objects of `mode` at once, requeueing at once: the host's peak RSS stays
/// within `--memory-budget`, the plugin's own lines within its log budget, and the host's
/// lines about it (each repeating at most 512 characters of its text) small.
async fn held_within_budgets(name: &str, mode: &str) -> Result<()> {
    let entry = "- path: hostile.wasm\n  concurrency: 16\n";
    let budget = ["--memory-budget", "256Mi"];
    let started = Instant::now();
    let case = Case::start(name, &["hostile"], entry, &budget, 3).await?;
    case.hostile(mode, 16, mode, json!({"requeueMs": 0})).await?;
    let calls = async || -> Result<f64> {
        let series =
            |r| format!("controller_runtime_reconcile_total{{controller=\"hostile\",result=\"{r}\"}}");
        Ok(case.metric(&series("success")).await? + case.metric(&series("error")).await?)
    };
    eventually("two calls per object", CONVERGE, async || {
        Ok((calls().await? >= 32.0).then_some(()))
    })
    .await?;
    let report = case.measure("hostile", WINDOW).await?;
    let (plugin_bytes, about_bytes) = log_bytes_of(&case.host.log());
    let allowed = LOG_BURST + LOG_RATE * started.elapsed().as_secs();
    println!(
        "budgets {mode}: {} calls, host peak RSS {:.0} MiB (budget {MEMORY_BUDGET_MIB}), \
         {plugin_bytes} B of plugin text (budget {allowed}), {about_bytes} B of host lines about it",
        calls().await?,
        report.peak_rss_mib,
    );
    ensure!(
        plugin_bytes <= allowed,
        "{plugin_bytes} B of plugin text, over {allowed}"
    );
    // Before the cap, one 64 KiB panic repeated in every WARN was megabytes a minute.
    ensure!(
        about_bytes <= 1 << 20,
        "{about_bytes} B of host lines about the plugin"
    );
    // And the whole log, whatever line repeats the plugin's text (say, an event refused).
    ensure!(report.log_bytes <= 4 << 20, "{} B of host log", report.log_bytes);
    let budget = Budget {
        rss_mib: MEMORY_BUDGET_MIB,
        ..Budget::default()
    };
    case.stop(report, &budget)?;
    Ok(())
}

/// Bytes of the plugin's own text in the log (the `capstan::plugin` target), and of the
/// host's lines about it.
fn log_bytes_of(log: &[serde_json::Value]) -> (u64, u64) {
    let hostile = log.iter().filter(|l| l["plugin"] == "hostile");
    let (own, about): (Vec<_>, Vec<_>) = hostile.partition(|l| l["target"] == "capstan::plugin");
    let bytes = |lines: Vec<&serde_json::Value>| lines.iter().map(|l| l.to_string().len() as u64).sum();
    (bytes(own), bytes(about))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fresh_huge_event_reasons() -> Result<()> {
    // The contract refuses reasons that are not short CamelCase: a refused response, or
    // events the host drops; either way the host holds none of it for long.
    held_within_budgets("budget-reasons", "reasons").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_pollables() -> Result<()> {
    held_within_budgets("budget-pollables", "pollables").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_bytes_of_64_mib() -> Result<()> {
    held_within_budgets("budget-random", "random").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn millions_of_empty_strings() -> Result<()> {
    held_within_budgets("budget-empty-strings", "empty-strings").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_64k_panic_on_every_call() -> Result<()> {
    held_within_budgets("budget-panic", "panic-64k").await
}
