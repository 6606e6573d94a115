//! A plugin's share of the host's CPU: each dispatch is charged its time, and while a
//! plugin is over its budget (`limits.cpuMillicores` per second, a bucket of one second's
//! worth) its next reconciles wait. A plugin that spins on every call and requeues at
//! once gets its share and no more; the other plugins keep theirs.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::bucket::Bucket;

/// Seconds of CPU a plugin may use per second.
pub struct CpuBudget(Mutex<Bucket>);

impl CpuBudget {
    /// A budget of `millicores` (1000 = one core), full.
    pub fn new(millicores: u32) -> Self {
        let rate = f64::from(millicores.max(1)) / 1000.0;
        CpuBudget(Mutex::new(Bucket::new(rate, rate, Instant::now())))
    }

    /// How long the next dispatch must wait for the budget to be back in credit.
    pub fn wait(&self) -> Duration {
        self.bucket().debt(Instant::now())
    }

    /// Charge one dispatch's time.
    pub fn charge(&self, took: Duration) {
        self.bucket().spend(took.as_secs_f64(), Instant::now());
    }

    fn bucket(&self) -> std::sync::MutexGuard<'_, Bucket> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}
