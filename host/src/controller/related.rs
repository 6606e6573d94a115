//! Related objects: kinds a plugin reads but never writes. Each declared kind is watched
//! (in the scope parents are, without `managedFields`) into a cache; per parent, the
//! plugin's `related` answer is asked once per parent version, checked by the contract's
//! rules, and answered from the caches. A change to a related object reconciles every
//! parent whose queries select it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::TryStreamExt;
use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::discovery::ApiResource;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};

use capstan_contract::related::{Parent, Resolved, resolve};

use super::compact::Compact;
use super::{Shared, Wiring, api, cached, discovery, queue, sharded};
use crate::engine::{DispatchError, Kind, Reconcile};
use crate::key::ObjectKey;

/// A watched related kind and its cache.
pub(super) struct RelatedKind {
    pub resource: ApiResource,
    pub store: Store<DynamicObject>,
}

/// Each parent's checked queries, for the plugin version and parent version that
/// produced them; forgotten when the parent is deleted.
#[derive(Default)]
pub(super) struct Index {
    entries: Mutex<HashMap<ObjectKey, Entry>>,
}

struct Entry {
    /// The plugin instance (hot reload or new settings make a new one) and the parent's
    /// resourceVersion the queries were computed for.
    plugin: usize,
    resource_version: String,
    queries: Arc<Vec<Resolved>>,
}

impl Index {
    pub fn forget(&self, key: &ObjectKey) {
        self.lock().remove(key);
    }

    /// Keep only the parents `keep` accepts.
    pub fn retain(&self, keep: &dyn Fn(&ObjectKey) -> bool) {
        self.lock().retain(|k, _| keep(k));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectKey, Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The parents whose queries select an object of related kind `kind`.
    fn parents_of(&self, kind: usize, object: &DynamicObject) -> Vec<ObjectKey> {
        let (ns, name) = (object.namespace(), object.name_any());
        self.lock()
            .iter()
            .filter(|(_, e)| {
                e.queries
                    .iter()
                    .any(|q| q.kind == kind && q.matches(ns.as_deref(), &name, object.labels()))
            })
            .map(|(k, _)| k.clone())
            .collect()
    }
}

impl Wiring {
    /// One related kind's watch and cache, and the stream that wakes the parents whose
    /// queries select a changed object.
    pub(super) async fn related(
        &self,
        index: usize,
        kind: &Kind,
    ) -> anyhow::Result<(
        RelatedKind,
        impl futures::Stream<Item = Result<DynamicObject, watcher::Error>> + Send + 'static,
        impl Fn(DynamicObject) -> Vec<ObjectRef<super::compact::Compact>> + Send + Sync + 'static,
    )> {
        let resource = discovery::resolve(&self.client, kind).await?;
        let writer = reflector::store::Writer::new(resource.clone());
        let store = writer.as_reader();
        let ns = self.options.namespace.as_deref().filter(|_| kind.namespaced);
        let (listed, size, cached_objects) = (self.sync.mark(), self.gauge(&resource), store.clone());
        let role = sharded::Role::Related {
            namespaced: kind.namespaced,
        };
        let client = sharded::client(&self.client, self.shard.as_ref(), &resource, &role);
        let watch = watcher(api(&client, &resource, ns), watcher::Config::default());
        let watch = sharded::only_mine(watch, self.shard.clone(), role).modify(cached(&resource));
        let stream = reflector::reflector(writer, watch)
            .default_backoff()
            .inspect_ok(move |event| {
                if matches!(event, watcher::Event::InitDone) {
                    listed();
                }
                size.set(cached_objects.len() as i64);
            })
            .touched_objects();
        let (per_object, tracked, parent) =
            (self.per_object.clone(), self.queue.clone(), self.parent.clone());
        let mapper =
            move |object: DynamicObject| wake(&per_object.related, &tracked, &parent, index, &object);
        Ok((RelatedKind { resource, store }, stream, mapper))
    }
}

/// The parents to reconcile because `object` changed.
fn wake(
    index: &Index,
    tracked: &queue::Queue,
    parent: &ApiResource,
    kind: usize,
    object: &DynamicObject,
) -> Vec<ObjectRef<super::compact::Compact>> {
    index
        .parents_of(kind, object)
        .into_iter()
        .map(|key| {
            tracked.add(key.clone());
            let r = ObjectRef::new_with(&key.name, parent.clone());
            match &key.namespace {
                Some(ns) => r.within(ns),
                None => r,
            }
        })
        .collect()
}

/// Why a parent's related objects could not be read.
pub(super) enum Failure {
    /// The plugin's `related` call failed.
    Dispatch(DispatchError),
    /// Its answer broke the rules.
    Refused(String),
}

/// The related objects `plugin` asks for `parent`, from the caches: its queries are asked
/// again only when the parent or the plugin changed.
pub(super) async fn read(
    parent: &Compact,
    plugin: &Arc<dyn Reconcile>,
    shared: &Shared,
) -> Result<Vec<Arc<DynamicObject>>, Failure> {
    let metadata = plugin.metadata();
    if metadata.related.is_empty() {
        return Ok(Vec::new());
    }
    let queries = queries(parent, plugin, shared).await?;
    let mut out: Vec<Arc<DynamicObject>> = Vec::new();
    for q in queries.iter() {
        let cache = &shared.related[q.kind];
        let found: Vec<Arc<DynamicObject>> = match &q.names {
            Some(names) => names
                .iter()
                .filter_map(|name| {
                    let r = ObjectRef::new_with(name, cache.resource.clone());
                    cache.store.get(&match &q.namespace {
                        Some(ns) => r.within(ns),
                        None => r,
                    })
                })
                .collect(),
            None => cache
                .store
                .state()
                .into_iter()
                .filter(|o| q.matches(o.namespace().as_deref(), &o.name_any(), o.labels()))
                .collect(),
        };
        for o in found {
            if !out.iter().any(|seen| Arc::ptr_eq(seen, &o)) {
                out.push(o);
            }
        }
    }
    Ok(out)
}

async fn queries(
    parent: &Compact,
    plugin: &Arc<dyn Reconcile>,
    shared: &Shared,
) -> Result<Arc<Vec<Resolved>>, Failure> {
    let key = ObjectKey::of(parent);
    let id = Arc::as_ptr(plugin) as *const () as usize;
    let version = parent.resource_version().unwrap_or_default();
    let index = &shared.per_object.related;
    if let Some(e) = index.lock().get(&key)
        && e.plugin == id
        && e.resource_version == version
    {
        return Ok(e.queries.clone());
    }
    let asking = plugin.clone();
    let parent_value = parent.value();
    let start = std::time::Instant::now();
    let answer = tokio::task::spawn_blocking(move || asking.related(&parent_value))
        .await
        .map_err(|e| Failure::Dispatch(DispatchError::Fatal(format!("related task failed: {e}"))))?;
    shared.cpu.charge(start.elapsed());
    let answer = answer.map_err(Failure::Dispatch)?;
    let metadata = plugin.metadata();
    let own = parent.namespace().filter(|_| metadata.parent.namespaced);
    let name = parent.metadata.name.as_deref().unwrap_or_default();
    let of = Parent {
        namespace: own.as_deref(),
        name,
    };
    let resolved = Arc::new(resolve(metadata, of, &answer, &shared.options.allow).map_err(Failure::Refused)?);
    index.lock().insert(
        key,
        Entry {
            plugin: id,
            resource_version: version,
            queries: resolved.clone(),
        },
    );
    Ok(resolved)
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_contract::{Metadata, RelatedQuery, Selector};

    fn kind(kind: &str, namespaced: bool) -> Kind {
        Kind {
            group: String::new(),
            version: "v1".into(),
            kind: kind.into(),
            plural: format!("{}s", kind.to_lowercase()),
            namespaced,
        }
    }

    fn remember(index: &Index, parent: &str, queries: &[RelatedQuery]) {
        let metadata = Metadata {
            name: "p".into(),
            version: "1".into(),
            parent: kind("Parent", true),
            children: vec![],
            related: vec![kind("ConfigMap", true), kind("Namespace", false)],
            settings_schema: None,
            finalizer: None,
        };
        let in_a = Parent {
            namespace: Some("a"),
            name: parent,
        };
        let entry = Entry {
            plugin: 1,
            resource_version: "1".into(),
            queries: Arc::new(resolve(&metadata, in_a, queries, &Default::default()).unwrap()),
        };
        index.lock().insert(ObjectKey::new(Some("a"), parent), entry);
    }

    fn object(namespace: Option<&str>, name: &str, labels: &[(&str, &str)]) -> DynamicObject {
        let mut o = DynamicObject::new(
            name,
            &ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
        );
        o.metadata.namespace = namespace.map(Into::into);
        o.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        o
    }

    #[test]
    fn a_changed_object_wakes_exactly_the_parents_whose_queries_select_it() {
        let index = Index::default();
        let query = |kind: &str, selector: Selector| RelatedQuery {
            group: String::new(),
            kind: kind.into(),
            namespace: None,
            selector,
        };
        remember(
            &index,
            "by-name",
            &[query("ConfigMap", Selector::Names(vec!["cfg".into()]))],
        );
        remember(
            &index,
            "by-label",
            &[query("ConfigMap", Selector::Labels("app=web".into()))],
        );
        remember(
            &index,
            "its-namespace",
            &[query("Namespace", Selector::Names(vec!["a".into()]))],
        );
        let woken = |kind, o: &DynamicObject| {
            let mut names: Vec<String> = index.parents_of(kind, o).into_iter().map(|k| k.name).collect();
            names.sort();
            names
        };
        assert_eq!(
            woken(0, &object(Some("a"), "cfg", &[("app", "web")])),
            ["by-label", "by-name"]
        );
        assert_eq!(woken(0, &object(Some("a"), "cfg", &[])), ["by-name"]);
        assert!(
            woken(0, &object(Some("b"), "cfg", &[("app", "web")])).is_empty(),
            "another namespace"
        );
        assert_eq!(woken(1, &object(None, "a", &[])), ["its-namespace"]);
        index.forget(&ObjectKey::new(Some("a"), "by-name"));
        assert!(
            woken(0, &object(Some("a"), "cfg", &[])).is_empty(),
            "forgotten with its parent"
        );
    }
}
