//! End-to-end benchmark of `capstan run`'s controller on the local control plane:
//! N Echos (default 1000; `CAPSTAN_BENCH_N=1000,10000` runs each size) exist before the
//! host starts; it reports the time until every Job exists and every status is written,
//! reconciles/s, API writes per Echo, reconcile latency and the host's peak RSS — with
//! echo.wasm in the sandbox, loaded from a warm compile cache (every start after the
//! first) and compiled at start (the first), and with the identical Echo code compiled
//! natively, so the sandbox's share shows (`CAPSTAN_BENCH_MODES=wasm,native` picks modes).
//! Each size is followed by the API server's floors, measured in the same round; on a
//! shared machine `CAPSTAN_BENCH_ROUNDS=3` repeats every size (each round on a plane of
//! its own) and ends with each figure's median and range.
//!
//! Then the quiet full resync: the host runs with a resync period longer than convergence
//! (`N/100 + 20` s), and once every Echo has converged, the CPU seconds the host spends
//! reconciling all N again (and the writes it makes: 0 expected) are measured.
//!
//! `sharded-2` and `sharded-3` run the wasm host as 2 or 3 replicas with `--sharding`
//! (key `uid`), each reconciling its share; the RSS column is the largest replica's.
//! After their resync, one replica is killed with -9 and 60 Echos are created: the time
//! until the others have reconciled all of them is the takeover (the default lease of
//! 15 s included). `sharded-K-namespace` shards by namespace instead, with the Echos
//! spread over 32 namespaces, on a plane of its own (the replicas watch every namespace).
//!
//! Then failover with the default lease settings: `kill -9` of the leader → first
//! reconcile by the standby, and SIGTERM → standby leads.
//!
//! `CAPSTAN_BENCH_SERVER=null` runs the wasm host against a null API server instead (in
//! this process, answering at once from memory): the host's own ceiling, in parents per
//! second per core, on any machine (see `e2e/ceiling.rs`).
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
    DispatchError, Engine, EngineConfig, Event, EventType, Kind, Metadata, Reconcile, RelatedParent,
    RelatedQuery, Request, Response,
};
use capstan::shard::ShardKey;
use capstan::{Host as CapstanHost, HostConfig};
use capstan_sdk::bindings::capstan::reconciler::types as wit;
use capstan_tests::host::{
    Host, echo, echo_resource, eventually, first_listed, install_plugin_crd, mount, pod_of, sample,
};
use capstan_tests::process::{cpu_of, cpu_seconds, peak_rss_mib};
use capstan_tests::requests::{
    FloorWrite, Traffic, floor_parents, requests, settled, write_floor, write_floor_of,
};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DynamicObject, PostParams};
use kube::runtime::watcher;

#[path = "e2e/ceiling.rs"]
mod ceiling;
#[path = "e2e/null_server.rs"]
mod null_server;

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

    fn related(&self, parent: &RelatedParent) -> Result<Vec<RelatedQuery>, DispatchError> {
        Ok(capstan_sdk::guest::queries::<echo::EchoReconciler>(
            parent.json().text(),
            "{}".into(),
        ))
    }

    fn reconcile(&self, request: &Request) -> Result<Response, DispatchError> {
        let now = request.now.unwrap_or_else(k8s_openapi::jiff::Timestamp::now);
        let request = wit::Request {
            parent: request.parent.text().to_string(),
            children: request.children.iter().map(|c| c.text().to_string()).collect(),
            related: request.related.iter().map(|c| c.text().to_string()).collect(),
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
                // Echo sets nothing on its parent.
                parent: Default::default(),
                // Native: nothing parsed out of a sandbox to hold.
                held: Default::default(),
            }),
            Err(wit::ReconcileError::Retry(r)) => Err(DispatchError::Retry {
                message: r.message,
                after: r.after_ms.map(Duration::from_millis),
            }),
            Err(wit::ReconcileError::Fatal(m)) => Err(DispatchError::Fatal(m)),
        }
    }
}

/// Reconciles a host runs at once: `CAPSTAN_BENCH_CONCURRENCY`, or the host's default.
fn concurrency() -> u16 {
    std::env::var("CAPSTAN_BENCH_CONCURRENCY")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(Options::default().concurrency)
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
async fn serve(mode: &str, namespace: &str, resync: Duration, sharding: Option<Shard<'_>>) -> Result<()> {
    let options = Options {
        // The namespace key spreads Echos over many namespaces, so that host watches all.
        namespace: match sharding {
            Some(Shard {
                key: ShardKey::Namespace,
                ..
            }) => None,
            _ => Some(namespace.into()),
        },
        resync,
        concurrency: concurrency(),
        ..Options::default()
    };
    let config = HostConfig {
        defaults: options.clone(),
        metrics_addr: "127.0.0.1:0".parse()?,
        health_addr: "127.0.0.1:0".parse()?,
        sharding: sharding.map(|shard| capstan::host::Sharding {
            members: capstan::leader::Settings::new("capstan-bench", namespace, shard.replica),
            key: shard.key,
        }),
        ..HostConfig::default()
    };
    let dir = plugin_dir(namespace);
    let host = match mode {
        "wasm" | "wasm-cold" => {
            let cache = (mode == "wasm").then(cache_dir);
            let config = HostConfig {
                plugins: Some(dir.clone()),
                ..config
            };
            tokio::task::spawn_blocking(move || CapstanHost::new(config, engine(cache)?)).await??
        }
        "native" => {
            let mut host = CapstanHost::new(config, engine(None)?)?;
            host.add(Arc::new(NativeEcho::new()), options);
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

/// Where the host serving `namespace` finds echo.wasm: mounted by the bench before the
/// host starts, so that building the plugin (even a no-op `cargo build`) is not timed
/// as the host's start.
fn plugin_dir(namespace: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("capstan-bench-{namespace}"))
}

/// A sharded replica's identity and key.
#[derive(Clone, Copy)]
struct Shard<'a> {
    replica: &'a str,
    key: ShardKey,
}

/// Namespaces the `-namespace` modes spread their Echos over.
const NAMESPACES: usize = 32;

/// The cores the plane, the host and the bench share.
fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// CPU seconds of the plane: API server and etcd.
fn plane_cpu() -> (f64, f64) {
    (cpu_of("kube-apiserver"), cpu_of("etcd"))
}

/// Reconciles of every result `capstan_tests` counts, from a metrics page.
fn reconciles_in(body: &str) -> f64 {
    ["success", "error", "requeue", "requeue_after"]
        .iter()
        .map(|r| {
            sample(
                body,
                &format!(r#"controller_runtime_reconcile_total{{controller="echo",result="{r}"}}"#),
            )
        })
        .sum()
}

/// Reconciles per Echo by what they did: the plugin called, answered from memory
/// (inputs unchanged), or put off: the caches not yet showing the last writes (`unseen`),
/// the plugin over its CPU share, its writes slowed, its creations waiting for the budget;
/// and its `related` calls.
struct Kinds {
    called: f64,
    related: f64,
    unchanged: f64,
    put_off: [f64; 4],
}

impl Kinds {
    fn of(bodies: &[String], n: usize) -> Kinds {
        let sum = |name: &str| bodies.iter().map(|b| sample(b, name)).sum::<f64>() / n as f64;
        Kinds {
            called: sum(r#"capstan_wasm_dispatch_seconds_count{plugin="echo",call="reconcile"}"#),
            related: sum(r#"capstan_wasm_dispatch_seconds_count{plugin="echo",call="related"}"#),
            unchanged: sum(r#"capstan_reconcile_unchanged_total{plugin="echo"}"#),
            put_off: capstan::ops::metrics::PUT_OFF_CAUSES.map(|c| {
                sum(&format!(
                    r#"capstan_reconcile_put_off_total{{plugin="echo",cause="{c}"}}"#
                ))
            }),
        }
    }

    /// One line under a size's row.
    fn print(&self) {
        println!(
            "          reconciles per Echo: plugin called {:.2} (and `related` {:.2}), inputs unchanged {:.2}, put off {:.2} (unseen {:.2}, CPU share {:.2}, writes slowed {:.2}, creations waiting {:.2})",
            self.called,
            self.related,
            self.unchanged,
            self.put_off.iter().sum::<f64>(),
            self.put_off[0],
            self.put_off[1],
            self.put_off[2],
            self.put_off[3]
        );
    }
}

/// The resync period the host runs with: longer than convergence takes.
fn resync_for(n: usize) -> Duration {
    Duration::from_secs(n as u64 / 100 + 20)
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
    /// Reconciles per Echo by what they did, until convergence.
    kinds: Kinds,
    jobs: Duration,
    statuses: Duration,
    reconciles: f64,
    writes: f64,
    /// The hosts' requests per Echo until converged and settled, as the API server counts them.
    traffic: Traffic,
    /// CPU seconds of all replicas from start to the last status.
    cpu: f64,
    p50: f64,
    p99: f64,
    /// Peak RSS of each replica.
    rss: Vec<f64>,
    /// CPU seconds of one quiet full resync, and the writes it made.
    resync_cpu: f64,
    resync_writes: f64,
    /// Sharded: kill -9 of a replica → Echos created after it all reconciled.
    takeover: Option<Duration>,
    /// Echos each replica's cache holds.
    cached: Vec<f64>,
}

/// SIGTERM to the host's process group, and SIGKILL to it if the host has not exited 10 s
/// later: a profiler the host runs under (`CAPSTAN_BENCH_WRAP`, `perf record` say) writes
/// its data only on the way out, and neither perf nor heaptrack passes a signal on to the
/// host (which then idled on, on later runs' cores).
async fn stop(child: &mut tokio::process::Child) {
    signal_group(child, libc::SIGTERM);
    if tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .is_err()
    {
        signal_group(child, libc::SIGKILL);
        child.kill().await.ok();
    }
}

/// Send `signal` to the process group the bench made for a host (the host and any
/// profiler around it).
fn signal_group(child: &tokio::process::Child, signal: i32) {
    if let Some(group) = child.id().and_then(|p| i32::try_from(p).ok()) {
        // SAFETY: kill signals the process group this bench made for the host.
        unsafe { libc::kill(-group, signal) };
    }
}

/// The command that runs one host (this binary with `--serve`) against `kubeconfig`: in a
/// process group of its own, killed with the bench.
fn host_command(
    serve_mode: &str,
    ns: &str,
    n: usize,
    kubeconfig: &std::path::Path,
) -> Result<tokio::process::Command> {
    // `CAPSTAN_BENCH_WRAP="heaptrack -o /tmp/host"` runs each host under a profiler
    // (its CPU and RSS are then the wrapper's).
    let wrap = std::env::var("CAPSTAN_BENCH_WRAP").unwrap_or_default();
    let mut words = wrap.split_whitespace();
    let mut command = match words.next() {
        Some(program) => {
            let mut command = tokio::process::Command::new(program);
            command.args(words).arg(std::env::current_exe()?);
            command
        }
        None => tokio::process::Command::new(std::env::current_exe()?),
    };
    command
        .args(["--serve", serve_mode, "--namespace", ns, "--resync"])
        .arg(resync_for(n).as_secs().to_string())
        .env("KUBECONFIG", kubeconfig)
        // `CAPSTAN_BENCH_LOG=debug` shows what a host does (its log on the bench's stderr).
        .env(
            "RUST_LOG",
            std::env::var("CAPSTAN_BENCH_LOG").unwrap_or_else(|_| "warn,kube_client=off".into()),
        )
        .stdout(std::process::Stdio::piped())
        // Its own process group, so a profiler it runs under and the host inside it
        // are stopped together (see `stop`).
        .process_group(0)
        .kill_on_drop(true);
    // A bench killed outright (SIGKILL, `pkill`) takes its hosts with it; a host that
    // outlived it would idle on, retrying a dead plane, on the next run's cores.
    // SAFETY: prctl is async-signal-safe and allocates nothing.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Ok(command)
}

/// Echos created after a replica is killed, for the takeover.
const AFTER_KILL: usize = 60;

async fn run_mode(plane: &Plane, mode: &str, n: usize) -> Result<Row> {
    let client = plane.client().await?;
    // `sharded-K` (key uid) or `sharded-K-namespace`; anything else runs one host.
    let (replicas, by_namespace) = match mode.strip_prefix("sharded-") {
        Some(rest) => match rest.strip_suffix("-namespace") {
            Some(k) => (k.parse::<usize>()?, true),
            None => (rest.parse::<usize>()?, false),
        },
        None => (1, false),
    };
    let mut spaces = Vec::new();
    for i in 0..if by_namespace { NAMESPACES } else { 1 } {
        spaces.push(plane.namespace(&format!("bench-{mode}-{n}-{i}")).await?);
    }
    let ns = spaces[0].clone();
    let echoes: Api<DynamicObject> = if by_namespace {
        Api::all_with(client.clone(), &echo_resource())
    } else {
        Api::namespaced_with(client.clone(), &ns, &echo_resource())
    };
    create(&client, &spaces, "e", n).await?;

    // Count from watches, so measuring does not load the API server with lists.
    let jobs_seen = Arc::new(AtomicUsize::new(0));
    let statuses_seen = Arc::new(AtomicUsize::new(0));
    let jobs: Api<Job> = if by_namespace {
        Api::all(client.clone())
    } else {
        Api::namespaced(client.clone(), &ns)
    };
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

    // `sharded-K`: K replicas of the wasm host, each reconciling its share.
    let serve_mode = if replicas > 1 { "wasm" } else { mode };
    mount(&["echo"], &plugin_dir(&ns))?;
    let before = requests(&client).await?;
    let plane_before = plane_cpu();
    let bench_before = cpu_seconds(std::process::id());
    let start = Instant::now();
    let mut children = Vec::new();
    for replica in 0..replicas {
        let mut command = host_command(serve_mode, &ns, n, plane.kubeconfig())?;
        if replicas > 1 {
            command.args(["--sharding", &format!("replica-{replica}")]);
        }
        if by_namespace {
            command.args(["--shard-key", "namespace"]);
        }
        children.push(command.spawn()?);
    }
    let mut hosts = Vec::new();
    for child in &mut children {
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
        hosts.push((pid, metrics));
    }
    let ready = start.elapsed();
    let (mut jobs_at, mut statuses_at, mut cpu, mut first_at) = (None, None, 0.0, None);
    while jobs_at.is_none() || statuses_at.is_none() {
        if first_at.is_none() && jobs_seen.load(Ordering::SeqCst) > 0 {
            first_at = Some(start.elapsed());
        }
        if start.elapsed() > Duration::from_secs(600) {
            bail!("{mode}: not converged after 600 s");
        }
        if jobs_at.is_none() && jobs_seen.load(Ordering::SeqCst) >= n {
            jobs_at = Some(start.elapsed());
        }
        if statuses_at.is_none() && statuses_seen.load(Ordering::SeqCst) >= n {
            statuses_at = Some(start.elapsed());
            cpu = hosts.iter().map(|(pid, _)| cpu_seconds(*pid)).sum();
            let plane = plane_cpu();
            let so_far = requests(&client).await?.since(&before);
            if std::env::var("CAPSTAN_BENCH_REQUESTS").is_ok() {
                println!("          requests until the last status: {:?}", so_far.all());
            }
            let so_far = so_far.traffic(&echo_resource().plural, &["jobs"]);
            let (api, etcd) = (plane.0 - plane_before.0, plane.1 - plane_before.1);
            let watches = cpu_seconds(std::process::id()) - bench_before;
            // Busy cores near all of them: the run was CPU-bound, and any CPU saved
            // (host or API server) is time saved.
            let busy = (api + etcd + watches + cpu) / start.elapsed().as_secs_f64();
            println!(
                "          until the last status: CPU of the API server {api:.2}s, etcd {etcd:.2}s, the bench's watches {watches:.2}s, the host {cpu:.2}s: {busy:.2} of {} cores busy; events written {}",
                cores(),
                so_far.events
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Let in-flight work (the events queued) settle before reading the counters.
    let after = settled(
        &client,
        "echos",
        &["jobs"],
        Duration::from_secs(1),
        Duration::from_secs(120),
    )
    .await?;
    println!(
        "          host serving after {:.2}s, first Job after {:.2}s",
        ready.as_secs_f64(),
        first_at.unwrap_or_default().as_secs_f64()
    );
    let traffic = after.since(&before).traffic(&echo_resource().plural, &["jobs"]);
    let bodies = pages(&hosts)?;
    let writes: f64 = bodies.iter().map(|b| writes_in(b)).sum();
    let (resync_cpu, resync_writes) = quiet_resync(&hosts, n, &bodies).await?;
    let rss: Vec<f64> = hosts.iter().map(|(pid, _)| peak_rss_mib(*pid)).collect();
    let takeover = if replicas > 1 {
        signal_group(&children[0], libc::SIGKILL);
        children[0].kill().await?;
        let killed = Instant::now();
        create(&client, &spaces, "after-kill-", AFTER_KILL).await?;
        while statuses_seen.load(Ordering::SeqCst) < n + AFTER_KILL {
            if killed.elapsed() > Duration::from_secs(120) {
                bail!("{mode}: the Echos created after a kill were not reconciled in 120 s");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Some(killed.elapsed())
    } else {
        None
    };
    for child in &mut children {
        stop(child).await;
    }
    job_watch.abort();
    status_watch.abort();
    let statuses = statuses_at.unwrap_or_default();
    let reconciles: f64 = bodies.iter().map(|b| reconciles_in(b)).sum();
    Ok(Row {
        kinds: Kinds::of(&bodies, n),
        jobs: jobs_at.unwrap_or_default(),
        statuses,
        reconciles: reconciles / statuses.as_secs_f64(),
        writes: writes / n as f64,
        traffic: per(traffic, n),
        cpu,
        p50: quantile(&bodies[0], "controller_runtime_reconcile_time_seconds", 0.5) * 1000.0,
        p99: quantile(&bodies[0], "controller_runtime_reconcile_time_seconds", 0.99) * 1000.0,
        rss,
        cached: bodies
            .iter()
            .map(|b| sample(b, r#"capstan_cache_objects{plugin="echo",kind="Echo"}"#))
            .collect(),
        resync_cpu,
        resync_writes,
        takeover,
    })
}

/// Requests per Echo.
fn per(t: Traffic, n: usize) -> Traffic {
    let n = n as f64;
    Traffic {
        children: t.children / n,
        status: t.status / n,
        parent: t.parent / n,
        events: t.events / n,
        reads: t.reads / n,
    }
}

/// Create `n` Echos named `prefix0`, `prefix1`, …, round-robin over `namespaces`, 16 at
/// a time.
async fn create(client: &kube::Client, namespaces: &[String], prefix: &str, n: usize) -> Result<()> {
    futures::stream::iter(0..n)
        .map(|i| {
            let ns = &namespaces[i % namespaces.len()];
            let echoes: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &echo_resource());
            async move {
                echoes
                    .create(
                        &PostParams::default(),
                        &echo(&format!("{prefix}{i}"), &format!("hello {i}"))?,
                    )
                    .await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(16)
        .try_collect::<()>()
        .await
}

/// Every host's metrics page.
fn pages(hosts: &[(u32, String)]) -> Result<Vec<String>> {
    hosts
        .iter()
        .map(|(_, addr)| Ok(capstan_tests::host::http_get(addr, "/metrics")?.1))
        .collect()
}

fn writes_in(body: &str) -> f64 {
    sample(body, r#"capstan_api_writes_total{plugin="echo"}"#)
}

/// Wait for the resync of all `n` converged Echos and measure it: the hosts' CPU seconds
/// from the last convergence reconcile to the n-th resync reconcile, and the writes made.
async fn quiet_resync(hosts: &[(u32, String)], n: usize, converged: &[String]) -> Result<(f64, f64)> {
    let reconciles: f64 = converged.iter().map(|b| reconciles_in(b)).sum();
    let writes: f64 = converged.iter().map(|b| writes_in(b)).sum();
    let cpu = || hosts.iter().map(|(pid, _)| cpu_seconds(*pid)).sum::<f64>();
    let before = cpu();
    let deadline = Instant::now() + resync_for(n) * 3;
    loop {
        let bodies = pages(hosts)?;
        if bodies.iter().map(|b| reconciles_in(b)).sum::<f64>() >= reconciles + n as f64 {
            let written = bodies.iter().map(|b| writes_in(b)).sum::<f64>() - writes;
            return Ok((cpu() - before, written));
        }
        if Instant::now() > deadline {
            bail!("the full resync of {n} Echos did not finish");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Which floor to measure.
#[derive(Clone, Copy, PartialEq)]
enum Floor {
    /// `write_floor`'s: a bare Job and a two-field status per parent, nothing watching.
    Raw,
    /// The same, with the two watches any controller of them keeps (its parents and its
    /// children) open: what fanning the writes out costs the API server.
    Watched,
    /// Exactly the host's writes, with nothing watching: Echo's own Job (with the
    /// host's owner reference, labels and digest) and Echo's own status, computed
    /// untimed from each parent by Echo's code.
    SameWrites,
}

/// One floor as measured: its time, and the CPU its client (kube's, 16 writes at a time)
/// spent on the `2n` writes and on any watches it kept.
struct Measured {
    seconds: f64,
    client_cpu: f64,
}

/// Measure one floor for `n` parents, printed with the CPU it took.
async fn measure_floor(plane: &Plane, n: usize, which: Floor) -> Result<Measured> {
    let label = match which {
        Floor::Raw => "floor",
        Floor::Watched => "watched floor",
        Floor::SameWrites => "floor of the host's writes",
    };
    let ns = plane
        .namespace(&format!(
            "bench-{}-{n}",
            label.replace(' ', "-").replace('\'', "")
        ))
        .await?;
    let client = plane.client().await?;
    floor_parents(&client, &ns, &echo_resource(), n, 16).await?;
    let watches = match which {
        Floor::Watched => open_watches(&client, &ns).await?,
        _ => Vec::new(),
    };
    let echos = match which {
        Floor::SameWrites => Some(echo_writes(&client, &ns).await?),
        _ => None,
    };
    let (before, bench_before) = (plane_cpu(), cpu_seconds(std::process::id()));
    let (creates, statuses) = match &echos {
        Some(writes) => write_floor_of(&client, &ns, &echo_resource(), writes, "capstan/echo", 16).await?,
        None => write_floor(&client, &ns, &echo_resource(), n, 16).await?,
    };
    let (cpu, bench_cpu) = (plane_cpu(), cpu_seconds(std::process::id()) - bench_before);
    watches.iter().for_each(tokio::task::JoinHandle::abort);
    let floor = (creates + statuses).as_secs_f64();
    let floor_cpu = (cpu.0 - before.0) + (cpu.1 - before.1) + bench_cpu;
    println!(
        "N={n}: CPU of the {label}: API server {:.2}s, etcd {:.2}s, its client {bench_cpu:.2}s: {:.2} of {} cores busy",
        cpu.0 - before.0,
        cpu.1 - before.1,
        floor_cpu / floor,
        cores()
    );
    println!(
        "N={n}: API server {label}, one Job create and one status apply per Echo, 16 at a time: {:.2} + {:.2} = {floor:.2} s",
        creates.as_secs_f64(),
        statuses.as_secs_f64()
    );
    Ok(Measured {
        seconds: floor,
        client_cpu: bench_cpu,
    })
}

/// What the host writes for each Echo in `namespace` before it has a Job: Echo's Job as
/// the host owns it, and Echo's status — from Echo's own code, called as the host calls it.
async fn echo_writes(client: &kube::Client, namespace: &str) -> Result<Vec<FloorWrite>> {
    let parents: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &echo_resource());
    let echo = NativeEcho::new();
    let mut writes = Vec::new();
    for parent in parents.list(&Default::default()).await?.items {
        let request = Request {
            parent: serde_json::to_value(&parent)?.into(),
            children: Vec::new(),
            related: Vec::new(),
            now: None,
            finalizing: false,
        };
        let response = echo
            .reconcile(&request)
            .map_err(|e| anyhow::anyhow!("Echo on a floor parent: {e:?}"))?;
        let children = capstan_contract::children(
            echo.metadata(),
            Some(namespace),
            response.children,
            &Default::default(),
        )?;
        let mut child = children.into_iter().next().context("Echo returned no Job")?;
        capstan::apply::own(&mut child, &parent, &echo_resource(), "echo");
        writes.push(FloorWrite {
            parent: parent.metadata.name.clone().unwrap_or_default(),
            child: child.object,
            status: response.status.context("Echo returned no status")?,
        });
    }
    Ok(writes)
}

/// A watch on the Echos and one on the Jobs of `namespace`, read as a controller reads
/// them, once both have listed.
async fn open_watches(client: &kube::Client, namespace: &str) -> Result<Vec<tokio::task::JoinHandle<()>>> {
    let parents: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &echo_resource());
    let jobs: Api<Job> = Api::namespaced(client.clone(), namespace);
    let (listed, mut ready) = tokio::sync::mpsc::channel::<()>(2);
    let watches = vec![
        tokio::spawn(drain(
            watcher(parents, watcher::Config::default()),
            listed.clone(),
        )),
        tokio::spawn(drain(watcher(jobs, watcher::Config::default()), listed)),
    ];
    for _ in 0..2 {
        ready
            .recv()
            .await
            .context("a floor watch ended before its first list")?;
    }
    Ok(watches)
}

/// Read a watch to its end, as a controller would, saying when its first list is in.
async fn drain<K>(
    stream: impl futures::Stream<Item = watcher::Result<watcher::Event<K>>>,
    listed: tokio::sync::mpsc::Sender<()>,
) {
    let mut stream = std::pin::pin!(stream);
    while let Ok(Some(event)) = stream.try_next().await {
        if matches!(event, watcher::Event::InitDone) {
            listed.send(()).await.ok();
        }
    }
}

/// Failover with the default lease settings (15 s / 10 s / 2 s), `capstan run` processes:
/// `kill -9` of the leader → first reconcile by the standby, and SIGTERM → standby leads.
async fn failover(plane: &Plane) -> Result<()> {
    let client = plane.client().await?;
    let ns = plane.namespace("bench-failover").await?;
    let dir = plugin_dir(&ns);
    mount(&["echo"], &dir)?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let holder = async || -> Result<Option<String>> {
        Ok(leases
            .get_opt("capstan")
            .await?
            .and_then(|l| l.spec?.holder_identity)
            .map(|identity| pod_of(&identity).to_string()))
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
    // The host's own runtime for the host it serves; the bench's for the rest.
    let serving = args.iter().any(|a| a == "--serve");
    let runtime = if serving {
        capstan::host::runtime()?
    } else {
        tokio::runtime::Runtime::new()?
    };
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|j| args.get(j + 1))
            .with_context(|| format!("{name} VALUE"))
    };
    if serving {
        let resync = Duration::from_secs(flag("--resync")?.parse()?);
        let key = match flag("--shard-key").map(String::as_str) {
            Ok("namespace") => ShardKey::Namespace,
            _ => ShardKey::Uid,
        };
        let shard = flag("--sharding").ok().map(|replica| Shard { replica, key });
        return runtime.block_on(serve(flag("--serve")?, flag("--namespace")?, resync, shard));
    }
    let list = |var: &str, default: &str| -> Vec<String> {
        std::env::var(var)
            .unwrap_or_else(|_| default.into())
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect()
    };
    let sizes = list("CAPSTAN_BENCH_N", "1000")
        .iter()
        .map(|n| {
            n.parse::<usize>()
                .with_context(|| format!("CAPSTAN_BENCH_N: {n} is not a number"))
        })
        .collect::<Result<Vec<_>>>()?;
    let modes = list("CAPSTAN_BENCH_MODES", "wasm,wasm-cold,native");
    // Build the plugin and fill the compile cache before anything is timed.
    std::fs::remove_dir_all(cache_dir()).ok();
    engine(Some(cache_dir()))?.load_file(&capstan_tests::plugin("echo"), Default::default())?;
    if std::env::var("CAPSTAN_BENCH_SERVER").as_deref() == Ok("null") {
        return runtime.block_on(ceiling::run(&sizes));
    }
    runtime.block_on(async {
        println!(
            "Echos created before the host starts; API server + etcd on loopback; {} cores",
            cores()
        );
        println!(
            "{:<9} {:>6} {:>9} {:>9} {:>12} {:>8} {:>8} {:>8} {:>9} {:>10} {:>10}",
            "mode",
            "N",
            "jobs (s)",
            "status(s)",
            "reconciles/s",
            "writes/E",
            "p50 (ms)",
            "p99 (ms)",
            "RSS (MiB)",
            "resync CPU",
            "resync wr"
        );
        // The host's CPU and the time ratios move by ±20 % from run to run on a shared
        // 2-core machine: `CAPSTAN_BENCH_ROUNDS=3` repeats each size and prints medians.
        let rounds: usize = std::env::var("CAPSTAN_BENCH_ROUNDS")
            .ok()
            .map(|r| r.parse().context("CAPSTAN_BENCH_ROUNDS is not a number"))
            .transpose()?
            .unwrap_or(1);
        let mut measured = Vec::new();
        for _ in 0..rounds {
            // A plane keeps every object a round made (no controller-manager deletes a
            // namespace's objects), and a fuller API server is a slower one: each round
            // runs on a plane of its own, stopped when the round ends.
            let plane = echo_plane().await?;
            for &n in &sizes {
                measured.extend(one_size(&plane, &modes, n).await?);
            }
        }
        if rounds > 1 {
            medians(&measured, &sizes, &modes, rounds);
        }
        std::fs::remove_dir_all(cache_dir()).ok();
        if std::env::var("CAPSTAN_BENCH_FAILOVER").as_deref() != Ok("0") {
            failover(&echo_plane().await?).await?;
        }
        Ok(())
    })
}

/// A plane of API server and etcd with Echo's CRD installed.
async fn echo_plane() -> Result<Plane> {
    let plane = Plane::start(PlaneConfig::api_only()).await?;
    install_plugin_crd(&plane, "echo").await?;
    Ok(plane)
}

/// What one size's round gave each mode, for the medians over rounds.
struct Round {
    mode: String,
    n: usize,
    /// Time to all statuses over the raw floor and over the floor of the same writes.
    over_floor: f64,
    over_same: f64,
    /// The host's CPU per parent (ms) and peak RSS (MiB).
    cpu_ms: f64,
    rss: f64,
}

/// Run every mode at size `n`, then the floors, printing each figure.
async fn one_size(plane: &Plane, modes: &[String], n: usize) -> Result<Vec<Round>> {
    let mut rows = Vec::new();
    for mode in modes {
        // A host sharded by namespace watches every namespace: a plane of its own.
        let r = if mode.ends_with("-namespace") {
            let own = Plane::start(PlaneConfig::api_only()).await?;
            install_plugin_crd(&own, "echo").await?;
            run_mode(&own, mode, n).await?
        } else {
            run_mode(plane, mode, n).await?
        };
        println!(
            "{:<9} {:>6} {:>9.2} {:>9.2} {:>12.0} {:>8.2} {:>8.2} {:>8.2} {:>9.1} {:>9.2}s {:>10.0}",
            mode,
            n,
            r.jobs.as_secs_f64(),
            r.statuses.as_secs_f64(),
            r.reconciles,
            r.writes,
            r.p50,
            r.p99,
            r.rss.iter().copied().fold(0.0, f64::max),
            r.resync_cpu,
            r.resync_writes
        );
        let t = &r.traffic;
        println!(
            "          per Echo, as the API server counts: writes {:.3} (children {:.3} + status {:.3} + parent {:.3}), events {:.3}, reads {:.3}; CPU {:.2} ms",
            t.children + t.status + t.parent,
            t.children,
            t.status,
            t.parent,
            t.events,
            t.reads,
            r.cpu * 1000.0 / n as f64
        );
        r.kinds.print();
        if r.rss.len() > 1 {
            let each: Vec<String> = r.rss.iter().map(|m| format!("{m:.1}")).collect();
            println!("          RSS per replica (MiB): {}", each.join(", "));
            let each: Vec<String> = r.cached.iter().map(|c| format!("{c:.0}")).collect();
            println!("          Echos cached per replica: {}", each.join(", "));
        }
        if let Some(t) = r.takeover {
            println!(
                "          kill -9 of a replica → {AFTER_KILL} new Echos reconciled by the others: {:.2}s (lease 15 s)",
                t.as_secs_f64()
            );
        }
        rows.push((mode.as_str(), r));
    }
    let time = |m: &str| {
        rows.iter()
            .find(|(mode, _)| *mode == m)
            .map(|(_, r)| r.statuses.as_secs_f64())
    };
    let raw = measure_floor(plane, n, Floor::Raw).await?;
    let watched = measure_floor(plane, n, Floor::Watched).await?;
    let same = measure_floor(plane, n, Floor::SameWrites).await?;
    let client = ClientFloor::of(&raw, &watched, &same, n);
    let (floor, watched, same) = (raw.seconds, watched.seconds, same.seconds);
    let mut rounds = Vec::new();
    for (mode, r) in &rows {
        client.print(n, mode, &r.traffic, r.cpu * 1000.0 / n as f64);
        let time = r.statuses.as_secs_f64();
        println!(
            "N={n}: {mode}: time to all statuses / floor: {:.2}× (/ watched floor: {:.2}×, / floor of the same writes: {:.2}×)",
            time / floor,
            time / watched,
            time / same
        );
        rounds.push(Round {
            mode: mode.to_string(),
            n,
            over_floor: time / floor,
            over_same: time / same,
            cpu_ms: r.cpu * 1000.0 / n as f64,
            rss: r.rss.iter().copied().fold(0.0, f64::max),
        });
    }
    if let (Some(wasm), Some(native)) = (time("wasm"), time("native")) {
        println!(
            "N={n}: time to all statuses, wasm / native: {:.2}×",
            wasm / native
        );
    }
    Ok(rounds)
}

/// What kube's client alone spends per parent, at the rate the floors measured: per write
/// of the host's (the floor of the same writes' client CPU over its `2n` writes), and for
/// the two watches (the watched floor's client CPU over the raw floor's). The host's CPU
/// per parent can go no lower than this while its requests go through that client; the
/// rest is its own (plugin calls, reconciles, caches).
struct ClientFloor {
    per_request_ms: f64,
    watches_ms: f64,
}

impl ClientFloor {
    fn of(raw: &Measured, watched: &Measured, same: &Measured, n: usize) -> ClientFloor {
        let ms = |cpu: f64| cpu * 1000.0 / n as f64;
        ClientFloor {
            per_request_ms: ms(same.client_cpu) / 2.0,
            watches_ms: ms(watched.client_cpu - raw.client_cpu).max(0.0),
        }
    }

    /// Print it for one mode's run: its requests per parent as the API server counted
    /// them, and the host's CPU per parent beside it.
    fn print(&self, n: usize, mode: &str, traffic: &Traffic, host_ms: f64) {
        let t = traffic;
        let requests = t.children + t.status + t.parent + t.events + t.reads;
        let client = requests * self.per_request_ms + self.watches_ms;
        println!(
            "N={n}: {mode}: kube's client alone at the floors' rate, for the host's {requests:.2} requests per Echo ({:.3} ms each) and its two watches ({:.3} ms): {client:.2} ms per Echo; the host's {host_ms:.2} ms leaves {:.2} ms its own",
            self.per_request_ms,
            self.watches_ms,
            host_ms - client
        );
    }
}

/// Each figure's median over the rounds, with its range.
fn medians(measured: &[Round], sizes: &[usize], modes: &[String], rounds: usize) {
    let median = |mut v: Vec<f64>| -> (f64, f64, f64) {
        v.sort_by(f64::total_cmp);
        let (lo, hi) = (v[0], v[v.len() - 1]);
        let mid = v.len() / 2;
        let m = if v.len() % 2 == 1 {
            v[mid]
        } else {
            (v[mid - 1] + v[mid]) / 2.0
        };
        (m, lo, hi)
    };
    for &n in sizes {
        for mode in modes {
            let of: Vec<&Round> = measured.iter().filter(|r| r.n == n && &r.mode == mode).collect();
            if of.is_empty() {
                continue;
            }
            let figure = |f: fn(&Round) -> f64| median(of.iter().map(|r| f(r)).collect());
            let (floor, same, cpu, rss) = (
                figure(|r| r.over_floor),
                figure(|r| r.over_same),
                figure(|r| r.cpu_ms),
                figure(|r| r.rss),
            );
            println!(
                "N={n}: {mode}: median of {rounds} rounds (lowest–highest): time to all statuses / floor {:.2}× ({:.2}–{:.2}), / floor of the same writes {:.2}× ({:.2}–{:.2}); CPU {:.2} ms per Echo ({:.2}–{:.2}); peak RSS {:.1} MiB ({:.1}–{:.1})",
                floor.0, floor.1, floor.2, same.0, same.1, same.2, cpu.0, cpu.1, cpu.2, rss.0, rss.1, rss.2
            );
        }
    }
}
