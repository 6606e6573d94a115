//! One child kind's cache, indexed by the UID of each child's controller, so a reconcile
//! reads its own children in O(own children) instead of scanning every cached child of
//! the kind (kube-runtime's `Store` has no indexers). It is fed the watcher's events the
//! way kube-runtime's reflector `Writer` is, re-list included: a re-list builds a new
//! set and replaces the old one at `InitDone`, so children deleted while the watch was
//! down leave the cache.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};

use kube::ResourceExt;
use kube::runtime::watcher::Event;

use super::compact::Compact;
use crate::key::ObjectKey;

/// Children by key, and the keys each controller owns.
#[derive(Default)]
struct Index {
    objects: HashMap<ObjectKey, Arc<Compact>>,
    by_owner: HashMap<String, HashSet<ObjectKey>>,
}

impl Index {
    fn insert(&mut self, object: Arc<Compact>) {
        let key = ObjectKey::of(&*object);
        self.remove(&key);
        if let Some(owner) = controller_uid(&object) {
            self.by_owner.entry(owner).or_default().insert(key.clone());
        }
        self.objects.insert(key, object);
    }

    fn remove(&mut self, key: &ObjectKey) {
        let Some(old) = self.objects.remove(key) else {
            return;
        };
        if let Some(owner) = controller_uid(&old)
            && let Some(keys) = self.by_owner.get_mut(&owner)
        {
            keys.remove(key);
            if keys.is_empty() {
                self.by_owner.remove(&owner);
            }
        }
    }
}

/// The UID of an object's controller, if it has one.
fn controller_uid(object: &Compact) -> Option<String> {
    crate::apply::controller(object.owner_references()).map(|r| r.uid.clone())
}

/// A cache of one child kind, shared by the watch that feeds it and the reconciles.
#[derive(Clone, Default)]
pub(super) struct Owned {
    inner: Arc<RwLock<Cache>>,
}

#[derive(Default)]
struct Cache {
    current: Index,
    /// The set a re-list is building, swapped in at `InitDone`.
    relist: Option<Index>,
}

impl Owned {
    /// Take in one watcher event.
    pub(super) fn apply(&self, event: &Event<Arc<Compact>>) {
        let mut cache = self.inner.write().unwrap_or_else(|e| e.into_inner());
        match event {
            Event::Apply(o) => cache.current.insert(o.clone()),
            Event::Delete(o) => cache.current.remove(&ObjectKey::of(&**o)),
            Event::Init => cache.relist = Some(Index::default()),
            Event::InitApply(o) => cache.relist.get_or_insert_with(Index::default).insert(o.clone()),
            Event::InitDone => {
                if let Some(listed) = cache.relist.take() {
                    cache.current = listed;
                }
            }
        }
    }

    /// An event of the watch every plugin shares, as this cache should take it: `ours`
    /// decides whose objects it keeps. Another plugin's object is dropped, but one this
    /// cache still holds (relabelled away from us by hand or by a third tool) is a removal
    /// of the copy held, so no stale copy is left to compare against or to prune, and its
    /// parent hears of it. A re-list needs no such care: it builds the set anew.
    pub(super) fn view(
        &self,
        event: Event<Arc<Compact>>,
        ours: impl Fn(&Compact) -> bool,
    ) -> Option<Event<Arc<Compact>>> {
        match event {
            Event::Apply(o) | Event::Delete(o) if !ours(&o) => {
                self.get(&ObjectKey::of(&*o)).map(Event::Delete)
            }
            Event::InitApply(o) if !ours(&o) => None,
            event => Some(event),
        }
    }

    /// The children whose controller has this UID, by name.
    pub(super) fn owned_by(&self, uid: &str) -> Vec<Arc<Compact>> {
        let cache = self.inner.read().unwrap_or_else(|e| e.into_inner());
        let Some(keys) = cache.current.by_owner.get(uid) else {
            return Vec::new();
        };
        let mut children: Vec<_> = keys
            .iter()
            .filter_map(|k| cache.current.objects.get(k).cloned())
            .collect();
        // A stable order, so equal caches give equal requests (goldens, replays).
        children.sort_by_key(|c| ObjectKey::of(&**c));
        children
    }

    /// The cached child with this key.
    pub(super) fn get(&self, key: &ObjectKey) -> Option<Arc<Compact>> {
        let cache = self.inner.read().unwrap_or_else(|e| e.into_inner());
        cache.current.objects.get(key).cloned()
    }

    /// How many children are cached.
    pub(super) fn len(&self) -> usize {
        let cache = self.inner.read().unwrap_or_else(|e| e.into_inner());
        cache.current.objects.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use kube::api::{DynamicObject, ObjectMeta};

    fn child(name: &str, owner: Option<&str>) -> Arc<Compact> {
        let mut o = DynamicObject {
            types: None,
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                ..ObjectMeta::default()
            },
            data: serde_json::Value::Null,
        };
        if let Some(uid) = owner {
            o.metadata.owner_references = Some(vec![OwnerReference {
                uid: uid.into(),
                controller: Some(true),
                ..OwnerReference::default()
            }]);
        }
        Arc::new(Compact::of(o))
    }

    fn names(children: Vec<Arc<Compact>>) -> Vec<String> {
        children.iter().map(|c| c.name_any()).collect()
    }

    #[test]
    fn children_are_found_by_their_controller() {
        let cache = Owned::default();
        cache.apply(&Event::Apply(child("b", Some("u1"))));
        cache.apply(&Event::Apply(child("a", Some("u1"))));
        cache.apply(&Event::Apply(child("c", Some("u2"))));
        cache.apply(&Event::Apply(child("orphan", None)));
        assert_eq!(names(cache.owned_by("u1")), ["a", "b"]);
        assert_eq!(names(cache.owned_by("u2")), ["c"]);
        assert!(cache.owned_by("u3").is_empty());
        let orphan = cache.get(&ObjectKey::new(Some("ns"), "orphan")).expect("cached");
        assert_eq!(
            orphan.value().expect("shown")["metadata"]["name"],
            "orphan",
            "the JSON is the object"
        );
        assert_eq!(cache.len(), 4);
    }

    #[test]
    fn a_new_controller_or_a_delete_moves_the_child() {
        let cache = Owned::default();
        cache.apply(&Event::Apply(child("a", Some("u1"))));
        cache.apply(&Event::Apply(child("a", Some("u2"))));
        assert!(cache.owned_by("u1").is_empty());
        assert_eq!(names(cache.owned_by("u2")), ["a"]);
        cache.apply(&Event::Delete(child("a", Some("u2"))));
        assert!(cache.owned_by("u2").is_empty());
        assert_eq!(cache.len(), 0);
    }

    #[test]
    fn a_relist_replaces_the_set_at_its_end() {
        let cache = Owned::default();
        cache.apply(&Event::Apply(child("gone", Some("u1"))));
        cache.apply(&Event::Init);
        cache.apply(&Event::InitApply(child("kept", Some("u1"))));
        // Until the re-list is done, reconciles see the old set.
        assert_eq!(names(cache.owned_by("u1")), ["gone"]);
        cache.apply(&Event::InitDone);
        assert_eq!(names(cache.owned_by("u1")), ["kept"]);
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn a_child_relabelled_away_leaves_the_cache_as_a_removal_of_the_copy_held() {
        let cache = Owned::default();
        // "Ours" stands in for the plugin label: here, the children named `a`.
        let ours = |o: &Compact| o.name_any() == "a";
        for name in ["a", "b"] {
            if let Some(event) = cache.view(Event::Apply(child(name, Some("u1"))), ours) {
                cache.apply(&event);
            }
        }
        assert_eq!(
            names(cache.owned_by("u1")),
            ["a"],
            "another plugin's child is not kept"
        );
        let held = cache.get(&ObjectKey::new(Some("ns"), "a")).expect("held");

        // `a` now carries another plugin's label: what goes on is the removal of the copy
        // held (it names the owner to wake), and the cache lets it go.
        let relabelled = child("a", Some("u2"));
        match cache.view(Event::Apply(relabelled), |_: &Compact| false) {
            Some(event @ Event::Delete(_)) => {
                let Event::Delete(removed) = &event else {
                    unreachable!()
                };
                assert!(Arc::ptr_eq(removed, &held), "the copy held, not the new object");
                cache.apply(&event);
            }
            other => panic!("expected the held copy's removal, got {other:?}"),
        }
        assert!(cache.owned_by("u1").is_empty());
        assert_eq!(cache.len(), 0);
        // Another plugin's object never held, and a re-list's item of another plugin: nothing.
        assert!(cache.view(Event::Delete(child("c", None)), ours).is_none());
        assert!(cache.view(Event::InitApply(child("c", None)), ours).is_none());
        assert!(matches!(cache.view(Event::InitDone, ours), Some(Event::InitDone)));
    }
}
