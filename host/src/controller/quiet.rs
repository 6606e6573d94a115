//! Quiet answers, remembered: a plugin is a deterministic function of its request (the
//! sandbox gives it no clock, entropy, filesystem or network of its own), so when a
//! parent's inputs are exactly those of its last quiet reconcile, calling the plugin
//! again can only repeat an answer that changed nothing.
//!
//! "Quiet" is a reconcile that succeeded, made no API write, recorded no event, asked
//! for no requeue and was not deferred. A reconcile that wrote is not remembered: its
//! inputs are from before its own writes, and a child it created that someone deletes
//! before any reconcile saw it would bring back exactly those inputs — remembered, the
//! child would never be made again. The inputs are the parent's, children's and related objects' UIDs
//! and resourceVersions and the plugin version; the only other field of a request,
//! `now`, is the one the contract asks a time-dependent answer to cover with
//! `requeue-after-ms` — and an answer that asks for a requeue is never remembered. So a
//! resync, a re-list after a dropped watch, or a shard hand-over that finds nothing
//! changed costs a cache lookup, not a sandboxed call and its checks; anything that
//! changed (a write, a watch event, a new plugin version) calls the plugin as before.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use kube::api::ObjectMeta;

use super::compact::Compact;

/// A digest of one reconcile's inputs (all but `now`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Inputs(u64);

impl Inputs {
    /// The inputs of a reconcile of `parent` by plugin version `version`, with its
    /// observed children (and the index of each one's declared kind) and related objects.
    pub(super) fn of<'a>(
        version: u64,
        parent: &ObjectMeta,
        children: impl IntoIterator<Item = (usize, &'a ObjectMeta)>,
        related: &[Arc<Compact>],
    ) -> Inputs {
        let mut h = DefaultHasher::new();
        version.hash(&mut h);
        identity(parent, &mut h);
        for (kind, child) in children {
            (0u8, kind).hash(&mut h);
            identity(child, &mut h);
        }
        for object in related {
            1u8.hash(&mut h);
            identity(&object.metadata, &mut h);
        }
        Inputs(h.finish())
    }
}

/// What identifies one version of an object: its UID and resourceVersion.
fn identity(meta: &ObjectMeta, h: &mut DefaultHasher) {
    meta.uid.hash(h);
    meta.resource_version.hash(h);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(uid: &str, version: &str) -> ObjectMeta {
        ObjectMeta {
            uid: Some(uid.into()),
            resource_version: Some(version.into()),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn any_changed_version_kind_or_plugin_changes_the_inputs() {
        let (a, b) = (1, 2);
        let parent = meta("p", "1");
        let child = meta("c", "7");
        let base = Inputs::of(a, &parent, [(0, &child)], &[]);
        assert_eq!(base, Inputs::of(a, &parent, [(0, &child)], &[]));
        assert_ne!(base, Inputs::of(a, &meta("p", "2"), [(0, &child)], &[]));
        assert_ne!(base, Inputs::of(a, &parent, [(0, &meta("c", "8"))], &[]));
        assert_ne!(base, Inputs::of(a, &parent, [(1, &child)], &[]));
        assert_ne!(base, Inputs::of(a, &parent, [], &[]));
        assert_ne!(base, Inputs::of(b, &parent, [(0, &child)], &[]));
        let related = Arc::new(Compact::of(kube::api::DynamicObject {
            types: None,
            metadata: meta("r", "3"),
            data: serde_json::Value::Null,
        }));
        assert_ne!(base, Inputs::of(a, &parent, [(0, &child)], &[related]));
    }
}
