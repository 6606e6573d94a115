//! One related kind's objects by namespace, with a change count per namespace, kept from
//! the watch's events: a label query reads only the objects of its namespace, and its
//! answer holds until an object of that namespace changes — not until any object of the
//! kind does, so a busy namespace never makes every parent's answer read again.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use kube::runtime::watcher::Event;

use super::super::compact::Compact;

/// The names in each namespace (`None`: a cluster-scoped kind) and when it last changed.
#[derive(Default)]
pub(super) struct Namespaces {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    buckets: HashMap<Option<String>, Bucket>,
    /// A list in progress (after `Init`): what it has shown so far.
    listing: Option<HashMap<Option<String>, BTreeSet<String>>>,
    /// Counts every change; a bucket carries the count of its last one, so counts only
    /// grow, per namespace as across them.
    changes: u64,
}

#[derive(Default)]
struct Bucket {
    changes: u64,
    names: BTreeSet<String>,
}

impl Inner {
    fn touch(&mut self, namespace: &Option<String>) -> &mut Bucket {
        self.changes += 1;
        let bucket = self.buckets.entry(namespace.clone()).or_default();
        bucket.changes = self.changes;
        bucket
    }
}

impl Namespaces {
    /// Take in one event of the watch (after the cache has).
    pub fn take<O: std::borrow::Borrow<Compact>>(&self, event: &Event<O>) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let of = |o: &Compact| {
            (
                o.metadata.namespace.clone(),
                o.metadata.name.clone().unwrap_or_default(),
            )
        };
        match event {
            Event::Apply(o) => {
                let (ns, name) = of(o.borrow());
                inner.touch(&ns).names.insert(name);
            }
            Event::Delete(o) => {
                let (ns, name) = of(o.borrow());
                inner.touch(&ns).names.remove(&name);
            }
            Event::Init => inner.listing = Some(HashMap::new()),
            Event::InitApply(o) => {
                let (ns, name) = of(o.borrow());
                let listing = inner.listing.get_or_insert_default();
                listing.entry(ns).or_default().insert(name);
            }
            Event::InitDone => {
                // The list replaces the cache: every namespace, listed or gone, changed.
                let listed = inner.listing.take().unwrap_or_default();
                let gone: Vec<Option<String>> = inner.buckets.keys().cloned().collect();
                for ns in gone {
                    inner.touch(&ns).names.clear();
                }
                for (ns, names) in listed {
                    inner.touch(&ns).names = names;
                }
            }
        }
    }

    /// The count of the last change in `namespace` (0: none seen).
    pub fn changes(&self, namespace: Option<&str>) -> u64 {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let key = namespace.map(str::to_string);
        inner.buckets.get(&key).map_or(0, |b| b.changes)
    }

    /// The count of the last change in any namespace.
    pub fn last_change(&self) -> u64 {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).changes
    }

    /// Every namespace holding objects of the kind (`None`: a cluster-scoped kind's).
    pub fn all(&self) -> Vec<Option<String>> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        (inner.buckets.iter())
            .filter(|(_, b)| !b.names.is_empty())
            .map(|(ns, _)| ns.clone())
            .collect()
    }

    /// The names of the objects in `namespace`, in order.
    pub fn names(&self, namespace: Option<&str>) -> Vec<String> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let key = namespace.map(str::to_string);
        inner
            .buckets
            .get(&key)
            .map(|b| b.names.iter().cloned().collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(ns: &str, name: &str) -> Compact {
        let object = kube::api::DynamicObject {
            types: None,
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                namespace: Some(ns.into()),
                ..Default::default()
            },
            data: serde_json::json!({}),
        };
        Compact::of(object)
    }

    #[test]
    fn a_change_in_one_namespace_leaves_the_others_counts_as_they_were() {
        let index = Namespaces::default();
        index.take(&Event::<Compact>::Init);
        for (ns, name) in [("a", "x"), ("a", "y"), ("b", "z")] {
            index.take(&Event::InitApply(object(ns, name)));
        }
        assert!(index.names(Some("a")).is_empty(), "not before the list is done");
        index.take(&Event::<Compact>::InitDone);
        assert_eq!(index.names(Some("a")), ["x", "y"]);
        let (a, b) = (index.changes(Some("a")), index.changes(Some("b")));
        index.take(&Event::Apply(object("b", "w")));
        assert_eq!(index.changes(Some("a")), a, "a change in b is none of a's");
        assert!(index.changes(Some("b")) > b);
        index.take(&Event::Delete(object("a", "x")));
        assert_eq!(index.names(Some("a")), ["y"]);
        assert!(index.changes(Some("a")) > a);
        // A namespace seen for the first time has changed since any answer read it empty.
        assert_eq!(index.changes(Some("c")), 0);
        index.take(&Event::Apply(object("c", "v")));
        assert!(index.changes(Some("c")) > 0);
        // A new list changes every namespace, one that is gone too.
        let before = index.changes(Some("c"));
        index.take(&Event::<Compact>::Init);
        index.take(&Event::InitApply(object("a", "y")));
        index.take(&Event::<Compact>::InitDone);
        assert!(index.changes(Some("c")) > before);
        assert!(index.names(Some("c")).is_empty());
        assert_eq!(index.names(Some("a")), ["y"]);
        // Any change moves the count of every namespace; only those holding objects are read.
        let any = index.last_change();
        index.take(&Event::Apply(object("d", "u")));
        assert!(index.last_change() > any);
        let mut all = index.all();
        all.sort();
        assert_eq!(all, [Some("a".to_string()), Some("d".to_string())]);
    }
}
