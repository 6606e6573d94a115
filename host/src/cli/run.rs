//! `capstan run`: load every plugin and reconcile against the cluster until signalled.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use crate::config::{self, PluginConfig};
use crate::controller::Options;
use crate::engine::{Engine, Limits, Plugin};
use crate::leader::{self, Leader};
use crate::ops;
use crate::ops::health::Health;
use crate::reload;
use crate::supervisor::Supervisor;

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
    /// Watch plugin files: a replaced file is swapped in without a restart, a new one started.
    #[arg(long)]
    hot_reload: bool,
    /// How long shutdown waits for in-flight reconciles before stopping them (keep it
    /// below the pod's terminationGracePeriodSeconds).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "20s")]
    shutdown_timeout: Duration,
    /// Plugin instances that may exist at once across all plugins (the engine's pool);
    /// the plugins' concurrency must add up to no more.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    max_instances: u32,
    /// Linear memory all plugins may hold together (bytes, or a quantity such as
    /// `512Mi`); each plugin reserves its `memoryTotal` from it when loaded, and one that
    /// does not fit is refused.
    #[arg(long, value_parser = parse_size, default_value_t = crate::engine::DEFAULT_MEMORY_BUDGET)]
    memory_budget: usize,
    /// How often hot reload looks at the plugin files.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "2s")]
    reload_interval: Duration,
    #[command(flatten)]
    election: ElectionArgs,
    #[command(flatten)]
    cache: super::CacheArgs,
}

/// Leader election (client-go's flags and defaults).
#[derive(Args, Debug)]
struct ElectionArgs {
    /// Reconcile only while holding a Lease, so replicas can stand by.
    #[arg(long)]
    leader_elect: bool,
    /// Lease name.
    #[arg(long, default_value = "capstan")]
    leader_election_id: String,
    /// Lease namespace [default: $POD_NAMESPACE, else the kubeconfig's namespace].
    #[arg(long)]
    leader_election_namespace: Option<String>,
    /// How long a Lease is valid after its last renewal.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "15s")]
    lease_duration: Duration,
    /// A leader that could not renew for this long stops reconciling.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
    renew_deadline: Duration,
    /// Time between attempts to acquire or renew the Lease.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "2s")]
    retry_period: Duration,
}

impl ElectionArgs {
    /// The Lease settings, or `None` without `--leader-elect`.
    fn settings(&self, default_namespace: &str) -> Option<leader::Settings> {
        if !self.leader_elect {
            return None;
        }
        let namespace = self
            .leader_election_namespace
            .clone()
            .or_else(|| std::env::var("POD_NAMESPACE").ok().filter(|n| !n.is_empty()))
            .unwrap_or_else(|| default_namespace.to_string());
        let mut settings = leader::Settings::new(&self.leader_election_id, namespace, leader::identity());
        settings.lease_duration = self.lease_duration;
        settings.renew_deadline = self.renew_deadline;
        settings.retry_period = self.retry_period;
        Some(settings)
    }
}

/// Every plugin to run with its options: the config file's entries, then every other
/// `*.wasm` in the plugin directory with the command-line defaults.
fn load_plugins(engine: &Engine, args: &RunArgs) -> anyhow::Result<Loaded> {
    let defaults = defaults(args);
    let mut entries: Vec<PluginConfig> = match &args.config {
        Some(path) => config::load(path)?.plugins,
        None => Vec::new(),
    };
    if let Some(dir) = &args.plugins {
        let paths = reload::wasm_files(dir)
            .with_context(|| format!("cannot read plugin directory {}", dir.display()))?;
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
                    allow_namespaces: Vec::new(),
                    allow_secrets: false,
                    allow_own_kind: false,
                });
            }
        }
    }
    anyhow::ensure!(!entries.is_empty(), "no plugins configured");
    let mut loaded = Loaded::default();
    for e in entries {
        let (cpu_millicores, creations, finalizer_timeout) = (
            e.limits.cpu_millicores,
            e.limits.creations_per_second,
            e.limits.finalizer_timeout,
        );
        let plugin = match engine.load_file(&e.path, e.limits) {
            Ok(plugin) => plugin,
            Err(err) => {
                loaded.broken.push((e.path, err.to_string()));
                continue;
            }
        };
        let mut options = defaults.clone();
        options.concurrency = e.concurrency.unwrap_or(options.concurrency);
        options.resync = e.resync.unwrap_or(options.resync);
        options.cpu_millicores = cpu_millicores;
        options.creations_per_second = creations;
        options.finalizer_timeout = finalizer_timeout;
        options.allow.cluster_kinds.extend(e.allow_cluster_kinds);
        if let Some(ns) = &args.namespace
            && let Some(outside) = e.allow_namespaces.iter().find(|n| *n != ns)
        {
            anyhow::bail!(
                "{}: allowNamespaces names {outside}, outside --namespace {ns}",
                e.path.display()
            );
        }
        options.allow.namespaces.extend(e.allow_namespaces);
        options.allow.namespaces.dedup();
        options.grants = crate::grants::Grants {
            secrets: e.allow_secrets,
            own_kind: e.allow_own_kind,
        };
        if let Err(why) = crate::grants::check(plugin.metadata(), &options.grants) {
            loaded.broken.push((e.path, why));
            continue;
        }
        loaded.plugins.push((e.path, plugin, options));
    }
    // A plugin that does not load is that plugin's trouble alone, unless nothing is left.
    if loaded.plugins.is_empty()
        && let Some((path, err)) = loaded.broken.first()
    {
        anyhow::bail!("{}: {err}", path.display());
    }
    let mut names: Vec<&str> = loaded
        .plugins
        .iter()
        .map(|(_, p, _)| p.metadata().name.as_str())
        .collect();
    names.sort();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        anyhow::bail!("two plugins are both named {}", w[0]);
    }
    let wanted: u32 = loaded
        .plugins
        .iter()
        .map(|(_, _, o)| u32::from(o.concurrency))
        .sum();
    anyhow::ensure!(
        wanted <= engine.max_instances(),
        "the plugins' concurrency adds up to {wanted}, more than the {} instances the engine pools (--max-instances)",
        engine.max_instances()
    );
    Ok(loaded)
}

/// The plugins that loaded, with their options, and the files that did not, with why.
#[derive(Default)]
struct Loaded {
    plugins: Vec<(PathBuf, Plugin, Options)>,
    broken: Vec<(PathBuf, String)>,
}

fn defaults(args: &RunArgs) -> Options {
    Options {
        namespace: args.namespace.clone(),
        allow: crate::validate::Allowances {
            cluster_kinds: args.allow_cluster_kinds.clone(),
            // Children of a cluster-scoped parent may go into the one namespace the host
            // watches; without --namespace, only where a plugin's config allows.
            namespaces: args.namespace.iter().cloned().collect(),
        },
        grants: Default::default(),
        concurrency: args.concurrency,
        resync: args.resync,
        ..Options::default()
    }
}

pub fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    if let Some(settings) = args.election.settings("default") {
        settings.validate()?;
    }
    let engine = args.cache.engine_with(crate::engine::EngineConfig {
        max_instances: args.max_instances,
        memory_budget: args.memory_budget,
        ..Default::default()
    })?;
    let loaded = load_plugins(&engine, &args)?;
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async move {
        // First, so a signal during start-up is honoured like any other.
        let signal = shutdown_signal()?;
        tokio::pin!(signal);
        let health = Health::default();
        ops::server::metrics(args.metrics_addr).await?;
        ops::server::health(args.health_addr, health.clone()).await?;
        let client = kube::Client::try_default()
            .await
            .context("no Kubernetes configuration")?;
        tokio::spawn(ops::server::probe_api(client.clone(), health.clone(), Duration::from_secs(5)));
        let (leader, elector) = match args.election.settings(client.default_namespace()) {
            Some(settings) => {
                tracing::info!(lease = %settings.name, namespace = %settings.namespace, identity = %settings.identity, "leader election on");
                let (leader, elector) = leader::start(client.clone(), settings);
                (leader, Some(elector))
            }
            None => (Leader::always(), None),
        };
        let mut supervisor = Supervisor::new(client, engine, leader, health.clone(), args.shutdown_timeout);
        for (path, plugin, options) in loaded.plugins {
            let m = plugin.metadata();
            tracing::info!(plugin = %m.name, version = %m.version, path = %path.display(), parent = %m.parent, "plugin loaded");
            supervisor.start(path, plugin, options);
        }
        for (path, error) in loaded.broken {
            supervisor.broken(path, &error);
        }
        if let (true, Some(dir)) = (args.hot_reload, &args.plugins) {
            supervisor.watch_dir(dir.clone(), defaults(&args));
        }
        let mut reload = tokio::time::interval(args.reload_interval);
        reload.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut beat = tokio::time::interval(Duration::from_secs(1));
        let mut trim = tokio::time::interval(ops::heap::TRIM_EVERY);
        loop {
            tokio::select! {
                _ = &mut signal => break,
                _ = beat.tick() => health.beat(),
                _ = trim.tick() => ops::heap::trim(),
                _ = reload.tick(), if args.hot_reload => supervisor.reload().await,
            }
        }
        health.stopping();
        tracing::info!(grace = ?args.shutdown_timeout, "shutting down: finishing in-flight reconciles");
        // Whatever happens below, the process ends: a second signal ends it at once, and
        // past the grace period (plus the Lease's release) it ends regardless.
        tokio::spawn(async {
            if let Ok(again) = shutdown_signal() {
                let _ = again.await;
                tracing::warn!("second signal: exiting now");
                std::process::exit(1);
            }
        });
        let limit = args.shutdown_timeout + RELEASE_TIMEOUT + Duration::from_secs(2);
        std::thread::spawn(move || {
            std::thread::sleep(limit);
            eprintln!("error: shutdown did not finish within {limit:?}; exiting");
            std::process::exit(1);
        });
        if let Some(elector) = &elector {
            elector.stop_waiters();
        }
        supervisor.stop().await;
        if let Some(elector) = elector
            && tokio::time::timeout(RELEASE_TIMEOUT, elector.release()).await.is_err()
        {
            tracing::warn!("the Lease was not released in time; standbys take over when it expires");
        }
        tracing::info!("stopped");
        Ok(ExitCode::SUCCESS)
    })
}

/// Bytes from a number with an optional Kubernetes quantity suffix (`Ki`, `Mi`, `Gi`,
/// `k`, `M`, `G`).
fn parse_size(text: &str) -> Result<usize, String> {
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (digits, suffix) = text.split_at(split);
    let unit: usize = match suffix {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        _ => return Err(format!("unknown unit {suffix:?}; use bytes or Ki, Mi, Gi")),
    };
    digits
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(unit))
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("{text:?} is not a positive size"))
}

/// How long releasing the Lease may take on the way out.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(3);

/// Resolves on SIGTERM or Ctrl-C; the handlers are installed when this is called.
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_take_bytes_or_quantity_suffixes() {
        assert_eq!(parse_size("512Mi"), Ok(512 << 20));
        assert_eq!(parse_size("1Gi"), Ok(1 << 30));
        assert_eq!(parse_size("1048576"), Ok(1 << 20));
        assert_eq!(parse_size("2G"), Ok(2_000_000_000));
        assert!(parse_size("12Xi").unwrap_err().contains("unknown unit"));
        assert!(parse_size("0").is_err() && parse_size("Mi").is_err() && parse_size("").is_err());
    }
}
