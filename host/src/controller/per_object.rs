//! What a plugin's controller remembers per parent — its backoff, events, recent writes,
//! related queries, last quiet answer, writes the caches may not show yet and what it may
//! still create — as one value ([`Parent`]) with one lifetime: from the parent's first
//! reconcile until it is deleted or a fresh list of the parents no longer holds it. The
//! memory outlives the controller: the supervisor hands it to a controller restarted on
//! other shard ranges, so the parents it keeps are not reconciled as if new.
//!
//! The parents are spread over a few maps by key, each behind its own lock, so
//! reconciles of different parents on many cores seldom wait for each other; a
//! reconcile takes one lock per step, never two at once.

use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use super::{backoff, churn, creations, events, quiet, related, written};
use crate::key::ObjectKey;

/// How many maps the parents are spread over.
const SHARDS: usize = 16;

/// What the host remembers about one parent.
#[derive(Default)]
pub(super) struct Parent {
    /// Failed reconciles in a row, for the backoff.
    pub backoff: backoff::Failures,
    /// What its events may still cost, and their series.
    pub events: events::ObjectEvents,
    /// Its recent writes, to catch ping-pong.
    pub churn: churn::Targets,
    /// What it asked to read, and the last answer.
    pub related: Option<related::Entry>,
    /// The inputs of its last quiet reconcile.
    pub quiet: Option<quiet::Inputs>,
    /// The writes of its last reconcile, until the caches show them.
    pub written: written::Pending,
    /// What it may still create on its own allowance.
    pub creations: creations::Allowance,
}

/// What the host remembers per parent, forgotten when the parent is gone.
pub(super) struct PerObject {
    shards: Box<[Mutex<HashMap<ObjectKey, Parent>>]>,
    hasher: std::collections::hash_map::RandomState,
    /// When parents' writes left alone for the churn window were last dropped.
    churn_swept: Mutex<Option<Instant>>,
}

impl Default for PerObject {
    fn default() -> Self {
        PerObject {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: Default::default(),
            churn_swept: Mutex::default(),
        }
    }
}

impl PerObject {
    fn shard(&self, key: &ObjectKey) -> MutexGuard<'_, HashMap<ObjectKey, Parent>> {
        let shard = &self.shards[self.hasher.hash_one(key) as usize % SHARDS];
        shard.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Run `f` on what is remembered of `key`, remembering it from now on.
    pub fn with<R>(&self, key: &ObjectKey, f: impl FnOnce(&mut Parent) -> R) -> R {
        let mut shard = self.shard(key);
        match shard.get_mut(key) {
            Some(parent) => f(parent),
            None => f(shard.entry(key.clone()).or_default()),
        }
    }

    /// Run `f` on what is remembered of `key`, if anything is.
    pub fn get<R>(&self, key: &ObjectKey, f: impl FnOnce(&mut Parent) -> R) -> Option<R> {
        self.shard(key).get_mut(key).map(f)
    }

    /// Visit every parent remembered, one map at a time.
    pub fn each(&self, mut f: impl FnMut(&ObjectKey, &mut Parent)) {
        for shard in &self.shards {
            let mut shard = shard.lock().unwrap_or_else(|e| e.into_inner());
            for (key, parent) in shard.iter_mut() {
                f(key, parent);
            }
        }
    }

    /// Forget a deleted parent.
    pub fn forget(&self, key: &ObjectKey) {
        self.shard(key).remove(key);
    }

    /// Forget every parent a fresh list did not hold: deleted while no watch ran, or now
    /// another replica's.
    pub fn keep_only(&self, listed: &HashSet<ObjectKey>) {
        for shard in &self.shards {
            let mut shard = shard.lock().unwrap_or_else(|e| e.into_inner());
            shard.retain(|key, _| listed.contains(key));
        }
    }

    /// Whether `target` of `parent` may be written with `digest` now ([`churn::Targets::check_at`]);
    /// once a churn window, every parent's writes left alone that long are dropped first
    /// (most objects are written once and then left alone).
    pub fn check_write(
        &self,
        parent: &ObjectKey,
        target: &str,
        (digest, seen): (&str, &str),
    ) -> churn::Verdict {
        let now = Instant::now();
        let due = {
            let mut swept = self.churn_swept.lock().unwrap_or_else(|e| e.into_inner());
            let due = swept.is_none_or(|at| now.saturating_duration_since(at) >= churn::WINDOW);
            if due {
                *swept = Some(now);
            }
            due
        };
        if due {
            self.each(|_, p| p.churn.sweep(now));
        }
        self.with(parent, |p| p.churn.check_at(target, digest, seen, now))
    }

    /// The series of every parent's events that ended, whose count the API server does
    /// not hold yet ([`events::ObjectEvents::sweep_at`]).
    pub fn sweep_events(&self) -> Vec<events::Due> {
        let (now, mut due) = (Instant::now(), Vec::new());
        self.each(|key, p| p.events.sweep_at(key, now, &mut due));
        due
    }

    /// The parents whose related queries select `object` of related kind `kind` as it is
    /// now, or whose last answer held it.
    pub fn reading(&self, kind: usize, object: &super::compact::Compact) -> Vec<ObjectKey> {
        let mut parents = Vec::new();
        self.each(|key, p| {
            if p.related.as_ref().is_some_and(|e| e.reads(kind, object)) {
                parents.push(key.clone());
            }
        });
        parents
    }
}

/// One plugin's per-parent memory, handed from one run of its controller to the next.
#[derive(Clone, Default)]
pub struct Memory(pub(super) Arc<PerObject>);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_list_keeps_what_it_holds_and_forgets_the_rest() {
        let memory = PerObject::default();
        let (kept, gone) = (
            ObjectKey::new(Some("ns"), "kept"),
            ObjectKey::new(Some("ns"), "gone"),
        );
        let inputs = quiet::Inputs::of(0, &Default::default(), [], &[]);
        for key in [&kept, &gone] {
            memory.with(key, |p| {
                p.backoff.fail();
                p.quiet = Some(inputs);
            });
        }
        memory.keep_only(&HashSet::from([kept.clone()]));
        assert_eq!(memory.get(&kept, |p| p.quiet), Some(Some(inputs)));
        assert!(memory.get(&gone, |_| ()).is_none());
        // A remembered failure doubles the next delay; a forgotten one starts over.
        let again = memory.with(&kept, |p| p.backoff.fail());
        assert!(again > memory.with(&gone, |p| p.backoff.fail()));
    }

    #[test]
    fn a_deleted_parent_is_forgotten_whole_and_others_are_kept() {
        let memory = PerObject::default();
        let keys: Vec<_> = (0..100)
            .map(|i| ObjectKey::new(Some("ns"), &format!("p{i}")))
            .collect();
        for key in &keys {
            memory.with(key, |p| p.backoff.fail());
        }
        memory.forget(&keys[7]);
        let mut left = 0;
        memory.each(|_, _| left += 1);
        assert_eq!(left, 99);
        assert!(memory.get(&keys[7], |_| ()).is_none());
        assert!(memory.get(&keys[8], |_| ()).is_some());
    }
}
