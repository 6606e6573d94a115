//! Related objects: kinds a plugin reads but never writes. Each declared kind is watched
//! (in the scope parents are) into a compact cache; per parent, the plugin's `related`
//! answer is asked once per change of what the call is shown of the parent (not its status
//! or version, see [`RelatedParent`]) and per plugin version, checked by the contract's
//! rules, and answered from the caches — again only when an object of a queried kind has
//! changed since, so a quiet resync costs no scan of a cache. A change to a related object
//! reconciles every parent whose queries select it now, or whose last answer held it (an
//! object relabelled out of a selection is news to the parents that read it). A label
//! query reads only its namespace's objects, and an answer is read again only when an
//! object of a namespace one of its queries reads has changed ([`namespaces`]).
//!
//! Answers are in a fixed order (query by query, then namespace and name), so identical
//! inputs make identical requests.

use std::sync::Arc;

use futures::StreamExt;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

use capstan_contract::related::{Parent, Resolved, resolve};

use super::compact::{Compact, Type};
use super::throttle::Call;
use super::version::Current;
use super::{Shared, Wiring, discovery, queue, sharded};
use crate::engine::{DispatchError, Kind, RelatedParent};
use crate::key::ObjectKey;
use namespaces::Namespaces;

mod namespaces;

/// A watched related kind and its cache.
pub(super) struct RelatedKind {
    pub resource: Type,
    pub store: Store<Compact>,
    /// Its objects by namespace, and each namespace's last change: an answer read at the
    /// same counts of the namespaces its queries read still holds.
    namespaces: Arc<Namespaces>,
}

/// A parent's checked queries and last answer, for the plugin version and parent version
/// that produced them.
pub(super) struct Entry {
    /// The plugin version and the parent's resourceVersion the queries were asked for
    /// (or last found to hold for), and the digest of what the call was shown.
    plugin: u64,
    resource_version: String,
    shown: u64,
    queries: Arc<Vec<Resolved>>,
    /// The last answer, and the change count of each query's namespace when it was read.
    answer: Arc<Vec<Arc<Compact>>>,
    changes: Vec<u64>,
}

impl Entry {
    /// Whether the parent's queries select `object` of related kind `kind` as it is now,
    /// or its last answer held it.
    pub fn reads(&self, kind: usize, object: &Compact) -> bool {
        let (ns, name) = (object.metadata.namespace.as_deref(), object.name_any());
        let held = self.answer.iter().any(|o| {
            o.types == object.types
                && o.metadata.name.as_deref() == Some(name.as_str())
                && o.metadata.namespace.as_deref() == ns
        });
        held || (self.queries.iter()).any(|q| q.kind == kind && q.matches(ns, &name, object.labels()))
    }
}

/// One related kind's watch and cache, and the stream that wakes the parents whose
/// queries select a changed object.
pub(super) async fn watch(
    wiring: &Wiring,
    index: usize,
    kind: &Kind,
) -> anyhow::Result<(
    RelatedKind,
    impl futures::Stream<Item = Result<Compact, watcher::Error>> + Send + 'static,
    impl Fn(Compact) -> Vec<ObjectRef<Compact>> + Send + Sync + 'static,
)> {
    let resource: Type = discovery::resolve(&wiring.client, kind).await?.into();
    let ns = wiring.options.namespace.as_deref().filter(|_| kind.namespaced);
    // Split by namespace on a replica sharded by namespace only when a parent reads its
    // own namespace alone: a plugin granted others (allowNamespaces, "*" queries) reads
    // objects of namespaces another replica's parents live in.
    let role = sharded::Role::Related {
        namespaced: kind.namespaced && wiring.options.allow.namespaces.is_empty(),
    };
    // The host's watch of the kind, shared with every plugin reading or reconciling it.
    let (informer, store) = wiring.stored(&resource, ns, None, role);
    let (listed, size, cached_objects) = (wiring.sync.mark(), wiring.gauge(&resource), store.clone());
    let namespaces = Arc::new(Namespaces::default());
    let indexed = namespaces.clone();
    let stream = informer
        .subscribe()
        .inspect(move |event| {
            // The shared cache has taken the event in before it is sent to subscribers.
            indexed.take(event);
            if matches!(event, watcher::Event::InitDone) {
                listed();
            }
            size.set(cached_objects.len() as i64);
        })
        .filter_map(|event| {
            futures::future::ready(match event {
                watcher::Event::Apply(o) | watcher::Event::InitApply(o) | watcher::Event::Delete(o) => {
                    Some(Ok::<_, watcher::Error>((*o).clone()))
                }
                watcher::Event::Init | watcher::Event::InitDone => None,
            })
        });
    let (per_object, tracked, parent) = (
        wiring.per_object.clone(),
        wiring.queue.clone(),
        wiring.parent.clone(),
    );
    let mapper = move |object: Compact| wake(per_object.reading(index, &object), &tracked, &parent);
    let kind = RelatedKind {
        resource,
        store,
        namespaces,
    };
    Ok((kind, stream, mapper))
}

/// The parents to reconcile because an object they read changed.
fn wake(parents: Vec<ObjectKey>, tracked: &queue::Queue, parent: &Type) -> Vec<ObjectRef<Compact>> {
    parents
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
    /// The plugin is over its CPU share: not asked, back after this long.
    Deferred(std::time::Duration),
    /// The parent's cached text could not be shown whole; the plugin was not asked.
    Cache(serde_json::Error),
}

/// The related objects the plugin asks for `parent`, from the caches: its queries are
/// asked again only when the parent or the plugin changed, and answered again only when
/// a queried kind changed.
pub(super) async fn read(
    parent: &Compact,
    plugin: &Current,
    shared: &Shared,
) -> Result<Arc<Vec<Arc<Compact>>>, Failure> {
    if plugin.plugin.metadata().related.is_empty() {
        return Ok(Arc::default());
    }
    let key = ObjectKey::of(parent);
    let version = parent.resource_version().unwrap_or_default();
    let memory = &shared.per_object;
    let known = memory.get(&key, |p| {
        let e = p.related.as_ref().filter(|e| e.plugin == plugin.number)?;
        Some((e.resource_version == version, e.shown, e.queries.clone()))
    });
    let known = known.flatten();
    // A new version (a status write, mostly) is asked about only if the call sees a change.
    let (shown, queries, kept) = match known {
        Some((true, shown, queries)) => (shown, queries, true),
        known => {
            let asked = RelatedParent::of(&parent.json().map_err(Failure::Cache)?);
            let shown = asked.digest();
            match known {
                Some((_, before, queries)) if before == shown => (shown, queries, true),
                _ => (shown, ask(asked, parent, plugin, shared).await?, false),
            }
        }
    };
    let kept = kept.then(|| {
        memory.get(&key, |p| {
            let e = p.related.as_mut()?;
            if e.shown != shown || e.changes != changes(&e.queries, shared) {
                return None;
            }
            e.resource_version = version.clone();
            Some(e.answer.clone())
        })
    });
    if let Some(answer) = kept.flatten().flatten() {
        return Ok(answer);
    }
    // Counted before the caches are read: a change landing in between is read again next time.
    let changes = changes(&queries, shared);
    let answer = Arc::new(answer(&queries, shared).map_err(Failure::Refused)?);
    let entry = Entry {
        plugin: plugin.number,
        resource_version: version,
        shown,
        queries,
        answer: answer.clone(),
        changes,
    };
    memory.with(&key, |p| p.related = Some(entry));
    Ok(answer)
}

/// The change count of the namespace each query reads (of any, for one reading every
/// namespace).
fn changes(queries: &[Resolved], shared: &Shared) -> Vec<u64> {
    (queries.iter())
        .map(|q| {
            let namespaces = &shared.related[q.kind].namespaces;
            match q.every_namespace() {
                true => namespaces.last_change(),
                false => namespaces.changes(q.namespace.as_deref()),
            }
        })
        .collect()
}

/// (namespace, name) of each object a query may select: the names it lists, or every
/// object of the namespaces it reads — the one it names, or all of them.
fn candidates(q: &Resolved, namespaces: &Namespaces) -> Vec<(Option<String>, String)> {
    let read: Vec<Option<String>> = match q.every_namespace() {
        true => namespaces.all(),
        false => vec![q.namespace.clone()],
    };
    match &q.names {
        Some(names) => (read.iter())
            .flat_map(|ns| names.iter().map(move |n| (ns.clone(), n.clone())))
            .collect(),
        None => (read.into_iter())
            .flat_map(|ns| {
                namespaces
                    .names(ns.as_deref())
                    .into_iter()
                    .map(move |n| (ns.clone(), n))
            })
            .collect(),
    }
}

/// The objects the queries select, query by query, each query's in namespace and name
/// order, each object once; refused past the contract's bound on an answer.
fn answer(queries: &[Resolved], shared: &Shared) -> Result<Vec<Arc<Compact>>, String> {
    let mut out: Vec<Arc<Compact>> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut tally = capstan_contract::related::Tally::default();
    for q in queries {
        let cache = &shared.related[q.kind];
        // A label query reads the names its namespaces hold, not the whole cache.
        let mut found: Vec<Arc<Compact>> = (candidates(q, &cache.namespaces).iter())
            .filter_map(|(ns, name)| {
                let r = ObjectRef::new_with(name, cache.resource.clone());
                cache.store.get(&match ns {
                    Some(ns) => r.within(ns),
                    None => r,
                })
            })
            .filter(|o| q.matches(o.metadata.namespace.as_deref(), &o.name_any(), o.labels()))
            .collect();
        found.sort_by(|a, b| {
            (&a.metadata.namespace, &a.metadata.name).cmp(&(&b.metadata.namespace, &b.metadata.name))
        });
        for o in found {
            if seen.insert(Arc::as_ptr(&o)) {
                // The text the request will carry (an object that cannot be shown fails
                // the reconcile later, where it is built).
                tally.add(o.json().map_or(0, |j| j.text().len()))?;
                out.push(o);
            }
        }
    }
    Ok(out)
}

/// Ask the plugin what it reads for `parent` (within its CPU share), and check the
/// answer against the contract.
async fn ask(
    asked: RelatedParent,
    parent: &Compact,
    plugin: &Current,
    shared: &Shared,
) -> Result<Arc<Vec<Resolved>>, Failure> {
    let key = crate::key::ObjectKey::of(parent);
    let permit = shared
        .cpu
        .acquire(Call::Related, &key)
        .await
        .map_err(Failure::Deferred)?;
    let asking = plugin.plugin.clone();
    let start = std::time::Instant::now();
    let answer = permit
        .on_thread(move |permit| permit.run(|| asking.related(&asked)))
        .await
        .map_err(|e| Failure::Dispatch(DispatchError::Fatal(format!("related task failed: {e}"))))?;
    super::dispatch::timed(&plugin.plugin.metadata().name, "related", start);
    let answer = answer.map_err(Failure::Dispatch)?;
    let metadata = plugin.plugin.metadata();
    // The parent's home as its children have it: one rule for both (`scope`).
    let own = super::scope::home(metadata, &parent.metadata, &shared.options);
    let name = parent.metadata.name.as_deref().unwrap_or_default();
    let of = Parent { namespace: own, name };
    let resolved = resolve(metadata, of, &answer, &shared.options.allow).map_err(Failure::Refused)?;
    Ok(Arc::new(resolved))
}

#[cfg(test)]
mod tests;
