//! Many plugins in one host, with default flags: N copies of Echo (`name:` in the config,
//! each with its own image so each makes its own Job) reconcile the same E Echos on the
//! local plane. Printed per N: whether all loaded, the time until every copy's Jobs
//! exist, the host's peak RSS and what each added plugin cost, and the watches the API
//! server has open in the namespace (one per kind, whatever N).
//!
//! `cargo bench -p capstan-tests --bench plugins`; `CAPSTAN_BENCH_PLUGINS=1,10,100,300`
//! picks the counts (default `1,10,100`), `CAPSTAN_BENCH_ECHOES` the Echos (default 5).
//! `CAPSTAN_BENCH_HOSTILE=loop` (or `memory`, any hostile mode) runs each count again
//! beside the hostile plugin reconciling 16 objects in that mode, calling again at once:
//! the copies' time to converge, with and without it (`CAPSTAN_BENCH_HOSTILE_MILLICORES`
//! sets its CPU share; one core by default).

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use capstan::dev::Plane;
use capstan_tests::governance::usage;
use capstan_tests::host::{
    Host, echo, echo_resource, hostile_crd, hostile_resource, install_plugin_crd, mount,
};
use capstan_tests::requests::watches;
use capstan_tests::workspace;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, DynamicObject, ListParams, PostParams};

/// One host's run with `copies` plugins and `echoes` parents.
struct Run {
    loaded: usize,
    refused: usize,
    converged: Duration,
    peak_rss_mib: f64,
    watches: (f64, f64),
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

/// The release `capstan` binary, built now (a bench measures what operators run).
fn release_capstan() -> Result<std::path::PathBuf> {
    let status = Command::new(env!("CARGO"))
        .args(["build", "--release", "-p", "capstan", "--bin", "capstan"])
        .current_dir(workspace())
        .status()?;
    if !status.success() {
        bail!("building the release capstan failed");
    }
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| workspace().join("target"), Into::into);
    Ok(std::path::Path::new(&target).join("release/capstan"))
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
    })
}

fn main() -> Result<()> {
    let runtime = tokio::runtime::Runtime::new()?;
    let copies = counts("CAPSTAN_BENCH_PLUGINS", "1,10,100")?;
    let echoes = counts("CAPSTAN_BENCH_ECHOES", "5")?.first().copied().unwrap_or(5);
    let hostile = std::env::var("CAPSTAN_BENCH_HOSTILE")
        .ok()
        .filter(|m| !m.is_empty());
    let binary = release_capstan()?;
    runtime.block_on(async {
        let plane = Plane::shared().await?;
        install_plugin_crd(plane, "echo").await?;
        plane.install_crds(&[hostile_crd()?]).await?;
        println!(
            "{echoes} Echos; default flags (--memory-budget 1Gi, --max-instances 256, concurrency 16 each)"
        );
        println!(
            "{:>8} {:>8} {:>8} {:>12} {:>14} {:>18} {:>16}",
            "plugins", "loaded", "refused", "all Jobs", "host peak RSS", "per added plugin", "watches E / J"
        );
        // The first host compiles Echo (Cranelift's peak); later ones load it from the
        // compile cache, as a host does after its first start. Warm it, unprinted.
        run(plane, &binary, (1, 1), None).await?;
        let mut first: Option<(usize, f64)> = None;
        for n in copies {
            for mode in std::iter::once(None).chain(hostile.as_deref().map(Some)) {
                let r = run(plane, &binary, (n, echoes), mode).await?;
                let label = mode.map_or_else(|| n.to_string(), |m| format!("+{m}"));
                let per = match mode {
                    None => {
                        let (n0, rss0) = *first.get_or_insert((r.loaded, r.peak_rss_mib));
                        if r.loaded > n0 {
                            format!("{:.2} MiB", (r.peak_rss_mib - rss0) / (r.loaded - n0) as f64)
                        } else {
                            String::new()
                        }
                    }
                    Some(_) => String::new(),
                };
                println!(
                    "{label:>8} {:>8} {:>8} {:>12} {:>14} {per:>18} {:>16}",
                    r.loaded,
                    r.refused,
                    format!("{:.1}s", r.converged.as_secs_f64()),
                    format!("{:.1} MiB", r.peak_rss_mib),
                    format!("{} / {}", r.watches.0, r.watches.1),
                );
            }
        }
        Ok(())
    })
}
