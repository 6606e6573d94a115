//! The deadline of one call, in CPU time: armed on the store before every call, checked
//! on each tick of the engine's epoch clock, which ticks only while an instance lives.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::Thread;
use std::time::Duration;

use wasmtime::Store;

use super::sandbox::State;

/// A call gets at most this many deadlines of wall-clock time, however little CPU it got.
const WALL_FACTOR: u32 = 10;

/// Stop the call once it has used `deadline` of CPU time (or `WALL_FACTOR` deadlines of
/// wall-clock time). CPU time, not wall time, is what the deadline measures: on a loaded
/// machine an honest plugin waiting for a core is not charged for the wait — not even
/// before the first tick, which a descheduled thread can reach a second late (a plugin's
/// `metadata` was refused so under CI load when that time was counted as CPU). Reading
/// the thread's clock at arm costs one system call per call.
pub(crate) fn arm(store: &mut Store<State>, deadline: Duration) {
    let started = std::time::Instant::now();
    let cpu_at_arm = thread_cpu_time();
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(move |_| {
        let wall = started.elapsed();
        let used = thread_cpu_time().saturating_sub(cpu_at_arm);
        if used >= deadline || wall >= deadline * WALL_FACTOR {
            Ok(wasmtime::UpdateDeadline::Interrupt)
        } else {
            Ok(wasmtime::UpdateDeadline::Continue(1))
        }
    });
}

/// CPU time the calling thread has used: what a plugin's calls are charged (the thread
/// runs nothing else while it runs a call).
pub fn thread_cpu_time() -> Duration {
    read_clock(libc::CLOCK_THREAD_CPUTIME_ID).unwrap_or(Duration::ZERO)
}

/// One thread's CPU clock, readable from other threads while that thread lives: what a
/// call still running has used so far.
#[derive(Clone, Copy, Debug)]
pub struct ThreadClock(libc::clockid_t);

impl ThreadClock {
    /// The calling thread's clock.
    pub fn current() -> Option<ThreadClock> {
        let mut clock: libc::clockid_t = 0;
        // SAFETY: pthread_self is the live calling thread; the id is written through a
        // valid pointer.
        let ok = unsafe { libc::pthread_getcpuclockid(libc::pthread_self(), &mut clock) } == 0;
        ok.then_some(ThreadClock(clock))
    }

    /// CPU time the thread has used; `None` once it has exited.
    pub fn read(self) -> Option<Duration> {
        read_clock(self.0)
    }
}

fn read_clock(clock: libc::clockid_t) -> Option<Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer; an invalid clock
    // (a thread gone) is an error return, not undefined behaviour.
    let ok = unsafe { libc::clock_gettime(clock, &mut ts) } == 0;
    ok.then(|| Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

/// The engine's epoch clock. It ticks only while some instance lives: an idle host is
/// not woken every tick, and a deadline counts from the first tick after its call began.
pub(crate) struct Clock {
    live: Arc<AtomicUsize>,
    thread: Thread,
}

/// One live instance: the clock ticks while any exists.
pub(crate) struct Ticking(Arc<Clock>);

/// How long the idle clock sleeps before checking that its engine still exists.
const IDLE_CHECK: Duration = Duration::from_secs(1);

impl Clock {
    /// Start the clock of `engine`, ticking every `tick` while instances live; it stops
    /// once the engine is dropped.
    pub fn start(engine: &wasmtime::Engine, tick: Duration) -> std::io::Result<Arc<Clock>> {
        let weak = engine.weak();
        let live = Arc::new(AtomicUsize::new(0));
        let counted = live.clone();
        let handle = std::thread::Builder::new()
            .name("capstan-epoch".into())
            .spawn(move || {
                while weak.upgrade().is_some() {
                    if counted.load(Ordering::Acquire) == 0 {
                        // `Clock::ticking` unparks; a token left by an unpark that came
                        // before this park makes it return at once.
                        std::thread::park_timeout(IDLE_CHECK);
                        continue;
                    }
                    std::thread::sleep(tick);
                    if let Some(engine) = weak.upgrade() {
                        engine.increment_epoch();
                    }
                }
            })?;
        Ok(Arc::new(Clock {
            live,
            thread: handle.thread().clone(),
        }))
    }

    /// Keep the clock ticking until the returned guard is dropped.
    pub fn ticking(self: &Arc<Self>) -> Ticking {
        if self.live.fetch_add(1, Ordering::AcqRel) == 0 {
            self.thread.unpark();
        }
        Ticking(self.clone())
    }
}

impl Drop for Ticking {
    fn drop(&mut self) {
        self.0.live.fetch_sub(1, Ordering::AcqRel);
    }
}
