//! End-to-end benchmark of `capstan run`'s controller on the local control plane:
//! N Echos (default 1000, `CAPSTAN_BENCH_N`) exist before the host starts; it reports the
//! time until every Job exists and every status is written, reconciles/s, API writes per
//! Echo, reconcile latency and the host's peak RSS — with echo.wasm in the sandbox, loaded
//! from a warm compile cache (every start after the first) and compiled at start (the
//! first), and with the identical Echo code compiled natively, so the sandbox's share shows.
//!
//! Then failover with the default lease settings: `kill -9` of the leader → first
//! reconcile by the standby, and SIGTERM → standby leads.
//!
//! `cargo bench -p capstan-tests --bench e2e`. The host (`capstan::Host`: servers,
//! supervisor, readiness, as `capstan run` wires them) runs as a child process (this
//! binary with `--serve`) so its RSS is its own.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use capstan::controller::Options;
use capstan::dev::{Plane, PlaneConfig};
use capstan::engine::{
    DispatchError, Engine, EngineConfig, Event, EventType, Kind, Metadata, Reconcile, RelatedQuery, Request,
    Response,
};
use capstan::{Host as CapstanHost, HostConfig};
use capstan_sdk::bindings::capstan::reconciler::types as wit;
use capstan_tests::host::{
    Host, echo, echo_resource, eventually, first_listed, install_plugin_crd, mount, sample,
};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DynamicObject, PostParams};
use kube::runtime::watcher;

/// Echo's own code, called natively through the same SDK glue as the Wasm export.
struct NativeEcho(Metadata);

fn kind(k: wit::KindRef) -> Kind {
    Kind {
        group: k.group,
        version: k.version,
        kind: k.kind,
        plural: k.plural,
        namespaced: k.namespaced,
    }
}

impl NativeEcho {
    fn new() -> Self {
        let m = capstan_sdk::guest::metadata::<echo::EchoReconciler>();
        NativeEcho(Metadata {
            name: m.name,
            version: m.version,
            parent: kind(m.parent),
            children: m.children.into_iter().map(kind).collect(),
            related: m.related.into_iter().map(kind).collect(),
            settings_schema: m.settings_schema.and_then(|s| serde_json::from_str(&s).ok()),
            finalizer: m.finalizer,
        })
    }
}

impl Reconcile for NativeEcho {
    fn metadata(&self) -> &Metadata {
        &self.0
    }

    fn related(&self, parent: &serde_json::Value) -> Result<Vec<RelatedQuery>, DispatchError> {
        Ok(capstan_sdk::guest::queries::<echo::EchoReconciler>(
            &parent.to_string(),
            "{}".into(),
        ))
    }

    fn reconcile(&self, request: &Request) -> Result<Response, DispatchError> {
        let now = request.now.unwrap_or_else(k8s_openapi::jiff::Timestamp::now);
        let request = wit::Request {
            parent: request.parent.to_string(),
            children: request.children.iter().map(|c| c.to_string()).collect(),
            related: request.related.iter().map(|c| c.to_string()).collect(),
            settings: "{}".into(),
            now: now.to_string(),
            finalizing: request.finalizing,
        };
        let json = |s: &str| {
            serde_json::from_str(s).map_err(|e| DispatchError::Retry {
                message: e.to_string(),
                after: None,
            })
        };
        match capstan_sdk::guest::reconcile::<echo::EchoReconciler>(request) {
            Ok(r) => Ok(Response {
                children: r.children.iter().map(|c| json(c)).collect::<Result<_, _>>()?,
                status: r.status.as_deref().map(json).transpose()?,
                requeue_after: r.requeue_after_ms.map(Duration::from_millis),
                events: r
                    .events
                    .into_iter()
                    .map(|e| Event {
                        event_type: match e.event_type {
                            wit::EventType::Normal => EventType::Normal,
                            wit::EventType::Warning => EventType::Warning,
                        },
                        reason: e.reason,
                        message: e.message,
                    })
                    .collect(),
                finalized: r.finalized,
            }),
            Err(wit::ReconcileError::Retry(r)) => Err(DispatchError::Retry {
                message: r.message,
                after: r.after_ms.map(Duration::from_millis),
            }),
            Err(wit::ReconcileError::Fatal(m)) => Err(DispatchError::Fatal(m)),
        }
    }
}

/// The compile cache the `wasm` mode loads from, warmed before anything is timed.
fn cache_dir() -> std::path::PathBuf {
    std::env::temp_dir().join("capstan-bench-compile-cache")
}

fn engine(cache_dir: Option<std::path::PathBuf>) -> Result<Engine> {
    Engine::new(EngineConfig {
        cache_dir,
        ..EngineConfig::default()
    })
}

/// The child process: the real host (servers, supervisor, readiness) with one Echo
/// controller on `namespace`, Wasm from a plugin directory or native.
async fn serve(mode: &str, namespace: &str) -> Result<()> {
    let config = HostConfig {
        defaults: Options {
            namespace: Some(namespace.into()),
            ..Options::default()
        },
        metrics_addr: "127.0.0.1:0".parse()?,
        health_addr: "127.0.0.1:0".parse()?,
        ..HostConfig::default()
    };
    let dir = std::env::temp_dir().join(format!("capstan-bench-{namespace}"));
    let host = match mode {
        "wasm" | "wasm-cold" => {
            mount(&["echo"], &dir)?;
            let cache = (mode == "wasm").then(cache_dir);
            let config = HostConfig {
                plugins: Some(dir.clone()),
                ..config
            };
            tokio::task::spawn_blocking(move || CapstanHost::new(config, engine(cache)?)).await??
        }
        "native" => {
            let mut host = CapstanHost::new(config, engine(None)?)?;
            host.add(
                Arc::new(NativeEcho::new()),
                Options {
                    namespace: Some(namespace.into()),
                    ..Options::default()
                },
            );
            host
        }
        other => bail!("unknown mode {other}"),
    };
    let client = kube::Client::try_default().await?;
    let serving = host.serve(client).await?;
    println!("METRICS {}", serving.metrics_addr());
    serving.until(std::future::pending()).await;
    Ok(())
}

/// Peak resident set of `pid` (VmHWM), in MiB.
fn peak_rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
            line.split_whitespace().nth(1)?.parse::<f64>().ok()
        })
        .map_or(0.0, |kib| kib / 1024.0)
}

/// `histogram_quantile` over a Prometheus histogram's cumulative buckets, interpolated.
fn quantile(body: &str, metric: &str, q: f64) -> f64 {
    let prefix = format!("{metric}_bucket{{");
    let mut buckets: Vec<(f64, f64)> = body
        .lines()
        .filter(|l| l.starts_with(&prefix))
        .filter_map(|l| {
            let le = l.split("le=\"").nth(1)?.split('"').next()?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, l.rsplit(' ').next()?.parse().ok()?))
        })
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total = buckets.last().map_or(0.0, |b| b.1);
    let rank = q * total;
    let (mut lower, mut below) = (0.0, 0.0);
    for (le, count) in buckets {
        if count >= rank {
            if le.is_infinite() {
                return lower;
            }
            return lower + (le - lower) * (rank - below) / (count - below).max(1.0);
        }
        (lower, below) = (le, count);
    }
    lower
}

struct Row {
    jobs: Duration,
    statuses: Duration,
    reconciles: f64,
    writes: f64,
    p50: f64,
    p99: f64,
    rss: f64,
}

async fn run_mode(plane: &Plane, mode: &str, n: usize) -> Result<Row> {
    let client = plane.client().await?;
    let ns = plane.namespace(&format!("bench-{mode}")).await?;
    let echoes: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &echo_resource());
    futures::stream::iter(0..n)
        .map(|i| {
            let echoes = echoes.clone();
            async move {
                echoes
                    .create(
                        &PostParams::default(),
                        &echo(&format!("e{i}"), &format!("hello {i}"))?,
                    )
                    .await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(16)
        .try_collect::<()>()
        .await?;

    // Count from watches, so measuring does not load the API server with lists.
    let jobs_seen = Arc::new(AtomicUsize::new(0));
    let statuses_seen = Arc::new(AtomicUsize::new(0));
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let count = jobs_seen.clone();
    let job_watch = tokio::spawn(async move {
        let mut names = std::collections::HashSet::new();
        let mut stream = std::pin::pin!(watcher(jobs, watcher::Config::default()));
        while let Ok(Some(event)) = stream.try_next().await {
            if let watcher::Event::Apply(j) | watcher::Event::InitApply(j) = event {
                names.insert(j.metadata.name.unwrap_or_default());
                count.store(names.len(), Ordering::SeqCst);
            }
        }
    });
    let count = statuses_seen.clone();
    let watched = echoes.clone();
    let status_watch = tokio::spawn(async move {
        let mut names = std::collections::HashSet::new();
        let mut stream = std::pin::pin!(watcher(watched, watcher::Config::default()));
        while let Ok(Some(event)) = stream.try_next().await {
            if let watcher::Event::Apply(e) | watcher::Event::InitApply(e) = event
                && !e.data["status"]["observedGeneration"].is_null()
            {
                names.insert(e.metadata.name.unwrap_or_default());
                count.store(names.len(), Ordering::SeqCst);
            }
        }
    });

    let mut child = tokio::process::Command::new(std::env::current_exe()?)
        .args(["--serve", mode, "--namespace", &ns])
        .env("KUBECONFIG", plane.kubeconfig())
        .env("RUST_LOG", "warn,kube_client=off")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let start = Instant::now();
    let pid = child.id().context("child pid")?;
    let stdout = child.stdout.take().context("child stdout")?;
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout));
    let metrics = loop {
        let line = lines
            .next_line()
            .await?
            .context("the host exited before serving metrics")?;
        if let Some(addr) = line.strip_prefix("METRICS ") {
            break addr.to_string();
        }
    };
    let (mut jobs_at, mut statuses_at) = (None, None);
    while jobs_at.is_none() || statuses_at.is_none() {
        if start.elapsed() > Duration::from_secs(600) {
            bail!("{mode}: not converged after 600 s");
        }
        if jobs_at.is_none() && jobs_seen.load(Ordering::SeqCst) >= n {
            jobs_at = Some(start.elapsed());
        }
        if statuses_at.is_none() && statuses_seen.load(Ordering::SeqCst) >= n {
            statuses_at = Some(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Let in-flight work settle before reading the counters.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let body = capstan_tests::host::http_get(&metrics, "/metrics")?.1;
    let rss = peak_rss_mib(pid);
    child.kill().await.ok();
    job_watch.abort();
    status_watch.abort();
    let statuses = statuses_at.unwrap_or_default();
    let reconciles: f64 = ["success", "error", "requeue"]
        .iter()
        .map(|r| {
            sample(
                &body,
                &format!(r#"controller_runtime_reconcile_total{{controller="echo",result="{r}"}}"#),
            )
        })
        .sum();
    Ok(Row {
        jobs: jobs_at.unwrap_or_default(),
        statuses,
        reconciles: reconciles / statuses.as_secs_f64(),
        writes: sample(&body, r#"capstan_api_writes_total{plugin="echo"}"#) / n as f64,
        p50: quantile(&body, "controller_runtime_reconcile_time_seconds", 0.5) * 1000.0,
        p99: quantile(&body, "controller_runtime_reconcile_time_seconds", 0.99) * 1000.0,
        rss,
    })
}

/// Failover with the default lease settings (15 s / 10 s / 2 s), `capstan run` processes:
/// `kill -9` of the leader → first reconcile by the standby, and SIGTERM → standby leads.
async fn failover(plane: &Plane) -> Result<()> {
    let client = plane.client().await?;
    let ns = plane.namespace("bench-failover").await?;
    let dir = std::env::temp_dir().join(format!("capstan-bench-{ns}"));
    mount(&["echo"], &dir)?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let holder = async || -> Result<Option<String>> {
        Ok(leases
            .get_opt("capstan")
            .await?
            .and_then(|l| l.spec?.holder_identity))
    };
    let start = |id: &str| {
        let args = [
            "--plugins",
            dir.to_str().unwrap_or_default(),
            "--namespace",
            &ns,
            "--leader-elect",
            "--leader-election-namespace",
            &ns,
        ];
        Host::start(plane, &args, &dir.join(format!("{id}.log")), &[("POD_NAME", id)])
    };
    let ready = async |host: &Host| {
        eventually("the host ready", Duration::from_secs(60), async || {
            Ok(host.logged("caches synced; ready").then_some(()))
        })
        .await
    };
    let mut hosts = vec![("a", start("a")?), ("b", start("b")?)];
    for (_, h) in &hosts {
        ready(h).await?;
    }
    let leader = eventually("a leader", Duration::from_secs(60), async || holder().await).await?;
    let i = hosts
        .iter()
        .position(|(id, _)| *id == leader)
        .context("leader is ours")?;
    let (_, killed) = hosts.remove(i);
    killed.signal(libc::SIGKILL);
    let t = Instant::now();
    let echoes: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &echo_resource());
    echoes
        .create(&PostParams::default(), &echo("after-kill", "hi")?)
        .await?;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    first_listed("the standby's first reconcile", &jobs, Duration::from_secs(60)).await?;
    let after_kill = t.elapsed();
    hosts.push(("c", start("c")?));
    ready(&hosts[1].1).await?;
    hosts[0].1.signal(libc::SIGTERM);
    let t = Instant::now();
    loop {
        if holder().await?.as_deref() == Some("c") {
            break;
        }
        if t.elapsed() > Duration::from_secs(60) {
            bail!("no hand-over after SIGTERM");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let after_term = t.elapsed();
    println!("failover, --lease-duration 15s --renew-deadline 10s --retry-period 2s:");
    println!("  kill -9 of the leader → first reconcile by the standby: {after_kill:.2?}");
    println!("  SIGTERM of the leader → standby leads:                 {after_term:.2?}");
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let runtime = tokio::runtime::Runtime::new()?;
    if let Some(i) = args.iter().position(|a| a == "--serve") {
        let mode = args.get(i + 1).context("--serve MODE")?;
        let ns = args
            .iter()
            .position(|a| a == "--namespace")
            .and_then(|j| args.get(j + 1))
            .context("--namespace NS")?;
        return runtime.block_on(serve(mode, ns));
    }
    let n: usize = std::env::var("CAPSTAN_BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    // Build the plugin and fill the compile cache before anything is timed.
    std::fs::remove_dir_all(cache_dir()).ok();
    engine(Some(cache_dir()))?.load_file(&capstan_tests::plugin("echo"), Default::default())?;
    runtime.block_on(async {
        let plane = Plane::start(PlaneConfig::api_only()).await?;
        install_plugin_crd(&plane, "echo").await?;
        println!("{n} Echos created before the host starts; API server + etcd on loopback; 2 cores");
        println!(
            "{:<9} {:>10} {:>12} {:>13} {:>13} {:>9} {:>9} {:>9}",
            "mode",
            "jobs (s)",
            "statuses (s)",
            "reconciles/s",
            "writes/Echo",
            "p50 (ms)",
            "p99 (ms)",
            "RSS (MiB)"
        );
        let mut rows = Vec::new();
        let modes = ["wasm", "wasm-cold", "native"];
        for mode in modes {
            let r = run_mode(&plane, mode, n).await?;
            println!(
                "{:<9} {:>10.2} {:>12.2} {:>13.0} {:>13.2} {:>9.2} {:>9.2} {:>9.1}",
                mode,
                r.jobs.as_secs_f64(),
                r.statuses.as_secs_f64(),
                r.reconciles,
                r.writes,
                r.p50,
                r.p99,
                r.rss
            );
            rows.push(r);
        }
        let native = rows[2].statuses.as_secs_f64();
        println!(
            "time to all statuses, wasm / native: {:.2}× (compiled at start: {:.2}×)",
            rows[0].statuses.as_secs_f64() / native,
            rows[1].statuses.as_secs_f64() / native
        );
        std::fs::remove_dir_all(cache_dir()).ok();
        failover(&plane).await
    })
}
