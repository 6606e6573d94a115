//! Read your own writes. The caches lag the API server by a watch event: a reconcile that
//! runs before they show what the last one of its parent wrote would find the status
//! unwritten or the child missing and write it again (and emit its transition's event
//! again). So each write's resourceVersion is kept per parent, and the parent's next
//! reconcile waits until the caches show every one of them — the watch event that makes
//! them show it wakes the parent anyway, so the wait costs no extra round.
//!
//! resourceVersions compare as integers (KEP-5504, stable since Kubernetes 1.35: decimal
//! digits, the longer the newer, otherwise by digits); a version that is not one is
//! compared for equality only. A watch that stalls never stops a parent for good: after
//! [`PATIENCE`] the reconcile goes on with what the caches hold.

use std::time::{Duration, Instant};

use crate::key::ObjectKey;

/// How long a parent's reconcile waits for the caches to show its last writes.
pub(super) const PATIENCE: Duration = Duration::from_secs(10);

/// Which cache must show a write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Cache {
    /// The parent's own (status, finalizers).
    Parent,
    /// A child kind's (by its index in the plugin's children), at this key.
    Child { kind: usize, key: ObjectKey },
}

/// What the cache must show.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Seen {
    /// The object at this resourceVersion or a later one: it was written.
    AtLeast(String),
    /// The object gone, or past this resourceVersion: it was deleted.
    Past(String),
}

/// One write a parent's next reconcile waits to see.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Expected {
    pub cache: Cache,
    pub seen: Seen,
}

impl Expected {
    /// Whether an object at `version` (`None`: not in the cache) shows this write.
    pub fn shown_by(&self, version: Option<&str>) -> bool {
        match (&self.seen, version) {
            (Seen::AtLeast(_), None) => false,
            (Seen::AtLeast(written), Some(v)) => at_least(v, written),
            (Seen::Past(_), None) => true,
            // Strictly later: an opaque version is later when it differs.
            (Seen::Past(deleted), Some(v)) => !at_least(deleted, v),
        }
    }
}

/// The writes one parent's last reconcile made that the caches may not show yet, and
/// when the last was made.
#[derive(Default)]
pub(super) struct Pending(Option<(Instant, Vec<Expected>)>);

impl Pending {
    /// Keep one write of the parent's reconcile (one the server gave no version for can
    /// never be seen, and is not kept).
    pub fn expect(&mut self, write: Expected) {
        if matches!(&write.seen, Seen::AtLeast(v) | Seen::Past(v) if v.is_empty()) {
            return;
        }
        let (since, writes) = self.0.get_or_insert_with(|| (Instant::now(), Vec::new()));
        *since = Instant::now();
        writes.push(write);
    }

    /// How long the parent's reconcile should still wait for the caches (where `shown`
    /// says whether they show one write), or `None` to go on: they show every write, or
    /// the patience ran out (the writes are then forgotten either way).
    pub fn lagging_at(&mut self, shown: impl Fn(&Expected) -> bool, now: Instant) -> Option<Duration> {
        let (since, writes) = self.0.as_mut()?;
        let waited = now.saturating_duration_since(*since);
        writes.retain(|w| !shown(w));
        if writes.is_empty() || waited >= PATIENCE {
            if !writes.is_empty() {
                tracing::debug!(
                    unseen = writes.len(),
                    "the caches do not show this parent's last writes yet; reconciling anyway"
                );
            }
            self.0 = None;
            return None;
        }
        Some(PATIENCE - waited)
    }
}

/// Keep one write of `parent`'s reconcile for its next reconcile to see first.
pub(super) fn expect(shared: &super::Shared, parent: &ObjectKey, write: Expected) {
    shared.per_object.with(parent, |p| p.written.expect(write));
}

/// Keep a write of the parent itself (its status, its finalizers), stored at `version`,
/// for its next reconcile to see first.
pub(super) fn parent(shared: &super::Shared, parent: &kube::api::DynamicObject, version: String) {
    let write = Expected {
        cache: Cache::Parent,
        seen: Seen::AtLeast(version),
    };
    expect(shared, &ObjectKey::of(parent), write);
}

/// Whether resourceVersion `a` is `b` or later (KEP-5504); versions that are not decimal
/// integers are only ever equal.
pub(super) fn at_least(a: &str, b: &str) -> bool {
    let comparable = |v: &str| !v.is_empty() && !v.starts_with('0') && v.bytes().all(|c| c.is_ascii_digit());
    if comparable(a) && comparable(b) {
        (a.len(), a) >= (b.len(), b)
    } else {
        a == b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare_as_integers_and_anything_else_only_for_equality() {
        assert!(at_least("10", "9"), "longer is later, whatever the digits");
        assert!(!at_least("9", "10"));
        assert!(at_least("123", "123"));
        assert!(at_least("124", "123"));
        assert!(!at_least("122", "123"));
        assert!(at_least("abc", "abc"));
        assert!(!at_least("abd", "abc"), "an opaque version is never later");
        assert!(!at_least("010", "9"), "a leading zero is not a KEP-5504 version");
    }

    fn child(seen: Seen) -> Expected {
        Expected {
            cache: Cache::Child {
                kind: 0,
                key: ObjectKey::new(Some("ns"), "c"),
            },
            seen,
        }
    }

    #[test]
    fn a_write_is_shown_by_its_version_or_a_later_one_a_deletion_by_absence() {
        let written = child(Seen::AtLeast("20".into()));
        assert!(!written.shown_by(None));
        assert!(!written.shown_by(Some("19")));
        assert!(written.shown_by(Some("20")));
        assert!(written.shown_by(Some("21")));
        let deleted = child(Seen::Past("20".into()));
        assert!(deleted.shown_by(None));
        assert!(!deleted.shown_by(Some("20")));
        assert!(deleted.shown_by(Some("25")), "made again since");
    }

    #[test]
    fn a_parent_waits_until_every_write_shows_or_patience_runs_out() {
        let mut written = Pending::default();
        let t0 = Instant::now();
        assert_eq!(written.lagging_at(|_| false, t0), None, "nothing written");
        written.expect(child(Seen::AtLeast("5".into())));
        written.expect(Expected {
            cache: Cache::Parent,
            seen: Seen::AtLeast("6".into()),
        });
        written.expect(child(Seen::AtLeast(String::new())));
        let t0 = Instant::now();
        let child_only = |w: &Expected| matches!(w.cache, Cache::Child { .. });
        let wait = written.lagging_at(child_only, t0);
        assert!(wait.is_some_and(|w| w <= PATIENCE), "the status is not shown yet");
        assert_eq!(written.lagging_at(|_| true, t0), None);
        assert_eq!(written.lagging_at(|_| false, t0), None, "forgotten once shown");

        written.expect(child(Seen::AtLeast("7".into())));
        let late = Instant::now() + PATIENCE;
        assert_eq!(written.lagging_at(|_| false, late), None, "a stalled watch");
    }
}
