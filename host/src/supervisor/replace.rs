//! New versions of running plugin files, and new or fixed files: each admitted as at
//! start ([`crate::admission`]); a version with the same kinds is swapped in (in-flight
//! reconciles finish on the old one), one whose kinds changed restarts its unit with new
//! watches and its canary checked again, a refused one leaves the old version serving. A
//! canary's new build is admitted against the running stable version. Admission runs on
//! a blocking thread while the supervisor's heartbeat goes on.

use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::watch;

use super::{Supervisor, count, given, refused, stop_within};
use crate::admission::{self, Rules};
use crate::controller::{self, Options};
use crate::engine::{Metadata, Plugin, Reconcile};
use crate::reload::{self, FileWatch};

impl Supervisor {
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
    pub(super) async fn admit(&self, bytes: Vec<u8>, rules: &Rules) -> Result<(Plugin, Options), String> {
        let admitting = admission::admit_blocking(&self.engine, bytes, rules);
        self.beating(admitting)
            .await
            .unwrap_or_else(|| Err("the host is stopping".into()))
    }

    /// Await `work` (a compile: a Python plugin's takes a minute) while beating the
    /// supervisor's heartbeat — work going on, not a wedged supervisor; `None` when the
    /// host stops first.
    pub(super) async fn beating<T>(&self, work: impl Future<Output = T>) -> Option<T> {
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
    pub(super) async fn recanary(&mut self, i: usize, bytes: Vec<u8>) {
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

    pub(super) async fn replace(&mut self, i: usize, bytes: Vec<u8>) {
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
            return refused(&name, &path, &super::admit::name_taken(&new_name, &holder, &path));
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
}

/// Same name and kinds: the running watches and caches fit the new version.
fn same_kinds(old: &Metadata, new: &Metadata) -> bool {
    old.name == new.name && admission::same_kinds(old, new)
}
