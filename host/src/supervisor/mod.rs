//! The running plugins, one unit each, isolated from each other: a unit waits (with
//! backoff, reported in `/readyz` and `capstan_plugin_up`) until its kinds are served,
//! then runs its controller; a new version with the same kinds is swapped in (in-flight
//! reconciles finish on the old one), one whose kinds changed restarts its unit with new
//! watches, a broken new file is refused while the old version keeps serving. Nothing one
//! plugin does stops another or the host, and stopping is bounded by a grace period.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::admission::Rules;
use crate::controller::{self, Canary, Options};
use crate::engine::{Engine, Plugin, Reconcile};
use crate::lease::Tenure;
use crate::ops::health::{Health, PluginState};
use crate::ops::metrics::{self, ReloadLabels};
use crate::reload::FileWatch;
pub(crate) use admit::{canary_admitted, name_taken};
pub use configure::Configured;
pub use serve::{Commands, Handle, Shards};
use unit::{stop_within, unit};

mod admit;
mod configure;
mod replace;
mod serve;
mod unit;

/// One plugin's controller, run by its own task.
struct Unit {
    /// The plugin's file and the rules its new versions are admitted under; `None` for a
    /// reconciler that is not a file.
    watch: Option<(FileWatch, Rules)>,
    /// The canary's file, watched for new builds like the stable one.
    canary_file: Option<FileWatch>,
    /// The canary its controller runs: replaced on a new build, re-checked (and dropped
    /// if it no longer fits) when the stable version's kinds change.
    canary: watch::Sender<Option<Canary>>,
    options: Options,
    version: watch::Sender<Arc<dyn Reconcile>>,
    stop: CancellationToken,
    task: JoinHandle<()>,
    /// What its controller remembers per parent, kept across a reshard's restart.
    memory: controller::Memory,
}

impl Unit {
    fn name(&self) -> String {
        self.version.borrow().metadata().name.clone()
    }
}

/// All plugins of this host.
pub struct Supervisor {
    client: kube::Client,
    engine: Engine,
    /// The right to reconcile new units start with: a shard assignment's term, or
    /// leadership.
    tenure: Tenure,
    /// Cancelled when the host stops: every unit's stop token is a child of it.
    stopping: CancellationToken,
    health: Health,
    /// How long stopping a unit may take before its task is aborted.
    grace: Duration,
    units: Vec<Unit>,
    /// The rules for plugins that appear in the directory later.
    dir: Option<(PathBuf, Rules)>,
    /// Files that were refused, with the rules they were refused under; tried again
    /// (under the same rules) when they change.
    broken: Vec<(FileWatch, Rules)>,
    /// On a sharded host, the ranges every unit runs.
    shard: Option<crate::shard::Filter>,
    /// The watches every unit shares.
    informers: controller::Informers,
    /// Where every unit records its reconciles, if anywhere.
    record: Option<Arc<crate::record::Recorder>>,
}

impl Supervisor {
    /// A supervisor reporting into `health`; stopping a plugin takes at most `grace`.
    pub fn new(
        client: kube::Client,
        engine: Engine,
        tenure: Tenure,
        health: Health,
        grace: Duration,
    ) -> Self {
        Supervisor {
            client,
            engine,
            tenure,
            stopping: CancellationToken::new(),
            health,
            grace,
            units: Vec::new(),
            dir: None,
            broken: Vec::new(),
            shard: None,
            informers: controller::Informers::default(),
            record: None,
        }
    }

    /// Record every unit's reconciles, from now on, with `recorder`.
    pub fn record(&mut self, recorder: Arc<crate::record::Recorder>) {
        self.record = Some(recorder);
    }

    /// Run every unit, from now on, on `filter`'s ranges under `tenure` (a sharded host).
    /// Units that run are stopped first, all of them, and only then started again, so when
    /// this returns nothing runs on ranges `filter` does not hold.
    pub async fn reshard(&mut self, filter: crate::shard::Filter, tenure: Tenure) {
        self.shard = Some(filter);
        self.tenure = tenure;
        for u in &self.units {
            u.stop.cancel();
        }
        let deadline = tokio::time::Instant::now() + self.grace;
        for i in 0..self.units.len() {
            let name = self.units[i].name();
            let task = std::mem::replace(&mut self.units[i].task, tokio::spawn(async {}));
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            stop_within(task, left, &name).await;
        }
        for i in 0..self.units.len() {
            let mut options = self.units[i].options.clone();
            options.shard.clone_from(&self.shard);
            let stop = self.stopping.child_token();
            let memory = self.units[i].memory.clone();
            let task = self.spawn(
                self.units[i].version.subscribe(),
                options.clone(),
                stop.clone(),
                memory,
            );
            let unit = &mut self.units[i];
            (unit.options, unit.stop, unit.task) = (options, stop, task);
        }
    }

    /// Pick up `*.wasm` files that appear in `dir` later, under `rules` (the directory's).
    pub fn watch_dir(&mut self, dir: PathBuf, rules: Rules) {
        self.dir = Some((dir, rules));
    }

    /// Run `plugin`, admitted under `rules`, in a unit of its own, with its admitted
    /// `canary` if it has one.
    pub fn start(&mut self, rules: Rules, plugin: Plugin, options: Options, canary: Option<Canary>) {
        given(&plugin, &options, self.engine.max_instances());
        let watch = FileWatch::new(rules.path().to_path_buf());
        self.run(Some((watch, rules)), Arc::new(plugin), options, canary);
    }

    /// Run `reconciler`, which is not a file (never reloaded), in a unit of its own.
    pub fn start_native(&mut self, reconciler: Arc<dyn Reconcile>, options: Options) {
        self.run(None, reconciler, options, None);
    }

    fn run(
        &mut self,
        watch: Option<(FileWatch, Rules)>,
        plugin: Arc<dyn Reconcile>,
        mut options: Options,
        canary: Option<Canary>,
    ) {
        if self.shard.is_some() {
            options.shard.clone_from(&self.shard);
        }
        // Whatever options a unit came with, it watches through the host's informers.
        options.informers = self.informers.clone();
        options.record.clone_from(&self.record);
        let canary_file = (watch.as_ref())
            .and_then(|(_, rules)| rules.entry().canary.as_ref())
            .map(|c| FileWatch::new(c.path.clone()));
        let (canary, canaries) = watch::channel(canary);
        options.canary = canaries;
        let (version, rx) = watch::channel(plugin);
        let stop = self.stopping.child_token();
        let memory = controller::Memory::default();
        let task = self.spawn(rx, options.clone(), stop.clone(), memory.clone());
        self.units.push(Unit {
            memory,
            watch,
            canary_file,
            canary,
            options,
            version,
            stop,
            task,
        });
    }

    /// Report a file refused under `rules`: `/readyz` names it, and with hot reload it is
    /// tried again, under the same rules, once it changes.
    pub fn broken(&mut self, rules: Rules, error: &str) {
        let path = rules.path().to_path_buf();
        tracing::error!(path = %path.display(), error, "plugin not loaded; the other plugins run");
        self.health
            .plugin(&file_key(&path), PluginState::Failed(error.to_string()));
        self.broken.push((FileWatch::new(path), rules));
    }

    fn spawn(
        &self,
        plugin: watch::Receiver<Arc<dyn Reconcile>>,
        options: Options,
        stop: CancellationToken,
        memory: controller::Memory,
    ) -> JoinHandle<()> {
        let (client, tenure, health) = (self.client.clone(), self.tenure.clone(), self.health.clone());
        tokio::spawn(unit(client, plugin, options, tenure, stop, health, memory))
    }

    /// Stop every unit: in-flight reconciles may finish within the grace period, then
    /// whatever is left is aborted.
    async fn stop(self) {
        for u in &self.units {
            u.stop.cancel();
        }
        let deadline = tokio::time::Instant::now() + self.grace;
        for u in self.units {
            let name = u.name();
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            stop_within(u.task, left, &name).await;
        }
    }
}

/// The name a file that never loaded goes by in `/readyz` and metrics.
fn file_key(path: &Path) -> String {
    format!("file {}", path.display())
}

fn count(plugin: &str, result: &str) {
    metrics::get()
        .reloads
        .get_or_create(&ReloadLabels {
            plugin: plugin.into(),
            result: result.into(),
        })
        .inc();
}

fn refused(plugin: &str, path: &Path, why: &str) {
    tracing::error!(plugin, path = %path.display(), error = why, "new plugin file refused; the running version keeps serving");
    count(plugin, "refused");
}

/// Say, once per plugin version, what it was given of the host's shared limits and why.
fn given(plugin: &Plugin, options: &Options, pool: u32) {
    let mib = |bytes: usize| format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20));
    tracing::info!(
        plugin = %plugin.metadata().name,
        memory_reserved = %mib(plugin.reserved()),
        memory_measured = %mib(plugin.footprint()),
        memory_total = %mib(plugin.limits().memory_total),
        concurrency = options.concurrency,
        instance_pool = pool,
        "plugin given: memory reserved as measured in one instance, more up to memoryTotal while the budget has room; instances from the shared pool, fairly under contention"
    );
}
