//! A budget for the events one plugin records, per object and reason — client-go's event
//! correlator's spam filter, keyed finer: a small burst, then one event a minute. A
//! plugin that emits an event on every reconcile (or requeues in a tight loop) fills
//! neither the API server nor `kubectl describe`; what is dropped is counted.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::bucket::Bucket;

/// Events of one reason on one object recorded back to back before the rate applies.
const BURST: f64 = 3.0;
/// After the burst, one event of a reason per object per this long.
const REFILL: Duration = Duration::from_secs(60);

/// Token buckets per (object key, reason).
#[derive(Default)]
pub struct EventBudget {
    buckets: Mutex<HashMap<(String, String), Bucket>>,
}

impl EventBudget {
    /// Whether an event of `reason` on `object` may be recorded now (and take its token).
    pub fn allow(&self, object: &str, reason: &str) -> bool {
        self.allow_at(object, reason, Instant::now())
    }

    fn allow_at(&self, object: &str, reason: &str, now: Instant) -> bool {
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        buckets
            .entry((object.to_string(), reason.to_string()))
            .or_insert_with(|| Bucket::new(1.0 / REFILL.as_secs_f64(), BURST, now))
            .try_take(1.0, now)
    }

    /// Drop the buckets of an object that is gone.
    pub fn forget(&self, object: &str) {
        self.buckets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(o, _), _| o != object);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_one_a_minute_per_object_and_reason() {
        let budget = EventBudget::default();
        let t0 = Instant::now();
        let allowed = (0..100).filter(|_| budget.allow_at("ns/a", "Spam", t0)).count();
        assert_eq!(allowed, 3, "the burst");
        assert!(
            budget.allow_at("ns/a", "Other", t0),
            "reasons have their own budget"
        );
        assert!(
            budget.allow_at("ns/b", "Spam", t0),
            "objects have their own budget"
        );
        assert!(!budget.allow_at("ns/a", "Spam", t0 + Duration::from_secs(30)));
        assert!(budget.allow_at("ns/a", "Spam", t0 + Duration::from_secs(61)));
        assert!(!budget.allow_at("ns/a", "Spam", t0 + Duration::from_secs(62)));
        budget.forget("ns/a");
        assert!(
            budget.allow_at("ns/a", "Spam", t0 + Duration::from_secs(62)),
            "a new object starts afresh"
        );
    }
}
