//! The host as a library: a [`Host`] loads its plugins from a [`HostConfig`], then runs
//! them against a cluster until a shutdown future resolves — the wiring `capstan run`
//! uses (metrics and health servers, API probe, leader election, supervisor, hot reload,
//! graceful stop), so benchmarks and embedders run exactly what operators deploy.
//!
//! Loading compiles plugins and calls into them, so [`Host::new`] runs outside an async
//! context (or in `spawn_blocking`).
//!
//! ```no_run
//! use capstan::engine::{Engine, EngineConfig};
//! use capstan::host::{Host, HostConfig};
//!
//! fn main() -> anyhow::Result<()> {
//!     let config = HostConfig {
//!         plugins: Some("plugins".into()),
//!         ..HostConfig::default()
//!     };
//!     let host = Host::new(config, Engine::new(EngineConfig::default())?)?;
//!     capstan::host::runtime()?.block_on(async {
//!         let client = kube::Client::try_default().await?;
//!         host.run(client, async {
//!             let _ = tokio::signal::ctrl_c().await;
//!         })
//!         .await
//!     })
//! }
//! ```

mod follow;
mod plugins;
mod references;
mod runtime;
pub use crate::admission::options as entry_options;
pub use runtime::{runtime, workers};
mod sharded;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::controller::Options;
use crate::engine::{Engine, Reconcile};
use crate::leader::{self, Elector};
use crate::lease::Tenure;
use crate::ops;
use crate::ops::health::Health;
use crate::shard::members::Membership;
use crate::supervisor::{self, Supervisor};

/// How long releasing the Lease may take on the way out.
pub const RELEASE_TIMEOUT: Duration = Duration::from_secs(3);

/// What a host runs and how; `Default` is `capstan run`'s defaults without plugins.
#[derive(Clone, Debug)]
pub struct HostConfig {
    /// Directory whose `*.wasm` files are plugins.
    pub plugins: Option<PathBuf>,
    /// The per-plugin settings file (`capstan run --config`).
    pub config: Option<PathBuf>,
    /// What every plugin runs with unless its config entry says otherwise.
    pub defaults: Options,
    /// Address of `/metrics` (port 0 picks a free port; see [`Serving::metrics_addr`]).
    pub metrics_addr: SocketAddr,
    /// Address of `/healthz` and `/readyz`.
    pub health_addr: SocketAddr,
    /// Swap in replaced plugin files and start new ones without a restart.
    pub hot_reload: bool,
    /// How often hot reload looks at the plugin files.
    pub reload_interval: Duration,
    /// How long stopping waits for in-flight reconciles before aborting them.
    pub shutdown_timeout: Duration,
    /// Reconcile only while holding this Lease; an empty namespace means the client's.
    pub election: Option<leader::Settings>,
    /// Split the objects among every replica of this group instead of electing a leader.
    pub sharding: Option<Sharding>,
    /// Record every dispatched reconcile as a replayable fixture.
    pub record: Option<crate::record::RecordConfig>,
    /// Where plugins named by registry reference are kept, by digest.
    pub pull_dir: Option<PathBuf>,
}

/// A sharded host's group and key.
#[derive(Clone, Debug)]
pub struct Sharding {
    /// The group (its name is the member Leases' prefix and label), its namespace (empty:
    /// the client's), this replica's identity and the Lease timings.
    pub members: leader::Settings,
    /// What is hashed to spread parents.
    pub key: crate::shard::ShardKey,
}

impl Default for HostConfig {
    fn default() -> Self {
        HostConfig {
            plugins: None,
            config: None,
            defaults: Options::default(),
            metrics_addr: SocketAddr::from(([0, 0, 0, 0], 8080)),
            health_addr: SocketAddr::from(([0, 0, 0, 0], 8081)),
            hot_reload: false,
            reload_interval: Duration::from_secs(2),
            shutdown_timeout: Duration::from_secs(20),
            election: None,
            sharding: None,
            record: None,
            pull_dir: None,
        }
    }
}

/// Plugins loaded and ready to run against a cluster.
pub struct Host {
    config: HostConfig,
    engine: Engine,
    loaded: plugins::Loaded,
    /// Reconcilers that are not Wasm files (native code, for comparisons).
    native: Vec<(Arc<dyn Reconcile>, Options)>,
}

impl Host {
    /// Load the plugins `config` names into `engine`. A file that does not load is
    /// reported when the host runs and the others run; it is an error only when nothing
    /// is left, or the plugins together break a host-wide rule.
    pub fn new(config: HostConfig, engine: Engine) -> anyhow::Result<Host> {
        if let Some(election) = &config.election {
            election.validate()?;
        }
        if let Some(sharding) = &config.sharding {
            anyhow::ensure!(
                config.election.is_none(),
                "sharding and leader election exclude each other: with sharding every replica reconciles its share"
            );
            sharding.members.validate()?;
        }
        let loaded = if config.plugins.is_some() || config.config.is_some() {
            plugins::load(
                &engine,
                (config.config.as_ref(), config.plugins.as_ref()),
                config.pull_dir.as_deref(),
                &config.defaults,
            )?
        } else {
            plugins::Loaded::default()
        };
        Ok(Host {
            config,
            engine,
            loaded,
            native: Vec::new(),
        })
    }

    /// Also run `reconciler`, which is not a file (no hot reload, no sandbox of ours).
    pub fn add(&mut self, reconciler: Arc<dyn Reconcile>, options: Options) {
        self.native.push((reconciler, options));
    }

    /// Serve until `shutdown` resolves, then stop gracefully: in-flight reconciles finish
    /// within [`HostConfig::shutdown_timeout`] and the Lease is released.
    pub async fn run(self, client: kube::Client, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        self.serve(client).await?.until(shutdown).await;
        Ok(())
    }

    /// Bind the servers, start leader election and every plugin; the host runs until
    /// [`Serving::until`]'s future resolves.
    pub async fn serve(self, client: kube::Client) -> anyhow::Result<Serving> {
        anyhow::ensure!(
            !self.loaded.plugins.is_empty() || !self.loaded.broken.is_empty() || !self.native.is_empty(),
            "no plugins configured"
        );
        let health = Health::default();
        let stop = CancellationToken::new();
        let metrics_addr = ops::server::metrics(self.config.metrics_addr, stop.clone()).await?;
        let health_addr = ops::server::health(self.config.health_addr, health.clone(), stop.clone()).await?;
        let probe = ops::server::probe_api(client.clone(), health.clone(), Duration::from_secs(5));
        tokio::spawn(stop.clone().run_until_cancelled_owned(probe));
        let (tenure, elector) = elect(&client, self.config.election.clone());
        let grace = self.config.shutdown_timeout;
        let (membership, shards) = match self.config.sharding {
            Some(sharding) => {
                let (membership, shards) = sharded::join(&client, sharding).await;
                (Some(membership), Some(shards))
            }
            None => (None, None),
        };
        let engine = self.engine.clone();
        let mut supervisor = Supervisor::new(client.clone(), self.engine, tenure, health.clone(), grace);
        // A sharded replica's units start on the membership's first assignment (no range):
        // they cache and reconcile nothing until the group gives them ranges.
        if let Some(s) = &shards {
            let first = s.target.borrow().clone();
            supervisor.reshard(s.filter(first.ranges), first.tenure).await;
        }
        if let Some(record) = self.config.record.clone() {
            let dir = record.dir.display().to_string();
            supervisor.record(Arc::new(crate::record::Recorder::new(record)?));
            tracing::info!(dir = %dir, "recording reconciles");
        }
        for a in self.loaded.plugins {
            let m = a.plugin.metadata();
            tracing::info!(plugin = %m.name, version = %m.version, path = %a.rules.path().display(), parent = %m.parent, "plugin loaded");
            supervisor.start(a.rules, a.plugin, a.options, a.canary);
        }
        for (rules, error) in self.loaded.broken {
            supervisor.broken(rules, &error);
        }
        for (reconciler, options) in self.native {
            supervisor.start_native(reconciler, options);
        }
        // Hot reload re-reads every plugin file; a plugin directory is also watched for
        // new files.
        let reload = self.config.hot_reload.then_some(self.config.reload_interval);
        if let (true, Some(dir)) = (self.config.hot_reload, self.config.plugins) {
            let rules =
                crate::admission::Rules::dir_file(dir.clone(), &self.config.defaults, self.loaded.policy)?;
            supervisor.watch_dir(dir, rules);
        }
        let supervisor = supervisor.into_task(shards);
        // Hot reload follows the config file's entries (and its references) as well.
        let followed = (self.config.config)
            .filter(|_| self.config.hot_reload)
            .map(|path| {
                follow::Followed::new(
                    path,
                    self.config.defaults,
                    self.config.pull_dir,
                    self.loaded.references,
                )
            });
        Ok(Serving {
            supervisor,
            membership,
            elector,
            health,
            stop,
            reload,
            followed,
            metrics_addr,
            health_addr,
            grace,
            engine,
        })
    }
}

/// Leader election from `settings`, or a tenure always held.
fn elect(client: &kube::Client, settings: Option<leader::Settings>) -> (Tenure, Option<Elector>) {
    let Some(mut settings) = settings else {
        return (Tenure::always(), None);
    };
    if settings.namespace.is_empty() {
        settings.namespace = client.default_namespace().to_string();
    }
    tracing::info!(lease = %settings.name, namespace = %settings.namespace, identity = %settings.identity, "leader election on");
    let (leader, elector) = leader::start(client.clone(), settings);
    (leader, Some(elector))
}

/// A running host.
pub struct Serving {
    supervisor: supervisor::Handle,
    /// A sharded host's membership.
    membership: Option<Membership>,
    elector: Option<Elector>,
    health: Health,
    /// Stops the HTTP servers and the API probe.
    stop: CancellationToken,
    /// How often to look at plugin files, with hot reload.
    reload: Option<Duration>,
    /// The config file, followed with hot reload.
    followed: Option<follow::Followed>,
    metrics_addr: SocketAddr,
    health_addr: SocketAddr,
    grace: Duration,
    /// The engine, for the memory budget's gauges.
    engine: Engine,
}

impl Serving {
    /// Where `/metrics` is served.
    pub fn metrics_addr(&self) -> SocketAddr {
        self.metrics_addr
    }

    /// Where `/healthz` and `/readyz` are served.
    pub fn health_addr(&self) -> SocketAddr {
        self.health_addr
    }

    /// Run until `shutdown` resolves, then stop: readiness fails at once, in-flight
    /// reconciles finish within the grace period, the Lease is released.
    pub async fn until(mut self, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        let mut reload = tokio::time::interval(self.reload.unwrap_or(Duration::from_secs(3600)));
        reload.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut beat = tokio::time::interval(Duration::from_secs(1));
        let mut trim = tokio::time::interval(ops::heap::TRIM_EVERY);
        // The config and its registry are followed in a task of their own: a slow pull
        // never holds up the heartbeat, a signal or the look at the files.
        if let (Some(followed), Some(every)) = (self.followed.take(), self.reload) {
            let follow = follow::follow(followed, every, self.supervisor.commands());
            tokio::spawn(self.stop.clone().run_until_cancelled_owned(follow));
        }
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                _ = beat.tick() => self.health.beat(),
                _ = trim.tick() => {
                    ops::heap::trim();
                    ops::metrics::get().memory(self.engine.memory_budget());
                }
                _ = reload.tick(), if self.reload.is_some() => self.supervisor.reload(),
            }
        }
        self.stop().await;
    }

    async fn stop(self) {
        self.health.stopping();
        tracing::info!(grace = ?self.grace, "shutting down: finishing in-flight reconciles");
        if let Some(elector) = &self.elector {
            elector.stop_waiters();
        }
        self.supervisor.stop(self.grace).await;
        if let Some(membership) = self.membership
            && tokio::time::timeout(RELEASE_TIMEOUT, membership.release())
                .await
                .is_err()
        {
            tracing::warn!(
                "the member Lease was not deleted in time; the others take its ranges when it expires"
            );
        }
        if let Some(elector) = self.elector
            && tokio::time::timeout(RELEASE_TIMEOUT, elector.release())
                .await
                .is_err()
        {
            tracing::warn!("the Lease was not released in time; standbys take over when it expires");
        }
        self.stop.cancel();
        tracing::info!("stopped");
    }
}
