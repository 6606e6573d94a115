//! Time and entropy inside the sandbox are deterministic, so the same request always
//! gives the same response (recordable, replayable) and no host call can block a plugin
//! past its deadline:
//!
//! - the wall clock stands at the Unix epoch (time for plugins comes through the contract);
//! - the monotonic clock starts at 0 and moves only when the plugin waits on it, and a
//!   wait (`subscribe-duration`, `subscribe-instant`) is ready at once: a plugin that
//!   "sleeps" 30 s spends no time and holds no thread;
//! - random bytes (secure and insecure) come from fixed seeds, at most
//!   [`MAX_RANDOM_BYTES`] a call: the host builds them before the guest gets them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rand::SeedableRng;
use rand::rngs::StdRng;
use wasmtime_wasi::p2::Pollable;
use wasmtime_wasi::{HostMonotonicClock, HostWallClock, WasiCtxBuilder};

/// Largest `get-random-bytes` a plugin may ask for in one call (wasmtime-wasi allows
/// 64 MiB, all of it host memory); more traps, as the plugin's own fault.
pub(crate) const MAX_RANDOM_BYTES: u64 = 1 << 20;

/// A monotonic clock that moves only when the guest waits on it.
#[derive(Clone, Default)]
pub(crate) struct VirtualClock(Arc<AtomicU64>);

impl VirtualClock {
    /// Move the clock forward by `nanos` (a wait of that long, taken at once).
    pub(crate) fn advance(&self, nanos: u64) {
        let _ = self.0.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
            Some(n.saturating_add(nanos))
        });
    }

    /// Move the clock to `instant` unless it is already past it.
    pub(crate) fn advance_to(&self, instant: u64) {
        self.0.fetch_max(instant, Ordering::Relaxed);
    }
}

impl HostMonotonicClock for VirtualClock {
    fn resolution(&self) -> u64 {
        1
    }

    fn now(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A wall clock stopped at the Unix epoch.
struct Epoch;

impl HostWallClock for Epoch {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }

    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

/// A wait that is over as soon as it starts.
pub(crate) struct Ready;

#[wasmtime_wasi::async_trait]
impl Pollable for Ready {
    async fn ready(&mut self) {}
}

/// Give a WASI context the deterministic clocks and entropy, with `clock` as its monotonic clock.
pub(crate) fn deterministic(builder: &mut WasiCtxBuilder, clock: VirtualClock) {
    builder
        .wall_clock(Epoch)
        .monotonic_clock(clock)
        .secure_random(StdRng::seed_from_u64(0))
        .insecure_random(StdRng::seed_from_u64(1))
        .insecure_random_seed(0)
        .max_random_size(MAX_RANDOM_BYTES);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_virtual_clock_moves_only_by_waits() {
        let clock = VirtualClock::default();
        assert_eq!(clock.now(), 0);
        clock.advance(30_000_000_000);
        assert_eq!(clock.now(), 30_000_000_000);
        clock.advance_to(10);
        assert_eq!(clock.now(), 30_000_000_000, "never backwards");
        clock.advance(u64::MAX);
        assert_eq!(clock.now(), u64::MAX, "saturates");
        assert_eq!(Epoch.now(), Duration::ZERO);
    }
}
