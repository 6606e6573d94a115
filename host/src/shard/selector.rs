//! The shard key and its two filters: the `shardSelector` text the API server applies, and
//! the same predicate applied here, so a replica sees the same objects with or without the
//! `ShardedListAndWatch` gate.
//!
//! Upstream (k8s.io/apiserver v0.37.2, `pkg/sharding/parser.go`) accepts only
//! `shardRange(<field>, '<start>', '<end>')` joined by `||`, all on one field, with bounds of
//! exactly 16 lower-case hex digits after `0x` (or the literal `'0x10000000000000000'`): the
//! API reference's own example `'0x0'` is refused ("did you mean 0x0000000000000000?").

use std::fmt;
use std::str::FromStr;

use crate::shard::range::{Range, SPACE_END, normalize};
use crate::shard::ring::fnv1a64;

/// What [`render`] sends for an empty set. Upstream refuses an empty selector (its absence
/// means "everything") and any range with `start >= end`, so "nothing" cannot be said; the
/// narrowest range holds one hash, `u64::MAX`: one object in 2^64 would still arrive, which
/// [`matches`] (false for an empty set) then drops. Callers owning nothing should not watch.
pub const NOTHING: Range = match Range::new(u64::MAX, SPACE_END) {
    Some(r) => r,
    // Evaluated at compile time: a wrong bound fails the build, never a request.
    None => panic!("[u64::MAX, 2^64) is a valid range"),
};

/// Which field of an object decides its shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ShardKey {
    /// `metadata.namespace`: a namespace's objects stay together on one replica.
    Namespace,
    /// `metadata.uid`: objects spread evenly whatever their namespace.
    Uid,
}

impl ShardKey {
    /// The field path `shardRange` names for this key.
    pub fn field(self) -> &'static str {
        match self {
            ShardKey::Namespace => "object.metadata.namespace",
            ShardKey::Uid => "object.metadata.uid",
        }
    }
}

impl fmt::Display for ShardKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ShardKey::Namespace => "namespace",
            ShardKey::Uid => "uid",
        })
    }
}

/// A shard key that is neither `namespace` nor `uid`.
#[derive(Debug, thiserror::Error)]
#[error("unknown shard key {0:?}: expected `namespace` or `uid`")]
pub struct UnknownShardKey(String);

impl FromStr for ShardKey {
    type Err = UnknownShardKey;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "namespace" => Ok(ShardKey::Namespace),
            "uid" => Ok(ShardKey::Uid),
            other => Err(UnknownShardKey(other.to_string())),
        }
    }
}

/// The hash the API server computes for an object under `key`.
///
/// Upstream hashes `accessor.GetNamespace()` (apimachinery `pkg/sharding/accessor.go`),
/// which is `""` for a cluster-scoped object: so is `None` here. A Namespace object is
/// cluster-scoped too, so under [`ShardKey::Namespace`] every Namespace lands on one shard.
pub fn hash_of(key: ShardKey, namespace: Option<&str>, uid: &str) -> u64 {
    match key {
        ShardKey::Namespace => fnv1a64(namespace.unwrap_or("").as_bytes()),
        ShardKey::Uid => fnv1a64(uid.as_bytes()),
    }
}

/// The `shardSelector` for `ranges` (normalized first); one matching nothing for an empty set.
pub fn render(key: ShardKey, ranges: &[Range]) -> String {
    let mut ranges = normalize(ranges);
    if ranges.is_empty() {
        ranges.push(NOTHING);
    }
    let field = key.field();
    ranges
        .iter()
        // `{:016x}` of 2^64 is the 17 digits upstream wants for the top.
        .map(|r| {
            format!(
                "shardRange({field}, '0x{:016x}', '0x{:016x}')",
                r.start(),
                r.end()
            )
        })
        .collect::<Vec<_>>()
        .join(" || ")
}

/// Whether the object is in `ranges` under `key`: the predicate [`render`]'s selector has
/// the API server apply (`start <= hash < end` for some range).
pub fn matches(key: ShardKey, ranges: &[Range], namespace: Option<&str>, uid: &str) -> bool {
    let hash = hash_of(key, namespace, uid);
    ranges.iter().any(|r| r.contains(hash))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(start: u64, end: u128) -> Range {
        Range::new(start, end).expect("a valid range")
    }

    #[test]
    fn keys_parse_print_and_name_their_field() {
        for key in [ShardKey::Namespace, ShardKey::Uid] {
            assert_eq!(key.to_string().parse::<ShardKey>().ok(), Some(key));
        }
        assert_eq!(ShardKey::Uid.field(), "object.metadata.uid");
        assert_eq!(ShardKey::Namespace.field(), "object.metadata.namespace");
        let err = "name".parse::<ShardKey>().unwrap_err().to_string();
        assert!(err.contains("\"name\"") && err.contains("`uid`"), "{err}");
    }

    #[test]
    fn cluster_scoped_objects_hash_the_empty_namespace() {
        assert_eq!(hash_of(ShardKey::Namespace, None, "u"), 0xcbf29ce484222325);
        assert_eq!(hash_of(ShardKey::Namespace, Some(""), "u"), 0xcbf29ce484222325);
        assert_eq!(
            hash_of(ShardKey::Namespace, Some("default"), "u"),
            0xebada5168620c5fe
        );
        assert_eq!(hash_of(ShardKey::Uid, Some("default"), "a"), 0xaf63dc4c8601ec8c);
    }

    #[test]
    fn renders_what_upstream_parses_and_prints_back() {
        // Upstream's Parse(..).String() of these ranges, printed by the v0.37.2 Go code.
        let two = [r(0x8000000000000000, SPACE_END), r(0, 0x4000000000000000)];
        assert_eq!(
            render(ShardKey::Uid, &two),
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x4000000000000000') || \
             shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')"
        );
        assert_eq!(
            render(ShardKey::Namespace, &[r(0xabc, 0xdef0)]),
            "shardRange(object.metadata.namespace, '0x0000000000000abc', '0x000000000000def0')"
        );
        // Touching ranges go out as one.
        let halves = [r(0, 1 << 63), r(1 << 63, SPACE_END)];
        assert_eq!(
            render(ShardKey::Uid, &halves),
            render(ShardKey::Uid, &[Range::FULL])
        );
    }

    #[test]
    fn an_empty_set_renders_the_narrowest_range_and_matches_nothing() {
        assert_eq!(
            render(ShardKey::Uid, &[]),
            "shardRange(object.metadata.uid, '0xffffffffffffffff', '0x10000000000000000')"
        );
        assert!(!matches(ShardKey::Uid, &[], Some("ns"), "uid"));
    }

    #[test]
    fn matches_uses_half_open_ranges_of_the_keyed_field() {
        let h = hash_of(ShardKey::Namespace, Some("default"), "");
        let upto = [r(0, u128::from(h))];
        let from = [r(h, SPACE_END)];
        assert!(!matches(ShardKey::Namespace, &upto, Some("default"), "x"));
        assert!(matches(ShardKey::Namespace, &from, Some("default"), "x"));
        // The uid is irrelevant under the namespace key, and the other way round.
        assert!(matches(ShardKey::Namespace, &from, Some("default"), "anything"));
        let u = hash_of(ShardKey::Uid, None, "a");
        assert!(matches(ShardKey::Uid, &[r(u, u128::from(u) + 1)], Some("x"), "a"));
        assert!(matches(ShardKey::Uid, &[Range::FULL], None, ""));
    }
}
