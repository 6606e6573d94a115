//! What a plugin's controller remembers per parent: backoff, event and write budgets, the
//! related queries it asked, and its last quiet answer. It outlives the controller — the
//! supervisor hands the same memory to a controller restarted on other shard ranges, so
//! the parents it keeps are not reconciled as if new — and forgets a parent when it is
//! deleted, or when a fresh list of the parents no longer holds it.

use std::collections::HashSet;
use std::sync::Arc;

use super::{backoff, churn, events, quiet, related, written};
use crate::key::ObjectKey;

/// What the host remembers per parent, forgotten when the parent is gone.
#[derive(Default)]
pub(super) struct PerObject {
    pub backoff: backoff::Backoff,
    /// What each object's events may still cost, and their series.
    pub events: events::Correlator,
    /// Recent writes per object, to catch ping-pong.
    pub churn: churn::Churn,
    /// What each object asked to read.
    pub related: related::Index,
    /// The inputs of each object's last quiet reconcile.
    pub quiet: quiet::Quiet,
    /// The writes of each object's last reconcile, until the caches show them.
    pub written: written::Written,
}

impl PerObject {
    /// Forget a deleted parent.
    pub fn forget(&self, key: &ObjectKey) {
        self.backoff.forget(key);
        self.events.forget(key);
        self.churn.forget(key);
        self.related.forget(key);
        self.quiet.forget(key);
        self.written.forget(key);
    }

    /// Forget every parent a fresh list did not hold: deleted while no watch ran, or now
    /// another replica's.
    pub fn keep_only(&self, listed: &HashSet<ObjectKey>) {
        let keep = |k: &ObjectKey| listed.contains(k);
        self.backoff.retain(&keep);
        self.events.retain(&keep);
        self.churn.retain(&keep);
        self.related.retain(&keep);
        self.quiet.retain(&keep);
        self.written.retain(&keep);
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
            memory.backoff.fail(key);
            memory.quiet.remember(key.clone(), inputs);
        }
        memory.keep_only(&HashSet::from([kept.clone()]));
        assert!(memory.quiet.unchanged(&kept, inputs));
        assert!(!memory.quiet.unchanged(&gone, inputs));
        // A remembered failure doubles the next delay; a forgotten one starts over.
        assert!(memory.backoff.fail(&kept) > memory.backoff.fail(&gone));
    }
}
