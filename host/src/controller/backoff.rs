//! Per-object exponential backoff, as client-go's default item rate limiter: 5 ms
//! doubling to a cap of 1000 s, forgotten on success. Never gives up on an object.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use crate::key::ObjectKey;

const BASE: Duration = Duration::from_millis(5);
const CAP: Duration = Duration::from_secs(1000);

/// Failure counts per key.
#[derive(Default)]
pub struct Backoff {
    failures: Mutex<HashMap<ObjectKey, u32>>,
}

impl Backoff {
    /// Record a failure of `key` and return how long to wait before the next try.
    pub fn fail(&self, key: &ObjectKey) -> Duration {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let n = failures.entry(key.clone()).or_insert(0);
        let delay = BASE
            .saturating_mul(1u32.checked_shl(*n).unwrap_or(u32::MAX))
            .min(CAP);
        *n = n.saturating_add(1);
        delay
    }

    /// Forget `key` after a success.
    pub fn forget(&self, key: &ObjectKey) {
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }

    /// Keep only the keys `keep` accepts.
    pub fn retain(&self, keep: &dyn Fn(&ObjectKey) -> bool) {
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|k, _| keep(k));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_from_5ms_to_the_cap_and_resets_on_success() {
        let b = Backoff::default();
        let delays: Vec<Duration> = (0..4).map(|_| b.fail(&"a".into())).collect();
        assert_eq!(delays, [5, 10, 20, 40].map(Duration::from_millis));
        assert_eq!(b.fail(&"other".into()), BASE, "keys are independent");
        for _ in 0..100 {
            b.fail(&"a".into());
        }
        assert_eq!(b.fail(&"a".into()), CAP);
        b.forget(&"a".into());
        assert_eq!(b.fail(&"a".into()), BASE);
    }
}
