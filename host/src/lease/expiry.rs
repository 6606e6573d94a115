//! Expiry of other holders' Leases, timed on this process's own monotonic clock from when
//! it saw each Lease's resourceVersion change — never from the `renewTime` a writer's wall
//! clock put in it, so a writer whose clock is behind is not declared dead while it
//! renews, and one whose clock is ahead does not keep a crashed holder's Lease alive.

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::LeaseSpec;
use tokio::time::Instant;

/// How long a Lease stays valid after its holder last renewed it: its
/// `leaseDurationSeconds`, none when unset or negative (a Lease anyone may take).
pub fn valid_for(spec: Option<&LeaseSpec>) -> Duration {
    let seconds = spec.and_then(|s| s.lease_duration_seconds).unwrap_or(0);
    Duration::from_secs(seconds.max(0).unsigned_abs().into())
}

/// When this process first saw each Lease at its current resourceVersion.
#[derive(Debug, Default)]
pub struct Observed {
    seen: HashMap<String, (String, Instant)>,
}

impl Observed {
    /// Note Lease `name` at `version`, seen at `now`; how long it has been unchanged.
    pub fn see(&mut self, name: &str, version: &str, now: Instant) -> Duration {
        match self.seen.get(name) {
            Some((v, at)) if v == version => now.saturating_duration_since(*at),
            _ => {
                self.seen.insert(name.to_string(), (version.to_string(), now));
                Duration::ZERO
            }
        }
    }

    /// When Lease `name` expires if it stays unchanged for `duration`.
    #[cfg(test)]
    pub fn expires(&self, name: &str, duration: Duration) -> Option<Instant> {
        self.seen.get(name).map(|(_, at)| *at + duration)
    }

    /// Forget the Leases `keep` says no: they are gone.
    pub fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        self.seen.retain(|name, _| keep(name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_lease_ages_only_while_its_version_stays() {
        let mut observed = Observed::default();
        let t0 = Instant::now();
        assert_eq!(observed.see("a", "1", t0), Duration::ZERO);
        assert_eq!(
            observed.see("a", "1", t0 + Duration::from_secs(5)),
            Duration::from_secs(5)
        );
        // Renewed: the clock starts again, whatever renewTime the writer put in it.
        assert_eq!(
            observed.see("a", "2", t0 + Duration::from_secs(6)),
            Duration::ZERO
        );
        assert_eq!(
            observed.expires("a", Duration::from_secs(15)),
            Some(t0 + Duration::from_secs(21))
        );
        observed.retain(|n| n != "a");
        assert_eq!(observed.expires("a", Duration::from_secs(15)), None);
    }

    #[test]
    fn a_lease_is_valid_for_its_duration_and_never_less_than_nothing() {
        let spec = |seconds| LeaseSpec {
            lease_duration_seconds: seconds,
            ..LeaseSpec::default()
        };
        assert_eq!(valid_for(Some(&spec(Some(15)))), Duration::from_secs(15));
        assert_eq!(valid_for(Some(&spec(Some(-5)))), Duration::ZERO);
        assert_eq!(valid_for(Some(&spec(None))), Duration::ZERO);
        assert_eq!(valid_for(None), Duration::ZERO);
    }
}
