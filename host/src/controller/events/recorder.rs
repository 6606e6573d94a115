//! Writing events off the reconcile's path, as client-go's recorder does: a reconcile
//! queues its events after its children and status are written and goes on; one task per
//! plugin writes them. Children and status come first: while any of the plugin's
//! reconciles runs ([`Busy`]), events wait — unless they have
//! waited [`PATIENCE`] or half the queue is full, when as many go at once as reconciles
//! run — and the API server's capacity goes to the writes the parents wait for; the
//! moment none is in flight, [`WRITERS`] events go at once. A full queue drops the event and counts it
//! (`capstan_events_dropped_total{cause="queue"}`), and so does a write that fails; on
//! shutdown the queue is written out within [`DRAIN`], and what is left is counted too.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use k8s_openapi::api::events::v1::Event as KubeEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::core::Request;
use serde_json::json;
use tokio::sync::{mpsc, oneshot};

use tokio_util::task::AbortOnDropHandle;

use super::Due;
use crate::key::ObjectKey;
use crate::lease::Tenure;
use crate::ops::metrics::{EventsDroppedLabels, PluginLabel};

/// Events waiting to be written, per plugin.
const QUEUE: usize = 8192;
/// Event writes in flight at once, per plugin, when children and status leave room.
const WRITERS: usize = 4;
/// How long an event waits for children and status before one is written among them.
const PATIENCE: Duration = Duration::from_secs(10);
/// How often ended series are swept (and their last counts written).
const SWEEP: Duration = Duration::from_secs(60);
/// How long a stopping controller waits for its queued events.
pub(crate) const DRAIN: Duration = Duration::from_secs(5);

/// One write of an event.
#[derive(Debug)]
pub(super) enum Write {
    /// A new Event, as the body of its create.
    Create(Body),
    /// A series' count on the Event of `object` named after `first`.
    Count(Due),
}

/// A new Event as the text its create sends: what waits in a queue of thousands is a
/// third of the `Event` it was made from (a struct of some thirty fields and a dozen
/// strings of its own), and it is serialized once either way.
#[derive(Debug)]
pub(super) struct Body {
    namespace: Box<str>,
    json: Box<[u8]>,
}

impl Body {
    /// The body of `event`'s create; `None` if it does not serialize (it always does).
    pub(super) fn of(event: &KubeEvent) -> Option<Body> {
        Some(Body {
            namespace: event.metadata.namespace.as_deref().unwrap_or("default").into(),
            json: serde_json::to_vec(event).ok()?.into(),
        })
    }
}

/// A write and the term it was decided in: it is sent only while that term lasts, so an
/// event queued by a reconcile of one term is never written in a later one (nor after a
/// shard's range moved to another replica).
type Queued = (Tenure, Write);

/// The queue of one plugin's event writes.
#[derive(Clone)]
pub(crate) struct Recorder {
    queue: mpsc::Sender<Queued>,
    plugin: String,
    tenure: Tenure,
}

impl Recorder {
    /// A recorder and the task, spawned, that writes what it queues with `client`
    /// (and the counts of the series `sweep` ends), each in the term of `tenure` it was
    /// queued in.
    pub(super) fn new(
        (client, tenure): (kube::Client, Tenure),
        plugin: &str,
        sweep: Sweep,
        busy: &Busy,
    ) -> (Recorder, Writing) {
        let (queue, rx) = mpsc::channel(256);
        let (stop, stopped) = oneshot::channel();
        let recorder = Recorder {
            queue,
            plugin: plugin.to_string(),
            tenure: tenure.clone(),
        };
        let writer = Writer {
            client,
            in_term: None,
            plugin: plugin.to_string(),
            sweep,
            busy: busy.0.subscribe(),
            tenure,
        };
        // Aborted with its unit: a unit cut off after the grace period leaves no writer
        // draining thousands of events behind it.
        let task = AbortOnDropHandle::new(tokio::spawn(writer.write_all(rx, stopped)));
        let writing = Writing {
            task,
            stop,
            plugin: plugin.to_string(),
        };
        (recorder, writing)
    }

    /// Queue one write, in the term now; a full queue drops it, counted.
    pub(super) fn send(&self, write: Write) {
        if self.queue.try_send((self.tenure.pin(), write)).is_err() {
            dropped(&self.plugin, Dropped::Queue);
        }
    }
}

/// What ends the series that are over, returning the counts still to write.
pub(super) type Sweep = Arc<dyn Fn() -> Vec<Due> + Send + Sync>;

/// The task writing one plugin's events.
pub(crate) struct Writing {
    task: AbortOnDropHandle<()>,
    stop: oneshot::Sender<()>,
    plugin: String,
}

impl Writing {
    /// Take no more events, write those queued within [`DRAIN`], and count the rest.
    pub(crate) async fn finish(mut self) {
        let _ = self.stop.send(());
        if tokio::time::timeout(DRAIN, &mut self.task).await.is_err() {
            self.task.abort();
            dropped(&self.plugin, Dropped::Shutdown);
            tracing::warn!(plugin = %self.plugin, "events still queued at shutdown were not recorded");
        }
    }
}

/// Why an event was not recorded: the `cause` of `capstan_events_dropped_total`.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Dropped {
    /// Over the budget of its object and reason.
    Budget,
    /// The plugin's event queue was full.
    Queue,
    /// The write failed.
    Failed,
    /// Still queued when the host stopped.
    Shutdown,
    /// Its term (or the shard range it was about) ended before it was written.
    Fenced,
}

impl Dropped {
    /// Every cause, so a plugin's series can start at zero.
    pub(crate) const CAUSES: &[&str] = &["budget", "queue", "failed", "shutdown", "fenced"];

    fn label(self) -> &'static str {
        Self::CAUSES[self as usize]
    }
}

/// Count an event not recorded, and why.
pub(super) fn dropped(plugin: &str, cause: Dropped) {
    let labels = EventsDroppedLabels {
        plugin: plugin.into(),
        cause: cause.label().into(),
    };
    crate::ops::metrics::get()
        .events_dropped
        .get_or_create(&labels)
        .inc();
}

/// How many of a plugin's reconciles are running.
#[derive(Clone)]
pub(crate) struct Busy(Arc<tokio::sync::watch::Sender<usize>>);

impl Default for Busy {
    fn default() -> Self {
        Busy(Arc::new(tokio::sync::watch::Sender::new(0)))
    }
}

impl Busy {
    /// Count one reconcile running until the guard is dropped.
    pub(crate) fn write(&self) -> impl Drop + use<> {
        struct Guard(Arc<tokio::sync::watch::Sender<usize>>);
        impl Drop for Guard {
            fn drop(&mut self) {
                self.0.send_modify(|n| *n -= 1);
            }
        }
        self.0.send_modify(|n| *n += 1);
        Guard(self.0.clone())
    }
}

/// The task writing one plugin's events.
struct Writer {
    /// The client with no fence of its own: each event is written fenced by its term.
    client: kube::Client,
    /// The client fenced by the last event's term: one per term, not one per event (each
    /// client is a task of its own, and every layer of one a hop between tasks).
    in_term: Option<(Option<u64>, kube::Client)>,
    plugin: String,
    sweep: Sweep,
    busy: tokio::sync::watch::Receiver<usize>,
    tenure: Tenure,
}

impl Writer {
    /// Write what the queue brings, as children and status leave room, and the ended
    /// series' counts.
    async fn write_all(mut self, mut rx: mpsc::Receiver<Queued>, mut stopped: oneshot::Receiver<()>) {
        let mut in_flight = FuturesUnordered::new();
        let mut swept = tokio::time::interval(SWEEP);
        swept.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut waiting: VecDeque<(Instant, Queued)> = VecDeque::new();
        let (mut open, mut counted, mut stopping) = (true, true, false);
        while open || !in_flight.is_empty() || !waiting.is_empty() {
            let room = self.room(
                waiting.front().map(|(at, _)| *at),
                waiting.len(),
                open && !stopping,
            );
            while in_flight.len() < room
                && let Some((_, (term, write))) = waiting.pop_front()
            {
                let client = self.fenced_by(&term);
                in_flight.push(write_fenced(client, self.plugin.clone(), write));
            }
            // Wake when the oldest event's patience runs out, or check again soon.
            let due = waiting
                .front()
                .map_or(SWEEP, |(at, _)| PATIENCE.saturating_sub(at.elapsed()))
                .max(Duration::from_millis(10));
            tokio::select! {
                write = rx.recv(), if open && waiting.len() < QUEUE => match write {
                    Some(write) => waiting.push_back((Instant::now(), write)),
                    None => open = false,
                },
                Some(()) = in_flight.next(), if !in_flight.is_empty() => {}
                // Gone with the reconciles: nothing is in flight any more.
                changed = self.busy.changed(), if counted => counted = changed.is_ok(),
                _ = tokio::time::sleep(due), if !waiting.is_empty() => {}
                _ = swept.tick(), if open => {
                    let (now, term) = (Instant::now(), self.tenure.pin());
                    waiting.extend((self.sweep)().into_iter().map(|due| (now, (term.clone(), Write::Count(due)))));
                }
                // What is queued is still written; nothing more is taken. (`open` stays
                // true until the queue is drained: a finished receiver is never polled again.)
                _ = &mut stopped, if !stopping => {
                    stopping = true;
                    rx.close();
                }
            }
        }
    }

    /// The client whose writes are refused once `term` is over.
    fn fenced_by(&mut self, term: &Tenure) -> kube::Client {
        match &self.in_term {
            Some((pinned, client)) if *pinned == term.pinned_to() => client.clone(),
            _ => {
                let client = crate::lease::guard(&self.client, term);
                self.in_term = Some((term.pinned_to(), client.clone()));
                client
            }
        }
    }

    /// How many event writes may be in flight now: all [`WRITERS`] when no reconcile
    /// runs (or the controller is stopping); when half the queue is full, as many as
    /// reconciles run (at least [`WRITERS`]), since each of them may queue an event and
    /// a queue drained slower than that fills up and drops; one when the oldest event
    /// has waited its patience; none otherwise.
    fn room(&self, oldest: Option<Instant>, waiting: usize, open: bool) -> usize {
        let running = *self.busy.borrow();
        if !open || running == 0 {
            WRITERS
        } else if waiting >= QUEUE / 2 {
            running.max(WRITERS)
        } else if oldest.is_some_and(|at| at.elapsed() >= PATIENCE) {
            1
        } else {
            0
        }
    }
}

/// Write one event with a client fenced by its term; a failure is logged and counted,
/// never retried into a loop.
async fn write_fenced(client: kube::Client, plugin: String, write: Write) {
    let result = match &write {
        Write::Create(event) => create(&client, event).await,
        Write::Count(due) => count(&client, due).await,
    };
    match result {
        Ok(()) => {
            let label = PluginLabel { plugin };
            crate::ops::metrics::get()
                .events_written
                .get_or_create(&label)
                .inc();
        }
        // The Event expired (its TTL) or was deleted: the series has nothing to count on.
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(kube::Error::Service(e)) if e.is::<crate::lease::guard::Fenced>() => {
            dropped(&plugin, Dropped::Fenced);
            tracing::debug!(plugin = %plugin, "event of an ended term not recorded");
        }
        Err(e) => {
            dropped(&plugin, Dropped::Failed);
            tracing::warn!(plugin = %plugin, error = %e, "could not record event");
        }
    }
}

async fn create(client: &kube::Client, event: &Body) -> kube::Result<()> {
    let api: Api<KubeEvent> = Api::namespaced(client.clone(), &event.namespace);
    let request = Request::new(api.resource_url()).create(&PostParams::default(), event.json.to_vec());
    crate::apply::written(client, request).await.map(drop)
}

async fn count(client: &kube::Client, due: &Due) -> kube::Result<()> {
    let patch = json!({"series": {"count": due.count, "lastObservedTime": MicroTime(Timestamp::now())}});
    let (namespace, name) = event_name(&due.object, due.first);
    let api: Api<KubeEvent> = Api::namespaced(client.clone(), &namespace);
    let request =
        Request::new(api.resource_url()).patch(&name, &PatchParams::default(), &Patch::Merge(&patch));
    crate::apply::written(client, request).await.map(drop)
}

/// The namespace and name of the Event about `object` first written at `first` (ns):
/// kube-runtime's `Recorder` names them so.
pub(super) fn event_name(object: &ObjectKey, first: u64) -> (String, String) {
    let namespace = object.namespace.clone().unwrap_or_else(|| "default".into());
    (namespace, format!("{}.{first:x}", object.name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_cause_has_its_own_label() {
        let all = [
            Dropped::Budget,
            Dropped::Queue,
            Dropped::Failed,
            Dropped::Shutdown,
            Dropped::Fenced,
        ];
        let labels: Vec<&str> = all.iter().map(|d| d.label()).collect();
        assert_eq!(labels, Dropped::CAUSES);
    }

    /// A client whose every request fails at once (nothing listens on the discard port).
    fn unreachable() -> kube::Client {
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("url"));
        kube::Client::try_from(config).expect("client")
    }

    #[tokio::test]
    async fn events_wait_for_the_reconciles_until_half_the_queue_waits_then_keep_pace_with_them() {
        let busy = Busy::default();
        let writer = Writer {
            client: unreachable(),
            in_term: None,
            plugin: "p".into(),
            sweep: Arc::new(Vec::new),
            busy: busy.0.subscribe(),
            tenure: Tenure::always(),
        };
        assert_eq!(
            writer.room(None, 100, true),
            WRITERS,
            "no reconcile runs: all writers"
        );
        let running: Vec<_> = (0..20).map(|_| busy.write()).collect();
        assert_eq!(writer.room(None, 100, true), 0, "reconciles run: events wait");
        let waited = Instant::now() - PATIENCE;
        assert_eq!(
            writer.room(Some(waited), 100, true),
            1,
            "one past its patience goes"
        );
        // Twenty reconciles may each queue an event: a queue half full is drained as fast.
        assert_eq!(writer.room(None, QUEUE / 2, true), 20);
        drop(running);
        let _one = busy.write();
        assert_eq!(
            writer.room(None, QUEUE / 2, true),
            WRITERS,
            "never fewer than WRITERS"
        );
    }

    #[tokio::test]
    async fn stopping_with_events_still_queued_writes_them_out_and_ends() {
        let busy = Busy::default();
        // A reconcile runs for good: before the stop, events only wait.
        let _running = busy.write();
        let writer = (unreachable(), Tenure::always());
        let (recorder, writing) = Recorder::new(writer, "p", Arc::new(Vec::new), &busy);
        for i in 0..100 {
            let mut event = KubeEvent::default();
            event.metadata.name = Some(format!("e{i}"));
            recorder.send(Write::Create(Body::of(&event).expect("serializes")));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let _ = writing.stop.send(());
        let ended = tokio::time::timeout(DRAIN, writing.task).await;
        assert!(
            matches!(ended, Ok(Ok(()))),
            "the writer drains its queue and ends without a panic: {ended:?}"
        );
    }

    /// An API server that counts the requests it gets.
    fn counting() -> (kube::Client, Arc<std::sync::atomic::AtomicUsize>) {
        let seen = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = seen.clone();
        let router = axum::Router::new().fallback(async move || {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            (
                [(http::header::CONTENT_TYPE, "application/json")],
                r#"{"metadata":{"resourceVersion":"1"}}"#,
            )
        });
        (kube::Client::new(router, "ns"), seen)
    }

    #[tokio::test]
    async fn an_event_queued_in_a_term_is_never_written_in_a_later_one() {
        // Review L1: the writer's client was guarded by the unpinned tenure, so an event a
        // reconcile queued in one term went out in the next term this process held.
        let (fence, tenure) = crate::lease::Fence::new(Duration::from_secs(3600));
        fence.renewed(tokio::time::Instant::now());
        let (client, seen) = counting();
        let busy = Busy::default();
        let running = busy.write();
        let (recorder, writing) = Recorder::new((client, tenure), "p", Arc::new(Vec::new), &busy);
        let event = || Write::Create(Body::of(&KubeEvent::default()).expect("serializes"));
        recorder.send(event());
        // The term ends while the event waits for the reconciles; a new one begins.
        fence.end();
        fence.renewed(tokio::time::Instant::now());
        recorder.send(event());
        drop(running);
        writing.finish().await;
        assert_eq!(
            seen.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "only the new term's event"
        );
    }

    #[tokio::test]
    async fn a_writing_dropped_with_its_unit_stops_writing() {
        let (client, seen) = counting();
        let busy = Busy::default();
        let running = busy.write();
        let (recorder, writing) = Recorder::new((client, Tenure::always()), "p", Arc::new(Vec::new), &busy);
        for _ in 0..10 {
            recorder.send(Write::Create(
                Body::of(&KubeEvent::default()).expect("serializes"),
            ));
        }
        // The unit is aborted after the grace period: its `Writing` goes without `finish`.
        drop(writing);
        drop(running);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(
            seen.load(std::sync::atomic::Ordering::SeqCst),
            0,
            "nothing written after the abort"
        );
    }
}
