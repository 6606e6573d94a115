//! A plugin's share of the host's CPU: each call into the plugin (`related` and
//! `reconcile`) is charged the CPU time of the thread that ran it, and while a plugin is
//! over its budget (`limits.cpuMillicores` per second) its next calls wait. A plugin that
//! spins on every call and requeues at once gets its share and no more; the other plugins
//! keep theirs.
//!
//! The share is kept over a [`WINDOW`] of ten seconds for cheap calls and over one second
//! for the rest. A restart or a resync asks an honest plugin about every parent at once:
//! a thousand Echos on a debug host are a few CPU seconds, which two cores spend faster
//! than one core's share refills, and a one-second bucket put parents off for it. Calls of
//! a kind whose recent cost is at most [`CHEAP`] of a second's credit may draw on the
//! whole window; any other call sees only the window's last second, so a plugin whose
//! calls run long is held exactly as a one-second bucket would hold it.
//!
//! Thread CPU time, not wall time: a call that waited for a pool slot, a blocking thread or
//! a core — because other plugins were busy — is not charged for their work. And the calls
//! in flight are bounded, not only the debt: a call may start only while the credit left
//! covers every call already running — each counted at what it has used so far or its
//! kind's recent cost, whichever is more — plus the new one. `related` and `reconcile` keep
//! separate costs (a cheap `related` vouches for nothing), and a kind whose cost is not
//! known yet runs one call at a time. So sixteen calls that each spin to their deadline
//! cannot all start on one second's credit, nor can a plugin that was cheap so far start a
//! burst once one of its calls runs long. An honest plugin's calls cost microseconds, and
//! this bound never puts it off: a call it refuses while every call in flight is still
//! cheap waits for one of them to end instead. Objects refused hold the credit their calls
//! will cost, in the order they were refused ([`line`]), so one spinning object does not
//! starve its siblings.
//!
//! A call admitted runs on one of the plugin's [`threads`], one per core.

mod line;
pub mod threads;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::bucket::Bucket;
use crate::engine::{ThreadClock, thread_cpu_time};
use crate::key::ObjectKey;

/// How much one new call's cost moves the running estimate.
const WEIGHT: f64 = 0.25;
/// The least a plugin over its bound waits before it is tried again.
const MIN_WAIT: Duration = Duration::from_millis(10);
/// How often a call waiting for the first call of its kind looks at what that call has
/// used so far.
const SETTLE: Duration = Duration::from_millis(20);
/// Seconds of the share cheap calls may run ahead of it by: a pass over every parent at
/// a restart fits (1 000 Echos cost ~3 CPU seconds on a debug host, ~0.3 on a release one).
const WINDOW: f64 = 10.0;
/// The most a call may cost, as a fraction of one second's credit, and still draw on the
/// whole window: 50 ms at one core, where Echo costs 0.05-3 ms and a spinner a second.
const CHEAP: f64 = 1.0 / 20.0;

/// Which entry point a call is: each has its own cost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    /// `related`: what the plugin reads for a parent.
    Related,
    /// `reconcile`.
    Reconcile,
}

/// One kind of call's recent cost and calls in flight.
#[derive(Default)]
struct Cost {
    /// CPU seconds per call; `None` until the first call of the kind ends.
    per_call: Option<f64>,
    in_flight: u32,
}

/// A call started and not yet charged.
struct Running {
    id: u64,
    call: Call,
    /// The thread running it, that thread's CPU time when the call began, and when that
    /// was; `None` until it is on its thread.
    on: Option<(ThreadClock, Duration, Instant)>,
}

impl Running {
    /// CPU seconds the call has used so far.
    fn used(&self) -> f64 {
        self.on
            .and_then(|(clock, began, _)| clock.read().map(|now| now.saturating_sub(began)))
            .map_or(0.0, |d| d.as_secs_f64())
    }

    /// CPU seconds the call has used so far, or `floor` if that is more. A thread's CPU
    /// time grows no faster than the wall clock, so a call on its thread for less than
    /// `floor` is not asked: reading another thread's clock is a system call, and every
    /// admission asks about every call in flight.
    fn used_or(&self, floor: f64, now: Instant) -> f64 {
        match self.on {
            Some((_, _, since)) if now.saturating_duration_since(since).as_secs_f64() <= floor => floor,
            _ => self.used().max(floor),
        }
    }
}

struct Inner {
    /// [`WINDOW`] seconds of the share.
    bucket: Bucket,
    costs: [Cost; 2],
    running: Vec<Running>,
    next_id: u64,
    line: line::Line,
}

impl Inner {
    fn cost(&mut self, call: Call) -> &mut Cost {
        &mut self.costs[call as usize]
    }

    /// CPU seconds the calls in flight are expected to use in all.
    fn committed(&self) -> f64 {
        // The real clock, whatever time the caller decides at: it bounds the CPU time read.
        let now = Instant::now();
        self.running
            .iter()
            .map(|r| r.used_or(self.costs[r.call as usize].per_call.unwrap_or(0.0), now))
            .sum()
    }

    /// Whether calls of `call` are cheap enough to draw on the whole window.
    fn cheap(&self, call: Call) -> bool {
        let cheap = self.bucket.rate() * CHEAP;
        self.costs[call as usize].per_call.is_some_and(|c| c <= cheap)
    }

    /// Whether a call refused now had better wait for a call in flight to end than put
    /// its object off: the plugin is not in debt, and every call in flight has used no
    /// more than a cheap call may. Such a refusal comes from the calls in flight alone —
    /// before the first call of a kind has ended, or while a cold first call's cost still
    /// weighs on its kind's estimate (a restart's sweep on a loaded host) — and they end
    /// within moments; a plugin whose calls run long is refused outright as before.
    fn passing(&mut self, call: Call, now: Instant) -> bool {
        let cheap = self.bucket.rate() * CHEAP;
        !self.running.is_empty()
            && self.credit(call, now) >= 0.0
            && self.running.iter().all(|r| r.used() <= cheap)
    }

    /// What a call of `call` may draw on: the whole window when it is cheap, its last
    /// second otherwise.
    fn credit(&mut self, call: Call, now: Instant) -> f64 {
        let reserved = if self.cheap(call) {
            0.0
        } else {
            self.bucket.rate() * (WINDOW - 1.0)
        };
        self.bucket.level(now) - reserved
    }

    /// Whether a call of `call` fits the credit now, behind the calls of the objects
    /// refused before it (`ahead`, counted by kind), or how long until it may.
    fn room(&mut self, call: Call, ahead: [u32; 2], now: Instant) -> Result<(), Duration> {
        let rate = self.bucket.rate();
        let credit = self.credit(call, now);
        if credit < 0.0 {
            return Err(Duration::from_secs_f64(-credit / rate));
        }
        let cost = self.cost(call);
        if cost.per_call.is_none() && cost.in_flight > 0 {
            return Err(MIN_WAIT);
        }
        let new = cost.per_call.unwrap_or(0.0);
        let held: f64 = (self.costs.iter().zip(ahead))
            .map(|(cost, n)| cost.per_call.unwrap_or(0.0) * f64::from(n))
            .sum();
        if !self.running.is_empty() || held > 0.0 {
            // The calls in flight are committed to one second's credit at most, however
            // much of the window is left: sixteen calls cheap so far may all turn to spin.
            let short = self.committed() + held + new - credit.min(rate);
            if short > 0.0 {
                let wait = Duration::from_secs_f64(short / rate);
                return Err(wait.max(MIN_WAIT));
            }
        }
        Ok(())
    }
}

/// Seconds of CPU a plugin may use per second, shared by all its calls.
#[derive(Clone)]
pub struct CpuBudget {
    inner: Arc<Mutex<Inner>>,
    /// Told whenever a call leaves flight, for the calls waiting to learn a cost.
    ended: Arc<tokio::sync::Notify>,
    /// Where every charge is also counted, for operators (`capstan_wasm_cpu_seconds_total`).
    meter: Meter,
    /// Where the plugin's calls run.
    threads: threads::Threads,
}

/// A counter of CPU seconds charged.
pub type Meter = prometheus_client::metrics::counter::Counter<f64, std::sync::atomic::AtomicU64>;

/// One call's place in the budget: [`Permit::run`] runs it and charges what it used.
pub struct Permit {
    budget: CpuBudget,
    id: u64,
    call: Call,
}

impl CpuBudget {
    /// A budget of `millicores` (1000 = one core), full.
    pub fn new(millicores: u32) -> Self {
        let rate = f64::from(millicores.max(1)) / 1000.0;
        CpuBudget {
            inner: Arc::new(Mutex::new(Inner {
                bucket: Bucket::new(rate, rate * WINDOW, Instant::now()),
                costs: Default::default(),
                running: Vec::new(),
                next_id: 0,
                line: line::Line::default(),
            })),
            ended: Arc::new(tokio::sync::Notify::new()),
            meter: Meter::default(),
            threads: threads::Threads::new(threads::per_core()),
        }
    }

    /// The same budget, counting every charge into `meter` as well.
    pub fn metered(self, meter: Meter) -> Self {
        CpuBudget { meter, ..self }
    }

    /// A permit for one call for `object`, or how long to wait before asking again: while
    /// the plugin is in debt, while its calls in flight would use up the credit left, or
    /// while objects refused before this one wait for their turn. Before the first call of
    /// a kind has ended its cost is unknown and one such call runs at a time. A call
    /// refused while the plugin has credit and its calls in flight have each used no more
    /// than a cheap call may waits for one of them to end rather than put its object off
    /// ([`Inner::passing`]). On a loaded machine a call's wall time (a fresh instance, a
    /// blocking thread, a core) is no measure of its cost; the CPU it has used is.
    pub async fn acquire(&self, call: Call, object: &ObjectKey) -> Result<Permit, Duration> {
        loop {
            let ended = self.ended.notified();
            match self.start_at(call, object, Instant::now()) {
                Err(_) if self.inner().passing(call, Instant::now()) => {
                    // Woken when a call ends, or to look again at what they have used.
                    let _ = tokio::time::timeout(SETTLE, ended).await;
                }
                started => return started,
            }
        }
    }

    fn start_at(&self, call: Call, object: &ObjectKey, now: Instant) -> Result<Permit, Duration> {
        let mut inner = self.inner();
        let ahead = inner.line.ahead(object, now);
        if let Err(wait) = inner.room(call, ahead, now) {
            inner.line.wait(object, call, now, wait);
            return Err(wait);
        }
        inner.line.served(object);
        inner.cost(call).in_flight += 1;
        let id = inner.next_id;
        inner.next_id += 1;
        inner.running.push(Running { id, call, on: None });
        Ok(Permit {
            budget: self.clone(),
            id,
            call,
        })
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Permit {
    /// Run `work` (which makes the call with [`Permit::run`]) on one of the plugin's
    /// [`threads`], after its calls waiting before. Dropped while it waits, the call is
    /// not made; once on its thread it is, and charged, whatever becomes of the caller.
    pub async fn on_thread<T: Send + 'static>(
        self,
        work: impl FnOnce(Permit) -> T + Send + 'static,
    ) -> Result<T, threads::Lost> {
        let threads = self.budget.threads.clone();
        threads.run(move || work(self)).await
    }

    /// Run the call on this thread (which runs nothing else meanwhile) and charge the CPU
    /// time it used; while it runs, what it has used so far counts against new calls.
    pub fn run<T>(self, call: impl FnOnce() -> T) -> T {
        // The wall clock first: the CPU time from `began` is then never more than the
        // wall time from `since` (what `Running::used_or` relies on).
        let since = Instant::now();
        let began = thread_cpu_time();
        if let Some(clock) = ThreadClock::current() {
            let mut inner = self.budget.inner();
            if let Some(r) = inner.running.iter_mut().find(|r| r.id == self.id) {
                r.on = Some((clock, began, since));
            }
        }
        let out = call();
        self.charge_at(thread_cpu_time().saturating_sub(began), Instant::now());
        out
    }

    fn charge_at(self, used: Duration, now: Instant) {
        let mut inner = self.budget.inner();
        let used = used.as_secs_f64();
        self.budget.meter.inc_by(used);
        inner.bucket.spend(used, now);
        let cost = inner.cost(self.call);
        cost.per_call = Some(match cost.per_call {
            Some(c) => c + WEIGHT * (used - c),
            None => used,
        });
        // The drop below ends the call's place in flight.
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        {
            let mut inner = self.budget.inner();
            inner.running.retain(|r| r.id != self.id);
            let cost = inner.cost(self.call);
            cost.in_flight = cost.in_flight.saturating_sub(1);
        }
        self.budget.ended.notify_waiters();
    }
}

#[cfg(test)]
mod tests;
