//! One watch and one cache per kind, scope and selector, shared by every plugin of the
//! host that reads them, as controller-runtime's manager shares informers: a hundred
//! plugins of one parent kind are one watch on the API server and one cache in the host.
//! Each plugin subscribes and gets the watch's events as if it had its own (a late
//! subscriber first gets the cache as a list), in the compact form, each object one shared
//! allocation; what a plugin does with them (its queue, its children's index) stays its own.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use futures::{Stream, StreamExt};
use kube::Client;
use kube::runtime::reflector::{Store, store::Writer};
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, watcher as watch};
use tokio::sync::broadcast;

use super::compact::{Compact, Type, cached};
use crate::key::ObjectKey;

/// What subscribers are sent: the watch's events, each object one shared allocation.
type Shared = Event<Arc<Compact>>;

/// Events a subscriber may fall behind by before it is given the cache again as a list.
const BACKLOG: usize = 4096;

/// What identifies a watch: the kind, the namespace scope, the label selector, and on a
/// sharded host the replica's ranges and the role they filter by.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Key {
    pub api_version: String,
    pub plural: String,
    pub namespace: Option<String>,
    pub labels: Option<String>,
    pub shard: Option<String>,
    /// Keep kube-runtime's `Store` (parents: the controller reads them from it); else a
    /// map whose objects the subscribers' indexes share (children).
    pub store: bool,
}

/// The host's live watches; cheap to clone, shared by every plugin's controller.
#[derive(Clone, Default)]
pub struct Informers(Arc<Mutex<HashMap<Key, Weak<Informer>>>>);

impl std::fmt::Debug for Informers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let live = self
            .0
            .lock()
            .map_or(0, |m| m.values().filter(|w| w.strong_count() > 0).count());
        write!(f, "Informers({live} live)")
    }
}

impl Informers {
    /// The informer for `key`, started with `events` (the watch, already filtered to the
    /// replica's ranges) unless one runs; it stops when its last subscriber is gone.
    pub(super) fn get_or_start<S>(
        &self,
        key: Key,
        resource: &Type,
        events: impl FnOnce() -> S,
    ) -> Arc<Informer>
    where
        S: Stream<Item = Result<Event<Compact>, watcher::Error>> + Send + 'static,
    {
        let mut live = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(informer) = live.get(&key).and_then(Weak::upgrade) {
            return informer;
        }
        live.retain(|_, w| w.strong_count() > 0);
        let informer = Informer::start(&key, resource, events());
        live.insert(key, Arc::downgrade(&informer));
        informer
    }

    /// How many watches run.
    pub fn len(&self) -> usize {
        let live = self.0.lock().unwrap_or_else(|e| e.into_inner());
        live.values().filter(|w| w.strong_count() > 0).count()
    }

    /// Whether no watch runs.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One running watch, its cache, and its subscribers' channel.
pub(super) struct Informer {
    state: Arc<Mutex<State>>,
    /// The cache as kube-runtime's controller reads it (the parent's object at reconcile).
    store: Option<Store<Compact>>,
    task: tokio::task::AbortHandle,
}

/// The objects an informer keeps, once: in kube-runtime's store, or in a map.
enum Cache {
    Store(Writer<Compact>),
    Map(HashMap<ObjectKey, Arc<Compact>>),
}

/// What the watch task and a new subscriber must see consistently.
struct State {
    cache: Cache,
    /// The objects of a list in progress (what a subscriber joining meanwhile is given).
    relist: Option<HashMap<ObjectKey, Arc<Compact>>>,
    listed: bool,
    tx: broadcast::Sender<Shared>,
}

impl Drop for Informer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Informer {
    fn start<S>(key: &Key, resource: &Type, events: S) -> Arc<Informer>
    where
        S: Stream<Item = Result<Event<Compact>, watcher::Error>> + Send + 'static,
    {
        let (cache, store) = if key.store {
            let writer = Writer::new(resource.clone());
            let store = writer.as_reader();
            (Cache::Store(writer), Some(store))
        } else {
            (Cache::Map(HashMap::new()), None)
        };
        let state = Arc::new(Mutex::new(State {
            cache,
            relist: None,
            listed: false,
            tx: broadcast::channel(BACKLOG).0,
        }));
        tracing::debug!(kind = %key.plural, namespace = ?key.namespace, labels = ?key.labels, "watch started");
        let (fed, resource, namespace) = (state.clone(), resource.clone(), key.namespace.clone());
        let task = tokio::spawn(async move {
            let mut events = std::pin::pin!(events.modify(cached(&resource)).default_backoff());
            while let Some(event) = events.next().await {
                match event {
                    Ok(event) => lock(&fed).apply(event),
                    Err(e) => {
                        tracing::warn!(kind = %resource.kind, namespace = ?namespace, error = %e, "watch failed; retrying with backoff")
                    }
                }
            }
        });
        Arc::new(Informer {
            state,
            store,
            task: task.abort_handle(),
        })
    }

    /// The shared cache, for kube-runtime's controller, when its key asked for one.
    pub fn store(&self) -> Option<Store<Compact>> {
        self.store.clone()
    }

    /// The watch's events from now on, preceded by the cache as a list when it has
    /// listed (or the part of a list in progress); a subscriber that falls behind is
    /// given the cache again as a list.
    pub fn subscribe(self: &Arc<Self>) -> impl Stream<Item = Shared> + Send + 'static + use<> {
        let (rx, replay) = lock(&self.state).subscribe();
        let start = (
            self.clone(),
            rx,
            replay.into_iter().collect::<std::collections::VecDeque<_>>(),
        );
        futures::stream::unfold(start, |(informer, mut rx, mut pending)| async move {
            loop {
                if let Some(event) = pending.pop_front() {
                    return Some((event, (informer, rx, pending)));
                }
                match rx.recv().await {
                    Ok(event) => return Some((event, (informer, rx, pending))),
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        tracing::debug!(missed, "subscriber behind its watch; given the cache again");
                        let (fresh, replay) = lock(&informer.state).subscribe();
                        rx = fresh;
                        pending.extend(replay);
                    }
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        })
    }
}

impl State {
    /// Take in one event of the watch and pass it on.
    fn apply(&mut self, event: Event<Compact>) {
        let event = super::compact::event(event);
        match &event {
            Event::Init => self.relist = Some(HashMap::new()),
            Event::InitApply(o) => drop(
                self.relist
                    .get_or_insert_with(HashMap::new)
                    .insert(ObjectKey::of(&**o), o.clone()),
            ),
            Event::InitDone => self.listed = true,
            Event::Apply(_) | Event::Delete(_) => {}
        }
        match &mut self.cache {
            Cache::Store(writer) => {
                writer.apply_watcher_event(&owned(&event));
                if matches!(event, Event::InitDone) {
                    self.relist = None;
                }
            }
            Cache::Map(objects) => match &event {
                Event::Apply(o) => drop(objects.insert(ObjectKey::of(&**o), o.clone())),
                Event::Delete(o) => drop(objects.remove(&ObjectKey::of(&**o))),
                Event::InitDone => *objects = self.relist.take().unwrap_or_default(),
                Event::Init | Event::InitApply(_) => {}
            },
        }
        // No subscriber is no error: the next one is given the cache.
        let _ = self.tx.send(event);
    }

    /// A receiver from now on, and what it must see first to be where the others are.
    fn subscribe(&self) -> (broadcast::Receiver<Shared>, Vec<Shared>) {
        let mut replay = Vec::new();
        match &self.relist {
            // A list in progress: its start, then its remaining objects and end arrive live.
            Some(partial) => {
                replay.push(Event::Init);
                replay.extend(partial.values().cloned().map(Event::InitApply));
            }
            None if self.listed => {
                replay.push(Event::Init);
                match &self.cache {
                    Cache::Store(writer) => {
                        replay.extend(writer.as_reader().state().into_iter().map(Event::InitApply));
                    }
                    Cache::Map(objects) => replay.extend(objects.values().cloned().map(Event::InitApply)),
                }
                replay.push(Event::InitDone);
            }
            None => {}
        }
        (self.tx.subscribe(), replay)
    }
}

/// The event as kube-runtime's store takes it.
fn owned(event: &Event<Arc<Compact>>) -> Event<Compact> {
    match event {
        Event::Apply(o) => Event::Apply((**o).clone()),
        Event::Delete(o) => Event::Delete((**o).clone()),
        Event::Init => Event::Init,
        Event::InitApply(o) => Event::InitApply((**o).clone()),
        Event::InitDone => Event::InitDone,
    }
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

/// The watch for `key` with `client`: kube-runtime's watcher with the selector.
pub(super) fn watch_of(
    client: Client,
    resource: &Type,
    key: &Key,
) -> impl Stream<Item = Result<Event<Compact>, watcher::Error>> + Send + 'static {
    let api = super::api(&client, resource, key.namespace.as_deref());
    let mut config = watcher::Config::default();
    if let Some(labels) = &key.labels {
        config = config.labels(labels);
    }
    watch(api, config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::{ApiResource, GroupVersionKind, ObjectMeta};

    fn resource() -> Type {
        ApiResource::from_gvk(&GroupVersionKind::gvk("capstan.dev", "v1alpha1", "Echo")).into()
    }

    /// An informer's state keeping a map (children's), or kube-runtime's store (parents').
    fn state_with(store: bool) -> State {
        State {
            cache: if store {
                Cache::Store(Writer::new(resource()))
            } else {
                Cache::Map(HashMap::new())
            },
            relist: None,
            listed: false,
            tx: broadcast::channel(BACKLOG).0,
        }
    }

    fn state() -> State {
        state_with(false)
    }

    fn echo(name: &str) -> Compact {
        Compact::of(kube::api::DynamicObject {
            types: None,
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                ..ObjectMeta::default()
            },
            data: serde_json::json!({"spec": {"message": name}}),
        })
    }

    /// Events as `Init`, `+name` (InitApply), `done`, `name` (Apply), `-name` (Delete).
    fn show(events: &[Event<Arc<Compact>>]) -> Vec<String> {
        use kube::ResourceExt;
        events
            .iter()
            .map(|e| match e {
                Event::Init => "Init".to_string(),
                Event::InitApply(o) => format!("+{}", o.name_any()),
                Event::InitDone => "done".to_string(),
                Event::Apply(o) => o.name_any(),
                Event::Delete(o) => format!("-{}", o.name_any()),
            })
            .collect()
    }

    fn received(rx: &mut broadcast::Receiver<Event<Arc<Compact>>>) -> Vec<String> {
        let mut events = Vec::new();
        while let Ok(e) = rx.try_recv() {
            events.push(e);
        }
        show(&events)
    }

    #[test]
    fn a_subscriber_before_the_first_list_sees_it_live() {
        for store in [false, true] {
            let mut state = state_with(store);
            let (mut rx, replay) = state.subscribe();
            assert!(replay.is_empty(), "nothing listed yet, nothing made up");
            for e in [
                Event::Init,
                Event::InitApply(echo("a")),
                Event::InitDone,
                Event::Apply(echo("b")),
            ] {
                state.apply(e);
            }
            assert_eq!(received(&mut rx), ["Init", "+a", "done", "b"]);
            let cached = match &state.cache {
                Cache::Store(writer) => writer.as_reader().len(),
                Cache::Map(objects) => objects.len(),
            };
            assert_eq!(cached, 2, "store {store}");
        }
    }

    #[test]
    fn a_late_subscriber_is_given_the_cache_as_a_list_then_what_follows() {
        for store in [false, true] {
            let mut state = state_with(store);
            for e in [
                Event::Init,
                Event::InitApply(echo("a")),
                Event::InitDone,
                Event::Apply(echo("b")),
                Event::Delete(echo("a")),
            ] {
                state.apply(e);
            }
            let (mut rx, replay) = state.subscribe();
            assert_eq!(show(&replay), ["Init", "+b", "done"], "store {store}");
            state.apply(Event::Apply(echo("c")));
            assert_eq!(received(&mut rx), ["c"]);
        }
    }

    #[test]
    fn a_subscriber_during_a_relist_gets_its_start_and_the_rest_live() {
        for store in [false, true] {
            let mut state = state_with(store);
            for e in [
                Event::Init,
                Event::InitApply(echo("old")),
                Event::InitDone,
                Event::Init,
                Event::InitApply(echo("a")),
            ] {
                state.apply(e);
            }
            let (mut rx, replay) = state.subscribe();
            assert_eq!(
                show(&replay),
                ["Init", "+a"],
                "the list in progress, not the old set (store {store})"
            );
            state.apply(Event::InitApply(echo("b")));
            state.apply(Event::InitDone);
            assert_eq!(received(&mut rx), ["+b", "done"]);
            let (_, replay) = state.subscribe();
            let mut listed = show(&replay);
            listed.sort();
            assert_eq!(
                listed,
                ["+a", "+b", "Init", "done"],
                "the old set is gone (store {store})"
            );
        }
    }

    /// A map's objects and what subscribers are sent are one allocation each.
    #[test]
    fn subscribers_share_the_cached_objects() {
        let mut state = state();
        let (mut rx, _) = state.subscribe();
        state.apply(Event::Apply(echo("a")));
        let Ok(Event::Apply(sent)) = rx.try_recv() else {
            panic!("an apply")
        };
        let Cache::Map(objects) = &state.cache else {
            panic!("a map")
        };
        assert!(Arc::ptr_eq(&sent, &objects[&ObjectKey::new(Some("ns"), "a")]));
    }
}
