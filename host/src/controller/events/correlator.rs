//! Which events reach the API server, and as what: client-go's event correlator, keyed
//! finer. Its spam filter is a budget per object and reason (a small burst, then one a
//! minute), and the plugin's own events also share one budget per object across reasons,
//! so inventing a new reason each time buys nothing; the host's warnings about the
//! plugin are not charged to it. Its aggregator makes a repeat of the same event (type,
//! reason and message on one object) within [`SERIES_WINDOW`] a count on the Event
//! already written (`events.k8s.io/v1` series), not a new Event; a repeat over the
//! budget is not lost but counted, and the count is written with the next repeat the
//! budget lets through, or when the series ends.
//!
//! Memory is bounded per object (reasons and series kept) and returns to nothing once an
//! object's events are quiet: [`ObjectEvents::sweep_at`] drops refilled budgets and ended
//! series.

use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;

use crate::bucket::Bucket;
use crate::key::ObjectKey;

/// Events of one reason on one object recorded back to back before the rate applies.
const BURST: f64 = 3.0;
/// After the burst, one event of a reason per object per this long.
pub(super) const REFILL: Duration = Duration::from_secs(60);
/// The plugin's events on one object, of any reason, recorded back to back.
pub(super) const OBJECT_BURST: f64 = 10.0;
/// The key of an object's all-reasons budget (not a valid reason).
const ANY_REASON: &str = "\0plugin";
/// Reasons with a budget kept per object. A bucket that has refilled is as good as a new
/// one and is dropped to make room; a new reason finding no room is not recorded, so
/// invented reasons cannot grow the host's memory for as long as the parent lives.
pub(super) const REASONS_KEPT: usize = 32;
/// A repeat this soon after the last one of the same event joins its series (client-go's
/// events recorder ends a series after six minutes without a repeat).
pub(super) const SERIES_WINDOW: Duration = Duration::from_secs(6 * 60);
/// Series kept per object; the one repeated longest ago makes room for a new one.
const SERIES_KEPT: usize = 32;

/// What to write for one event.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Decision {
    /// A new Event, named after this moment (ns since the epoch).
    Create(u64),
    /// The series of the Event named after `first` has reached `count`.
    Count { first: u64, count: u32 },
    /// Counted in its series, written later: its budget is spent for now.
    Held,
    /// Not recorded: over the budget, or no room for another reason.
    Dropped,
}

/// A series to bring up to date: the Event of `object` named after `first`, at `count`.
#[derive(Debug, PartialEq, Eq)]
pub struct Due {
    pub object: ObjectKey,
    pub first: u64,
    pub count: u32,
}

/// One event's series on one object.
struct Series {
    /// Hash of type, reason and message.
    identity: u64,
    /// When the Event was first written (its name), ns since the epoch.
    first: u64,
    count: u32,
    /// The count the API server holds.
    written: u32,
    last: Instant,
}

/// One object's budgets and series. Both are lists grown one at a time: every parent
/// with an event has this for minutes (at 10 000 parents, a map's and a list's first
/// allocation, room for four, were most of the correlator's memory), and a handful of
/// reasons is found faster by a scan than by hashing.
#[derive(Default)]
pub struct ObjectEvents {
    buckets: Vec<(Box<str>, Bucket)>,
    series: Vec<Series>,
}

/// Push onto a list grown one at a time.
fn push_exact<T>(list: &mut Vec<T>, item: T) {
    list.reserve_exact(1);
    list.push(item);
}

/// The identity of an event on its object: a repeat has the same.
pub(super) fn identity(warning: bool, reason: &str, message: &str) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (warning, reason, message).hash(&mut hasher);
    hasher.finish()
}

impl ObjectEvents {
    /// What to write for an event of `identity` and `reason` on this object at `now`
    /// (`at` on the wall clock; `from_plugin`: one of the plugin's own, not the host's).
    pub(super) fn observe_at(
        &mut self,
        identity: u64,
        reason: &str,
        from_plugin: bool,
        now: Instant,
        at: Timestamp,
    ) -> Decision {
        let repeat = self
            .series
            .iter()
            .position(|s| s.identity == identity && now.saturating_duration_since(s.last) < SERIES_WINDOW);
        if let Some(i) = repeat {
            let series = &mut self.series[i];
            series.count += 1;
            series.last = now;
            let (first, count) = (series.first, series.count);
            if !allow(&mut self.buckets, reason, from_plugin, now) {
                return Decision::Held;
            }
            self.series[i].written = count;
            return Decision::Count { first, count };
        }
        if !allow(&mut self.buckets, reason, from_plugin, now) {
            return Decision::Dropped;
        }
        let first = u64::try_from(at.as_nanosecond()).unwrap_or_default();
        self.series.retain(|s| s.identity != identity);
        if self.series.len() >= SERIES_KEPT
            && let Some(oldest) = (0..self.series.len()).min_by_key(|&i| self.series[i].last)
        {
            self.series.swap_remove(oldest);
        }
        push_exact(
            &mut self.series,
            Series {
                identity,
                first,
                count: 1,
                written: 1,
                last: now,
            },
        );
        Decision::Create(first)
    }

    /// End the series of `object` not repeated within [`SERIES_WINDOW`] (adding to `due`
    /// those whose count the API server does not hold yet), and drop refilled budgets;
    /// an object whose events are quiet keeps nothing.
    pub fn sweep_at(&mut self, object: &ObjectKey, now: Instant, due: &mut Vec<Due>) {
        self.series.retain(|s| {
            let ended = now.saturating_duration_since(s.last) >= SERIES_WINDOW;
            if ended && s.count > s.written {
                due.push(Due {
                    object: object.clone(),
                    first: s.first,
                    count: s.count,
                });
            }
            !ended
        });
        self.buckets.retain_mut(|(_, bucket)| !bucket.full(now));
        if self.series.is_empty() {
            self.series = Vec::new();
        }
        if self.buckets.is_empty() {
            self.buckets = Vec::new();
        }
    }

    /// Whether nothing is kept.
    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.series.capacity() == 0 && self.buckets.capacity() == 0
    }
}

/// Whether an event of `reason` may be written now, taking its tokens: the object's
/// budget first (for the plugin's events), so a plugin inventing reasons gets no bucket
/// for them beyond what that budget lets through, and cannot grow the map either.
fn allow(buckets: &mut Vec<(Box<str>, Bucket)>, reason: &str, from_plugin: bool, now: Instant) -> bool {
    if !room(buckets, reason, now) {
        return false;
    }
    let mut has = |reason: &str, burst| {
        let at = match buckets.iter().position(|(r, _)| &**r == reason) {
            Some(at) => at,
            None => {
                let bucket = Bucket::new(1.0 / REFILL.as_secs_f64(), burst, now);
                push_exact(buckets, (reason.into(), bucket));
                buckets.len() - 1
            }
        };
        buckets[at].1.has(1.0, now)
    };
    if (from_plugin && !has(ANY_REASON, OBJECT_BURST)) || !has(reason, BURST) {
        return false;
    }
    let charged = std::iter::once(reason).chain(from_plugin.then_some(ANY_REASON));
    for reason in charged {
        if let Some((_, bucket)) = buckets.iter_mut().find(|(r, _)| &**r == reason) {
            bucket.spend(1.0, now);
        }
    }
    true
}

/// Whether `reason` has a bucket among an object's `buckets` or room for one (after the
/// refilled ones are dropped).
fn room(buckets: &mut Vec<(Box<str>, Bucket)>, reason: &str, now: Instant) -> bool {
    if buckets.iter().any(|(r, _)| &**r == reason) || buckets.len() < REASONS_KEPT {
        return true;
    }
    buckets.retain_mut(|(_, bucket)| !bucket.full(now));
    buckets.len() < REASONS_KEPT
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// Each object's events, as the per-parent memory keeps them.
    #[derive(Default)]
    struct Correlator {
        objects: std::cell::RefCell<HashMap<ObjectKey, ObjectEvents>>,
    }

    impl Correlator {
        fn observe_at(
            &self,
            object: &ObjectKey,
            id: u64,
            reason: &str,
            from_plugin: bool,
            now: Instant,
            at: Timestamp,
        ) -> Decision {
            let mut objects = self.objects.borrow_mut();
            let events = objects.entry(object.clone()).or_default();
            events.observe_at(id, reason, from_plugin, now, at)
        }

        fn sweep_at(&self, now: Instant) -> Vec<Due> {
            let mut due = Vec::new();
            for (object, events) in self.objects.borrow_mut().iter_mut() {
                events.sweep_at(object, now, &mut due);
            }
            due
        }

        fn kept(&self, object: &ObjectKey) -> usize {
            self.objects.borrow().get(object).map_or(0, |e| e.buckets.len())
        }

        fn forget(&self, object: &ObjectKey) {
            self.objects.borrow_mut().remove(object);
        }
    }

    /// Whether a new event of `reason` (its own identity) is written at `now`.
    fn allowed(c: &Correlator, object: &str, reason: &str, from_plugin: bool, now: Instant) -> bool {
        let id = identity(false, reason, "");
        matches!(
            c.observe_at(&object.into(), id, reason, from_plugin, now, Timestamp::now()),
            Decision::Create(_) | Decision::Count { .. }
        )
    }

    #[test]
    fn a_burst_then_one_a_minute_per_object_and_reason() {
        let c = Correlator::default();
        let t0 = Instant::now();
        let written = (0..100).filter(|_| allowed(&c, "ns/a", "Spam", true, t0)).count();
        assert_eq!(written, 3, "the burst");
        assert!(
            allowed(&c, "ns/a", "Other", true, t0),
            "reasons have their own budget"
        );
        assert!(
            allowed(&c, "ns/b", "Spam", true, t0),
            "objects have their own budget"
        );
        assert!(!allowed(&c, "ns/a", "Spam", true, t0 + Duration::from_secs(30)));
        assert!(allowed(&c, "ns/a", "Spam", true, t0 + Duration::from_secs(61)));
        assert!(!allowed(&c, "ns/a", "Spam", true, t0 + Duration::from_secs(62)));
        c.forget(&"ns/a".into());
        assert!(
            allowed(&c, "ns/a", "Spam", true, t0 + Duration::from_secs(62)),
            "a new object starts afresh"
        );
    }

    #[test]
    fn new_reasons_buy_a_plugin_nothing_and_the_hosts_warnings_still_go_out() {
        let c = Correlator::default();
        let t0 = Instant::now();
        let written = (0..100)
            .filter(|i| allowed(&c, "ns/a", &format!("Spam{i}"), true, t0))
            .count();
        assert_eq!(written, OBJECT_BURST as usize, "one budget across reasons");
        assert!(
            allowed(&c, "ns/a", "PluginFault", false, t0),
            "the host's own warning is not charged to the plugin"
        );
        assert!(allowed(&c, "ns/a", "Spam0", true, t0 + Duration::from_secs(61)));
    }

    #[test]
    fn the_reasons_kept_per_object_are_bounded_however_many_are_invented() {
        let c = Correlator::default();
        let t0 = Instant::now();
        let object: ObjectKey = "ns/a".into();
        // A new reason every minute for a day, the pace the object's budget lets through.
        for minute in 0..24 * 60 {
            let at = t0 + Duration::from_secs(60 * minute);
            allowed(&c, "ns/a", &format!("Reason{minute}"), true, at);
            assert!(c.kept(&object) <= REASONS_KEPT);
        }
        // Host warnings of a few fixed reasons keep going out among them.
        let late = t0 + Duration::from_secs(60 * 24 * 60);
        assert!(allowed(&c, "ns/a", "PluginFault", false, late));
        // Thirty-two reasons used at once hold all the room: a thirty-third is dropped,
        // and goes out once the others' buckets have refilled.
        for i in 0..REASONS_KEPT {
            assert!(allowed(&c, "ns/b", &format!("Host{i}"), false, t0));
        }
        assert!(!allowed(&c, "ns/b", "OneMore", false, t0));
        assert!(allowed(&c, "ns/b", "OneMore", false, t0 + REFILL));
    }

    #[test]
    fn a_repeat_is_a_count_on_its_series_and_none_is_lost_over_the_budget() {
        let c = Correlator::default();
        let (t0, at) = (Instant::now(), Timestamp::now());
        let object: ObjectKey = "ns/a".into();
        let id = identity(false, "JobPending", "Job a is Pending");
        let observe = |now| c.observe_at(&object, id, "JobPending", true, now, at);
        let Decision::Create(first) = observe(t0) else {
            panic!("the first is written")
        };
        assert_eq!(observe(t0), Decision::Count { first, count: 2 });
        assert_eq!(observe(t0), Decision::Count { first, count: 3 });
        // The reason's burst is spent: repeats are counted, not written, not dropped.
        assert_eq!(observe(t0), Decision::Held);
        assert_eq!(observe(t0), Decision::Held);
        // The next write the budget allows carries every repeat.
        let later = t0 + REFILL;
        assert_eq!(observe(later), Decision::Count { first, count: 6 });
        assert_eq!(observe(later), Decision::Held);
        // Another message is another event.
        let other = identity(false, "JobPending", "Job b is Pending");
        assert!(matches!(
            c.observe_at(&object, other, "JobPending", true, later + REFILL, at),
            Decision::Create(_)
        ));
        // The series ends without a repeat for the window; its last count is then due.
        let end = later + SERIES_WINDOW;
        assert_eq!(c.sweep_at(end - Duration::from_secs(1)), vec![]);
        assert_eq!(
            c.sweep_at(end),
            vec![Due {
                object: object.clone(),
                first,
                count: 7
            }]
        );
        assert!(matches!(observe(end), Decision::Create(_)), "a new series");
    }

    #[test]
    fn quiet_objects_cost_nothing_after_a_sweep() {
        let c = Correlator::default();
        let t0 = Instant::now();
        for i in 0..100 {
            allowed(&c, &format!("ns/o{i}"), "JobPending", true, t0);
        }
        assert!(c.objects.borrow().values().all(|e| !e.is_empty()));
        assert_eq!(c.sweep_at(t0 + SERIES_WINDOW), vec![]);
        assert!(c.objects.borrow().values().all(ObjectEvents::is_empty));
    }
}
