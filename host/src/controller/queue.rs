//! client-go's workqueue metrics for kube-runtime's scheduler, whose queue is private.
//!
//! The tracker sees what the scheduler sees — every trigger (watch events of parents and
//! of their children) and every requeue the reconciler asks for — and mirrors the queue's
//! dirty set: a key is added once until a reconcile of it starts, as in client-go, so
//! `workqueue_adds_total`, `workqueue_depth` and `workqueue_queue_duration_seconds` mean
//! what dashboards expect. A delayed requeue joins the queue when its delay is up; it is
//! counted then, when the reconcile it asked for starts.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

use crate::key::ObjectKey;
use crate::ops::metrics::{self, QueueLabel};

/// How long until a resync `period` from now, rounded up to a whole second of the
/// process's clock. Resyncs that fall due in the same second run together, so a quiet
/// host wakes once a second for them, not once per object (each wake-up of an idle
/// runtime costs more CPU than a quiet reconcile itself).
pub fn resync_after(period: Duration) -> Duration {
    let due = Instant::now().saturating_duration_since(origin()) + period;
    let whole = Duration::from_secs(due.as_secs() + u64::from(due.subsec_nanos() > 0));
    period + (whole - due)
}

/// The instant the process's resync seconds count from.
fn origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

/// A key waiting for its reconcile.
struct Pending {
    /// When it became (or will become) ready.
    ready: Instant,
    /// Already counted in adds and depth (immediate triggers are; delayed requeues are not yet).
    counted: bool,
}

/// The mirror of one controller's queue.
pub struct Queue {
    pending: Mutex<HashMap<ObjectKey, Pending>>,
    adds: Counter,
    depth: Gauge,
    queue_duration: Histogram,
    work_duration: Histogram,
}

impl Queue {
    /// A tracker whose metrics carry `name`.
    pub fn new(name: &str) -> Self {
        let m = metrics::get();
        let label = QueueLabel { name: name.into() };
        Queue {
            pending: Mutex::default(),
            adds: m.queue_adds.get_or_create(&label).clone(),
            depth: m.queue_depth.get_or_create(&label).clone(),
            queue_duration: m.queue_duration.get_or_create(&label).clone(),
            work_duration: m.work_duration.get_or_create(&label).clone(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectKey, Pending>> {
        // The map holds plain data; a panic elsewhere cannot leave it inconsistent.
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A watch event asked for `key` to be reconciled now.
    pub fn add(&self, key: ObjectKey) {
        let now = Instant::now();
        let mut pending = self.lock();
        let entry = pending.entry(key).or_insert(Pending {
            ready: now,
            counted: false,
        });
        if !entry.counted {
            entry.ready = entry.ready.min(now);
            entry.counted = true;
            self.adds.inc();
            self.depth.inc();
        }
    }

    /// The reconciler asked for `key` again after `after`.
    pub fn requeue(&self, key: ObjectKey, after: Duration) {
        let ready = Instant::now() + after;
        let mut pending = self.lock();
        let entry = pending.entry(key).or_insert(Pending {
            ready,
            counted: false,
        });
        entry.ready = entry.ready.min(ready);
    }

    /// `key`'s object is gone; the scheduler drops it without a reconcile.
    pub fn forget(&self, key: &ObjectKey) {
        if self.lock().remove(key).is_some_and(|p| p.counted) {
            self.depth.dec();
        }
    }

    /// A reconcile of `key` starts: it leaves the queue.
    pub fn start(&self, key: &ObjectKey) -> Instant {
        let now = Instant::now();
        if let Some(p) = self.lock().remove(key) {
            if p.counted {
                self.depth.dec();
            } else {
                self.adds.inc();
            }
            self.queue_duration
                .observe(now.saturating_duration_since(p.ready).as_secs_f64());
        }
        now
    }

    /// The reconcile that [`Queue::start`] began is done.
    pub fn done(&self, started: Instant) {
        self.work_duration.observe(started.elapsed().as_secs_f64());
    }

    /// Keys waiting now, delayed requeues that are not yet due excluded.
    #[cfg(test)]
    fn depth(&self) -> i64 {
        self.depth.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resyncs_fall_due_on_whole_seconds_within_a_second_of_their_period() {
        let period = Duration::from_secs(30);
        let after = resync_after(period);
        assert!(after >= period && after <= period + Duration::from_secs(1));
        let due = Instant::now() + after - origin();
        // Within the few microseconds between the two clock reads of a whole second.
        let off = due.subsec_nanos().min(1_000_000_000 - due.subsec_nanos());
        assert!(off < 50_000_000, "due {due:?} is not on a whole second");
    }

    #[test]
    fn a_key_is_counted_once_until_its_reconcile_starts() {
        let q = Queue::new("test-dedup");
        q.add("ns/a".into());
        q.add("ns/a".into());
        q.add("ns/b".into());
        assert_eq!(q.depth(), 2);
        assert_eq!(q.adds.get(), 2);
        q.start(&"ns/a".into());
        assert_eq!(q.depth(), 1);
        q.add("ns/a".into());
        assert_eq!((q.depth(), q.adds.get()), (2, 3));
    }

    #[test]
    fn delayed_requeues_count_when_they_start_and_a_trigger_brings_them_forward() {
        let q = Queue::new("test-delay");
        q.requeue("ns/a".into(), Duration::from_secs(600));
        assert_eq!((q.depth(), q.adds.get()), (0, 0));
        q.add("ns/a".into());
        assert_eq!((q.depth(), q.adds.get()), (1, 1));
        q.start(&"ns/a".into());
        q.requeue("ns/a".into(), Duration::ZERO);
        q.start(&"ns/a".into());
        assert_eq!((q.depth(), q.adds.get()), (0, 2));
    }

    #[test]
    fn a_deleted_object_leaves_the_queue() {
        let q = Queue::new("test-forget");
        q.add("ns/a".into());
        q.forget(&"ns/a".into());
        assert_eq!(q.depth(), 0);
        let started = q.start(&"ns/a".into());
        q.done(started);
        assert_eq!(q.adds.get(), 1);
    }
}
