//! Per-plugin wiring: resolve kinds through discovery, watch the parent kind and the
//! plugin's children (by label), map children to their controlling parent, and drive
//! reconciles through kube-runtime's `Controller` — which deduplicates keys and never
//! runs two reconciles of one object at once.

mod backoff;
mod children;
mod churn;
mod discovery;
mod events;
mod finalizer;
mod queue;
mod reconcile;
mod throttle;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::discovery::ApiResource;
use kube::runtime::controller::{Config, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};

use kube::ResourceExt;
use tokio::sync::watch;

use crate::engine::{Kind, Reconcile};

use crate::leader::Leader;
pub use discovery::served;

/// How one plugin is run.
#[derive(Clone, Debug)]
pub struct Options {
    /// Watch only this namespace.
    pub namespace: Option<String>,
    /// What the operator allows the plugin's responses beyond its parent's namespace.
    pub allow: crate::validate::Allowances,
    /// Kinds the operator lets the plugin declare (Secrets, its own parent kind).
    pub grants: crate::grants::Grants,
    /// Reconciles of this plugin running at once.
    pub concurrency: u16,
    /// Reconcile every parent at least this often.
    pub resync: Duration,
    /// CPU the plugin's dispatches may use per second, in millicores.
    pub cpu_millicores: u32,
    /// Children the plugin may create per second.
    pub creations_per_second: u32,
    /// How long a deletion may wait for the plugin before `FinalizerStuck`.
    pub finalizer_timeout: Duration,
}

impl Default for Options {
    fn default() -> Self {
        let limits = crate::engine::Limits::default();
        Options {
            namespace: None,
            allow: Default::default(),
            grants: Default::default(),
            concurrency: 16,
            resync: Duration::from_secs(600),
            cpu_millicores: limits.cpu_millicores,
            creations_per_second: limits.creations_per_second,
            finalizer_timeout: limits.finalizer_timeout,
        }
    }
}

/// A watched child kind and its cache.
struct ChildKind {
    kind: Kind,
    resource: ApiResource,
    store: Store<DynamicObject>,
}

/// Everything one plugin's reconciles share.
struct Shared {
    client: Client,
    /// The plugin version new reconciles use; hot reload replaces it.
    plugin: watch::Receiver<Arc<dyn Reconcile>>,
    parent: ApiResource,
    /// The parent cache: reconciles that waited for leadership re-read their object here.
    cache: Store<DynamicObject>,
    children: Vec<ChildKind>,
    recorder: Recorder,
    options: Options,
    backoff: Arc<backoff::Backoff>,
    /// What each object's events may still cost.
    events: Arc<events::EventBudget>,
    /// Recent writes per object, to catch ping-pong.
    churn: Arc<churn::Churn>,
    /// The plugin's share of CPU.
    cpu: throttle::CpuBudget,
    /// The plugin's budget of child creations.
    creations: std::sync::Mutex<crate::bucket::Bucket>,
    queue: Arc<queue::Queue>,
    leader: Leader,
    /// True once the parent and every child cache have listed.
    synced: watch::Receiver<bool>,
}

impl Shared {
    fn plugin(&self) -> Arc<dyn Reconcile> {
        self.plugin.borrow().clone()
    }

    /// Take one creation from the plugin's budget, or say how long until there is one.
    fn creation(&self) -> Result<(), Duration> {
        let mut bucket = self.creations.lock().unwrap_or_else(|e| e.into_inner());
        let now = std::time::Instant::now();
        if bucket.try_take(1.0, now) {
            Ok(())
        } else {
            Err(bucket.until(1.0, now))
        }
    }
}

/// Counts the watch streams that have not finished their first list.
struct SyncCount {
    remaining: AtomicUsize,
    done: watch::Sender<bool>,
}

impl SyncCount {
    /// A callback for one stream's `InitDone`; only its first call counts (relists repeat it).
    fn mark(self: &Arc<Self>) -> impl Fn() + Send + Sync + 'static {
        let (sync, seen) = (self.clone(), AtomicBool::new(false));
        move || {
            if !seen.swap(true, Ordering::SeqCst) && sync.remaining.fetch_sub(1, Ordering::SeqCst) == 1 {
                let _ = sync.done.send(true);
            }
        }
    }
}

fn api(client: &Client, resource: &ApiResource, namespace: Option<&str>) -> Api<DynamicObject> {
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
        None => Api::all_with(client.clone(), resource),
    }
}

/// Objects of a list come without `apiVersion` and `kind` (list items carry no type);
/// the contract promises both to plugins, and the unchanged-check compares them.
fn typed(resource: &ApiResource) -> impl FnMut(&mut DynamicObject) + Send + 'static {
    let types = kube::api::TypeMeta {
        api_version: resource.api_version.clone(),
        kind: resource.kind.clone(),
    };
    move |o| {
        if o.types.is_none() {
            o.types = Some(types.clone());
        }
    }
}

/// The queue key of an object: `namespace/name`, or `name` when cluster-scoped.
fn key(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    }
}

/// Run one plugin until `shutdown` resolves; in-flight reconciles finish first. `synced`
/// fires once the parent and child caches have listed. Only while `leader` leads do
/// reconciles run; a new value in `plugin` (same kinds) is used from the next reconcile
/// on, and every parent is reconciled once with it.
pub async fn run(
    client: Client,
    plugin: watch::Receiver<Arc<dyn Reconcile>>,
    options: Options,
    leader: Leader,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
    synced: tokio::sync::oneshot::Sender<()>,
) -> anyhow::Result<()> {
    let metadata = plugin.borrow().metadata().clone();
    let name = metadata.name.clone();
    let parent = discovery::resolve(&client, &metadata.parent).await?;
    let queue = Arc::new(queue::Queue::new(&name));
    let namespace = options
        .namespace
        .as_deref()
        .filter(|_| metadata.parent.namespaced);
    let writer = reflector::store::Writer::new(parent.clone());
    let cache = writer.as_reader();
    let (synced_tx, synced_rx) = watch::channel(false);
    let sync = Arc::new(SyncCount {
        remaining: AtomicUsize::new(1 + metadata.children.len()),
        done: synced_tx,
    });
    let tracked = queue.clone();
    let listed = sync.mark();
    let backoff = Arc::new(backoff::Backoff::default());
    let events = Arc::new(events::EventBudget::default());
    let churn = Arc::new(churn::Churn::default());
    let (forget, forget_events, forget_writes) = (backoff.clone(), events.clone(), churn.clone());
    let parents = reflector::reflector(
        writer,
        watcher(api(&client, &parent, namespace), watcher::Config::default()).modify(typed(&parent)),
    )
    .inspect_ok(move |event| match event {
        watcher::Event::Apply(o) | watcher::Event::InitApply(o) => {
            tracked.add(key(o.namespace().as_deref(), &o.name_any()))
        }
        watcher::Event::Delete(o) => {
            let key = key(o.namespace().as_deref(), &o.name_any());
            forget.forget(&key);
            forget_events.forget(&key);
            forget_writes.forget(&key);
            tracked.forget(&key);
        }
        watcher::Event::InitDone => listed(),
        watcher::Event::Init => {}
    })
    .applied_objects();
    let mut controller = Controller::for_stream_with(parents, cache.clone(), parent.clone())
        .with_config(Config::default().concurrency(options.concurrency));

    let mut children = Vec::new();
    for kind in &metadata.children {
        let resource = discovery::resolve(&client, kind).await?;
        let writer = reflector::store::Writer::new(resource.clone());
        let store = writer.as_reader();
        let config = watcher::Config::default().labels(&crate::apply::selector(&name));
        let ns = options.namespace.as_deref().filter(|_| kind.namespaced);
        let (tracked, owner) = (queue.clone(), parent.clone());
        let namespaced = metadata.parent.namespaced;
        let listed = sync.mark();
        let stream = reflector::reflector(
            writer,
            watcher(api(&client, &resource, ns), config).modify(typed(&resource)),
        )
        .default_backoff()
        .inspect_ok(move |event| {
            if matches!(event, watcher::Event::InitDone) {
                listed();
            }
        })
        .touched_objects()
        .inspect_ok(move |child| {
            let ns = child.namespace().filter(|_| namespaced);
            for r in child.owner_references() {
                if r.kind == owner.kind && r.api_version == owner.api_version {
                    tracked.add(key(ns.as_deref(), &r.name));
                }
            }
        });
        controller = controller.owns_stream_with(stream, resource.clone());
        children.push(ChildKind {
            kind: kind.clone(),
            resource,
            store,
        });
    }
    // A new plugin version reconciles every parent once.
    let (tracked, all) = (queue.clone(), cache.clone());
    let reloads = futures::stream::unfold(plugin.clone(), |mut rx| async move {
        rx.changed().await.ok().map(|()| ((), rx))
    })
    .map(move |()| {
        for o in all.state() {
            tracked.add(key(o.namespace().as_deref(), &o.name_any()));
        }
    });
    controller = controller.reconcile_all_on(reloads);

    // kube-runtime's Store::wait_until_ready wakes only its most recent waiter, and the
    // controller waits on the parent store itself: count first lists from the streams.
    let mut listed = synced_rx.clone();
    tokio::spawn(async move {
        if listed.wait_for(|s| *s).await.is_ok() {
            let _ = synced.send(());
        }
    });
    let controller_label = crate::ops::metrics::ControllerLabel {
        controller: name.clone(),
    };
    crate::ops::metrics::get()
        .max_concurrent
        .get_or_create(&controller_label)
        .set(i64::from(options.concurrency));

    let reporter = Reporter {
        controller: format!("capstan-{name}"),
        instance: std::env::var("POD_NAME").ok(),
    };
    let shared = Arc::new(Shared {
        cpu: throttle::CpuBudget::new(options.cpu_millicores),
        creations: std::sync::Mutex::new(crate::bucket::Bucket::new(
            f64::from(options.creations_per_second.max(1)),
            2.0 * f64::from(options.creations_per_second.max(1)),
            std::time::Instant::now(),
        )),
        recorder: Recorder::new(client.clone(), reporter),
        client,
        plugin,
        parent,
        cache,
        children,
        options,
        backoff,
        events,
        churn,
        queue,
        leader,
        synced: synced_rx,
    });
    tracing::info!(plugin = %name, parent = %metadata.parent, child_kinds = metadata.children.len(), "controller started");
    controller
        .graceful_shutdown_on(shutdown)
        .run(reconcile::reconcile, reconcile::error_policy, shared)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "reconcile round ended with an error");
            }
        })
        .await;
    tracing::info!(plugin = %name, "controller stopped");
    Ok(())
}
