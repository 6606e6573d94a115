//! What `/healthz` and `/readyz` report: each plugin's state, whether the API server
//! answers, and whether the host's own loop is still turning.
//!
//! Ready means every plugin runs with synced caches and the API server answers; the
//! `/readyz` body names each plugin that does not and why. Live means both of the host's
//! own loops have turned recently — the main loop (signals, heartbeat, reloads) and the
//! supervisor task (units, reshards, hot reload) — so a host wedged in either (or past its
//! shutdown deadline) fails `/healthz` and kubelet restarts it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::ops::metrics::{self, PluginLabel};

/// How long either loop may go without a tick before the host counts as wedged.
pub const STALL: Duration = Duration::from_secs(60);

/// Where one plugin stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PluginState {
    /// Its controller runs; its caches are still listing.
    Syncing,
    /// Its controller runs with synced caches.
    Running,
    /// Not running, retried with backoff (e.g. a kind not served yet); why.
    Waiting(String),
    /// Its file did not load; retried when the file changes (with hot reload); why.
    Failed(String),
}

/// Readiness and liveness of the host; cheap to clone.
#[derive(Clone)]
pub struct Health(Arc<Inner>);

struct Inner {
    api: AtomicBool,
    stopping: AtomicBool,
    plugins: Mutex<BTreeMap<String, PluginState>>,
    heartbeat: Mutex<Instant>,
    supervisor: Mutex<Instant>,
}

impl Default for Health {
    fn default() -> Self {
        Health(Arc::new(Inner {
            api: AtomicBool::new(true),
            stopping: AtomicBool::new(false),
            plugins: Mutex::new(BTreeMap::new()),
            heartbeat: Mutex::new(Instant::now()),
            supervisor: Mutex::new(Instant::now()),
        }))
    }
}

impl Health {
    /// Record where plugin `name` stands; `capstan_plugin_up` follows.
    pub fn plugin(&self, name: &str, state: PluginState) {
        let up = i64::from(state == PluginState::Running);
        metrics::get()
            .plugin_up
            .get_or_create(&PluginLabel { plugin: name.into() })
            .set(up);
        let mut plugins = self.plugins();
        let all_ran = all_running(&plugins);
        plugins.insert(name.to_string(), state);
        if !all_ran && all_running(&plugins) {
            tracing::info!(plugins = plugins.len(), "caches synced; ready");
        }
    }

    /// Forget a plugin that is no longer run (replaced under another name, or its file fixed).
    pub fn forget(&self, name: &str) {
        self.plugins().remove(name);
        let _ = metrics::get()
            .plugin_up
            .remove(&PluginLabel { plugin: name.into() });
    }

    /// Where plugin `name` stands, if it is known.
    #[cfg(test)]
    pub fn state(&self, name: &str) -> Option<PluginState> {
        self.plugins().get(name).cloned()
    }

    /// The host is shutting down: not ready from now on.
    pub fn stopping(&self) {
        self.0.stopping.store(true, Ordering::SeqCst);
    }

    /// Record whether the API server answers; returns what was recorded before.
    pub fn set_api(&self, reachable: bool) -> bool {
        self.0.api.swap(reachable, Ordering::SeqCst)
    }

    /// The main loop turned.
    pub fn beat(&self) {
        *self.0.heartbeat.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    /// The supervisor task turned (or is compiling, which is work, not a wedge).
    pub fn beat_supervisor(&self) {
        *self.0.supervisor.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    /// Why the host is not live, if it is not.
    pub fn not_live(&self) -> Option<String> {
        let since = |beat: &Mutex<Instant>| beat.lock().unwrap_or_else(|e| e.into_inner()).elapsed();
        let stalled = [
            ("main loop", since(&self.0.heartbeat)),
            ("supervisor", since(&self.0.supervisor)),
        ]
        .into_iter()
        .filter(|(_, since)| *since > STALL)
        .map(|(what, since)| format!("{what} stalled for {}s", since.as_secs()))
        .collect::<Vec<_>>();
        (!stalled.is_empty()).then(|| stalled.join("; "))
    }

    /// Why the host is not ready, one line per reason; `None` when ready.
    pub fn not_ready(&self) -> Option<String> {
        let mut why = Vec::new();
        if self.0.stopping.load(Ordering::SeqCst) {
            why.push("shutting down".to_string());
        }
        if !self.0.api.load(Ordering::SeqCst) {
            why.push("API server unreachable".to_string());
        }
        let plugins = self.plugins();
        if plugins.is_empty() {
            why.push("no plugin started yet".to_string());
        }
        for (name, state) in plugins.iter() {
            match state {
                PluginState::Running => {}
                PluginState::Syncing => why.push(format!("plugin {name}: caches not synced")),
                PluginState::Waiting(e) => why.push(format!("plugin {name}: not running: {e}")),
                PluginState::Failed(e) => why.push(format!("plugin {name}: not loaded: {e}")),
            }
        }
        (!why.is_empty()).then(|| why.join("\n"))
    }

    fn plugins(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, PluginState>> {
        self.0.plugins.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn all_running(plugins: &BTreeMap<String, PluginState>) -> bool {
    !plugins.is_empty() && plugins.values().all(|s| *s == PluginState::Running)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_only_when_every_plugin_runs_and_the_api_answers() {
        let h = Health::default();
        assert!(h.not_ready().unwrap().contains("no plugin"));
        h.plugin("echo", PluginState::Syncing);
        h.plugin(
            "mirror",
            PluginState::Waiting("kind Mirror.example.com/v1 is not served".into()),
        );
        let why = h.not_ready().unwrap();
        assert!(why.contains("plugin echo: caches not synced"), "{why}");
        assert!(why.contains("plugin mirror: not running: kind Mirror"), "{why}");
        h.plugin("echo", PluginState::Running);
        h.plugin("mirror", PluginState::Running);
        assert_eq!(h.not_ready(), None);
        h.set_api(false);
        assert_eq!(h.not_ready().as_deref(), Some("API server unreachable"));
        h.set_api(true);
        h.forget("mirror");
        assert_eq!(h.state("mirror"), None);
        h.stopping();
        assert!(h.not_ready().unwrap().contains("shutting down"));
    }

    #[test]
    fn live_while_both_loops_beat() {
        let h = Health::default();
        assert_eq!(h.not_live(), None);
        let stale = Instant::now() - STALL - Duration::from_secs(1);
        *h.0.heartbeat.lock().unwrap() = stale;
        assert!(h.not_live().unwrap().contains("main loop stalled"));
        h.beat();
        assert_eq!(h.not_live(), None);
        // A wedged supervisor is not hidden by a main loop that still turns (review M4).
        *h.0.supervisor.lock().unwrap() = stale;
        let why = h.not_live().unwrap();
        assert!(why.starts_with("supervisor stalled"), "{why}");
        h.beat_supervisor();
        assert_eq!(h.not_live(), None);
    }
}
