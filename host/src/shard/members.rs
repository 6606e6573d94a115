//! Membership of a sharded host, in the manner of timebertt/kubernetes-controller-sharding:
//! every replica holds a Lease of its own (labelled with the group), the live members
//! (unexpired Leases) split the hash space on a consistent-hash [`Ring`], and a joining or
//! leaving member moves only its share.
//!
//! No range is reconciled by two replicas at once. Each Lease says which ranges its
//! replica may be reconciling (`capstan.dev/held`) and which members it counts
//! (`capstan.dev/view`). A replica
//! - gives up a range first and says so after: `held` keeps a range until every
//!   controller that ran it has stopped (in-flight reconciles finished);
//! - says so first and takes a range after: `held` names a range before any controller
//!   starts on it, and only a range no other live Lease holds is taken;
//! - takes new ranges only while every live member counts the same members, so all agree
//!   on the ring and no two of them want the same range.
//!
//! A replica that cannot renew its Lease for the renew deadline stops reconciling, before
//! the others (who wait for the Lease to expire) take its ranges over.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::range::{self, Range};
use super::ring::{Ring, fnv1a64};
use crate::leader::Settings;
use crate::ops::metrics;

/// The label naming a member Lease's group.
pub const GROUP_LABEL: &str = "capstan.dev/shard-group";
/// The annotation listing the ranges a member may be reconciling.
pub const HELD: &str = "capstan.dev/held";
/// The annotation naming the members a member counts (a hash of their identities).
pub const VIEW: &str = "capstan.dev/view";
/// The field manager of member Leases.
const MANAGER: &str = "capstan-shard";
/// While the group settles, members look this many times per retry period.
const SETTLING: u32 = 5;
/// How long after a member's Lease expires the others look (clocks tick apart).
const EXPIRY_MARGIN: Duration = Duration::from_millis(50);

/// Another live member, as its Lease says.
#[derive(Debug)]
struct Member {
    /// When its Lease expires unless renewed.
    expires: Timestamp,
    identity: String,
    view: String,
    held: Vec<Range>,
}

/// What the supervisor is told to run, and what it tells back it runs.
pub struct Channels {
    /// The ranges to run now.
    pub target: watch::Receiver<Vec<Range>>,
    /// The ranges every controller runs (set once they have restarted).
    pub running: watch::Sender<Vec<Range>>,
}

/// A running membership; [`Membership::release`] gives the Lease up.
pub struct Membership {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
    leases: Api<Lease>,
    name: String,
}

/// Join the group `settings.name` as `settings.identity`.
pub fn join(client: kube::Client, settings: Settings) -> (Membership, Channels) {
    let (target_tx, target) = watch::channel(Vec::new());
    let (running, running_rx) = watch::channel(Vec::new());
    let leases: Api<Lease> = Api::namespaced(client, &settings.namespace);
    let name = lease_name(&settings);
    let stop = CancellationToken::new();
    let task = tokio::spawn(run(leases.clone(), settings, target_tx, running_rx, stop.clone()));
    (
        Membership {
            stop,
            task,
            leases,
            name,
        },
        Channels { target, running },
    )
}

impl Membership {
    /// Stop renewing and delete the Lease, so the others take its ranges at once; call
    /// after every controller has stopped.
    pub async fn release(self) {
        self.stop.cancel();
        let _ = self.task.await;
        if let Err(e) = self.leases.delete(&self.name, &DeleteParams::default()).await {
            tracing::warn!(error = %e, lease = %self.name, "member Lease not deleted; the others wait for it to expire");
        }
    }
}

/// The member Lease's name: the group, then the identity.
fn lease_name(s: &Settings) -> String {
    format!("{}-{}", s.name, s.identity)
}

async fn run(
    leases: Api<Lease>,
    s: Settings,
    target: watch::Sender<Vec<Range>>,
    mut running: watch::Receiver<Vec<Range>>,
    stop: CancellationToken,
) {
    let name = lease_name(&s);
    let mut renewed: Option<Instant> = None;
    let mut published = false;
    let mut wake = tokio::time::Instant::now();
    loop {
        tokio::select! {
            () = tokio::time::sleep_until(wake) => {}
            // Ranges given up are published as soon as their controllers stopped.
            () = changed(&mut running) => {}
            () = stop.cancelled() => return,
        }
        let round = tokio::time::Instant::now();
        wake = round + s.retry_period;
        let selector = format!("{GROUP_LABEL}={}", s.name);
        let listed = match leases.list(&ListParams::default().labels(&selector)).await {
            Ok(list) => list.items,
            Err(e) => {
                tracing::warn!(error = %e, "could not list member Leases");
                lapse(&target, renewed, s.renew_deadline);
                continue;
            }
        };
        let now = Timestamp::now();
        let others: Vec<Member> = listed
            .iter()
            .filter(|l| l.metadata.name.as_deref() != Some(name.as_str()))
            .filter_map(|l| member(l, now))
            .collect();
        // Look again the moment a member's Lease expires, not up to a period later.
        if let Some(left) = others.iter().map(|m| m.expires.duration_since(now)).min() {
            let left = Duration::try_from(left).unwrap_or_default();
            wake = wake.min(round + left + EXPIRY_MARGIN);
        }
        let ids: BTreeSet<&str> = others
            .iter()
            .map(|m| m.identity.as_str())
            .chain([s.identity.as_str()])
            .collect();
        let view = view_of(&ids);
        let ring = Ring::new(ids.iter().copied());
        let desired = ring.ranges(&s.identity);
        let current = target.borrow().clone();
        // Taking a range needs the whole group to agree on the ring, and a Lease of ours
        // the others have seen (so replicas starting together do not all take everything).
        let agreed = published && others.iter().all(|m| m.view == view);
        let keep = range::intersect(&current, &desired);
        let gain = if agreed {
            let held: Vec<Range> = others.iter().flat_map(|m| m.held.clone()).collect();
            range::subtract(&range::subtract(&desired, &range::normalize(&held)), &keep)
        } else {
            Vec::new()
        };
        let next = range::normalize(&[keep, gain].concat());
        let held = range::normalize(&[running.borrow().clone(), next.clone()].concat());
        match renew(&leases, &name, &s, &view, &held).await {
            Ok(()) => (renewed, published) = (Some(Instant::now()), true),
            Err(e) => {
                tracing::warn!(error = %e, lease = %name, "could not renew the member Lease");
                lapse(&target, renewed, s.renew_deadline);
                continue;
            }
        }
        report(ids.len(), &next);
        // While the group settles (views to agree, ranges to be released), look again
        // soon: every member is waiting for the others' next renewal.
        if next != desired {
            wake = wake.min(round + s.retry_period / SETTLING);
        }
        if next != current {
            tracing::info!(members = ids.len(), share = %share(&next), ranges = next.len(), "shard ranges changed");
            metrics::get().shard_rebalances.inc();
            let _ = target.send(next);
        }
    }
}

/// Until `running` changes; forever once its sender is gone.
async fn changed(running: &mut watch::Receiver<Vec<Range>>) {
    if running.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Stop reconciling once the Lease has gone unrenewed for the deadline: by the time it
/// expires for the others, nothing here runs.
fn lapse(target: &watch::Sender<Vec<Range>>, renewed: Option<Instant>, deadline: Duration) {
    if renewed.is_none_or(|at| at.elapsed() >= deadline) && !target.borrow().is_empty() {
        tracing::warn!("member Lease not renewed within the renew deadline; stopping every range");
        let _ = target.send(Vec::new());
    }
}

/// Write our Lease: renewed now, with the members we count and the ranges we may run.
async fn renew(
    leases: &Api<Lease>,
    name: &str,
    s: &Settings,
    view: &str,
    held: &[Range],
) -> kube::Result<()> {
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some([(GROUP_LABEL.to_string(), s.name.clone())].into()),
            annotations: Some(
                [
                    (VIEW.to_string(), view.to_string()),
                    (HELD.to_string(), encode(held)),
                ]
                .into(),
            ),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(s.identity.clone()),
            lease_duration_seconds: Some(s.lease_duration.as_secs().try_into().unwrap_or(i32::MAX)),
            renew_time: Some(MicroTime(Timestamp::now())),
            ..LeaseSpec::default()
        }),
    };
    let params = PatchParams::apply(MANAGER).force();
    leases.patch(name, &params, &Patch::Apply(&lease)).await?;
    Ok(())
}

/// A live member from its Lease; `None` when it has expired or is not a member's.
fn member(lease: &Lease, now: Timestamp) -> Option<Member> {
    let spec = lease.spec.as_ref()?;
    let renewed = spec.renew_time.as_ref()?.0;
    let valid = SignedDuration::from_secs(spec.lease_duration_seconds?.into());
    if renewed + valid <= now {
        return None;
    }
    let annotations = lease.metadata.annotations.as_ref();
    let get = |k: &str| annotations.and_then(|a| a.get(k)).cloned().unwrap_or_default();
    Some(Member {
        expires: renewed + valid,
        identity: spec.holder_identity.clone()?,
        view: get(VIEW),
        held: decode(&get(HELD)),
    })
}

/// The members a replica counts, as one short string to compare.
fn view_of(ids: &BTreeSet<&str>) -> String {
    let joined: Vec<&str> = ids.iter().copied().collect();
    format!("{:016x}", fnv1a64(joined.join("\n").as_bytes()))
}

/// Ranges as `start-end` hex pairs, comma-separated.
pub fn encode(ranges: &[Range]) -> String {
    ranges
        .iter()
        .map(|r| format!("{:x}-{:x}", r.start(), r.end()))
        .collect::<Vec<_>>()
        .join(",")
}

/// [`encode`]'s ranges back; anything malformed is left out.
pub fn decode(text: &str) -> Vec<Range> {
    text.split(',')
        .filter_map(|pair| {
            let (start, end) = pair.trim().split_once('-')?;
            Range::new(
                u64::from_str_radix(start, 16).ok()?,
                u128::from_str_radix(end, 16).ok()?,
            )
        })
        .collect()
}

/// The share of the hash space `ranges` cover, as a percentage.
fn share(ranges: &[Range]) -> String {
    format!(
        "{:.1}%",
        range::width(ranges) as f64 / range::SPACE_END as f64 * 100.0
    )
}

fn report(members: usize, ranges: &[Range]) {
    let m = metrics::get();
    m.shard_members.set(members as i64);
    m.shard_ranges.set(ranges.len() as i64);
    m.shard_share
        .set(range::width(ranges) as f64 / range::SPACE_END as f64);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_survive_the_annotation() {
        let ranges = Ring::new(["a", "b", "c"]).ranges("b");
        assert_eq!(decode(&encode(&ranges)), ranges);
        assert_eq!(decode(&encode(&[Range::FULL])), vec![Range::FULL]);
        assert!(decode("").is_empty());
        assert!(
            decode("zz-1,5-3").is_empty(),
            "malformed and empty pairs are left out"
        );
    }

    #[test]
    fn a_view_names_the_members_in_any_order() {
        let a: BTreeSet<&str> = ["x", "y"].into();
        let b: BTreeSet<&str> = ["y", "x"].into();
        let c: BTreeSet<&str> = ["x"].into();
        assert_eq!(view_of(&a), view_of(&b));
        assert_ne!(view_of(&a), view_of(&c));
    }

    #[test]
    fn an_expired_lease_is_no_member() {
        let now = Timestamp::now();
        let lease = |renewed: Timestamp| Lease {
            metadata: ObjectMeta::default(),
            spec: Some(LeaseSpec {
                holder_identity: Some("b".into()),
                lease_duration_seconds: Some(15),
                renew_time: Some(MicroTime(renewed)),
                ..LeaseSpec::default()
            }),
        };
        assert!(member(&lease(now), now).is_some());
        assert!(member(&lease(now - SignedDuration::from_secs(16)), now).is_none());
    }
}
