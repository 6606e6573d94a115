//! A plugin's share of the host's CPU: each dispatch is charged its time, and while a
//! plugin is over its budget (`limits.cpuMillicores` per second, a token bucket of one
//! second's worth) its next reconciles wait. A plugin that spins on every call and
//! requeues at once gets its share and no more; the other plugins keep theirs.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Token bucket of CPU seconds.
pub struct CpuBudget {
    /// Seconds of CPU per second of time.
    rate: f64,
    state: Mutex<(f64, Instant)>,
}

impl CpuBudget {
    /// A budget of `millicores` (1000 = one core), full.
    pub fn new(millicores: u32) -> Self {
        let rate = f64::from(millicores.max(1)) / 1000.0;
        CpuBudget {
            rate,
            state: Mutex::new((rate, Instant::now())),
        }
    }

    /// How long the next dispatch must wait for the budget to be back in credit.
    pub fn wait(&self) -> Duration {
        self.wait_at(Instant::now())
    }

    fn wait_at(&self, now: Instant) -> Duration {
        let (tokens, _) = self.refill(now);
        if tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-tokens / self.rate)
        }
    }

    /// Charge one dispatch's time.
    pub fn charge(&self, took: Duration) {
        self.charge_at(took, Instant::now());
    }

    fn charge_at(&self, took: Duration, now: Instant) {
        self.refill(now);
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.0 -= took.as_secs_f64();
    }

    fn refill(&self, now: Instant) -> (f64, Instant) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let elapsed = now.saturating_duration_since(state.1).as_secs_f64();
        state.0 = (state.0 + elapsed * self.rate).min(self.rate);
        state.1 = now.max(state.1);
        *state
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plugin_over_its_share_waits_until_it_is_back_in_credit() {
        let budget = CpuBudget::new(500); // half a core
        let t0 = Instant::now();
        assert_eq!(budget.wait_at(t0), Duration::ZERO);
        // Two dispatches of 0.9 s each: 1.8 s against a bucket of 0.5 s.
        budget.charge_at(Duration::from_millis(900), t0);
        budget.charge_at(Duration::from_millis(900), t0);
        let wait = budget.wait_at(t0);
        assert!(
            (wait.as_secs_f64() - 2.6).abs() < 0.01,
            "1.3 s of debt at 0.5/s: {wait:?}"
        );
        assert_eq!(budget.wait_at(t0 + Duration::from_secs(3)), Duration::ZERO);
        // Idle time refills the bucket only up to one second's worth.
        let later = t0 + Duration::from_secs(100);
        budget.charge_at(Duration::from_millis(500), later);
        assert_eq!(budget.wait_at(later), Duration::ZERO);
        budget.charge_at(Duration::from_millis(100), later);
        assert!(budget.wait_at(later) > Duration::ZERO);
    }
}
