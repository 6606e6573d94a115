//! The running plugins, one controller each: start them, swap in a new version of a
//! plugin whose kinds are unchanged (in-flight reconciles finish on the old one), restart
//! a plugin whose kinds changed with new watches, refuse a broken new file while the old
//! version keeps serving, and stop them all on shutdown.

use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::controller::{self, Options};
use crate::engine::{Engine, Limits, Metadata, Plugin, Reconcile};
use crate::leader::Leader;
use crate::ops::metrics::{self, ReloadLabels};
use crate::reload::{self, FileWatch};

/// One plugin's controller.
struct Running {
    watch: FileWatch,
    limits: Limits,
    options: Options,
    version: watch::Sender<Arc<dyn Reconcile>>,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

/// All running plugins of this host.
pub struct Supervisor {
    client: kube::Client,
    engine: Engine,
    leader: Leader,
    running: Vec<Running>,
    /// Defaults for plugins that appear in the directory later.
    dir: Option<(PathBuf, Options)>,
    failures: mpsc::UnboundedSender<anyhow::Error>,
    /// Files in the plugin directory that did not load.
    broken: Vec<FileWatch>,
}

impl Supervisor {
    /// A supervisor; a controller that fails sends its error to `failures`.
    pub fn new(
        client: kube::Client,
        engine: Engine,
        leader: Leader,
        failures: mpsc::UnboundedSender<anyhow::Error>,
    ) -> Self {
        Supervisor {
            client,
            engine,
            leader,
            running: Vec::new(),
            dir: None,
            failures,
            broken: Vec::new(),
        }
    }

    /// Pick up `*.wasm` files that appear in `dir` later, with `defaults`.
    pub fn watch_dir(&mut self, dir: PathBuf, defaults: Options) {
        self.dir = Some((dir, defaults));
    }

    /// Start a controller for `plugin` loaded from `path`; the receiver fires once its caches synced.
    pub fn start(&mut self, path: PathBuf, plugin: Plugin, options: Options) -> oneshot::Receiver<()> {
        let limits = plugin.limits().clone();
        let (version, rx) = watch::channel(Arc::new(plugin) as Arc<dyn Reconcile>);
        let (synced, ready) = oneshot::channel();
        let stop = CancellationToken::new();
        let task = self.spawn(rx, options.clone(), stop.clone(), synced);
        self.running.push(Running {
            watch: FileWatch::new(path),
            limits,
            options,
            version,
            stop,
            task,
        });
        ready
    }

    fn spawn(
        &self,
        plugin: watch::Receiver<Arc<dyn Reconcile>>,
        options: Options,
        stop: CancellationToken,
        synced: oneshot::Sender<()>,
    ) -> JoinHandle<()> {
        let (client, leader, failures) = (self.client.clone(), self.leader.clone(), self.failures.clone());
        tokio::spawn(async move {
            let shutdown = async move { stop.cancelled().await };
            if let Err(e) = controller::run(client, plugin, options, leader, shutdown, synced).await {
                let _ = failures.send(e);
            }
        })
    }

    /// Look for replaced plugin files (and new ones in the plugin directory) and act on them.
    pub async fn reload(&mut self) {
        for i in 0..self.running.len() {
            if let Some(bytes) = self.running[i].watch.changed() {
                self.replace(i, &bytes).await;
            }
        }
        let Some((dir, defaults)) = self.dir.clone() else {
            return;
        };
        let Ok(paths) = reload::wasm_files(&dir) else {
            return;
        };
        for path in paths {
            if self.running.iter().any(|r| r.watch.path() == path) {
                continue;
            }
            // A file that failed to load is retried only when it changes, so it is reported once.
            let bytes = match self.broken.iter_mut().find(|b| b.path() == path) {
                Some(broken) => match broken.changed() {
                    Some(bytes) => bytes,
                    None => continue,
                },
                None => {
                    self.broken.push(FileWatch::new(path.clone()));
                    match std::fs::read(&path) {
                        Ok(bytes) => bytes,
                        Err(_) => continue,
                    }
                }
            };
            match self.engine.load(&bytes, Limits::default()) {
                Ok(plugin) if self.named(&plugin.metadata().name) => {
                    refused(&plugin.metadata().name, &path, "another plugin has this name")
                }
                Ok(plugin) => {
                    tracing::info!(plugin = %plugin.metadata().name, path = %path.display(), "new plugin started");
                    count(&plugin.metadata().name, "started");
                    self.broken.retain(|b| b.path() != path);
                    drop(self.start(path, plugin, defaults.clone()));
                }
                Err(e) => refused("", &path, &e.to_string()),
            }
        }
    }

    fn named(&self, name: &str) -> bool {
        self.running
            .iter()
            .any(|r| r.version.borrow().metadata().name == name)
    }

    async fn replace(&mut self, i: usize, bytes: &[u8]) {
        let old = self.running[i].version.borrow().clone();
        let name = old.metadata().name.clone();
        let path = self.running[i].watch.path().to_path_buf();
        let new = match self.engine.load(bytes, self.running[i].limits.clone()) {
            Ok(new) => new,
            Err(e) => return refused(&name, &path, &e.to_string()),
        };
        if same_kinds(old.metadata(), new.metadata()) {
            tracing::info!(plugin = %name, path = %path.display(), version = %new.metadata().version, "plugin reloaded");
            count(&name, "reloaded");
            let _ = self.running[i].version.send(Arc::new(new) as Arc<dyn Reconcile>);
            return;
        }
        if new.metadata().name != name && self.named(&new.metadata().name) {
            return refused(&name, &path, "another plugin has the new name");
        }
        if let Err(e) = controller::served(&self.client, new.metadata()).await {
            return refused(&name, &path, &format!("{e:#}"));
        }
        // Kinds changed: stop the old controller (in-flight reconciles finish), start anew.
        let running = &mut self.running[i];
        running.stop.cancel();
        let task = std::mem::replace(&mut running.task, tokio::spawn(async {}));
        let _ = task.await;
        tracing::info!(plugin = %new.metadata().name, path = %path.display(), "plugin kinds changed; restarted with new watches");
        count(&new.metadata().name, "restarted");
        let (version, rx) = watch::channel(Arc::new(new) as Arc<dyn Reconcile>);
        let stop = CancellationToken::new();
        let (synced, _) = oneshot::channel();
        let task = self.spawn(rx, self.running[i].options.clone(), stop.clone(), synced);
        let running = &mut self.running[i];
        (running.version, running.stop, running.task) = (version, stop, task);
    }

    /// Stop every controller; in-flight reconciles finish first.
    pub async fn stop(self) {
        for r in &self.running {
            r.stop.cancel();
        }
        for r in self.running {
            let _ = r.task.await;
        }
    }
}

/// Same name and kinds: the running watches and caches fit the new version.
fn same_kinds(old: &Metadata, new: &Metadata) -> bool {
    old.name == new.name
        && old.parent == new.parent
        && old.children == new.children
        && old.finalizer == new.finalizer
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

fn refused(plugin: &str, path: &std::path::Path, why: &str) {
    tracing::error!(plugin, path = %path.display(), error = why, "new plugin file refused; the running version keeps serving");
    count(plugin, "refused");
}
