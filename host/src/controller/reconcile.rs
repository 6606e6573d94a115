//! One reconcile: parent and owned children from cache → plugin in the sandbox →
//! validated response → writes, events and the next requeue.

use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use tracing::Instrument;

use super::compact::Compact;
use super::events::{self, warn};
use super::quiet::Inputs;
use super::{Shared, children, churn, finalizer, queue};
use crate::apply;
use crate::engine::{DispatchError, Reconcile, Request};
use crate::key::ObjectKey;
use crate::ops::metrics::{ControllerLabel, FaultLabels, PluginLabel, QueueLabel};
use crate::validate;

/// Why a reconcile must be retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The plugin asked to retry, after its own delay or with backoff.
    #[error("plugin asked to retry: {message}")]
    Retry {
        /// Why.
        message: String,
        /// The plugin's delay, capped.
        after: Option<Duration>,
    },
    /// The plugin's related queries broke the rules; nothing was dispatched.
    #[error("related queries refused: {0}")]
    RelatedRefused(String),
    /// The plugin faulted.
    #[error("plugin fault: {0}")]
    Fault(crate::engine::Fault),
    /// The plugin's response broke the rules; nothing was applied.
    #[error("response refused: {0}")]
    Refused(validate::Refusal),
    /// A Kubernetes API call failed.
    #[error("API: {0}")]
    Api(#[from] kube::Error),
    /// A child the response names exists and belongs to someone else; nothing was applied.
    #[error("child conflict: {0}")]
    Conflict(String),
    /// Another plugin manages a status field the response sets; the status was not written.
    #[error("status conflict: {0}")]
    StatusHeld(String),
    /// A write would repeat content just written (ping-pong); it was not made.
    #[error("write loop: {0}")]
    Loop(String),
    /// The plugin is over its CPU share: not dispatched, back after this long.
    #[error("over the plugin's CPU share; back in {0:?}")]
    Deferred(Duration),
    /// The blocking dispatch task died.
    #[error("dispatch task failed: {0}")]
    Join(String),
}

/// kube-runtime's reconcile entry point: waits for leadership, runs one reconcile with
/// the current plugin version (cancelled if leadership is lost) and accounts for it.
pub async fn reconcile(parent: Arc<Compact>, shared: Arc<Shared>) -> Result<Action, Error> {
    let object = ObjectKey::of(&*parent);
    let dequeued = shared.queue.start(&object);
    let plugin = shared.plugin();
    let name = plugin.metadata().name.clone();
    let span = tracing::info_span!("reconcile", plugin = %name, object = %object);
    async move {
        let Some(parent) = admitted(parent, &shared).await else {
            return Ok(Action::await_change());
        };
        let workers = crate::ops::metrics::get()
            .active_workers
            .get_or_create(&ControllerLabel {
                controller: name.clone(),
            })
            .clone();
        workers.inc();
        tracing::debug!("reconcile started");
        let start = std::time::Instant::now();
        // The term this reconcile runs in: it ends with it, even if another begins.
        let term = shared.tenure.pin();
        let result = tokio::select! {
            r = reconcile_inner(&parent, &object, &plugin, &shared) => Ok(r),
            ended = term.lost() => Err(ended),
        };
        workers.dec();
        shared.queue.done(dequeued);
        let result = match result {
            Ok(r) => {
                tracing::debug!("reconcile finished");
                Some(r)
            }
            Err(ended) => {
                // Nothing it did after its term ended reached the API server.
                tracing::debug!(fenced_at = %crate::lease::wall_at(ended), "reconcile finished");
                None
            }
        };
        next(&shared, object, &name, start, result)
    }
    .instrument(span)
    .await
}

/// The parent to reconcile once the child caches have listed and this process leads —
/// re-read from the cache if it waited for leadership — or `None` to wait for a change.
async fn admitted(parent: Arc<Compact>, shared: &Shared) -> Option<Arc<Compact>> {
    // The parent cache is complete (kube-runtime waits for it), the child caches may
    // not be yet: a plugin must never see a partial list of its children.
    shared.synced.clone().wait_for(|s| *s).await.ok()?;
    if shared.tenure.is_held() {
        return Some(parent);
    }
    if !shared.tenure.acquired().await {
        return None;
    }
    // It may have changed or gone while this process was a standby.
    shared
        .cache
        .get(&ObjectRef::from_obj_with(&*parent, shared.parent.clone()))
}

/// Count the finished reconcile and say when to come back: `None` is a reconcile
/// cancelled because leadership was lost.
fn next(
    shared: &Shared,
    object: ObjectKey,
    name: &str,
    start: std::time::Instant,
    result: Option<Result<Option<Duration>, Error>>,
) -> Result<Action, Error> {
    let metrics = crate::ops::metrics::get();
    let Some(result) = result else {
        // Fenced: a later reconcile waits for leadership to come back.
        tracing::warn!("reconcile cancelled: the lease term it ran in is over");
        metrics.reconciled(name, "requeue", start.elapsed());
        return Ok(Action::requeue(Duration::from_secs(1)));
    };
    let outcome = match &result {
        Ok(_) => "success",
        Err(Error::Deferred(_)) => "requeue_after",
        Err(_) => "error",
    };
    metrics.reconciled(name, outcome, start.elapsed());
    // Deferred is neither a success nor a failure: the backoff stays as it was.
    let after = match result {
        Err(Error::Deferred(after)) => Some(after),
        result => {
            let after = result?;
            shared.per_object.backoff.forget(&object);
            after
        }
    };
    Ok(match after {
        Some(after) => {
            shared.queue.requeue(object, after);
            Action::requeue(after)
        }
        None => Action::await_change(),
    })
}

/// kube-runtime's error policy: per-object exponential backoff, never giving up.
pub fn error_policy(parent: Arc<Compact>, error: &Error, shared: Arc<Shared>) -> Action {
    let name = shared.plugin().metadata().name.clone();
    crate::ops::metrics::get()
        .retries
        .get_or_create(&QueueLabel { name: name.clone() })
        .inc();
    let object = ObjectKey::of(&*parent);
    let delay = match error {
        Error::Retry {
            after: Some(after), ..
        } => *after,
        _ => shared.per_object.backoff.fail(&object),
    };
    tracing::warn!(plugin = %name, object = %object, error = %error, retry_in = ?delay, "reconcile failed");
    shared.queue.requeue(object, delay);
    Action::requeue(delay)
}

/// An observed child: which declared kind, and the object from its cache.
pub(super) struct Observed {
    pub kind: usize,
    pub object: Arc<Compact>,
}

/// One reconcile, as named steps; `Ok(Some(d))` asks to be called again after `d`,
/// `Ok(None)` only on change.
async fn reconcile_inner(
    compact: &Compact,
    key: &ObjectKey,
    plugin: &Arc<dyn Reconcile>,
    shared: &Shared,
) -> Result<Option<Duration>, Error> {
    let metadata = plugin.metadata();
    let deleting = compact.metadata.deletion_timestamp.is_some();
    // A deletion is never answered from memory, and waits for no related query.
    if deleting && let Some(done) = finalizer::ensure(&compact.object(), metadata, shared, deleting).await? {
        return Ok(done);
    }
    let observed = observe(compact, shared);
    let related = match super::related::read(compact, plugin, shared).await {
        Ok(related) => related,
        Err(super::related::Failure::Dispatch(e)) => {
            return outcome(&compact.object(), metadata, shared, Err(e))
                .await
                .map(|_| None);
        }
        Err(super::related::Failure::Refused(m)) => {
            return Err(children::refused_related(&compact.object(), metadata, shared, m).await);
        }
    };
    let inputs = Inputs::of(
        plugin,
        &compact.metadata,
        observed.iter().map(|o| (o.kind, &o.object.metadata)),
        &related,
    );
    let quiet = &shared.per_object.quiet;
    if !deleting && quiet.unchanged(key, inputs) {
        tracing::debug!("inputs unchanged since the last quiet reconcile; the plugin's answer stands");
        count_unchanged(&metadata.name);
        return Ok(Some(queue::resync_after(shared.options.resync)));
    }
    quiet.forget(key);
    let parent = &compact.object();
    if !deleting && let Some(done) = finalizer::ensure(parent, metadata, shared, deleting).await? {
        return Ok(done);
    }
    // Over its CPU share, the plugin's object comes back when the share allows, and no
    // worker (nor shutdown) waits for it meanwhile.
    let wait = shared.cpu.wait();
    if !wait.is_zero() {
        tracing::debug!(wait = ?wait, "plugin over its CPU share; later");
        return Err(Error::Deferred(wait));
    }
    let parent_json = compact.value();
    let related = related
        .iter()
        .map(|o| serde_json::to_value(&**o).unwrap_or_default())
        .collect();
    let start = std::time::Instant::now();
    let dispatched = dispatch(parent_json, plugin, &observed, related, deleting).await;
    shared.cpu.charge(start.elapsed());
    let (request, result) = dispatched?;
    let Some(response) = outcome(parent, metadata, shared, result).await? else {
        return Ok(None);
    };
    let asked_again = response.requeue_after.is_some() || !response.events.is_empty();
    let mut desired = children::check(parent, metadata, shared, response.children, &response.events).await?;
    for child in &mut desired {
        apply::own(child, parent, &shared.parent, &metadata.name);
    }
    let plan = children::claim(parent, metadata, shared, desired, &observed, &request.children).await?;
    let deferred = children::apply(shared, parent, &metadata.name, &plan).await?;
    children::prune(shared, &metadata.name, &plan, &observed).await?;
    if let Some(status) = &response.status {
        write_status(parent, &metadata.name, shared, status).await?;
    }
    for event in &response.events {
        events::record(shared, parent, event).await;
    }
    if deleting && response.finalized {
        finalizer::release(parent, metadata, shared).await?;
        return Ok(None);
    }
    let next = response
        .requeue_after
        .unwrap_or_else(|| queue::resync_after(shared.options.resync));
    let next = deferred.map_or(next, |d| next.min(d));
    if deleting && let Some(due) = finalizer::stuck(parent, shared, &metadata.name).await {
        return Ok(Some(next.min(due)));
    }
    if !deleting && !asked_again && deferred.is_none() {
        quiet.remember(key.clone(), inputs);
    }
    Ok(Some(next))
}

/// Apply the response's status when it differs from the parent's: never over another
/// plugin's fields, never as ping-pong.
async fn write_status(
    parent: &DynamicObject,
    plugin: &str,
    shared: &Shared,
    status: &serde_json::Value,
) -> Result<(), Error> {
    if parent.data.get("status") == Some(status) {
        return Ok(());
    }
    let seen = parent.resource_version().unwrap_or_default();
    churn::guard(shared, parent, plugin, "status", (&apply::digest(status), &seen)).await?;
    let written = apply::status(&shared.client, &shared.parent, parent, status, plugin).await?;
    count_write(plugin);
    if let apply::StatusWrite::HeldBy(message) = written {
        let label = PluginLabel {
            plugin: plugin.into(),
        };
        crate::ops::metrics::get()
            .status_conflicts
            .get_or_create(&label)
            .inc();
        let message =
            format!("status not written: {message} (a status field belongs to the plugin that set it first)");
        warn(shared, parent, "StatusConflict", &message).await;
        return Err(Error::StatusHeld(message));
    }
    Ok(())
}

/// The cached children this parent controls (the caches hold only this plugin's), found
/// through each cache's owner index.
fn observe(parent: &Compact, shared: &Shared) -> Vec<Observed> {
    let uid = parent.uid().unwrap_or_default();
    shared
        .children
        .iter()
        .enumerate()
        .flat_map(|(kind, c)| {
            c.cache
                .owned_by(&uid)
                .into_iter()
                .map(move |object| Observed { kind, object })
        })
        .collect()
}

/// Run the plugin on a blocking thread. The request comes back: its observed children,
/// already JSON, serve the unchanged-check instead of converting every object again.
async fn dispatch(
    parent: serde_json::Value,
    plugin: &Arc<dyn Reconcile>,
    observed: &[Observed],
    related: Vec<serde_json::Value>,
    finalizing: bool,
) -> Result<(Request, Result<crate::engine::Response, DispatchError>), Error> {
    let request = Request {
        parent,
        children: observed.iter().map(|o| o.object.value()).collect(),
        related,
        now: None,
        finalizing,
    };
    let plugin = plugin.clone();
    let label = PluginLabel {
        plugin: plugin.metadata().name.clone(),
    };
    let start = std::time::Instant::now();
    let done = tokio::task::spawn_blocking(move || {
        let result = plugin.reconcile(&request);
        (request, result)
    })
    .await
    .map_err(|e| Error::Join(e.to_string()))?;
    crate::ops::metrics::get()
        .dispatch_time
        .get_or_create(&label)
        .observe(start.elapsed().as_secs_f64());
    Ok(done)
}

/// The plugin's answer: a response to act on, `None` for a fatal error (recorded, wait
/// for a change), or an error to retry with backoff.
async fn outcome(
    parent: &DynamicObject,
    metadata: &crate::engine::Metadata,
    shared: &Shared,
    result: Result<crate::engine::Response, DispatchError>,
) -> Result<Option<crate::engine::Response>, Error> {
    match result {
        Ok(response) => Ok(Some(response)),
        Err(DispatchError::Retry { message, after }) => Err(Error::Retry { message, after }),
        Err(DispatchError::Fatal(m)) => {
            warn(shared, parent, "ReconcileFailed", &m).await;
            Ok(None)
        }
        Err(DispatchError::Fault(f)) => {
            let metrics = crate::ops::metrics::get();
            let cause = FaultLabels {
                plugin: metadata.name.clone(),
                cause: f.cause().into(),
            };
            metrics.faults.get_or_create(&cause).inc();
            if matches!(f, crate::engine::Fault::Panic(_) | crate::engine::Fault::Trap(_)) {
                let controller = ControllerLabel {
                    controller: metadata.name.clone(),
                };
                metrics.reconcile_panics.get_or_create(&controller).inc();
            }
            warn(shared, parent, "PluginFault", &format!("plugin {f}")).await;
            Err(Error::Fault(f))
        }
    }
}

/// Count one reconcile of `plugin`'s that found the inputs of its last quiet one.
fn count_unchanged(plugin: &str) {
    crate::ops::metrics::get()
        .unchanged
        .get_or_create(&PluginLabel {
            plugin: plugin.into(),
        })
        .inc();
}

/// Count one API write of `plugin`'s reconciles.
pub(super) fn count_write(plugin: &str) {
    crate::ops::metrics::get()
        .api_writes
        .get_or_create(&PluginLabel {
            plugin: plugin.into(),
        })
        .inc();
}
