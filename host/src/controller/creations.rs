//! The creation budget. It holds back a plugin that creates without end — ever new
//! children, or parents for itself or another plugin to make more from — and never a
//! plugin that merely has many parents. A parent someone else made (a user's: it carries
//! no plugin's label) brings an allowance of its own, [`PARENT_BURST`] creations at once
//! and one more every [`PARENT_REFILL`], so 10 000 new parents create their children at the
//! API server's pace. What a parent creates past its allowance, and everything a parent a
//! plugin made creates, is spent from the plugin's `limits.creationsPerSecond` (twice that
//! at once): a chain of plugin-made parents, however it loops through plugins, goes at
//! that rate.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::bucket::Bucket;

/// Creations a user's parent may make at once before it spends the plugin's budget.
pub(super) const PARENT_BURST: f32 = 16.0;
/// How long a user's parent takes to earn one creation back.
pub(super) const PARENT_REFILL: Duration = Duration::from_secs(60);

/// One parent's own creations: what it is short of a full allowance, as of when.
#[derive(Debug, Default)]
pub(super) struct Allowance {
    owed: f32,
    at: Option<Instant>,
}

impl Allowance {
    /// Take one creation if the allowance has one.
    pub fn take(&mut self, now: Instant) -> bool {
        let earned = self.at.map_or(f32::INFINITY, |at| {
            now.saturating_duration_since(at).as_secs_f32() / PARENT_REFILL.as_secs_f32()
        });
        self.owed = (self.owed - earned).max(0.0);
        self.at = Some(now);
        if self.owed + 1.0 > PARENT_BURST {
            return false;
        }
        self.owed += 1.0;
        true
    }
}

/// A plugin's budget of creations beyond its parents' own.
pub(super) struct Budget(Mutex<Bucket>);

impl Budget {
    /// `per_second` creations a second, twice that at once.
    pub fn new(per_second: u32, now: Instant) -> Self {
        let rate = f64::from(per_second.max(1));
        Budget(Mutex::new(Bucket::new(rate, 2.0 * rate, now)))
    }

    /// Take one creation, or say how long until there is one.
    pub fn take(&self, now: Instant) -> Result<(), Duration> {
        let mut bucket = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if bucket.try_take(1.0, now) {
            Ok(())
        } else {
            Err(bucket.until(1.0, now))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parent_creates_its_burst_at_once_then_one_a_refill() {
        let t0 = Instant::now();
        let mut own = Allowance::default();
        let burst = PARENT_BURST as usize;
        assert_eq!((0..burst + 5).filter(|_| own.take(t0)).count(), burst);
        assert!(!own.take(t0 + PARENT_REFILL / 2), "half a refill earns nothing");
        assert!(own.take(t0 + PARENT_REFILL), "one refill earns one");
        assert!(!own.take(t0 + PARENT_REFILL));
        // Left alone long enough, the allowance is whole again, and no more than whole.
        let later = t0 + PARENT_REFILL * 1000;
        assert_eq!((0..burst + 5).filter(|_| own.take(later)).count(), burst);
    }

    #[test]
    fn the_plugins_budget_gives_twice_its_rate_at_once_then_says_when() {
        let t0 = Instant::now();
        let budget = Budget::new(5, t0);
        assert_eq!((0..20).filter(|_| budget.take(t0).is_ok()).count(), 10);
        let wait = budget.take(t0).expect_err("spent");
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_millis(200),
            "{wait:?}"
        );
        assert!(budget.take(t0 + Duration::from_millis(200)).is_ok());
    }
}
