//! The clocks a term is judged by. Terms run on the monotonic clock, which a paused
//! process (SIGSTOP) sees move on; but a frozen *machine* — a hypervisor's stop, a host
//! suspend — can stop the guest's monotonic clock while the world's time runs on, and the
//! others take over meanwhile. So each renewal also notes `CLOCK_BOOTTIME` (which counts
//! a suspend) and the wall clock, and a term is over once either has moved more than the
//! monotonic clock by the lease's margin (`lease_duration − renew_deadline`) since.
//!
//! Built with the `dev` feature, `CAPSTAN_DEV_FROZEN_FILE` names a file holding seconds
//! this process's monotonic clock is to lag behind (as if it had stood still that long
//! while the wall clock ran): the fault suite's frozen machine.

use std::time::{Duration, SystemTime};

use tokio::time::Instant;

/// What terms are timed by: the monotonic clock (as tokio tells it), less the dev
/// freeze.
pub fn now() -> Instant {
    Instant::now() - frozen()
}

/// Sleep until `at`, an instant of [`now`]'s.
pub async fn sleep_until(at: Instant) {
    tokio::time::sleep_until(real(at)).await;
}

/// The tokio instant of `at`, an instant of [`now`]'s.
pub fn real(at: Instant) -> Instant {
    at + frozen()
}

/// The three clocks at one moment.
#[derive(Clone, Copy, Debug)]
pub struct Clocks {
    monotonic: std::time::Instant,
    boot: Duration,
    wall: SystemTime,
}

impl Clocks {
    /// The clocks now.
    pub fn read() -> Clocks {
        Clocks {
            monotonic: std::time::Instant::now() - frozen(),
            boot: boottime(),
            wall: SystemTime::now(),
        }
    }

    /// The wall clock's reading.
    pub fn wall(&self) -> SystemTime {
        self.wall
    }

    /// How much further the boot or wall clock moved than the monotonic one from
    /// `earlier` to these readings: the time the monotonic clock stood still (or a step
    /// of the wall clock).
    pub fn jumped_since(&self, earlier: &Clocks) -> Duration {
        let monotonic = self.monotonic.saturating_duration_since(earlier.monotonic);
        let boot = self.boot.saturating_sub(earlier.boot);
        let wall = self.wall.duration_since(earlier.wall).unwrap_or_default();
        boot.max(wall).saturating_sub(monotonic)
    }
}

/// `CLOCK_BOOTTIME`: monotonic, and counting time suspended.
fn boottime() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to write.
    if unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// How long this process's monotonic clock is to have stood still (dev builds only).
#[cfg(feature = "dev")]
fn frozen() -> Duration {
    static FILE: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    let file = FILE.get_or_init(|| std::env::var_os("CAPSTAN_DEV_FROZEN_FILE").map(Into::into));
    // Read at every look, so a test can set it while the process is stopped and the
    // first look after it resumes already sees it.
    file.as_ref()
        .and_then(|f| std::fs::read_to_string(f).ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .unwrap_or_default()
}

#[cfg(not(feature = "dev"))]
fn frozen() -> Duration {
    Duration::ZERO
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(monotonic: std::time::Instant, boot: u64, wall: u64) -> Clocks {
        Clocks {
            monotonic,
            boot: Duration::from_secs(boot),
            wall: SystemTime::UNIX_EPOCH + Duration::from_secs(wall),
        }
    }

    #[test]
    fn a_jump_is_what_the_boot_or_wall_clock_moved_beyond_the_monotonic_one() {
        let t0 = std::time::Instant::now();
        let before = at(t0, 100, 1000);
        // All three moved 5 s: a pause the monotonic clock saw (SIGSTOP), no jump.
        assert_eq!(
            at(t0 + Duration::from_secs(5), 105, 1005).jumped_since(&before),
            Duration::ZERO
        );
        // The machine was frozen 30 s: the monotonic clock stood still.
        let frozen = at(t0 + Duration::from_secs(1), 131, 1031);
        assert_eq!(frozen.jumped_since(&before), Duration::from_secs(30));
        // Only the wall clock stepped ahead (NTP): counted as well, which only ends a term early.
        let stepped = at(t0 + Duration::from_secs(1), 101, 1021);
        assert_eq!(stepped.jumped_since(&before), Duration::from_secs(20));
        // A wall clock set back is no jump.
        assert_eq!(
            at(t0 + Duration::from_secs(1), 101, 900).jumped_since(&before),
            Duration::ZERO
        );
    }

    #[test]
    fn the_real_clocks_move_together() {
        let a = Clocks::read();
        std::thread::sleep(Duration::from_millis(20));
        assert!(Clocks::read().jumped_since(&a) < Duration::from_millis(20));
    }
}
