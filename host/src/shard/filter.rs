//! What one replica's controllers reconcile: the hash ranges it holds, applied to a
//! plugin's watches by the API server (`shardSelector`) where it can, and by the same
//! predicate on the host where it cannot — so behaviour is the same either way.
//!
//! A parent belongs to the range its key hashes into. A child follows its parent: under
//! the `namespace` key a namespaced parent's children share its namespace, so the server
//! filters their watch too; under `uid` (and for cluster-scoped parents, whose children
//! live in other namespaces) a child is matched by its controller's UID, on the host.

use kube::Resource;

use super::range::Range;
use super::selector::{ShardKey, hash_of};
use super::wire::{Collection, MAX_SELECTOR_BYTES, SelectorLayer, bounded_selector};

/// The ranges a replica reconciles and how they are applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Filter {
    /// What is hashed.
    pub key: ShardKey,
    /// The ranges held (normalized).
    pub ranges: Vec<Range>,
    /// Whether the API server filters watches (`ShardedListAndWatch` on).
    pub server_side: bool,
}

impl Filter {
    /// Whether a parent is in the ranges.
    pub fn parent(&self, parent: &impl Resource) -> bool {
        let meta = parent.meta();
        self.has(hash_of(
            self.key,
            meta.namespace.as_deref(),
            meta.uid.as_deref().unwrap_or_default(),
        ))
    }

    /// Whether a child's parent is in the ranges: its controller's UID under the `uid`
    /// key, its own namespace under `namespace` (a parent's children share it).
    pub fn child(&self, child: &impl Resource) -> bool {
        let meta = child.meta();
        match self.key {
            ShardKey::Namespace => self.has(hash_of(self.key, meta.namespace.as_deref(), "")),
            ShardKey::Uid => {
                let references = meta.owner_references.as_deref().unwrap_or_default();
                crate::apply::controller(references)
                    .is_some_and(|r| self.has(hash_of(self.key, None, &r.uid)))
            }
        }
    }

    /// Whether a related object may concern a parent in the ranges. A namespaced parent
    /// granted no other namespace reads related objects of its own only, so under the
    /// `namespace` key a namespaced one outside the ranges concerns none of this
    /// replica's parents; otherwise any may (the watch says which: `Role::Related`).
    pub fn related(&self, object: &impl Resource, kind_namespaced: bool) -> bool {
        !self.shards_related(kind_namespaced)
            || self.has(hash_of(self.key, object.meta().namespace.as_deref(), ""))
    }

    /// Whether a related kind's objects are split by range: namespaced ones under the
    /// `namespace` key (which [`Filter::for_parent_scope`] keeps for namespaced parents only).
    pub fn shards_related(&self, kind_namespaced: bool) -> bool {
        self.key == ShardKey::Namespace && kind_namespaced
    }

    fn has(&self, hash: u64) -> bool {
        self.ranges.iter().any(|r| r.contains(hash))
    }

    /// This filter for a plugin whose parent kind is cluster-scoped: such parents all have
    /// the empty namespace, so they are spread by UID whatever the key.
    pub fn for_parent_scope(&self, namespaced: bool) -> Filter {
        let key = if namespaced { self.key } else { ShardKey::Uid };
        Filter { key, ..self.clone() }
    }

    /// Whether the server can filter a child kind's watch: the key is the namespace and
    /// parents are namespaced (their children share their namespace).
    pub fn server_filters_children(&self, parent_namespaced: bool) -> bool {
        self.server_side && self.key == ShardKey::Namespace && parent_namespaced
    }

    /// `client` with the selector on list and watch requests of `collections`.
    pub fn client(&self, client: &kube::Client, collections: Vec<Collection>) -> kube::Client {
        let selector = bounded_selector(self.key, &self.ranges, MAX_SELECTOR_BYTES);
        let layer = SelectorLayer::new(&selector, collections);
        crate::layered::layered(client, layer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use kube::api::ObjectMeta;

    fn object(ns: &str, uid: &str, owner: Option<&str>) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                uid: Some(uid.into()),
                owner_references: owner.map(|o| {
                    vec![OwnerReference {
                        uid: o.into(),
                        controller: Some(true),
                        ..OwnerReference::default()
                    }]
                }),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    fn half(key: ShardKey, of: u64) -> Filter {
        let lower = Range::new(0, 1 << 63).expect("a range");
        let upper = Range::new(1 << 63, super::super::range::SPACE_END).expect("a range");
        Filter {
            key,
            ranges: vec![if of < (1 << 63) { lower } else { upper }],
            server_side: false,
        }
    }

    #[test]
    fn a_child_follows_its_parent() {
        let parent = object("ns", "parent-uid", None);
        let child = object("ns", "child-uid", Some("parent-uid"));
        for key in [ShardKey::Uid, ShardKey::Namespace] {
            let h = hash_of(key, Some("ns"), "parent-uid");
            let mine = half(key, h);
            let other = half(key, h ^ (1 << 63));
            assert!(mine.parent(&parent) && mine.child(&child), "{key}");
            assert!(!other.parent(&parent) && !other.child(&child), "{key}");
        }
        let orphan = object("ns", "o", None);
        let h = hash_of(ShardKey::Uid, None, "x");
        assert!(!half(ShardKey::Uid, h).child(&orphan) && !half(ShardKey::Uid, h ^ (1 << 63)).child(&orphan));
    }

    #[test]
    fn related_objects_are_split_by_namespace_only_under_the_namespace_key() {
        let object = object("team-a", "u1", None);
        let by_ns = half(
            ShardKey::Namespace,
            hash_of(ShardKey::Namespace, Some("team-a"), ""),
        );
        let other = Filter {
            ranges: vec![],
            ..by_ns.clone()
        };
        assert!(by_ns.related(&object, true));
        assert!(!other.related(&object, true));
        // Cluster-scoped related kinds, and every kind under the uid key, are not split.
        assert!(other.related(&object, false));
        let by_uid = Filter {
            key: ShardKey::Uid,
            ..other
        };
        assert!(by_uid.related(&object, true));
    }

    #[test]
    fn cluster_scoped_parents_spread_by_uid() {
        let f = half(ShardKey::Namespace, 0);
        assert_eq!(f.for_parent_scope(false).key, ShardKey::Uid);
        assert_eq!(f.for_parent_scope(true).key, ShardKey::Namespace);
        assert!(
            !Filter {
                server_side: true,
                ..f.clone()
            }
            .server_filters_children(false)
        );
        assert!(
            Filter {
                server_side: true,
                ..f
            }
            .server_filters_children(true)
        );
    }
}
