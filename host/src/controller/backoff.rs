//! Per-parent exponential backoff, as client-go's default item rate limiter: 5 ms
//! doubling to a cap of 1000 s, forgotten on success. Never gives up on a parent.

use std::time::Duration;

const BASE: Duration = Duration::from_millis(5);
const CAP: Duration = Duration::from_secs(1000);

/// One parent's failed reconciles in a row.
#[derive(Default)]
pub(super) struct Failures(u32);

impl Failures {
    /// Count a failure and return how long to wait before the next try.
    pub fn fail(&mut self) -> Duration {
        let delay = BASE
            .saturating_mul(1u32.checked_shl(self.0).unwrap_or(u32::MAX))
            .min(CAP);
        self.0 = self.0.saturating_add(1);
        delay
    }

    /// Start over after a success.
    pub fn reset(&mut self) {
        self.0 = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_from_5ms_to_the_cap_and_resets_on_success() {
        let mut a = Failures::default();
        let delays: Vec<Duration> = (0..4).map(|_| a.fail()).collect();
        assert_eq!(delays, [5, 10, 20, 40].map(Duration::from_millis));
        assert_eq!(Failures::default().fail(), BASE, "parents are independent");
        for _ in 0..100 {
            a.fail();
        }
        assert_eq!(a.fail(), CAP);
        a.reset();
        assert_eq!(a.fail(), BASE);
    }
}
