//! A token bucket: what a plugin may spend per second (CPU time, log bytes, events), with
//! a burst. Spending past empty goes into debt, which the caller waits out or drops on.

use std::time::{Duration, Instant};

/// Tokens refilled at `rate` per second up to `burst`.
#[derive(Clone, Debug)]
pub struct Bucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl Bucket {
    /// A full bucket.
    pub fn new(rate: f64, burst: f64, now: Instant) -> Self {
        Bucket {
            rate,
            burst,
            tokens: burst,
            last: now,
        }
    }

    /// Tokens per second.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        self.last = now.max(self.last);
    }

    /// Tokens there now (negative in debt).
    pub fn level(&mut self, now: Instant) -> f64 {
        self.refill(now);
        self.tokens
    }

    /// Whether the bucket is full again: as good as a new one, so nothing is lost by
    /// dropping it.
    pub fn full(&mut self, now: Instant) -> bool {
        self.level(now) >= self.burst
    }

    /// Take `n` tokens if there are that many.
    pub fn try_take(&mut self, n: f64, now: Instant) -> bool {
        self.refill(now);
        if self.tokens >= n {
            self.tokens -= n;
            true
        } else {
            false
        }
    }

    /// Whether `n` tokens are there (taking none).
    pub fn has(&mut self, n: f64, now: Instant) -> bool {
        self.refill(now);
        self.tokens >= n
    }

    /// How long until `n` tokens are there (zero when they are).
    pub fn until(&mut self, n: f64, now: Instant) -> Duration {
        self.refill(now);
        Duration::from_secs_f64((n - self.tokens).max(0.0) / self.rate)
    }

    /// Take `n` tokens, into debt if need be.
    pub fn spend(&mut self, n: f64, now: Instant) {
        self.refill(now);
        self.tokens -= n;
    }

    /// Give back `n` tokens taken for what turned out to cost nothing (never past full).
    pub fn refund(&mut self, n: f64, now: Instant) {
        self.refill(now);
        self.tokens = (self.tokens + n).min(self.burst);
    }

    /// How long until the bucket is out of debt.
    pub fn debt(&mut self, now: Instant) -> Duration {
        self.refill(now);
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.rate)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refills_at_its_rate_up_to_its_burst() {
        let t0 = Instant::now();
        let mut b = Bucket::new(2.0, 4.0, t0);
        assert!((0..4).all(|_| b.try_take(1.0, t0)));
        assert!(!b.try_take(1.0, t0));
        assert!(b.try_take(1.0, t0 + Duration::from_millis(500)));
        b.spend(3.0, t0 + Duration::from_millis(500));
        assert_eq!(
            b.debt(t0 + Duration::from_millis(500)),
            Duration::from_millis(1500)
        );
        assert_eq!(b.debt(t0 + Duration::from_secs(100)), Duration::ZERO);
        let mut empty = Bucket::new(2.0, 4.0, t0);
        empty.spend(4.0, t0);
        assert_eq!(empty.until(1.0, t0), Duration::from_millis(500));
        assert_eq!(empty.until(1.0, t0 + Duration::from_secs(1)), Duration::ZERO);
        assert!(
            !b.try_take(5.0, t0 + Duration::from_secs(200)),
            "never more than the burst"
        );
    }
}
