//! Write ping-pong: the same object (a child, or a parent's status) rewritten with
//! content this plugin already wrote a moment ago. That is someone undoing the plugin's
//! writes (another controller, an autoscaler, a second host), or a plugin that flips
//! between two answers; either way, every write wakes the next one. Each object has a
//! budget of such rewrites — a few at once, then one a minute — and over it the write is
//! not made, so a fight costs the API server one write a minute instead of hundreds a
//! second. A first write of new content is always allowed, and so is a write made again
//! over the very same observed version of the object (a cache that has not yet seen the
//! first write), which is no fight.
//!
//! A write the server answers at the very version it was made over changed nothing: the
//! object holds that content already, by this plugin's field manager, though it does not
//! *look* so here — a list another controller or a webhook extends (a shared
//! `status.conditions`) is longer than the plugin's. Such a write is [`Targets::unchanged`]:
//! it is no rewrite, a co-writer's later change makes no fight of it, and the same content
//! over the same version is not sent again.
//!
//! A plugin can also feed itself with ever new content (a counter in the status: each
//! write wakes a reconcile that writes the next number). So every object also has a
//! budget of writes of any content — five at once, then one every ten seconds — and a
//! write over it is deferred: the parent comes back when the object may be written again.

use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

use crate::bucket::Bucket;

/// How long a written digest counts as recent.
pub(super) const WINDOW: Duration = Duration::from_secs(60);
/// Rewrites of recent content allowed back to back.
const BURST: f64 = 3.0;
/// Digests remembered per object.
const REMEMBERED: usize = 4;
/// Writes of one object, of any content, back to back.
const WRITE_BURST: f64 = 5.0;
/// After that burst, one write of an object per this long.
const WRITE_EVERY: Duration = Duration::from_secs(10);

struct Entry {
    /// Digest written, the resourceVersion observed when writing it (none: unobserved),
    /// when; oldest first. Both are only compared, so they are kept as fingerprints: every
    /// parent has an entry per written object for a minute, at 10 000 parents kilobytes
    /// each as text.
    recent: Vec<(u64, Option<u64>, Instant)>,
    rewrites: Bucket,
    writes: Bucket,
    /// Content the server was found to hold already, and at which version.
    held: Option<(u64, u64)>,
}

/// A text as a fingerprint for equality (a collision would take one rewrite from a budget).
fn fingerprint(text: &str) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut hasher);
    hasher.finish()
}

/// Whether a write may be made.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Yes.
    Write,
    /// No: it repeats recent content, over the rewrite budget (ping-pong).
    Loop,
    /// Not yet: the object was written often; it may be again after this long.
    Later(Duration),
    /// No need: the server answered this content over this very version without a
    /// change.
    Unchanged,
}

/// One parent's recent writes, per written object by fingerprint (a parent writes a
/// handful, so a list).
#[derive(Default)]
pub(super) struct Targets(Vec<(u64, Entry)>);

impl Targets {
    /// Whether `target`, observed at resourceVersion `seen` ("" when not observed), may
    /// be written with content `digest` at `now`; only a write is recorded.
    pub fn check_at(&mut self, target: &str, digest: &str, seen: &str, now: Instant) -> Verdict {
        let entry = self.entry(target, now);
        let (digest, seen) = (fingerprint(digest), (!seen.is_empty()).then(|| fingerprint(seen)));
        if seen.is_some_and(|seen| entry.held == Some((digest, seen))) {
            return Verdict::Unchanged;
        }
        entry
            .recent
            .retain(|(_, _, at)| now.saturating_duration_since(*at) < WINDOW);
        // Unobserved never matches: a child deleted again and again is a fight too.
        let repeat = entry
            .recent
            .iter()
            .any(|(d, s, _)| *d == digest && (s.is_none() || *s != seen));
        if repeat && !entry.rewrites.has(1.0, now) {
            return Verdict::Loop;
        }
        if !entry.writes.has(1.0, now) {
            return Verdict::Later(entry.writes.until(1.0, now));
        }
        if repeat {
            entry.rewrites.spend(1.0, now);
        }
        entry.writes.spend(1.0, now);
        if entry.recent.len() == REMEMBERED {
            entry.recent.remove(0);
        }
        entry.recent.reserve_exact(1);
        entry.recent.push((digest, seen, now));
        Verdict::Write
    }

    /// The entry of `target`, made at `now` if there is none.
    fn entry(&mut self, target: &str, now: Instant) -> &mut Entry {
        let target = fingerprint(target);
        let at = match self.0.iter().position(|(t, _)| *t == target) {
            Some(at) => at,
            None => {
                // Grown one at a time: every parent keeps its entries for a minute, and
                // most write two objects once (room for four each was most of this).
                self.0.reserve_exact(1);
                self.0.push((
                    target,
                    Entry {
                        recent: Vec::new(),
                        rewrites: Bucket::new(1.0 / WINDOW.as_secs_f64(), BURST, now),
                        writes: Bucket::new(1.0 / WRITE_EVERY.as_secs_f64(), WRITE_BURST, now),
                        held: None,
                    },
                ));
                self.0.len() - 1
            }
        };
        &mut self.0[at].1
    }

    /// The write of `digest` to `target` just checked was answered at `version`, the
    /// version it was made over: the server held that content already. It is no rewrite
    /// (a co-writer's next change does not make it one), and is not made again over
    /// `version`.
    pub fn unchanged(&mut self, target: &str, digest: &str, version: &str) {
        self.unchanged_at(target, digest, version, Instant::now());
    }

    fn unchanged_at(&mut self, target: &str, digest: &str, version: &str, now: Instant) {
        let target = fingerprint(target);
        let Some((_, entry)) = self.0.iter_mut().find(|(t, _)| *t == target) else {
            return;
        };
        // Nobody undid it: no write of this content is a rewrite to count against the next.
        let digest = fingerprint(digest);
        entry.recent.retain(|(d, _, _)| *d != digest);
        entry.writes.refund(1.0, now);
        entry.held = Some((digest, fingerprint(version)));
    }

    /// Drop the objects not written within the window: most are written once and then
    /// left alone, and are not kept.
    pub fn sweep(&mut self, now: Instant) {
        self.0.retain(|(_, e)| {
            e.recent
                .last()
                .is_some_and(|(_, _, at)| now.saturating_duration_since(*at) < WINDOW)
        });
        if self.0.is_empty() {
            self.0 = Vec::new();
        }
    }
}

/// Why a write of `target` by `plugin` was refused as ping-pong.
pub(super) fn loop_message(target: &str, plugin: &str) -> String {
    format!(
        "{target} not written: plugin {plugin} wrote this very content to it less than {}s ago, more than {BURST} times; another writer keeps undoing it, or the plugin flips between answers",
        WINDOW.as_secs()
    )
}

/// Why the writes of `target` by `plugin` are slowed.
pub(super) fn rate_message(target: &str, plugin: &str) -> String {
    format!(
        "{target} written {WRITE_BURST} times at once by plugin {plugin}; its writes are now {}s apart (each one wakes the next reconcile)",
        WRITE_EVERY.as_secs()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wrote(v: Verdict) -> bool {
        v == Verdict::Write
    }

    #[test]
    fn new_content_is_free_and_flipping_back_is_budgeted() {
        let (mut a, mut b) = (Targets::default(), Targets::default());
        let t0 = Instant::now();
        // An honest sequence: every write is new content.
        for (i, d) in ["pending", "running", "succeeded"].iter().enumerate() {
            let at = t0 + Duration::from_secs(i as u64);
            assert!(wrote(a.check_at("status", d, &i.to_string(), at)));
        }
        // A flip: a, b, a, b, … each over a new version — the first of each is new, then
        // three rewrites pass, then it is a loop.
        let verdicts: Vec<Verdict> = (0..20)
            .map(|i| {
                let d = if i % 2 == 0 { "a" } else { "b" };
                b.check_at("status", d, &i.to_string(), t0)
            })
            .collect();
        assert_eq!(verdicts.iter().filter(|v| **v == Verdict::Write).count(), 2 + 3);
        assert!(verdicts[5..].iter().all(|v| *v == Verdict::Loop));
        let later = |s| t0 + Duration::from_secs(s);
        assert_eq!(b.check_at("status", "a", "30", later(30)), Verdict::Loop);
        assert!(wrote(b.check_at("status", "a", "61", later(61))), "one a minute");
        assert!(
            wrote(b.check_at("child", "a", "1", t0)),
            "objects have their own budget"
        );
        // Swept once the window passes with no write: remembered no more.
        b.sweep(later(62 + 60));
        assert!(wrote(b.check_at("status", "a", "62", later(62 + 60))));
    }

    #[test]
    fn someone_undoing_the_same_write_is_caught_but_a_stale_cache_is_not() {
        let (mut a, mut b, mut c) = (Targets::default(), Targets::default(), Targets::default());
        let t0 = Instant::now();
        let undone = (0..10)
            .filter(|i| wrote(a.check_at("cm", "mine", &i.to_string(), t0)))
            .count();
        assert_eq!(undone, 1 + 3, "the write, then three rewrites of it");
        let stale: Vec<Verdict> = (0..10).map(|_| b.check_at("cm", "mine", "7", t0)).collect();
        assert!(
            !stale.contains(&Verdict::Loop),
            "the same version seen again: the cache lags, nobody fights"
        );
        let deleted = (0..10)
            .filter(|_| wrote(c.check_at("cm", "mine", "", t0)))
            .count();
        assert_eq!(deleted, 1 + 3, "made again and again: someone keeps deleting it");
    }

    #[test]
    fn a_write_the_server_held_already_is_no_rewrite_and_is_not_sent_again() {
        // Review M2: another controller owns one condition of the same list, so the
        // plugin's status never looks applied; each of the co-writer's changes brought
        // the same write over a new version, and the fourth in a minute was a "loop".
        let mut churn = Targets::default();
        let t0 = Instant::now();
        for version in 1..=10 {
            let seen = version.to_string();
            assert!(wrote(churn.check_at("status", "mine", &seen, t0)), "at {seen}");
            churn.unchanged_at("status", "mine", &seen, t0);
            assert_eq!(
                churn.check_at("status", "mine", &seen, t0),
                Verdict::Unchanged,
                "not sent again over the version it was held at"
            );
        }
        // New content is a write as ever.
        assert!(wrote(churn.check_at("status", "new", "10", t0)));
    }

    #[test]
    fn ever_new_content_is_spaced_out_after_a_burst() {
        let mut churn = Targets::default();
        let t0 = Instant::now();
        let mut counter = |n: u64, at| churn.check_at("status", &n.to_string(), &n.to_string(), at);
        assert!((0..5).all(|n| wrote(counter(n, t0))));
        assert_eq!(counter(5, t0), Verdict::Later(WRITE_EVERY));
        assert_eq!(
            counter(5, t0 + Duration::from_secs(4)),
            Verdict::Later(Duration::from_secs(6))
        );
        assert!(wrote(counter(5, t0 + WRITE_EVERY)));
        assert!(!wrote(counter(6, t0 + WRITE_EVERY)));
    }
}
