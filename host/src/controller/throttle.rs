//! A plugin's share of the host's CPU: each call into the plugin (`related` and
//! `reconcile`) is charged the CPU time of the thread that ran it, and while a plugin is
//! over its budget (`limits.cpuMillicores` per second, a bucket of one second's worth)
//! its next calls wait. A plugin that spins on every call and requeues at once gets its
//! share and no more; the other plugins keep theirs.
//!
//! Thread CPU time, not wall time: a call that waited for a pool slot, a blocking thread
//! or a core — because other plugins were busy — is not charged for their work. And the
//! calls in flight are bounded, not only the debt: a call may start only while the
//! credit left covers every call already running at the plugin's recent cost per call,
//! so sixteen calls that each spin to their deadline cannot all start on one second's
//! credit. An honest plugin's calls cost microseconds, and this bound never holds it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::bucket::Bucket;

/// How much one new call's cost moves the running estimate.
const WEIGHT: f64 = 0.25;
/// The least a plugin over its bound waits before it is tried again.
const MIN_WAIT: Duration = Duration::from_millis(10);

struct Inner {
    bucket: Bucket,
    /// Calls started and not yet charged.
    in_flight: u32,
    /// The plugin's recent CPU seconds per call; `None` until its first call ends.
    per_call: Option<f64>,
}

/// Seconds of CPU a plugin may use per second, shared by all its calls.
#[derive(Clone)]
pub struct CpuBudget(Arc<Mutex<Inner>>);

/// One call's place in the budget: charged with the CPU time it used when it ends.
pub struct Permit(CpuBudget);

impl CpuBudget {
    /// A budget of `millicores` (1000 = one core), full.
    pub fn new(millicores: u32) -> Self {
        let rate = f64::from(millicores.max(1)) / 1000.0;
        CpuBudget(Arc::new(Mutex::new(Inner {
            bucket: Bucket::new(rate, rate, Instant::now()),
            in_flight: 0,
            per_call: None,
        })))
    }

    /// A permit for one call, or how long to wait before asking again: while the plugin
    /// is in debt, or while its calls in flight would use up the credit left.
    pub fn start(&self) -> Result<Permit, Duration> {
        self.start_at(Instant::now())
    }

    fn start_at(&self, now: Instant) -> Result<Permit, Duration> {
        let mut inner = self.inner();
        let debt = inner.bucket.debt(now);
        if !debt.is_zero() {
            return Err(debt);
        }
        if inner.in_flight > 0 {
            // Before the first call has ended nothing is known of the cost: one at a time.
            let credit = inner.bucket.level(now);
            let running = match inner.per_call {
                Some(cost) => cost * f64::from(inner.in_flight + 1),
                None => f64::INFINITY,
            };
            if running > credit {
                let cost = inner.per_call.unwrap_or(0.0);
                let wait = Duration::from_secs_f64(cost / inner.bucket.rate());
                return Err(wait.max(MIN_WAIT));
            }
        }
        inner.in_flight += 1;
        Ok(Permit(self.clone()))
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Permit {
    /// End the call, charging the CPU time it used.
    pub fn charge(self, used: Duration) {
        self.charge_at(used, Instant::now());
    }

    fn charge_at(self, used: Duration, now: Instant) {
        let mut inner = self.0.inner();
        let used = used.as_secs_f64();
        inner.bucket.spend(used, now);
        inner.per_call = Some(match inner.per_call {
            Some(cost) => cost + WEIGHT * (used - cost),
            None => used,
        });
        // The drop below ends the call's place in flight.
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut inner = self.0.inner();
        inner.in_flight = inner.in_flight.saturating_sub(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spinning_plugin_runs_one_call_per_credit_and_waits_out_its_debt() {
        let cpu = CpuBudget::new(1000);
        let t0 = Instant::now();
        let first = cpu.start_at(t0).expect("full credit");
        assert!(
            cpu.start_at(t0).is_err(),
            "nothing known of the cost yet: one at a time"
        );
        first.charge_at(Duration::from_millis(900), t0);
        // 0.1 s of credit left, 0.9 s a call: no second call while one is in flight.
        let second = cpu.start_at(t0).expect("nothing in flight");
        assert!(cpu.start_at(t0).is_err());
        second.charge_at(Duration::from_millis(900), t0);
        let wait = cpu.start_at(t0).err().expect("in debt");
        assert!(wait >= Duration::from_millis(700), "{wait:?}");
        assert!(cpu.start_at(t0 + Duration::from_secs(1)).is_ok());
    }

    #[test]
    fn an_honest_plugin_runs_all_its_calls_at_once() {
        let cpu = CpuBudget::new(1000);
        let t0 = Instant::now();
        cpu.start_at(t0).unwrap().charge_at(Duration::from_micros(40), t0);
        let permits: Vec<Permit> = (0..16).map(|_| cpu.start_at(t0).expect("credit")).collect();
        assert_eq!(permits.len(), 16);
    }

    #[test]
    fn a_call_that_never_reports_still_leaves_flight() {
        let cpu = CpuBudget::new(1000);
        let t0 = Instant::now();
        drop(cpu.start_at(t0).unwrap());
        assert!(cpu.start_at(t0).is_ok(), "a dropped permit frees its place");
    }
}
