//! `capstan run`: load every plugin and reconcile against the cluster until signalled.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use crate::config::{self, PluginConfig};
use crate::controller::{self, Options};
use crate::engine::{Engine, EngineConfig, Limits, Plugin};
use crate::ops;

/// Arguments of `capstan run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// Directory whose `*.wasm` files are the plugins to run.
    #[arg(long, required_unless_present = "config")]
    plugins: Option<PathBuf>,
    /// YAML file of per-plugin settings (path, limits, concurrency, resync, allowClusterKinds).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Watch only this namespace.
    #[arg(long)]
    namespace: Option<String>,
    /// Reconciles per plugin running at once.
    #[arg(long, default_value_t = 16)]
    concurrency: u16,
    /// Reconcile every object at least this often, e.g. `10m`.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10m")]
    resync: Duration,
    /// Cluster-scoped child kinds plugins may create (`Kind` or `plural.group`), repeatable.
    #[arg(long = "allow-cluster-kind")]
    allow_cluster_kinds: Vec<String>,
    /// Address of `/metrics` (port 0 picks a free port; the bound address is logged).
    #[arg(long, default_value = "0.0.0.0:8080")]
    metrics_addr: SocketAddr,
    /// Address of `/healthz` and `/readyz`.
    #[arg(long, default_value = "0.0.0.0:8081")]
    health_addr: SocketAddr,
}

/// Every plugin to run with its options: the config file's entries, then every other
/// `*.wasm` in the plugin directory with the command-line defaults.
fn load_plugins(engine: &Engine, args: &RunArgs) -> anyhow::Result<Vec<(Plugin, Options)>> {
    let defaults = Options {
        namespace: args.namespace.clone(),
        allowed_cluster_kinds: args.allow_cluster_kinds.clone(),
        concurrency: args.concurrency,
        resync: args.resync,
    };
    let mut entries: Vec<PluginConfig> = match &args.config {
        Some(path) => config::load(path)?.plugins,
        None => Vec::new(),
    };
    if let Some(dir) = &args.plugins {
        let listing = std::fs::read_dir(dir)
            .with_context(|| format!("cannot read plugin directory {}", dir.display()))?;
        let mut paths: Vec<PathBuf> = listing
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "wasm"))
            .collect();
        paths.sort();
        anyhow::ensure!(!paths.is_empty(), "no *.wasm plugins in {}", dir.display());
        let configured: Vec<PathBuf> = entries
            .iter()
            .filter_map(|e| e.path.canonicalize().ok())
            .collect();
        for path in paths {
            if !path.canonicalize().is_ok_and(|p| configured.contains(&p)) {
                entries.push(PluginConfig {
                    path,
                    limits: Limits::default(),
                    concurrency: None,
                    resync: None,
                    allow_cluster_kinds: Vec::new(),
                });
            }
        }
    }
    anyhow::ensure!(!entries.is_empty(), "no plugins configured");
    let plugins = entries
        .into_iter()
        .map(|e| {
            let plugin = engine
                .load_file(&e.path, e.limits)
                .map_err(|err| anyhow::anyhow!("{}: {err}", e.path.display()))?;
            let mut options = defaults.clone();
            options.concurrency = e.concurrency.unwrap_or(options.concurrency);
            options.resync = e.resync.unwrap_or(options.resync);
            options.allowed_cluster_kinds.extend(e.allow_cluster_kinds);
            Ok((plugin, options))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut names: Vec<&str> = plugins.iter().map(|(p, _)| p.metadata().name.as_str()).collect();
    names.sort();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        anyhow::bail!("two plugins are both named {}", w[0]);
    }
    Ok(plugins)
}

pub fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let engine = Engine::new(EngineConfig::default())?;
    let plugins = load_plugins(&engine, &args)?;
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async move {
        let readiness = ops::server::Readiness::default();
        ops::server::metrics(args.metrics_addr).await?;
        ops::server::health(args.health_addr, readiness.clone()).await?;
        let client = kube::Client::try_default()
            .await
            .context("no Kubernetes configuration")?;
        let (stop, _) = tokio::sync::broadcast::channel::<()>(1);
        let mut tasks = tokio::task::JoinSet::new();
        let mut synced = Vec::new();
        for (plugin, options) in plugins {
            let mut rx = stop.subscribe();
            let shutdown = async move {
                let _ = rx.recv().await;
            };
            let (tx, done) = tokio::sync::oneshot::channel();
            synced.push(done);
            tasks.spawn(controller::run(
                client.clone(),
                plugin,
                options.clone(),
                shutdown,
                tx,
            ));
        }
        let ready = readiness.clone();
        tokio::spawn(async move {
            if futures::future::try_join_all(synced).await.is_ok() {
                tracing::info!("caches synced; ready");
                ready.set(true);
            }
        });
        let signal = shutdown_signal();
        tokio::pin!(signal);
        loop {
            tokio::select! {
                _ = &mut signal => {
                    readiness.set(false);
                    tracing::info!("shutting down: finishing in-flight reconciles");
                    let _ = stop.send(());
                    while let Some(done) = tasks.join_next().await {
                        done??;
                    }
                    return Ok(ExitCode::SUCCESS);
                }
                Some(done) = tasks.join_next() => {
                    // A controller that cannot start (e.g. an unserved kind) stops the host.
                    done??;
                }
            }
        }
    })
}

async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {}
    }
}
