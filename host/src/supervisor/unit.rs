//! One plugin's life under the supervisor: wait until its kinds are served (with backoff,
//! reported in `/readyz`), run its controller, start over if it ends by itself, and stop
//! within a grace period when told to.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::controller::{self, Options};
use crate::engine::Reconcile;
use crate::lease::Tenure;
use crate::ops::health::{Health, PluginState};

/// First wait before a unit whose kinds are not served looks again; doubles to [`RETRY_MAX`].
const RETRY_MIN: Duration = Duration::from_secs(1);
/// Longest wait between two looks at a plugin's kinds.
const RETRY_MAX: Duration = Duration::from_secs(60);

/// Wait for a cancelled unit's task to end, aborting it after `grace`.
pub(super) async fn stop_within(mut task: JoinHandle<()>, grace: Duration, plugin: &str) {
    if tokio::time::timeout(grace, &mut task).await.is_err() {
        tracing::warn!(plugin, grace = ?grace, "plugin did not stop within the grace period; aborted");
        task.abort();
        let _ = task.await;
    }
}

/// One plugin's life: wait until its kinds are served, run its controller, and start
/// over (with backoff) if the controller ends by itself, until `stop`.
pub(super) async fn unit(
    client: kube::Client,
    plugin: watch::Receiver<Arc<dyn Reconcile>>,
    options: Options,
    tenure: Tenure,
    stop: CancellationToken,
    health: Health,
    memory: controller::Memory,
) {
    let name = plugin.borrow().metadata().name.clone();
    let mut delay = RETRY_MIN;
    loop {
        let metadata = plugin.borrow().metadata().clone();
        let served = tokio::select! {
            served = controller::served(&client, &metadata) => served,
            () = stop.cancelled() => return,
        };
        let why = match served {
            Err(e) => format!("{e:#}"),
            Ok(()) => {
                delay = RETRY_MIN;
                health.plugin(&name, PluginState::Syncing);
                let (synced, listed) = oneshot::channel();
                let (marker, marked) = (health.clone(), name.clone());
                let up = tokio::spawn(async move {
                    if listed.await.is_ok() {
                        tracing::info!(plugin = %marked, "plugin running: caches synced");
                        marker.plugin(&marked, PluginState::Running);
                    }
                });
                tracing::info!(plugin = %name, parent = %metadata.parent, children = metadata.children.len(), "plugin starting");
                let cancelled = stop.clone();
                let shutdown = async move { cancelled.cancelled().await };
                let result = controller::run(
                    client.clone(),
                    plugin.clone(),
                    options.clone(),
                    tenure.clone(),
                    shutdown,
                    synced,
                    memory.clone(),
                )
                .await;
                up.abort();
                if stop.is_cancelled() {
                    return;
                }
                match result {
                    Err(e) => format!("{e:#}"),
                    Ok(()) => "its controller stopped".into(),
                }
            }
        };
        health.plugin(&name, PluginState::Waiting(why.clone()));
        tracing::warn!(plugin = %name, error = %why, retry_in = ?delay, "plugin not running; the other plugins run; retrying");
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = stop.cancelled() => return,
        }
        delay = (delay * 2).min(RETRY_MAX);
    }
}
