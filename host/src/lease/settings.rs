//! A lease holder's name, identity and timings, and the rule that makes fencing possible:
//! the renew deadline (when a holder stops) is shorter than the lease duration others
//! read from the Lease (when they take over).

use std::time::Duration;

/// Lease name, namespace, identity and timings (client-go's defaults: 15 s / 10 s / 2 s).
#[derive(Clone, Debug)]
pub struct Settings {
    /// Lease name.
    pub name: String,
    /// Lease namespace.
    pub namespace: String,
    /// This process's identity in `holderIdentity`.
    pub identity: String,
    /// How long a lease is valid after its last renewal, as standbys see it.
    pub lease_duration: Duration,
    /// A leader that could not renew for this long stops leading.
    pub renew_deadline: Duration,
    /// Time between attempts to acquire or renew.
    pub retry_period: Duration,
}

impl Settings {
    /// Settings with client-go's default timings.
    pub fn new(name: impl Into<String>, namespace: impl Into<String>, identity: impl Into<String>) -> Self {
        Settings {
            name: name.into(),
            namespace: namespace.into(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    /// Check the timings make fencing possible: the duration other replicas read from the
    /// Lease (whole seconds) must be longer than the renew deadline, after which this leader
    /// stops leading.
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.renew_deadline < self.lease_duration,
            "--renew-deadline ({:?}) must be shorter than --lease-duration ({:?}), or two leaders could overlap",
            self.renew_deadline,
            self.lease_duration
        );
        // Other replicas time the lease by what is recorded, not by the flag.
        let recorded = self.recorded_lease_seconds();
        anyhow::ensure!(
            self.renew_deadline < Duration::from_secs(recorded.unsigned_abs().into()),
            "--lease-duration {:?} is recorded in the Lease as {recorded}s, which must be longer than --renew-deadline {:?}, or two leaders could overlap",
            self.lease_duration,
            self.renew_deadline
        );
        anyhow::ensure!(
            self.retry_period < self.renew_deadline,
            "--retry-period ({:?}) must be shorter than --renew-deadline ({:?})",
            self.retry_period,
            self.renew_deadline
        );
        Ok(())
    }

    /// `leaseDurationSeconds` as written into the Lease: whole seconds, rounded down.
    pub(crate) fn recorded_lease_seconds(&self) -> i32 {
        i32::try_from(self.lease_duration.as_secs()).unwrap_or(i32::MAX)
    }
}

/// This process's identity: the pod name (or the hostname and pid outside a pod), then a
/// suffix drawn for this process, as client-go's `hostname_uuid`. Two processes with one
/// pod name (a force-deleted StatefulSet pod whose process still runs) are two holders:
/// neither takes the other's term for its own, nor writes the other's member Lease.
pub fn identity() -> String {
    let base = match std::env::var("POD_NAME") {
        Ok(pod) if !pod.is_empty() => pod,
        _ => {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_ascii_lowercase())
                .unwrap_or_else(|_| "capstan".into());
            format!("{host}-{}", std::process::id())
        }
    };
    format!("{base}-{:08x}", process_suffix())
}

/// 32 bits drawn once per process, which no other process draws alike but by chance: the
/// standard library seeds each `RandomState` from the OS's randomness.
fn process_suffix() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    static SUFFIX: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *SUFFIX.get_or_init(|| {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u32(std::process::id());
        hasher.finish() as u32
    })
}

#[cfg(test)]
impl Settings {
    /// Settings with timings in milliseconds, for tests.
    pub(crate) fn timings(name: &str, namespace: &str, lease: u64, renew: u64, retry: u64) -> Settings {
        Settings {
            lease_duration: Duration::from_millis(lease),
            renew_deadline: Duration::from_millis(renew),
            retry_period: Duration::from_millis(retry),
            ..Settings::new(name, namespace, "me")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NAMESPACE: &str = "ns";
    const NAME: &str = "capstan";

    fn timings(lease: u64, renew: u64, retry: u64) -> Settings {
        Settings::timings("capstan", "ns", lease, renew, retry)
    }

    #[test]
    fn lease_duration_truncated_to_the_renew_deadline_is_refused() {
        let error = timings(1500, 1200, 500).validate().unwrap_err().to_string();
        assert_eq!(
            error,
            "--lease-duration 1.5s is recorded in the Lease as 1s, which must be longer than \
             --renew-deadline 1.2s, or two leaders could overlap"
        );
        // Equal is not longer: a standby could take over the moment this leader fences.
        let error = timings(1900, 1000, 500).validate().unwrap_err().to_string();
        assert!(error.contains("recorded in the Lease as 1s"), "{error}");
        // Under a second is recorded as 0 s.
        let error = timings(900, 600, 100).validate().unwrap_err().to_string();
        assert!(error.contains("recorded in the Lease as 0s"), "{error}");
    }

    #[test]
    fn the_identity_is_the_same_all_through_a_process_and_ends_in_its_own_suffix() {
        let (a, b) = (identity(), identity());
        assert_eq!(a, b);
        let (base, suffix) = a.rsplit_once('-').unwrap();
        assert!(!base.is_empty());
        assert_eq!(suffix.len(), 8);
        assert!(suffix.chars().all(|c| c.is_ascii_hexdigit()), "{a}");
    }

    #[test]
    fn whole_second_lease_durations_longer_than_the_renew_deadline_are_accepted() {
        timings(15_000, 10_000, 2_000).validate().unwrap();
        timings(2_000, 1_500, 500).validate().unwrap();
        Settings::new(NAME, NAMESPACE, "me").validate().unwrap();
    }

    #[test]
    fn renew_deadline_not_shorter_than_the_lease_duration_is_refused() {
        let error = timings(10_000, 12_000, 2_000).validate().unwrap_err().to_string();
        assert!(error.contains("must be shorter than --lease-duration"), "{error}");
        let error = timings(15_000, 10_000, 10_000)
            .validate()
            .unwrap_err()
            .to_string();
        assert!(error.contains("--retry-period"), "{error}");
    }
}
