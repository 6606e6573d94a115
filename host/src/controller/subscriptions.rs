//! What one plugin subscribes to: its parents, and its children of each declared kind,
//! from the host's shared informers, mirrored into its queue and its own indexes.

use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use kube::ResourceExt;
use kube::discovery::ApiResource;
use kube::runtime::controller::{Config, Controller};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;

use super::{ChildKind, Wiring, compact, discovery, informer, owned, sharded, update};
use crate::engine::Kind;
use crate::key::ObjectKey;

impl Wiring {
    /// The parent watch (mirrored into the queue, forgetting deleted objects) and its
    /// cache, both the host's, shared with every plugin of the same parent kind.
    pub(super) fn parents(&self) -> (Controller<compact::Compact>, Store<compact::Compact>) {
        let namespace = self
            .options
            .namespace
            .as_deref()
            .filter(|_| self.metadata.parent.namespaced);
        let labels = self.options.parent_labels.clone();
        let (informer, cache) = self.stored(&self.parent, namespace, labels, sharded::Role::Parent);
        let (tracked, per_object, listed) = (self.queue.clone(), self.per_object.clone(), self.sync.mark());
        let (preview, name) = (self.options.preview.clone(), self.metadata.name.clone());
        let (size, cached_parents) = (self.gauge(&self.parent), cache.clone());
        let mut listing = std::collections::HashSet::new();
        let parents = informer
            .subscribe()
            .inspect(move |event| match event {
                watcher::Event::Apply(o) => tracked.add(ObjectKey::of(&**o)),
                watcher::Event::InitApply(o) => {
                    let key = ObjectKey::of(&**o);
                    listing.insert(key.clone());
                    tracked.add(key);
                }
                watcher::Event::Delete(o) => {
                    let key = ObjectKey::of(&**o);
                    per_object.forget(&key);
                    if let Some(preview) = &preview {
                        preview.forget(&name, &key);
                    }
                    tracked.forget(&key);
                }
                watcher::Event::InitDone => {
                    per_object.keep_only(&std::mem::take(&mut listing));
                    listed();
                }
                watcher::Event::Init => listing.clear(),
            })
            .inspect(move |_| {
                size.set(cached_parents.len() as i64);
            })
            .filter_map(|event| {
                futures::future::ready(match event {
                    watcher::Event::Apply(o) | watcher::Event::InitApply(o) => Some(o),
                    _ => None,
                })
            });
        let controller = Controller::for_shared_stream_with(parents, cache.clone(), self.parent.clone())
            .with_config(Config::default().concurrency(self.options.concurrency));
        (controller, cache)
    }

    /// The host's informer of every `resource` in `namespace` with `labels` (parents,
    /// related objects) and the kube-runtime store it keeps them in.
    pub(super) fn stored(
        &self,
        resource: &compact::Type,
        namespace: Option<&str>,
        labels: Option<String>,
        role: sharded::Role,
    ) -> (Arc<informer::Informer>, Store<compact::Compact>) {
        let informer = self.informer(resource, namespace, labels, role);
        // Keys of non-child roles ask for a store; an empty one would stand in only if
        // that rule changed.
        let store = informer
            .store()
            .unwrap_or_else(|| kube::runtime::reflector::store::Writer::new(resource.clone()).as_reader());
        (informer, store)
    }

    /// The host's informer of `resource` in `namespace` with `labels`, filtered to the
    /// replica's ranges for `role` on a sharded host.
    fn informer(
        &self,
        resource: &compact::Type,
        namespace: Option<&str>,
        labels: Option<String>,
        role: sharded::Role,
    ) -> Arc<informer::Informer> {
        let key = informer::Key {
            api_version: resource.api_version.clone(),
            plural: resource.plural.clone(),
            namespace: namespace.map(String::from),
            labels,
            shard: self.shard.as_ref().map(|f| format!("{f:?} {role:?}")),
            // Parents and related objects are read from kube-runtime's store.
            store: !matches!(role, sharded::Role::Child { .. }),
        };
        let client = sharded::client(&self.client, self.shard.as_ref(), resource, &role);
        let shard = self.shard.clone();
        self.options.informers.get_or_start(key.clone(), resource, || {
            sharded::only_mine(informer::watch_of(client, resource, &key), shard, role)
        })
    }

    /// One child kind's watch (by the plugin's label), its cache, and the stream of
    /// children that wakes their controlling parents.
    pub(super) async fn children(
        &self,
        kind: &Kind,
    ) -> anyhow::Result<(
        ChildKind,
        impl futures::Stream<Item = Result<compact::Compact, watcher::Error>> + Send + 'static,
    )> {
        let update = update::of(&self.options.updates, kind);
        let resource: compact::Type = discovery::resolve(&self.client, kind).await?.into();
        let cache = owned::Owned::default();
        let ns = self.options.namespace.as_deref().filter(|_| kind.namespaced);
        let (tracked, owner, listed) = (self.queue.clone(), self.parent.clone(), self.sync.mark());
        let namespaced = self.metadata.parent.namespaced;
        let (fed, size, held) = (cache.clone(), self.gauge(&resource), cache.clone());
        let role = sharded::Role::Child {
            parent_namespaced: namespaced,
        };
        // One watch of every plugin's children of this kind; this plugin's are those
        // carrying its name (a preview's: those of the plugin it previews).
        let informer = self.informer(&resource, ns, Some(crate::apply::selector_all()), role);
        let mine = self
            .options
            .preview
            .as_ref()
            .map_or_else(|| self.metadata.name.clone(), |p| p.writer().to_string());
        let stream = informer
            .subscribe()
            .filter_map(move |event| {
                futures::future::ready(held.view(event, |o| crate::apply::made_by(o, &mine)))
            })
            .map(move |event| {
                fed.apply(&event);
                size.set(fed.len() as i64);
                if matches!(event, watcher::Event::InitDone) {
                    listed();
                }
                event
            })
            .filter_map(|event| {
                futures::future::ready(match event {
                    watcher::Event::Apply(o) | watcher::Event::InitApply(o) | watcher::Event::Delete(o) => {
                        Some(Ok::<_, watcher::Error>((*o).clone()))
                    }
                    watcher::Event::Init | watcher::Event::InitDone => None,
                })
            })
            .inspect_ok(move |child: &compact::Compact| {
                let ns = child.namespace().filter(|_| namespaced);
                for r in child.owner_references() {
                    if r.kind == owner.kind && r.api_version == owner.api_version {
                        tracked.add(ObjectKey::new(ns.as_deref(), &r.name));
                    }
                }
            });
        let child = ChildKind {
            kind: kind.clone(),
            resource,
            cache,
            update,
        };
        Ok((child, stream))
    }

    /// The gauge of how many objects of `resource` this plugin's caches hold.
    pub(super) fn gauge(&self, resource: &ApiResource) -> prometheus_client::metrics::gauge::Gauge {
        crate::ops::metrics::get().cache(&self.metadata.name, &resource.kind)
    }
}
