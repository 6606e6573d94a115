//! Membership of a sharded host, in the manner of timebertt/kubernetes-controller-sharding:
//! every replica holds a Lease of its own (labelled with the group), the live members
//! split the hash space on a consistent-hash [`Ring`], and a joining or leaving member
//! moves only its share. Renewal, fencing and expiry follow the one lease discipline of
//! the `lease` module: a member's term ends `renew_deadline` after the start of its last
//! renewal whatever the API or the process does, and the others time its Lease from when
//! they saw it change, on their own clocks.
//!
//! No range is reconciled by two replicas at once. Each Lease says which ranges its
//! replica may be reconciling (`capstan.dev/held`), which members it counts
//! (`capstan.dev/view`) and how it splits the space (`capstan.dev/space`: the shard key and
//! the ring's parameters). A replica
//! - gives up a range first and says so after: `held` keeps a range while any controller
//!   may run on it: running, stopping, or told to start;
//! - says so first and takes a range after: `held` names a range before any controller
//!   starts on it, and only a range no other live Lease holds is taken;
//! - takes new ranges only while every live member counts the same members, so all agree
//!   on the ring and no two of them want the same range;
//! - keeps its ranges only through one unbroken term: after a lapse (a pause, a stalled
//!   connection, a frozen machine's clock) it starts with none and earns them again like
//!   a newcomer — and never keeps a range another live Lease holds;
//! - takes nothing while a member splitting another space holds ranges, and of two spaces
//!   with nothing held only the first (by name) takes: replicas that disagree on the shard
//!   key (a rollout of a new `--shard-key`) never split the objects twice;
//! - deletes member Leases that nobody renewed for twice their duration (crashed replicas).

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DeleteParams, ListParams, Preconditions};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::member_lease::{
    GROUP_LABEL, HELD, Member, SPACE, VIEW, encode, lease_name, member, renew, view_of,
};
use super::range::{self, Range};
use super::ring::Ring;
use crate::lease::{Fence, Holder, Observed, Settings, Tenure};
use crate::ops::metrics;

/// While the group settles, members look this many times per retry period.
const SETTLING: u32 = 5;
/// How long after a member's Lease expires the others look (timers fire late).
const EXPIRY_MARGIN: Duration = Duration::from_millis(50);
/// A Lease unchanged for this many lease durations belongs to a replica that is gone.
const STALE_AFTER: u32 = 2;

/// The ranges to run, and the term they are held in: controllers started on them run
/// only while that term lasts.
#[derive(Clone, Debug)]
pub struct Assignment {
    /// The ranges.
    pub ranges: Vec<Range>,
    /// The membership term they were given in.
    pub tenure: Tenure,
}

/// What the supervisor is told to run, and what it tells back it runs.
pub struct Channels {
    /// The ranges to run now.
    pub target: watch::Receiver<Assignment>,
    /// The ranges any controller may be running on (set once they have stopped or started).
    pub running: watch::Sender<Vec<Range>>,
}

/// A running membership; [`Membership::release`] gives the Lease up.
pub struct Membership {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
    leases: Api<Lease>,
    name: String,
}

/// Join the group `settings.name` as `settings.identity`, splitting `space` (the shard
/// key and ring parameters; members of other spaces never split the objects with this one).
pub fn join(client: kube::Client, settings: Settings, space: String) -> (Membership, Channels) {
    let (fence, tenure) = Fence::new(settings.renew_deadline);
    fence.limit_jumps(settings.lease_duration - settings.renew_deadline);
    let empty = Assignment {
        ranges: Vec::new(),
        tenure: tenure.pin(),
    };
    let (target_tx, target) = watch::channel(empty);
    let (running, running_rx) = watch::channel(Vec::new());
    let leases: Api<Lease> = Api::namespaced(client, &settings.namespace);
    let name = lease_name(&settings);
    let stop = CancellationToken::new();
    let stopped = stop.clone();
    let mut members = Members {
        leases: leases.clone(),
        name: name.clone(),
        space,
        settings,
        observed: Observed::default(),
        target: target_tx,
        running: running_rx,
        published: false,
        settling: false,
        wake: None,
        attempt: crate::lease::now(),
        disagreement: None,
    };
    let retry = members.settings.retry_period;
    let renewing = async move {
        crate::lease::hold(&fence, retry, &mut members).await;
    };
    let task = tokio::spawn(async move {
        // Dropping the loop drops the fence: the term ends with it.
        stopped.run_until_cancelled(renewing).await;
    });
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

/// The membership's side of the renew loop.
struct Members {
    leases: Api<Lease>,
    name: String,
    space: String,
    settings: Settings,
    observed: Observed,
    target: watch::Sender<Assignment>,
    running: watch::Receiver<Vec<Range>>,
    /// Our Lease, as written in this term, is there for the others to see.
    published: bool,
    /// The group has not settled yet: look again soon.
    settling: bool,
    /// When the next member Lease expires.
    wake: Option<Instant>,
    /// When the last round began.
    attempt: Instant,
    /// The spaces of other members, while they differ from ours (said once per change).
    disagreement: Option<BTreeSet<String>>,
}

/// What one round decided.
struct Plan {
    /// The ranges to run.
    next: Vec<Range>,
    /// The ranges the ring gives us.
    desired: Vec<Range>,
    members: usize,
}

impl Holder for Members {
    type Plan = Plan;

    async fn round(&mut self, held: bool) -> Result<Option<Plan>, kube::Error> {
        self.attempt = crate::lease::now();
        if !held {
            self.published = false;
        }
        let selector = format!("{GROUP_LABEL}={}", self.settings.name);
        let listed = self
            .leases
            .list(&ListParams::default().labels(&selector))
            .await?
            .items;
        let others = self.live(&listed).await;
        let (plan, view, published) = self.plan(&others, held);
        renew(
            &self.leases,
            &self.name,
            &self.settings,
            &[(VIEW, &view), (SPACE, &self.space), (HELD, &encode(&published))],
        )
        .await?;
        Ok(Some(plan))
    }

    fn commit(&mut self, plan: Plan, tenure: Tenure, began: bool) {
        self.published = true;
        self.settling = plan.next != plan.desired;
        report(plan.members, &plan.next);
        let current = self.target.borrow().ranges.clone();
        if plan.next != current || (began && !plan.next.is_empty()) {
            tracing::info!(members = plan.members, share = %share(&plan.next), ranges = plan.next.len(), "shard ranges changed");
            metrics::get().shard_rebalances.inc();
            let _ = self.target.send(Assignment {
                ranges: plan.next,
                tenure,
            });
        }
    }

    fn lapsed(&mut self) {
        self.published = false;
        if !self.target.borrow().ranges.is_empty() {
            tracing::warn!(
                "member Lease not renewed within the renew deadline; every range stopped, to be earned again"
            );
            self.target.send_modify(|a| a.ranges.clear());
            report(0, &[]);
        }
    }

    async fn wait(&mut self, next: Instant, _: bool) {
        let mut wake = next;
        if let Some(expiry) = self.wake {
            wake = wake.min(expiry.max(self.attempt));
        }
        if self.settling {
            wake = wake.min(self.attempt + self.settings.retry_period / SETTLING);
        }
        tokio::select! {
            () = crate::lease::clock::sleep_until(wake) => {}
            // Ranges given up are published as soon as their controllers stopped.
            () = changed(&mut self.running) => {}
        }
    }
}

impl Members {
    /// The other members whose Leases are live by our clock; Leases nobody renewed for
    /// [`STALE_AFTER`] durations are deleted.
    async fn live(&mut self, listed: &[Lease]) -> Vec<Member> {
        let now = crate::lease::now();
        let names: BTreeSet<&str> = listed.iter().filter_map(|l| l.metadata.name.as_deref()).collect();
        self.observed.retain(|n| names.contains(n));
        self.wake = None;
        let mut live = Vec::new();
        for lease in listed {
            let (Some(name), Some(version)) = (
                lease.metadata.name.as_deref(),
                lease.metadata.resource_version.as_deref(),
            ) else {
                continue;
            };
            if name == self.name {
                continue;
            }
            let valid = crate::lease::valid_for(lease.spec.as_ref());
            let unchanged = self.observed.see(name, version, now);
            if unchanged < valid {
                let expires = now + (valid - unchanged) + EXPIRY_MARGIN;
                self.wake = Some(self.wake.map_or(expires, |w| w.min(expires)));
                live.extend(member(lease));
            } else if !valid.is_zero() && unchanged >= valid * STALE_AFTER {
                self.collect(name, version).await;
            }
        }
        live
    }

    /// Delete a stale member Lease, unless it changed since we saw it.
    async fn collect(&self, name: &str, version: &str) {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                resource_version: Some(version.to_string()),
                uid: None,
            }),
            ..DeleteParams::default()
        };
        match self.leases.delete(name, &params).await {
            Ok(_) => tracing::info!(
                lease = name,
                "deleted the member Lease of a replica gone for good"
            ),
            Err(e) => tracing::debug!(lease = name, error = %e, "stale member Lease not deleted"),
        }
    }

    /// The next ranges, the view to publish and the ranges to publish as held.
    fn plan(&mut self, others: &[Member], held: bool) -> (Plan, String, Vec<Range>) {
        let identity = self.settings.identity.clone();
        let me = identity.as_str();
        let view = view_of(
            others
                .iter()
                .map(|m| (m.identity.as_str(), m.space.as_str()))
                .chain([(me, self.space.as_str())]),
        );
        let gains = self.may_gain(others, &view);
        let peers: Vec<&Member> = others.iter().filter(|m| m.space == self.space).collect();
        let ids: BTreeSet<&str> = peers.iter().map(|m| m.identity.as_str()).chain([me]).collect();
        let desired = Ring::new(ids.iter().copied()).ranges(me);
        // Only an unbroken term keeps what it held; after a lapse everything is earned again.
        let current = if held {
            self.target.borrow().ranges.clone()
        } else {
            Vec::new()
        };
        let theirs: Vec<Range> = others.iter().flat_map(|m| m.held.clone()).collect();
        let theirs = range::normalize(&theirs);
        // A range another live Lease holds is never kept: after a freeze this term did not
        // see (the machine's clock stood still too), the others may have taken it.
        let keep = range::subtract(&range::intersect(&current, &desired), &theirs);
        let gain = if gains {
            range::subtract(&range::subtract(&desired, &theirs), &keep)
        } else {
            Vec::new()
        };
        let next = range::normalize(&[keep, gain].concat());
        let published = range::normalize(
            &[
                self.running.borrow().clone(),
                self.target.borrow().ranges.clone(),
                next.clone(),
            ]
            .concat(),
        );
        let plan = Plan {
            next,
            desired,
            members: ids.len(),
        };
        (plan, view, published)
    }

    /// Whether ranges may be taken now: our Lease is published in this term, every live
    /// member counts the same members, and no member of another space holds a range
    /// (nor comes first, when none does).
    fn may_gain(&mut self, others: &[Member], view: &str) -> bool {
        let strangers: BTreeSet<String> = others
            .iter()
            .filter(|m| m.space != self.space)
            .map(|m| m.space.clone())
            .collect();
        if strangers.is_empty() {
            self.disagreement = None;
        } else if self.disagreement.as_ref() != Some(&strangers) {
            tracing::warn!(ours = %self.space, theirs = ?strangers, "members split the objects differently (shard key or ring); only one way at a time: a space takes ranges only once no other holds any");
            self.disagreement = Some(strangers);
        }
        let strangers_hold = others.iter().any(|m| m.space != self.space && !m.held.is_empty());
        let first = others.iter().all(|m| m.space >= self.space);
        self.published && others.iter().all(|m| m.view == view) && !strangers_hold && first
    }
}

/// Until `running` changes; forever once its sender is gone.
async fn changed(running: &mut watch::Receiver<Vec<Range>>) {
    if running.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
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
    use super::super::member_lease::decode;
    use super::*;

    #[test]
    fn a_member_lease_is_named_validly_whatever_the_identity() {
        let s = Settings::new("capstan", "ns", "Host_01-1a2b3c4d");
        assert_eq!(lease_name(&s), "capstan-host-01-1a2b3c4d");
    }

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
    fn a_view_names_the_members_and_their_spaces_in_any_order() {
        let a = view_of([("x", "uid"), ("y", "uid")].into_iter());
        let b = view_of([("y", "uid"), ("x", "uid")].into_iter());
        assert_eq!(a, b);
        assert_ne!(a, view_of([("x", "uid")].into_iter()));
        assert_ne!(
            a,
            view_of([("x", "uid"), ("y", "namespace")].into_iter()),
            "the space counts"
        );
    }
}
