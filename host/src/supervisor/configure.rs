//! What the config file names, applied while the host runs (hot reload): an entry that
//! is new starts, one that is gone stops, and one whose rules changed — settings, limits,
//! grants, name, mode, canary, the signature policy — is admitted again under them: it
//! restarts with what they allow, or stops and is reported if they refuse it. The plugin
//! directory's files follow the config's policy too.

use std::path::{Path, PathBuf};

use super::{Supervisor, file_key};
use crate::admission::Rules;
use crate::ops::health::PluginState;
use crate::reload::FileWatch;

/// The config file's entries as it now reads.
pub struct Configured {
    /// Each entry's rules, its references pointed at their links.
    pub entries: Vec<Rules>,
    /// Files whose pull failed (an entry's link, or a canary a policy refuses), and why.
    pub failed: Vec<(PathBuf, String)>,
    /// Whether the config's global signature policy applies (the directory's files too).
    pub policy: bool,
}

impl Supervisor {
    /// Run what `configured` names: stop what it no longer names, admit again what now
    /// runs under other rules, and start what is new; then look at the files.
    pub(super) async fn configure(&mut self, configured: Configured) {
        let Configured {
            entries,
            failed,
            policy,
        } = configured;
        if let Some((_, dir)) = &mut self.dir {
            *dir = dir.under_policy(policy);
        }
        let running: Vec<(PathBuf, Rules)> = (self.units.iter())
            .filter_map(|u| u.watch.as_ref().map(|(w, r)| (w.path().to_path_buf(), r.clone())))
            .collect();
        let wanted: Vec<(PathBuf, Option<Rules>)> = (running.into_iter())
            .filter_map(|(path, now)| {
                let next = self.rules_for(&path, &entries);
                (next.as_ref() != Some(&now)).then_some((path, next))
            })
            .collect();
        // Stops first, so a name they free is free for what starts.
        for (path, _) in wanted.iter().filter(|(_, next)| next.is_none()) {
            tracing::info!(path = %path.display(), "plugin no longer configured; stopped");
            self.remove(path).await;
        }
        for (path, next) in wanted {
            if let Some(rules) = next {
                self.readmit(&path, rules).await;
            }
        }
        self.configure_broken(&entries).await;
        for rules in entries {
            self.configure_new(rules, &failed).await;
        }
        for (path, why) in failed.iter().filter(|(p, _)| !self.tracks(p)) {
            tracing::warn!(path = %path.display(), error = %why, "not run");
        }
        self.reload().await;
    }

    /// The rules the file at `path` now runs under: its entry's, or the directory's for
    /// a file of the plugin directory; `None` when nothing names it.
    fn rules_for(&self, path: &Path, entries: &[Rules]) -> Option<Rules> {
        if let Some(entry) = entries.iter().find(|r| same_file(r.path(), path)) {
            return Some(entry.clone());
        }
        let (dir, rules) = self.dir.as_ref()?;
        let in_dir = path.parent().is_some_and(|p| same_file(p, dir));
        in_dir.then(|| rules.for_file(path.to_path_buf()))
    }

    /// Whether a unit runs the file at `path` or it is kept as refused.
    fn tracks(&self, path: &Path) -> bool {
        let runs = (self.units.iter()).any(|u| u.watch.as_ref().is_some_and(|(w, _)| w.path() == path));
        runs || self.broken.iter().any(|(b, _)| b.path() == path)
    }

    /// Admit the running file at `path` again under `rules`: restarted with what they
    /// allow, or stopped and reported as refused.
    async fn readmit(&mut self, path: &Path, rules: Rules) {
        self.remove(path).await;
        tracing::info!(path = %path.display(), "plugin's config entry changed; admitting it again under it");
        self.broken
            .push((FileWatch::new(path.to_path_buf()), rules.clone()));
        match std::fs::read(path) {
            Ok(bytes) => self.add(rules, bytes).await,
            Err(e) => self.broken_now(path, format!("cannot read {}: {e}", path.display())),
        }
    }

    /// Files kept as refused follow the config: dropped when nothing names them any more,
    /// tried again at once under rules that changed.
    async fn configure_broken(&mut self, entries: &[Rules]) {
        let mut retry = Vec::new();
        for (watch, rules) in std::mem::take(&mut self.broken) {
            match self.rules_for(watch.path(), entries) {
                None => self.health.forget(&file_key(watch.path())),
                Some(next) if next != rules => retry.push(next),
                Some(_) => self.broken.push((watch, rules)),
            }
        }
        for rules in retry {
            let path = rules.path().to_path_buf();
            self.broken.push((FileWatch::new(path.clone()), rules.clone()));
            if let Ok(bytes) = std::fs::read(&path) {
                self.add(rules, bytes).await;
            }
        }
    }

    /// Start an entry the config names anew (kept as refused if it does not run, and
    /// tried again when its file changes).
    async fn configure_new(&mut self, rules: Rules, failed: &[(PathBuf, String)]) {
        let path = rules.path().to_path_buf();
        if self.tracks(&path) {
            return;
        }
        self.broken.push((FileWatch::new(path.clone()), rules.clone()));
        if let Some((_, why)) = failed.iter().find(|(p, _)| *p == path) {
            return self.broken_now(&path, why.clone());
        }
        match std::fs::read(&path) {
            Ok(bytes) => self.add(rules, bytes).await,
            Err(e) => self.broken_now(&path, format!("cannot read {}: {e}", path.display())),
        }
    }

    /// Say that the file at `path`, kept as refused, does not run, and why.
    fn broken_now(&self, path: &Path, why: String) {
        tracing::error!(path = %path.display(), error = %why, "plugin not loaded; the other plugins run");
        self.health.plugin(&file_key(path), PluginState::Failed(why));
    }

    /// Stop the unit running the file at `path` (in-flight reconciles finish within the
    /// grace period) and forget it.
    async fn remove(&mut self, path: &Path) {
        let Some(i) =
            (self.units.iter()).position(|u| u.watch.as_ref().is_some_and(|(w, _)| w.path() == path))
        else {
            return;
        };
        let unit = self.units.remove(i);
        let name = unit.name();
        unit.stop.cancel();
        super::stop_within(unit.task, self.grace, &name).await;
        self.health.forget(&name);
    }
}

/// Whether `a` and `b` name one file: equal, or equal once their directories are
/// resolved (a registry link itself is never resolved: two links may share one blob).
fn same_file(a: &Path, b: &Path) -> bool {
    let resolved = |p: &Path| Some(p.parent()?.canonicalize().ok()?.join(p.file_name()?));
    a == b || resolved(a).is_some_and(|r| Some(r) == resolved(b))
}
