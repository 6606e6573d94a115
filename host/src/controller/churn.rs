//! Write ping-pong: the same object (a child, or a parent's status) rewritten with
//! content this plugin already wrote a moment ago. That is someone undoing the plugin's
//! writes (another controller, an autoscaler, a second host), or a plugin that flips
//! between two answers; either way, every write wakes the next one. Each object has a
//! budget of such rewrites — a few at once, then one a minute — and over it the write is
//! not made, so a fight costs the API server one write a minute instead of hundreds a
//! second. A first write of new content is always allowed, and so is a write made again
//! over the very same observed version of the object (a cache that has not yet seen the
//! first write), which is no fight.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::api::DynamicObject;

use super::Shared;
use super::events::warn;
use super::reconcile::Error;
use crate::bucket::Bucket;
use crate::ops::metrics::PluginLabel;

/// How long a written digest counts as recent.
const WINDOW: Duration = Duration::from_secs(60);
/// Rewrites of recent content allowed back to back.
const BURST: f64 = 3.0;
/// Digests remembered per object.
const REMEMBERED: usize = 4;

struct Entry {
    /// Digest written, the resourceVersion observed when writing it ("" for none), when.
    recent: VecDeque<(String, String, Instant)>,
    rewrites: Bucket,
}

/// Recent writes per (parent key, object), of one plugin.
#[derive(Default)]
pub struct Churn {
    entries: Mutex<Entries>,
}

#[derive(Default)]
struct Entries {
    map: HashMap<(String, String), Entry>,
    /// When objects with no write in the window were last dropped.
    swept: Option<Instant>,
}

impl Churn {
    /// Whether `target` (of `parent`), observed at resourceVersion `seen` ("" when not
    /// observed), may be written with content `digest` now; a refused write is not
    /// recorded.
    pub fn allow(&self, parent: &str, target: &str, digest: &str, seen: &str) -> bool {
        self.allow_at(parent, target, digest, seen, Instant::now())
    }

    fn allow_at(&self, parent: &str, target: &str, digest: &str, seen: &str, now: Instant) -> bool {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        // Objects written once and then left alone (most of them) are not kept.
        if entries
            .swept
            .is_none_or(|at| now.saturating_duration_since(at) >= WINDOW)
        {
            entries.swept = Some(now);
            entries.map.retain(|_, e| {
                e.recent
                    .back()
                    .is_some_and(|(_, _, at)| now.saturating_duration_since(*at) < WINDOW)
            });
        }
        let key = (parent.to_string(), target.to_string());
        let entry = entries.map.entry(key).or_insert_with(|| Entry {
            recent: VecDeque::new(),
            rewrites: Bucket::new(1.0 / WINDOW.as_secs_f64(), BURST, now),
        });
        entry
            .recent
            .retain(|(_, _, at)| now.saturating_duration_since(*at) < WINDOW);
        // Unobserved ("") never matches: a child deleted again and again is a fight too.
        let repeat = entry
            .recent
            .iter()
            .any(|(d, s, _)| d == digest && (s.is_empty() || s != seen));
        if repeat && !entry.rewrites.try_take(1.0, now) {
            return false;
        }
        if entry.recent.len() == REMEMBERED {
            entry.recent.pop_front();
        }
        entry
            .recent
            .push_back((digest.to_string(), seen.to_string(), now));
        true
    }

    /// Forget the objects of a parent that is gone.
    pub fn forget(&self, parent: &str) {
        self.entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .map
            .retain(|(p, _), _| p != parent);
    }
}

/// Let a write of `target` (content `digest`, observed at `seen`, on behalf of `parent`)
/// through, or refuse it as ping-pong: a `WriteLoop` Warning, `capstan_write_loops_total`,
/// and an error that backs the parent off.
pub(super) async fn guard(
    shared: &Shared,
    parent: &DynamicObject,
    plugin: &str,
    target: &str,
    (digest, seen): (&str, &str),
) -> Result<(), Error> {
    let key = super::reconcile::key(parent);
    if shared.churn.allow(&key, target, digest, seen) {
        return Ok(());
    }
    let label = PluginLabel {
        plugin: plugin.to_string(),
    };
    crate::ops::metrics::get().write_loops.get_or_create(&label).inc();
    let message = format!(
        "{target} not written: plugin {plugin} wrote this very content to it less than {}s ago, more than {BURST} times; another writer keeps undoing it, or the plugin flips between answers",
        WINDOW.as_secs()
    );
    warn(shared, parent, "WriteLoop", &message).await;
    Err(Error::Loop(message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_content_is_free_and_flipping_back_is_budgeted() {
        let churn = Churn::default();
        let t0 = Instant::now();
        // An honest sequence: every write is new content.
        for (i, d) in ["pending", "running", "succeeded"].iter().enumerate() {
            let at = t0 + Duration::from_secs(i as u64);
            assert!(churn.allow_at("ns/a", "status", d, &i.to_string(), at));
        }
        // A flip: a, b, a, b, … each over a new version — the first of each is new, then
        // three rewrites pass.
        let flips = (0..20)
            .filter(|i| {
                let d = if i % 2 == 0 { "a" } else { "b" };
                churn.allow_at("ns/b", "status", d, &i.to_string(), t0)
            })
            .count();
        assert_eq!(flips, 2 + 3);
        let later = |s| t0 + Duration::from_secs(s);
        assert!(!churn.allow_at("ns/b", "status", "a", "30", later(30)));
        assert!(
            churn.allow_at("ns/b", "status", "a", "61", later(61)),
            "one a minute"
        );
        assert!(
            churn.allow_at("ns/b", "child", "a", "1", t0),
            "objects have their own budget"
        );
        churn.forget("ns/b");
        assert!(churn.allow_at("ns/b", "status", "a", "62", later(62)));
    }

    #[test]
    fn someone_undoing_the_same_write_is_caught_but_a_stale_cache_is_not() {
        let churn = Churn::default();
        let t0 = Instant::now();
        let undone = (0..10)
            .filter(|i| churn.allow_at("ns/a", "cm", "mine", &i.to_string(), t0))
            .count();
        assert_eq!(undone, 1 + 3, "the write, then three rewrites of it");
        let stale = (0..10)
            .filter(|_| churn.allow_at("ns/b", "cm", "mine", "7", t0))
            .count();
        assert_eq!(
            stale, 10,
            "the same version seen again: the cache lags, nobody fights"
        );
        let deleted = (0..10)
            .filter(|_| churn.allow_at("ns/c", "cm", "mine", "", t0))
            .count();
        assert_eq!(deleted, 1 + 3, "made again and again: someone keeps deleting it");
    }
}
