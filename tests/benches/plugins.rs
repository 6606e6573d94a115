//! Many plugins in one host, with default flags: N copies of Echo (`name:` in the config,
//! each with its own image so each makes its own Job) reconcile the same E Echos on the
//! local plane. Printed per N: whether all loaded, the time until every copy's Jobs
//! exist, the host's peak RSS and what each added plugin cost, and the watches the API
//! server has open in the namespace (one per kind, whatever N), and the copies' reconcile
//! time (mean, and the p99 bucket's bound) from the host's metrics.
//!
//! `cargo bench -p capstan-tests --bench plugins`; `CAPSTAN_BENCH_PLUGINS=1,10,100,300`
//! picks the counts (default `1,10,100`), `CAPSTAN_BENCH_ECHOES` the Echos (default 5).
//! `CAPSTAN_BENCH_HOSTILE=loop` (or `memory`, any hostile mode) runs each count again
//! beside the hostile plugin reconciling 16 objects in that mode, calling again at once:
//! the copies' time to converge, with and without it (`CAPSTAN_BENCH_HOSTILE_MILLICORES`
//! sets its CPU share; one core by default). `CAPSTAN_BENCH_REPEAT=R` alternates R runs
//! without and with it and prints the median and worst of the ratios.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use capstan::dev::Plane;
use capstan_tests::governance::usage;
use capstan_tests::host::{
    Host, echo, echo_resource, hostile_crd, hostile_resource, install_plugin_crd, mount,
};
use capstan_tests::release_capstan;
use capstan_tests::requests::watches;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, DynamicObject, ListParams, PostParams};

/// One host's run with `copies` plugins and `echoes` parents.
struct Run {
    loaded: usize,
    refused: usize,
    converged: Duration,
    peak_rss_mib: f64,
    watches: (f64, f64),
    /// The copies' reconcile time: mean and p99 (a bucket's upper bound), seconds.
    latency: (f64, f64),
}

/// The copies' (`echo-*`) reconcile times from the host's
/// `controller_runtime_reconcile_time_seconds`: their mean, and the upper bound of the
/// bucket holding the 99th percentile.
fn copies_latency(metrics: &str) -> (f64, f64) {
    let mut buckets: std::collections::BTreeMap<u64, f64> = Default::default();
    let (mut sum, mut count) = (0.0, 0.0);
    let series = "controller_runtime_reconcile_time_seconds";
    for line in metrics
        .lines()
        .filter(|l| l.starts_with(series) && l.contains("controller=\"echo-"))
    {
        let Some((head, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let value: f64 = value.parse().unwrap_or(0.0);
        if head.starts_with(&format!("{series}_sum")) {
            sum += value;
        } else if head.starts_with(&format!("{series}_count")) {
            count += value;
        } else if let Some(le) = head.split("le=\"").nth(1).and_then(|r| r.split('"').next()) {
            let le: f64 = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().unwrap_or(f64::INFINITY)
            };
            *buckets.entry(le.to_bits()).or_default() += value;
        }
    }
    let mut sorted: Vec<(f64, f64)> = buckets
        .into_iter()
        .map(|(le, n)| (f64::from_bits(le), n))
        .collect();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let p99 = sorted
        .iter()
        .find(|(_, cumulative)| *cumulative >= 0.99 * count)
        .map_or(f64::NAN, |(le, _)| *le);
    (if count > 0.0 { sum / count } else { f64::NAN }, p99)
}

fn counts(var: &str, default: &str) -> Result<Vec<usize>> {
    std::env::var(var)
        .unwrap_or_else(|_| default.into())
        .split(',')
        .map(|n| {
            n.trim()
                .parse::<usize>()
                .with_context(|| format!("{var}: {n} is not a count"))
        })
        .collect()
}

/// Hostile objects beside the copies in a run with a misbehaving plugin.
const HOSTILES: usize = 16;

async fn run(
    plane: &Plane,
    binary: &std::path::Path,
    (copies, echoes): (usize, usize),
    hostile: Option<&str>,
) -> Result<Run> {
    let ns = plane.namespace(&format!("plugins-{copies}")).await?;
    let dir = std::env::temp_dir().join(format!("capstan-bench-{ns}"));
    mount(&["echo", "hostile"], &dir)?;
    let mut entries: String = (0..copies)
        .map(|i| {
            format!("- path: echo.wasm\n  name: echo-{i}\n  settings: {{image: \"busybox:copy-{i}\"}}\n")
        })
        .collect();
    if hostile.is_some() {
        entries.push_str("- path: hostile.wasm\n");
        // Its CPU share, when not the default of one core.
        if let Ok(millicores) = std::env::var("CAPSTAN_BENCH_HOSTILE_MILLICORES") {
            entries.push_str(&format!("  limits: {{cpuMillicores: {millicores}}}\n"));
        }
    }
    let config = dir.join("capstan.yaml");
    std::fs::write(&config, format!("plugins:\n{entries}"))?;
    let log = dir.join("host.log");
    let args = ["--config", config.to_str().context("utf-8")?, "--namespace", &ns];
    let client = plane.client().await?;
    // System components keep namespaced watches of their own; the host's are the rest.
    let before = watches(&client).await?;
    let mut host = Host::start_binary(binary, plane, &args, &log, &[])?;
    if let Some(mode) = hostile {
        let hostiles: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &hostile_resource());
        for i in 0..HOSTILES {
            let object: DynamicObject = serde_json::from_value(serde_json::json!({
                "apiVersion": "capstan.dev/v1alpha1", "kind": "Hostile",
                "metadata": {"name": format!("{mode}-{i}")}, "spec": {"mode": mode, "requeueMs": 0},
            }))?;
            hostiles.create(&PostParams::default(), &object).await?;
        }
        // Let it get going before the copies have anything to do.
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    let parents: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &echo_resource());
    let start = Instant::now();
    for i in 0..echoes {
        parents
            .create(&PostParams::default(), &echo(&format!("e{i}"), "many plugins")?)
            .await?;
    }
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let given = |log: &[serde_json::Value], prefix: &str| {
        log.iter()
            .filter(|l| l["message"].as_str().is_some_and(|m| m.starts_with(prefix)))
            .count()
    };
    let (loaded, converged) = loop {
        let loaded = given(&host.log(), "plugin given") - usize::from(hostile.is_some());
        let made = jobs.list(&ListParams::default()).await?.items.len();
        if loaded > 0 && made >= loaded * echoes {
            break (loaded, start.elapsed());
        }
        if start.elapsed() > Duration::from_secs(900) {
            bail!("{copies} plugins: {made} of {} Jobs after 900 s", loaded * echoes);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let open = watches(&client).await?;
    let namespaced = |r: &str| {
        let key = (r.to_string(), "namespace".to_string());
        open.get(&key).copied().unwrap_or(0.0) - before.get(&key).copied().unwrap_or(0.0)
    };
    let peak_rss_mib = usage(host.pid())?.peak_rss_mib;
    let latency = copies_latency(&host.metrics().await?);
    let refused = given(&host.log(), "plugin not loaded");
    host.signal(libc::SIGTERM);
    host.wait(Duration::from_secs(60))?;
    std::fs::remove_dir_all(dir).ok();
    Ok(Run {
        loaded,
        refused,
        converged,
        peak_rss_mib,
        watches: (namespaced(&echo_resource().plural), namespaced("jobs")),
        latency,
    })
}

fn main() -> Result<()> {
    let runtime = tokio::runtime::Runtime::new()?;
    let copies = counts("CAPSTAN_BENCH_PLUGINS", "1,10,100")?;
    let echoes = counts("CAPSTAN_BENCH_ECHOES", "5")?.first().copied().unwrap_or(5);
    let hostile = std::env::var("CAPSTAN_BENCH_HOSTILE")
        .ok()
        .filter(|m| !m.is_empty());
    let repeat = counts("CAPSTAN_BENCH_REPEAT", "1")?
        .first()
        .copied()
        .unwrap_or(1)
        .max(1);
    let binary = release_capstan()?;
    runtime.block_on(async {
        let plane = Plane::shared().await?;
        install_plugin_crd(plane, "echo").await?;
        plane.install_crds(&[hostile_crd()?]).await?;
        println!(
            "{echoes} Echos; default flags (--memory-budget 1Gi, --max-instances 256, concurrency {} each)",
            capstan::controller::Options::default().concurrency
        );
        println!(
            "{:>8} {:>8} {:>8} {:>12} {:>14} {:>18} {:>16} {:>22}",
            "plugins",
            "loaded",
            "refused",
            "all Jobs",
            "host peak RSS",
            "per added plugin",
            "watches E / J",
            "reconcile mean / p99"
        );
        // The first host compiles Echo (Cranelift's peak); later ones load it from the
        // compile cache, as a host does after its first start. Warm it, unprinted.
        run(plane, &binary, (1, 1), None).await?;
        let mut first: Option<(usize, f64)> = None;
        for n in copies {
            // (without, with) the misbehaving plugin, per repeat, alternated.
            let mut pairs: Vec<(Run, Run)> = Vec::new();
            for _ in 0..repeat {
                let alone = run(plane, &binary, (n, echoes), None).await?;
                let per = match *first.get_or_insert((alone.loaded, alone.peak_rss_mib)) {
                    (n0, rss0) if alone.loaded > n0 => {
                        format!(
                            "{:.2} MiB",
                            (alone.peak_rss_mib - rss0) / (alone.loaded - n0) as f64
                        )
                    }
                    _ => String::new(),
                };
                print_run(&n.to_string(), &alone, &per);
                if let Some(mode) = hostile.as_deref() {
                    let beside = run(plane, &binary, (n, echoes), Some(mode)).await?;
                    print_run(&format!("+{mode}"), &beside, "");
                    pairs.push((alone, beside));
                }
            }
            if !pairs.is_empty() {
                print_ratios(&pairs);
            }
        }
        Ok(())
    })
}

fn print_run(label: &str, r: &Run, per: &str) {
    println!(
        "{label:>8} {:>8} {:>8} {:>12} {:>14} {per:>18} {:>16} {:>22}",
        r.loaded,
        r.refused,
        format!("{:.1}s", r.converged.as_secs_f64()),
        format!("{:.1} MiB", r.peak_rss_mib),
        format!("{} / {}", r.watches.0, r.watches.1),
        format!("{:.1} / {:.0} ms", r.latency.0 * 1e3, r.latency.1 * 1e3),
    );
}

/// The copies beside the misbehaving plugin against alone: the median of each repeat's
/// ratio, and the worst.
fn print_ratios(pairs: &[(Run, Run)]) {
    let ratios = |f: &dyn Fn(&Run) -> f64| {
        let mut r: Vec<f64> = pairs.iter().map(|(a, b)| f(b) / f(a)).collect();
        r.sort_by(f64::total_cmp);
        (r[r.len() / 2], r[r.len() - 1])
    };
    let converged = ratios(&|r| r.converged.as_secs_f64());
    let mean = ratios(&|r| r.latency.0);
    let p99 = ratios(&|r| r.latency.1);
    println!(
        "beside it, over {} runs (median, worst): all Jobs {:.2}×, {:.2}×; reconcile mean {:.2}×, {:.2}×; p99 bucket {:.0}×, {:.0}×",
        pairs.len(),
        converged.0,
        converged.1,
        mean.0,
        mean.1,
        p99.0,
        p99.1
    );
}
