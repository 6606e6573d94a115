//! A plugin's log volume over time: everything it logs (the `log` import, stdout and
//! stderr) is charged to one budget per plugin — `limits.logBytesPerSecond` (4 KiB a
//! second by default) with a burst of 256 KiB —
//! and what does not fit is dropped. Drops are reported in one warning a minute at most,
//! so a plugin that floods cannot flood the host's log by the back door either.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::bucket::Bucket;

/// Bytes a plugin may log at once before the rate applies.
const BURST: f64 = 256.0 * 1024.0;
/// How often drops are reported.
const REPORT_EVERY: Duration = Duration::from_secs(60);

struct Inner {
    bucket: Bucket,
    dropped: u64,
    reported: Option<Instant>,
}

/// One plugin's log budget, shared by all its calls.
pub(crate) struct LogBudget(Mutex<Inner>);

impl LogBudget {
    /// A full budget of `rate` bytes a second.
    pub fn new(rate: u32) -> Self {
        LogBudget(Mutex::new(Inner {
            bucket: Bucket::new(f64::from(rate.max(1)), BURST, Instant::now()),
            dropped: 0,
            reported: None,
        }))
    }

    /// Bytes a second this budget allows.
    pub fn rate(&self) -> u32 {
        self.inner().bucket.rate() as u32
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a line of `len` bytes may be logged now; a line that may not is counted.
    pub fn allow(&self, len: usize) -> bool {
        let mut inner = self.inner();
        let ok = inner.bucket.try_take(len as f64, Instant::now());
        if !ok {
            inner.dropped += len as u64;
        }
        ok
    }

    /// Count bytes dropped elsewhere (the per-call caps).
    pub fn dropped(&self, bytes: u64) {
        self.inner().dropped += bytes;
    }

    /// The bytes dropped since the last report, when a report is due.
    pub fn report(&self) -> Option<u64> {
        let mut inner = self.inner();
        let now = Instant::now();
        let due = inner
            .reported
            .is_none_or(|at| now.duration_since(at) >= REPORT_EVERY);
        if inner.dropped == 0 || !due {
            return None;
        }
        inner.reported = Some(now);
        Some(std::mem::take(&mut inner.dropped))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_is_cut_to_the_burst_and_reported_once() {
        let budget = LogBudget::new(4096);
        let line = 1024;
        let logged = (0..10_000).filter(|_| budget.allow(line)).count();
        assert!((256..=260).contains(&logged), "{logged} lines of 1 KiB");
        let dropped = budget.report().expect("a report is due");
        assert!(dropped >= (10_000 - 260) * 1024);
        assert!(!budget.allow(line * 64));
        assert_eq!(budget.report(), None, "at most one report a minute");
    }
}
