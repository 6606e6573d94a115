//! One reconcile: parent and owned children from cache → plugin in the sandbox →
//! validated response → writes, events and the next requeue.

use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use tokio_util::task::AbortOnDropHandle;
use tracing::Instrument;

use super::compact::Compact;
use super::outcome::{Error, Observed, Writes};
use super::quiet::Inputs;
use super::related::Failure;
use super::sink::At;
use super::version::Current;
use super::written::{Cache, Expected};
use super::{Shared, dispatch, finalizer, queue, write};
use crate::engine::Response;
use crate::key::ObjectKey;
use crate::ops::metrics::{self, ControllerLabel, QueueLabel};

/// kube-runtime's reconcile entry point: one reconcile ([`reconcile_one`]) as a task of
/// its own. kube-runtime polls every reconcile of a controller from the one task that
/// runs it, which would keep a plugin's reconciles — building requests, checking answers,
/// planning and encoding writes — to one core however many the machine has; as tasks,
/// they spread over the runtime's workers. Dropping the reconcile (a shutdown past its
/// grace) still stops it where it is: the task is aborted with it.
pub async fn reconcile(parent: Arc<Compact>, shared: Arc<Shared>) -> Result<Action, Error> {
    let work = reconcile_one(parent, shared).instrument(tracing::Span::current());
    match AbortOnDropHandle::new(tokio::spawn(work)).await {
        Ok(result) => result,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        // Aborted by the runtime shutting down: nobody is left to act on the answer.
        Err(_) => Ok(Action::await_change()),
    }
}

/// Wait for leadership, run one reconcile with the current plugin version (cancelled if
/// leadership is lost) and account for it.
async fn reconcile_one(parent: Arc<Compact>, shared: Arc<Shared>) -> Result<Action, Error> {
    let object = ObjectKey::of(&*parent);
    let dequeued = shared.queue.start(&object);
    let plugin = shared.versions.for_parent(parent.labels());
    let name = plugin.plugin.metadata().name.clone();
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
        // The plugin's events make way for its reconciles.
        let busy = shared.busy.write();
        tracing::debug!("reconcile started");
        let start = std::time::Instant::now();
        // The term this reconcile runs in: it ends with it, even if another begins.
        let term = shared.tenure.pin();
        let result = term
            .within(reconcile_inner(&parent, &object, &plugin, &shared))
            .await;
        workers.dec();
        drop(busy);
        shared.queue.done(dequeued);
        shared.sink.finished(&name, &object, &result);
        let wall = |at| k8s_openapi::jiff::Timestamp::try_from(term.wall_at(at)).unwrap_or_default();
        let result = match result {
            // Nothing it did after its term's end reached the API server, so that end (as it
            // stands now) is said too: a pause (SIGSTOP) between the work's end and this
            // line would otherwise date the work at the thaw.
            Ok(r) => {
                tracing::debug!(
                    term_ends_at = term.ends().map(|end| tracing::field::display(wall(end))),
                    "reconcile finished"
                );
                Some(r)
            }
            Err(ended) => {
                tracing::debug!(fenced_at = %wall(ended), "reconcile finished");
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
        // Over for good: this unit's controllers stop, and whoever holds the parent next
        // lists it afresh; a term only late in being renewed was waited out (`acquired`).
        tracing::debug!("not reconciled: the lease term is over or the host is stopping");
        return None;
    }
    tracing::debug!("the lease term was renewed (or acquired) after this reconcile was due; reconciling now");
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
        Err(e) if put_off(name, e) => "requeue_after",
        Err(_) => "error",
    };
    metrics.reconciled(name, outcome, start.elapsed());
    // Put off is neither a success nor a failure: the backoff stays as it was.
    let after = match result.as_ref().err().and_then(Error::put_off) {
        Some(after) => Some(after),
        None => {
            let after = result?;
            shared.per_object.get(&object, |p| p.backoff.reset());
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
    let plugin = shared.plugin();
    let name = plugin.metadata().name.clone();
    crate::ops::metrics::get()
        .retries
        .get_or_create(&QueueLabel { name: name.clone() })
        .inc();
    let object = ObjectKey::of(&*parent);
    let delay = match error {
        Error::Retry {
            after: Some(after), ..
        } => *after,
        _ => shared.per_object.with(&object, |p| p.backoff.fail()),
    };
    shared.sink.failed(&shared, &object, error, delay);
    shared.queue.requeue(object, delay);
    Action::requeue(delay)
}

/// One reconcile, as named steps; `Ok(Some(d))` asks to be called again after `d`,
/// `Ok(None)` only on change.
async fn reconcile_inner(
    compact: &Compact,
    key: &ObjectKey,
    plugin: &Current,
    shared: &Shared,
) -> Result<Option<Duration>, Error> {
    if let Some(wait) = unseen(compact, key, shared) {
        tracing::debug!("the caches do not show this parent's last writes yet; waiting for them");
        return Err(Error::Unseen(wait));
    }
    let metadata = plugin.plugin.metadata();
    let deleting = compact.metadata.deletion_timestamp.is_some();
    let parent = &compact.object()?;
    let at = &write::at(shared, parent, &metadata.name);
    // A deletion is never answered from memory, and waits for no related query.
    if deleting && (!finalizer::held(parent, metadata) || finalizer::let_go(at, metadata).await?) {
        return Ok(None);
    }
    let observed = observe(compact, shared);
    let Some(related) = related(compact, at, plugin).await? else {
        return Ok(None);
    };
    let children = observed.iter().map(|o| (o.kind, &*o.object.metadata));
    let inputs = Inputs::of(plugin.number, &compact.metadata, children, &related);
    let memory = &shared.per_object;
    if !deleting && memory.get(key, |p| p.quiet == Some(inputs)) == Some(true) {
        tracing::debug!("inputs unchanged since the last quiet reconcile; the plugin's answer stands");
        metrics::count(|m| &m.unchanged, &metadata.name);
        return Ok(Some(queue::resync_after(shared.options.resync)));
    }
    memory.get(key, |p| p.quiet = None);
    let inputs_seen = (&observed[..], &related[..]);
    let Some(mut response) = dispatch::run(compact, at, plugin, inputs_seen).await? else {
        return Ok(None);
    };
    // Put on before any child is made, in the same reconcile: waiting for the update to
    // wake the parent cost a whole reconcile more of every new parent. Taken off a live
    // parent the plugin holds nothing for.
    let finalizer_changed = !deleting && finalizer::hold(at, metadata, holds(&response)).await?;
    let written = write::write(at, metadata, &mut response, &observed).await;
    let Some(writes) = write::follow(at, metadata, &response, written).await? else {
        return Ok(None);
    };
    let next = next_after(&response, writes, shared);
    if deleting && let Some(due) = finalizer::stuck(at, &metadata.name) {
        return Ok(Some(next.min(due)));
    }
    if !deleting && !finalizer_changed && quiet_answer(&response, writes) {
        memory.with(key, |p| p.quiet = Some(inputs));
    }
    Ok(Some(next))
}

/// Whether a live parent is to carry the plugin's finalizer after this answer: unless the
/// plugin answered `finalized` with no children (it holds nothing to clean up).
fn holds(response: &Response) -> bool {
    !(response.finalized && response.children.is_empty())
}

/// How long to wait for the caches to show the parent's last writes, if they do not yet.
fn unseen(parent: &Compact, key: &ObjectKey, shared: &Shared) -> Option<Duration> {
    let shown = |write: &Expected| {
        let version = match &write.cache {
            Cache::Parent => parent.resource_version(),
            Cache::Child { kind, key } => match shared.children.get(*kind) {
                Some(child) => child.cache.get(key).and_then(|c| c.resource_version()),
                // A kind the plugin no longer declares: nothing to wait for.
                None => return true,
            },
        };
        write.shown_by(version.as_deref())
    };
    let now = std::time::Instant::now();
    let lagging = shared.per_object.get(key, |p| p.written.lagging_at(shown, now));
    lagging.flatten()
}

/// The related objects the plugin reads for this parent; `None` when its `related` call
/// failed for good (recorded on the parent).
async fn related(
    compact: &Compact,
    at: &At<'_>,
    plugin: &Current,
) -> Result<Option<Arc<Vec<Arc<Compact>>>>, Error> {
    match super::related::read(compact, plugin, at.shared).await {
        Ok(related) => Ok(Some(related)),
        Err(Failure::Dispatch(e)) => dispatch::answer(at, plugin, Err(e)).map(|_| None),
        Err(Failure::Deferred(wait)) => Err(Error::Deferred(wait)),
        Err(Failure::Cache(e)) => Err(Error::Cache(e)),
        Err(Failure::Refused(m)) => Err(write::refused_related(at, m)),
    }
}

/// When to come back: when the plugin asked, or at the resync — sooner for a write left
/// for later.
fn next_after(response: &Response, writes: Writes, shared: &Shared) -> Duration {
    let next = response
        .requeue_after
        .unwrap_or_else(|| queue::resync_after(shared.options.resync));
    writes.deferred.map_or(next, |d| next.min(d))
}

/// Whether the same inputs can only bring the same answer again, which changes nothing:
/// no write made or left for later, no event, no requeue asked for.
fn quiet_answer(response: &Response, writes: Writes) -> bool {
    writes == Writes::default() && response.requeue_after.is_none() && response.events.is_empty()
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

/// Whether `error` put the reconcile off (it did nothing and comes back); counted by cause.
fn put_off(plugin: &str, error: &Error) -> bool {
    let cause = match error {
        Error::Unseen(_) => "unseen",
        Error::Deferred(_) => "cpu_share",
        Error::Slowed(_) => "write_rate",
        _ => return false,
    };
    metrics::put_off(plugin, cause);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_answer_that_wrote_nothing_and_asked_nothing_is_quiet() {
        let answer = Response::default();
        assert!(quiet_answer(&answer, Writes::default()));
        // A child created (and perhaps deleted at once by someone else): the inputs it was
        // made from could come back, and must call the plugin again.
        assert!(!quiet_answer(&answer, Writes::wrote("test")));
        assert!(!quiet_answer(&answer, Writes::deferred(Duration::from_secs(1))));
        let requeue = Response {
            requeue_after: Some(Duration::from_secs(5)),
            ..Response::default()
        };
        assert!(!quiet_answer(&requeue, Writes::default()));
    }
}
