//! Consistent hashing of replicas onto the API server's shard hash space.
//!
//! The hash is the one `shardSelector` filters on. Upstream (k8s.io/apimachinery v0.37.2,
//! `pkg/sharding/hash.go`) computes `HashField(value)` as Go's `hash/fnv` `New64a()` over
//! `[]byte(value)`: the field's string bytes, no prefix, no separator, no length. The
//! golden values in the tests below were printed by that Go code.

use sha2::{Digest, Sha256};

use crate::shard::range::{Range, SPACE_END, normalize};

/// Virtual points per member. Each point is one range in a member's `shardSelector`, so
/// this bounds the selector's length (32 ranges: ~3.5 KB percent-encoded, under the 4 KB
/// that proxies in front of API servers commonly allow a query); 64 split the space a
/// little more evenly but made 8–12 KB selectors.
pub const POINTS_PER_MEMBER: u32 = 32;

/// The ring's parameters, as members compare them: members built with others never
/// split the space with these.
pub fn parameters() -> String {
    format!("sha256-points-{POINTS_PER_MEMBER}")
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a, 64 bits: the hash the API server's `shardRange` applies to a field's value.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(FNV_OFFSET, |h, b| (h ^ u64::from(*b)).wrapping_mul(FNV_PRIME))
}

/// Members placed on the hash space by their virtual points; a hash belongs to the
/// member owning the first point at or after it, wrapping past the top.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ring {
    members: Vec<String>,
    /// `(point, index into members)`, sorted; one entry per distinct point.
    points: Vec<(u64, usize)>,
}

impl Ring {
    /// A ring of `members` (duplicates ignored); the same set gives the same ring in any order.
    pub fn new<I, S>(members: I) -> Ring
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut members: Vec<String> = members.into_iter().map(Into::into).collect();
        members.sort();
        members.dedup();
        let mut points: Vec<(u64, usize)> = members
            .iter()
            .enumerate()
            .flat_map(|(m, name)| (0..POINTS_PER_MEMBER).map(move |i| (point(name, i), m)))
            .collect();
        // On a shared point the first name in sort order wins, whoever else is present,
        // so the tie never moves anything but the joining or leaving member's share.
        points.sort();
        points.dedup_by_key(|p| p.0);
        Ring { members, points }
    }

    /// The members, sorted.
    pub fn members(&self) -> &[String] {
        &self.members
    }

    /// The member owning `hash`; `None` for an empty ring.
    pub fn owner(&self, hash: u64) -> Option<&str> {
        let i = self.points.partition_point(|p| p.0 < hash);
        let (_, m) = self.points.get(i).or_else(|| self.points.first())?;
        Some(&self.members[*m])
    }

    /// The hashes `member` owns, normalized; empty if it is not a member.
    pub fn ranges(&self, member: &str) -> Vec<Range> {
        let Ok(me) = self.members.binary_search_by(|m| m.as_str().cmp(member)) else {
            return Vec::new();
        };
        let mut arcs = Vec::new();
        let mut prev = self.points.last().map(|p| p.0);
        for (i, &(at, owner)) in self.points.iter().enumerate() {
            if owner == me {
                // The arc `(previous point, at]`; the first one also takes the wrap-around.
                let after_prev = prev.map_or(0, |p| u128::from(p) + 1);
                if i == 0 {
                    arcs.extend(Range::wide(after_prev, SPACE_END));
                    arcs.extend(Range::wide(0, u128::from(at) + 1));
                } else {
                    arcs.extend(Range::wide(after_prev, u128::from(at) + 1));
                }
            }
            prev = Some(at);
        }
        normalize(&arcs)
    }
}

/// Where a member's `i`th virtual point sits. Not FNV: names that differ in a character or
/// two (`capstan-0#5`, `capstan-1#5`) get FNV-1a hashes close together, and three such
/// members got 35%, 9.6% and 55% of the space. SHA-256 spreads them (33%, 32%, 35%).
fn point(member: &str, i: u32) -> u64 {
    let digest = Sha256::digest(format!("{member}#{i}").as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::range::{overlaps, subtract, width};

    fn ring(names: &[&str]) -> Ring {
        Ring::new(names.iter().copied())
    }

    /// Every hash owned exactly once: the members' ranges are disjoint and fill the space,
    /// and `owner` agrees with `ranges`.
    fn assert_partition(r: &Ring) {
        let all: Vec<Vec<Range>> = r.members().iter().map(|m| r.ranges(m)).collect();
        assert_eq!(all.iter().map(|x| width(x)).sum::<u128>(), SPACE_END);
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                assert!(!overlaps(a, b));
            }
        }
        for k in 0..2000u32 {
            let h = fnv1a64(format!("object-{k}").as_bytes());
            let owner = r.owner(h).expect("a non-empty ring owns every hash");
            assert!(r.ranges(owner).iter().any(|x| x.contains(h)), "{h:#x} -> {owner}");
        }
    }

    #[test]
    fn fnv_matches_go_hash_fnv_and_upstream_hash_field() {
        // Go's hash/fnv golden64a, then apimachinery's sharding.HashField (v0.37.2).
        assert_eq!(fnv1a64(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a64(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(fnv1a64(b"abc"), 0xe71fa2190541574b);
        assert_eq!(fnv1a64(b"default"), 0xebada5168620c5fe);
        assert_eq!(fnv1a64(b"kube-system"), 0xdf65c7bc1d82b35e);
        assert_eq!(
            fnv1a64(b"3f1b2c4d-0000-4e5f-8a9b-0123456789ab"),
            0xa6d8eca5741fc140
        );
    }

    #[test]
    fn empty_ring_owns_nothing() {
        let r = Ring::new(Vec::<String>::new());
        assert_eq!(r.owner(0), None);
        assert_eq!(r.owner(u64::MAX), None);
        assert!(r.ranges("a").is_empty());
        assert!(r.members().is_empty());
    }

    #[test]
    fn single_member_owns_everything() {
        let r = ring(&["only"]);
        assert_eq!(r.ranges("only"), vec![Range::FULL]);
        assert_eq!(r.owner(0), Some("only"));
        assert_eq!(r.owner(u64::MAX), Some("only"));
        assert!(r.ranges("other").is_empty());
    }

    #[test]
    fn order_and_duplicates_do_not_matter() {
        let a = ring(&["c", "a", "b"]);
        assert_eq!(a, ring(&["a", "b", "c", "a"]));
        assert_eq!(a.members(), ["a", "b", "c"]);
        assert_partition(&a);
    }

    #[test]
    fn hashes_past_the_last_point_wrap_to_the_first() {
        let r = ring(&["a", "b", "c"]);
        let first = r.points[0];
        let last = r.points[r.points.len() - 1];
        assert_eq!(r.owner(u64::MAX), Some(r.members[first.1].as_str()));
        assert_eq!(r.owner(0), Some(r.members[first.1].as_str()));
        assert_eq!(r.owner(last.0), Some(r.members[last.1].as_str()));
        // The wrapped arc is split at 2^64/0: the first point's owner holds both ends.
        let ranges = r.ranges(&r.members[first.1]);
        assert_eq!(ranges[0].start(), 0);
        assert_eq!(ranges[ranges.len() - 1].end(), SPACE_END);
    }

    #[test]
    fn three_members_share_the_space_evenly() {
        let r = ring(&["capstan-0", "capstan-1", "capstan-2"]);
        assert_partition(&r);
        let samples = 30_000u32;
        for m in r.members() {
            let share = width(&r.ranges(m)) as f64 / SPACE_END as f64;
            let hits = (0..samples)
                .filter(|k| r.owner(fnv1a64(format!("key-{k}").as_bytes())) == Some(m.as_str()))
                .count();
            let sampled = hits as f64 / f64::from(samples);
            eprintln!("{m}: {share:.3} of the space, {sampled:.3} of the keys");
            assert!((0.20..=0.45).contains(&share), "{m}: {share}");
            assert!((0.20..=0.45).contains(&sampled), "{m}: {sampled}");
        }
    }

    /// Identities carry a suffix drawn per process, so the split differs run to run: over
    /// 2 000 trios like the host's, 99% give every member 20–47% and none under 15% or over
    /// 55% (the spread a cluster test of three replicas can rely on).
    #[test]
    fn three_members_with_drawn_suffixes_stay_near_a_third() {
        let (mut outside, mut far) = (0, 0);
        let trios = 2_000u32;
        for t in 0..trios {
            let names: Vec<String> = ["r-a", "r-b", "r-c"]
                .iter()
                .map(|base| format!("{base}-{:08x}", fnv1a64(format!("{base}{t}").as_bytes()) as u32))
                .collect();
            let r = Ring::new(names.iter().map(String::as_str));
            let shares: Vec<f64> = names
                .iter()
                .map(|m| width(&r.ranges(m)) as f64 / SPACE_END as f64)
                .collect();
            outside += usize::from(shares.iter().any(|s| !(0.20..0.47).contains(s)));
            far += usize::from(shares.iter().any(|s| !(0.15..0.55).contains(s)));
        }
        eprintln!("{outside} of {trios} trios had a member outside 20–47%");
        assert!(outside * 100 <= trios as usize, "{outside} of {trios}");
        assert_eq!(far, 0);
    }

    #[test]
    fn a_join_takes_only_from_the_others_and_a_leave_gives_only_to_them() {
        let before = ring(&["a", "b", "c"]);
        let after = ring(&["a", "b", "c", "d"]);
        assert_partition(&after);
        let mut lost = Vec::new();
        for m in before.members() {
            let (old, new) = (before.ranges(m), after.ranges(m));
            assert!(subtract(&new, &old).is_empty(), "{m} gained on a join");
            lost.extend(subtract(&old, &new));
        }
        // What the others lost is exactly what the newcomer owns.
        assert_eq!(normalize(&lost), after.ranges("d"));
        assert!(!after.ranges("d").is_empty());

        // "b" leaves: the rest only grow, by exactly what "b" had.
        let left = ring(&["a", "c", "d"]);
        assert_partition(&left);
        let mut gained = Vec::new();
        for m in left.members() {
            let (old, new) = (after.ranges(m), left.ranges(m));
            assert!(subtract(&old, &new).is_empty(), "{m} lost on a leave");
            gained.extend(subtract(&new, &old));
        }
        assert_eq!(normalize(&gained), after.ranges("b"));
    }
}
