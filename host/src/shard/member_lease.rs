//! A member Lease as written and read: its name, labels and annotations (the ranges a
//! member holds, the members it counts, how it splits the space), and the member it
//! describes.

use std::collections::BTreeSet;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ObjectMeta, Patch, PatchParams};

use super::range::Range;
use super::ring::fnv1a64;
use crate::lease::Settings;

/// The label naming a member Lease's group.
pub const GROUP_LABEL: &str = "capstan.dev/shard-group";
/// The annotation listing the ranges a member may be reconciling.
pub const HELD: &str = "capstan.dev/held";
/// The annotation naming the members a member counts (a hash of their identities and spaces).
pub const VIEW: &str = "capstan.dev/view";
/// The annotation naming how a member splits objects: shard key and ring parameters.
pub const SPACE: &str = "capstan.dev/space";
/// The field manager of member Leases.
pub(super) const MANAGER: &str = "capstan-shard";
/// Another live member, as its Lease says.
#[derive(Debug)]
pub(super) struct Member {
    pub identity: String,
    pub view: String,
    pub space: String,
    pub held: Vec<Range>,
}

/// The member Lease's name: the group, then the identity, made a valid object name
/// (an identity may carry a hostname's capitals or a `_`).
pub(super) fn lease_name(s: &Settings) -> String {
    let name: String = format!("{}-{}", s.name, s.identity)
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '-' | '.') => c,
            _ => '-',
        })
        .collect();
    name.trim_end_matches(['-', '.']).to_string()
}

/// Write our Lease: renewed now, with `annotations`.
pub(super) async fn renew(
    leases: &Api<Lease>,
    name: &str,
    s: &Settings,
    annotations: &[(&str, &str)],
) -> kube::Result<()> {
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some([(GROUP_LABEL.to_string(), s.name.clone())].into()),
            annotations: Some(
                annotations
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(s.identity.clone()),
            lease_duration_seconds: Some(s.recorded_lease_seconds()),
            renew_time: Some(MicroTime(crate::lease::wall_clock())),
            ..LeaseSpec::default()
        }),
    };
    let params = PatchParams::apply(MANAGER).force();
    leases.patch(name, &params, &Patch::Apply(&lease)).await?;
    Ok(())
}

/// A member from its Lease (live or not); `None` when it is not a member's.
pub(super) fn member(lease: &Lease) -> Option<Member> {
    let spec = lease.spec.as_ref()?;
    let annotations = lease.metadata.annotations.as_ref();
    let get = |k: &str| annotations.and_then(|a| a.get(k)).cloned().unwrap_or_default();
    Some(Member {
        identity: spec.holder_identity.clone()?,
        view: get(VIEW),
        space: get(SPACE),
        held: decode(&get(HELD)),
    })
}

/// The members a replica counts (identity and space), as one short string to compare.
pub(super) fn view_of<'a>(members: impl Iterator<Item = (&'a str, &'a str)>) -> String {
    let sorted: BTreeSet<String> = members.map(|(id, space)| format!("{id}\t{space}")).collect();
    let joined: Vec<&str> = sorted.iter().map(String::as_str).collect();
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
