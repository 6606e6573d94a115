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

use crate::admission::{self, Rules};
use crate::controller::{self, Canary, Options};
use crate::engine::{Engine, Metadata, Plugin, Reconcile};
use crate::lease::Tenure;
use crate::ops::health::{Health, PluginState};
use crate::ops::metrics::{self, ReloadLabels};
use crate::reload::{self, FileWatch};
pub(crate) use admit::{canary_admitted, name_taken};
pub use configure::Configured;
pub use serve::{Commands, Handle, Shards};
use unit::{stop_within, unit};

mod admit;
mod configure;
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

    /// Look for replaced plugin files (and new or fixed ones) and act on them.
    pub async fn reload(&mut self) {
        for i in 0..self.units.len() {
            if let Some(bytes) = self.units[i].watch.as_mut().and_then(|(w, _)| w.changed()) {
                self.replace(i, bytes).await;
            }
            if let Some(bytes) = self.units[i].canary_file.as_mut().and_then(FileWatch::changed) {
                self.recanary(i, bytes).await;
            }
        }
        let mut paths: Vec<PathBuf> = Vec::new();
        if let Some((dir, _)) = &self.dir
            && let Ok(found) = reload::wasm_files(dir)
        {
            paths.extend(found);
        }
        for (b, _) in &self.broken {
            if !paths.iter().any(|p| p == b.path()) {
                paths.push(b.path().to_path_buf());
            }
        }
        for path in paths {
            if self
                .units
                .iter()
                .any(|u| u.watch.as_ref().is_some_and(|(w, _)| w.path() == path))
            {
                continue;
            }
            // A refused file is retried only when it changes, so it is reported once, and
            // always under the rules it was first refused under.
            let (bytes, rules) = match self.broken.iter_mut().find(|(b, _)| b.path() == path) {
                Some((broken, rules)) => match broken.changed() {
                    Some(bytes) => (bytes, rules.clone()),
                    None => continue,
                },
                None => {
                    let Some((_, dir)) = &self.dir else { continue };
                    let rules = dir.for_file(path.clone());
                    self.broken.push((FileWatch::new(path.clone()), rules.clone()));
                    match std::fs::read(&path) {
                        Ok(bytes) => (bytes, rules),
                        Err(_) => continue,
                    }
                }
            };
            self.add(rules, bytes).await;
        }
    }

    /// [`admission::admit`] on a blocking thread, given up when the host stops.
    async fn admit(&self, bytes: Vec<u8>, rules: &Rules) -> Result<(Plugin, Options), String> {
        let admitting = admission::admit_blocking(&self.engine, bytes, rules);
        self.beating(admitting)
            .await
            .unwrap_or_else(|| Err("the host is stopping".into()))
    }

    /// Await `work` (a compile: a Python plugin's takes a minute) while beating the
    /// supervisor's heartbeat — work going on, not a wedged supervisor; `None` when the
    /// host stops first.
    async fn beating<T>(&self, work: impl Future<Output = T>) -> Option<T> {
        tokio::pin!(work);
        let mut beat = tokio::time::interval(std::time::Duration::from_secs(1));
        loop {
            tokio::select! {
                done = &mut work => return Some(done),
                () = self.stopping.cancelled() => return None,
                _ = beat.tick() => self.health.beat_supervisor(),
            }
        }
    }

    /// A new build of unit `i`'s canary: admitted against the running stable version and
    /// sent to its controller, or refused while the canary it replaces keeps running.
    async fn recanary(&mut self, i: usize, bytes: Vec<u8>) {
        let Some((_, rules)) = &self.units[i].watch else {
            return;
        };
        let rules = rules.clone();
        let stable = self.units[i].version.borrow().metadata().clone();
        let options = self.units[i].options.clone();
        let Some(canary) = self.canary(Some(bytes), &rules, &stable, &options).await else {
            return;
        };
        tracing::info!(plugin = %stable.name, version = %canary.plugin.metadata().version, "canary reloaded");
        count(&stable.name, "canary_reloaded");
        self.units[i].canary.send_replace(Some(canary));
    }

    async fn replace(&mut self, i: usize, bytes: Vec<u8>) {
        let old = self.units[i].version.borrow().clone();
        let name = old.metadata().name.clone();
        let Some((path, rules)) = self.units[i]
            .watch
            .as_ref()
            .map(|(w, rules)| (w.path().to_path_buf(), rules.clone()))
        else {
            return;
        };
        let new = match self.admit(bytes, &rules).await {
            Ok((new, _)) => new,
            Err(e) => return refused(&name, &path, &e),
        };
        if same_kinds(old.metadata(), new.metadata()) {
            tracing::info!(plugin = %name, path = %path.display(), version = %new.metadata().version, "plugin reloaded");
            given(&new, &self.units[i].options, self.engine.max_instances());
            count(&name, "reloaded");
            let _ = self.units[i].version.send(Arc::new(new) as Arc<dyn Reconcile>);
            return;
        }
        let new_name = new.metadata().name.clone();
        if new_name != name
            && let Some(holder) = self.holder(&new_name)
        {
            return refused(&name, &path, &admit::name_taken(&new_name, &holder, &path));
        }
        let served = tokio::select! {
            served = controller::served(&self.client, new.metadata()) => served,
            () = self.stopping.cancelled() => return,
        };
        if let Err(e) = served {
            return refused(&name, &path, &format!("{e:#}"));
        }
        // The canary was checked against the old kinds: it runs on only if it fits the new.
        let canary = self
            .canary(None, &rules, new.metadata(), &self.units[i].options)
            .await;
        if canary.is_none() && self.units[i].canary.borrow().is_some() {
            tracing::warn!(plugin = %new_name, "canary dropped: it does not fit the new version's kinds");
        }
        // Kinds changed: stop the old unit (in-flight reconciles finish), start anew.
        let unit = &mut self.units[i];
        let (version, rx) = watch::channel(Arc::new(new) as Arc<dyn Reconcile>);
        let stop = self.stopping.child_token();
        let old_stop = std::mem::replace(&mut unit.stop, stop.clone());
        old_stop.cancel();
        let old_task = std::mem::replace(&mut unit.task, tokio::spawn(async {}));
        stop_within(old_task, self.grace, &name).await;
        if new_name != name {
            self.health.forget(&name);
        }
        tracing::info!(plugin = %new_name, path = %path.display(), "plugin kinds changed; restarted with new watches");
        count(&new_name, "restarted");
        self.units[i].canary.send_replace(canary);
        // Other kinds, other parents: nothing the old controller remembered applies.
        let memory = controller::Memory::default();
        let task = self.spawn(rx, self.units[i].options.clone(), stop, memory.clone());
        let unit = &mut self.units[i];
        (unit.version, unit.task, unit.memory) = (version, task, memory);
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

/// Same name and kinds: the running watches and caches fit the new version.
fn same_kinds(old: &Metadata, new: &Metadata) -> bool {
    old.name == new.name
        && old.parent == new.parent
        && old.children == new.children
        && old.related == new.related
        && old.finalizer == new.finalizer
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
