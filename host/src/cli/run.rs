//! `capstan run`: load every plugin and reconcile against the cluster until signalled.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use crate::controller::Options;
use crate::host::{Host, HostConfig, RELEASE_TIMEOUT};
use crate::leader;

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
    #[arg(long, default_value_t = crate::controller::DEFAULT_CONCURRENCY)]
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
    /// Watch plugin files and the `--config` file: a replaced file is swapped in without a restart, a new one started, and the config's new, removed and changed entries applied.
    #[arg(long)]
    hot_reload: bool,
    /// How long shutdown waits for in-flight reconciles before stopping them (keep it
    /// below the pod's terminationGracePeriodSeconds).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "20s")]
    shutdown_timeout: Duration,
    /// Plugin instances that may exist at once across all plugins (the engine's pool),
    /// shared fairly: a plugin alone may use all of it, plugins in contention get equal shares.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    max_instances: u32,
    /// Linear memory all plugins may hold together (bytes, or a quantity such as
    /// `512Mi`); each plugin reserves what one instance was measured to hold when loaded
    /// (one that does not fit is refused), and borrows the unreserved rest while it has room.
    #[arg(long, value_parser = parse_size, default_value_t = crate::engine::DEFAULT_MEMORY_BUDGET)]
    memory_budget: usize,
    /// How often hot reload looks at the plugin files.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "2s")]
    reload_interval: Duration,
    /// Record every dispatched reconcile (its input and the plugin's answer) as a JSON
    /// fixture under DIR/<plugin>/, for `capstan test --replay DIR NEW.wasm`.
    #[arg(long, value_name = "DIR")]
    record: Option<std::path::PathBuf>,
    /// Recordings kept under --record (bytes, or a quantity such as `64Mi`); the oldest
    /// beyond it are deleted.
    #[arg(long, value_parser = parse_size, default_value = "64Mi", requires = "record")]
    record_max_bytes: usize,
    /// Keep plugins named by registry reference (`oci://…` in --config) here, by digest
    /// [default: $XDG_CACHE_HOME/capstan/oci or ~/.cache/capstan/oci]. Must be writable
    /// only by the host: its files run as code.
    #[arg(long, env = "CAPSTAN_PULL_DIR", value_name = "DIR")]
    pull_dir: Option<PathBuf>,
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
    /// Every replica reconciles a share of the objects, split by consistent hashing among
    /// the live members of the group (one Lease each, named after --leader-election-id).
    #[arg(long, conflicts_with = "leader_elect")]
    sharding: bool,
    /// What spreads parents over replicas: `uid` (even) or `namespace` (a namespace's
    /// objects together; the API server can then filter children too).
    #[arg(long, default_value = "uid", requires = "sharding")]
    shard_key: crate::shard::ShardKey,
}

impl ElectionArgs {
    /// The Lease settings, or `None` without `--leader-elect`; without a namespace from
    /// the flag or `$POD_NAMESPACE`, the namespace is left empty: the client's default.
    fn settings(&self) -> Option<leader::Settings> {
        if !self.leader_elect {
            return None;
        }
        Some(self.lease())
    }

    /// The group's settings with `--sharding`.
    fn sharding(&self) -> Option<crate::host::Sharding> {
        self.sharding.then(|| crate::host::Sharding {
            members: self.lease(),
            key: self.shard_key,
        })
    }

    /// The Lease settings the flags give (for leader election or sharding).
    fn lease(&self) -> leader::Settings {
        let namespace = self
            .leader_election_namespace
            .clone()
            .or_else(|| std::env::var("POD_NAMESPACE").ok().filter(|n| !n.is_empty()))
            .unwrap_or_default();
        let mut settings = leader::Settings::new(&self.leader_election_id, namespace, leader::identity());
        settings.lease_duration = self.lease_duration;
        settings.renew_deadline = self.renew_deadline;
        settings.retry_period = self.retry_period;
        settings
    }
}

impl RunArgs {
    /// The host's configuration from the flags.
    fn host_config(&self) -> HostConfig {
        HostConfig {
            plugins: self.plugins.clone(),
            config: self.config.clone(),
            defaults: self.defaults(),
            metrics_addr: self.metrics_addr,
            health_addr: self.health_addr,
            hot_reload: self.hot_reload,
            reload_interval: self.reload_interval,
            shutdown_timeout: self.shutdown_timeout,
            election: self.election.settings(),
            sharding: self.election.sharding(),
            record: self.record.clone().map(|dir| crate::record::RecordConfig {
                dir,
                max_bytes: self.record_max_bytes as u64,
            }),
            pull_dir: self.pull_dir.clone().or_else(super::registry::default_pull_dir),
        }
    }

    fn defaults(&self) -> Options {
        Options {
            namespace: self.namespace.clone(),
            allow: crate::validate::Allowances {
                cluster_kinds: self.allow_cluster_kinds.clone(),
                // Children of a cluster-scoped parent may go into the one namespace the
                // host watches; without --namespace, only where a plugin's config allows.
                namespaces: self.namespace.iter().cloned().collect(),
                ..Default::default()
            },
            concurrency: self.concurrency,
            resync: self.resync,
            ..Options::default()
        }
    }
}

pub fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let engine = args.cache.engine_with(crate::engine::EngineConfig {
        max_instances: args.max_instances,
        memory_budget: args.memory_budget,
        ..Default::default()
    })?;
    let config = args.host_config();
    let limit = config.shutdown_timeout + RELEASE_TIMEOUT + Duration::from_secs(2);
    let runtime = crate::host::runtime()?;
    // Before loading, which may compile for a while: a host with no cluster to talk to
    // says so at once. kube's error already names every place it looked (its source
    // chain would say all of it again).
    let kube_config = runtime
        .block_on(kube::Config::infer())
        .map_err(|e| anyhow::anyhow!("no Kubernetes configuration: {e}"))?;
    // Plugins load outside the runtime: loading calls into them.
    let host = Host::new(config, engine)?;
    runtime.block_on(async move {
        // First, so a signal during start-up is honoured like any other.
        let signal = shutdown_signal()?;
        let client = kube::Client::try_from(kube_config).context("the Kubernetes client")?;
        let shutdown = async move {
            signal.await;
            bound_exit(limit);
        };
        host.run(client, shutdown).await?;
        Ok(ExitCode::SUCCESS)
    })
}

/// From the first signal on, the process ends whatever happens: a second signal ends it
/// at once, and past `limit` (the grace period plus the Lease's release) it ends anyway.
fn bound_exit(limit: Duration) {
    tokio::spawn(async {
        if let Ok(again) = shutdown_signal() {
            let _ = again.await;
            tracing::warn!("second signal: exiting now");
            std::process::exit(1);
        }
    });
    std::thread::spawn(move || {
        std::thread::sleep(limit);
        eprintln!("error: shutdown did not finish within {limit:?}; exiting");
        std::process::exit(1);
    });
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
