//! Per-plugin wiring: resolve kinds through discovery, watch the parent kind and the
//! plugin's children (by label), map children to their controlling parent, and drive
//! reconciles through kube-runtime's `Controller` — which deduplicates keys and never
//! runs two reconciles of one object at once.

mod backoff;
mod churn;
mod compact;
mod creations;
mod discovery;
mod dispatch;
mod events;
mod finalizer;
mod informer;
mod outcome;
mod owned;
mod per_object;
mod plan;
mod queue;
mod quiet;
mod reconcile;
mod related;
mod scope;
mod sharded;
mod sink;
mod subscriptions;
mod synced;
mod throttle;
mod update;
mod version;
mod write;
mod written;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::Client;
use kube::api::Api;
use kube::runtime::events::Reporter;
use kube::runtime::reflector::Store;

use tokio::sync::watch;

use crate::engine::{Kind, Metadata, Reconcile};
use crate::key::ObjectKey;

use crate::lease::Tenure;
pub use discovery::{resolve, served};
pub use informer::Informers;
pub use per_object::Memory;
use per_object::PerObject;
pub use update::Update;
pub use version::Canary;

/// Reconciles of one plugin running at once, unless configured. A reconcile spends most
/// of its time waiting for the API server's answers, so this caps a plugin's parents per
/// second at about this many per write time. Measured with the e2e bench's null server
/// answering each write after 5 ms (`CAPSTAN_BENCH_WRITE_LATENCY_MS`), 10 000 new parents
/// on 2 cores: 9.9 s at 16, 5.7 at 32, 3.7 at 64 (3.6-4.6 with writes answered at once),
/// 3.5 at 128 for 3 MiB more. A plugin's calls past its memory total, its CPU share or
/// the instance pool wait there, whatever this allows.
pub(crate) const DEFAULT_CONCURRENCY: u16 = 64;

/// How one plugin is run.
#[derive(Clone, Debug)]
pub struct Options {
    /// Watch only this namespace.
    pub namespace: Option<String>,
    /// What the operator grants the plugin: kinds it may declare (Secrets, its own parent
    /// kind) and where its responses may write and its queries read beyond its parent's
    /// namespace.
    pub allow: crate::validate::Allowances,
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
    /// The plugin's settings (`null` for none), which it checks at load.
    pub settings: serde_json::Value,
    /// On a sharded host, the hash ranges this replica reconciles.
    pub shard: Option<crate::shard::Filter>,
    /// The host's watches, shared by every plugin that reads the same kind.
    pub informers: Informers,
    /// The name to run the plugin under instead of its own (one file run twice).
    pub name: Option<String>,
    /// Where dispatched reconciles are recorded (`capstan run --record`), if anywhere.
    pub record: Option<Arc<crate::record::Recorder>>,
    /// Write nothing: find what the plugin would do instead (`capstan diff`, shadow mode).
    pub preview: Option<Arc<crate::preview::Preview>>,
    /// Reconcile only the parents with these labels (a label selector).
    pub parent_labels: Option<String>,
    /// How existing children of a kind (`Kind` or `plural.group`) that differ from the
    /// answer are updated; in place unless named.
    pub updates: std::collections::BTreeMap<String, Update>,
    /// A candidate version for the parents its selector picks, as the supervisor sends
    /// it: replaced or dropped while the controller runs.
    pub canary: watch::Receiver<Option<Canary>>,
}

impl Default for Options {
    fn default() -> Self {
        let limits = crate::engine::Limits::default();
        Options {
            namespace: None,
            allow: Default::default(),
            concurrency: DEFAULT_CONCURRENCY,
            resync: Duration::from_secs(600),
            cpu_millicores: limits.cpu_millicores,
            creations_per_second: limits.creations_per_second,
            finalizer_timeout: limits.finalizer_timeout,
            settings: serde_json::Value::Null,
            shard: None,
            informers: Informers::default(),
            name: None,
            record: None,
            preview: None,
            parent_labels: None,
            updates: Default::default(),
            canary: watch::channel(None).1,
        }
    }
}

/// A watched child kind and its cache.
struct ChildKind {
    kind: Kind,
    resource: compact::Type,
    cache: owned::Owned,
    /// How its children that differ from an answer are updated.
    update: update::Rule,
}

/// Everything one plugin's reconciles share.
struct Shared {
    client: Client,
    /// The plugin version new reconciles use, numbered; hot reload replaces it.
    versions: version::Versions,
    parent: compact::Type,
    /// The parent cache: reconciles that waited for leadership re-read their object here.
    cache: Store<compact::Compact>,
    children: Vec<ChildKind>,
    /// Related kinds, in the order the plugin declared them.
    related: Vec<related::RelatedKind>,
    /// Who the plugin's events say recorded them.
    reporter: Reporter,
    /// The queue the plugin's events are written from.
    events: events::Recorder,
    /// The plugin's reconciles running, which its events make way for.
    busy: events::Busy,
    options: Options,
    /// Backoff, event and write budgets per parent.
    per_object: Arc<PerObject>,
    /// The plugin's share of CPU.
    cpu: throttle::CpuBudget,
    /// The plugin's budget of child creations beyond its parents' own.
    creations: creations::Budget,
    queue: Arc<queue::Queue>,
    tenure: Tenure,
    /// True once the parent and every child cache have listed.
    synced: watch::Receiver<bool>,
    /// What carries out the plugin's answers: writes, or a preview's findings.
    sink: Box<dyn sink::Sink>,
}

impl Shared {
    fn plugin(&self) -> Arc<dyn Reconcile> {
        self.versions.current().plugin
    }

    /// Take one creation for `parent`: from its own allowance when it is a user's (no
    /// plugin made it), else — or once that is spent — from the plugin's budget; or say
    /// how long until there is one ([`creations`]).
    fn creation(&self, parent: &kube::api::DynamicObject) -> Result<(), Duration> {
        let now = std::time::Instant::now();
        let users = crate::apply::maker(parent).is_none();
        if users
            && self
                .per_object
                .with(&ObjectKey::of(parent), |p| p.creations.take(now))
        {
            return Ok(());
        }
        self.creations.take(now)
    }
}

/// The API of `resource`, in `namespace` or all of them, read into compact objects.
fn api(client: &Client, resource: &compact::Type, namespace: Option<&str>) -> Api<compact::Compact> {
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
        None => Api::all_with(client.clone(), resource),
    }
}

/// What one plugin's watches feed: its queue mirror, first-list count and per-object memory.
struct Wiring {
    client: Client,
    options: Options,
    metadata: Metadata,
    parent: compact::Type,
    queue: Arc<queue::Queue>,
    sync: Arc<synced::SyncCount>,
    per_object: Arc<PerObject>,
    /// The replica's ranges, keyed as this plugin's parents are spread.
    shard: Option<crate::shard::Filter>,
}

/// Run one plugin until `shutdown` resolves; in-flight reconciles finish first. `synced`
/// fires once the parent and child caches have listed. Only while `tenure` is held do
/// reconciles run, and the plugin's writes are refused outside it; a new value in `plugin` (same kinds) is used from the next reconcile
/// on, and every parent is reconciled once with it.
pub async fn run(
    client: Client,
    plugin: watch::Receiver<Arc<dyn Reconcile>>,
    options: Options,
    tenure: Tenure,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
    synced: tokio::sync::oneshot::Sender<()>,
    memory: Memory,
) -> anyhow::Result<()> {
    let metadata = plugin.borrow().metadata().clone();
    update::check(&options.updates, &metadata.children).map_err(|e| anyhow::anyhow!("{e}"))?;
    let shard = options
        .shard
        .as_ref()
        .map(|f| f.for_parent_scope(metadata.parent.namespaced));
    if shard.as_ref().is_some_and(|f| f.ranges.is_empty()) {
        // Nothing to reconcile until the group gives this replica a range.
        tracing::info!(plugin = %metadata.name, "no shard ranges held; waiting");
        let _ = synced.send(());
        shutdown.await;
        return Ok(());
    }
    let (sync, synced_rx) = synced::SyncCount::new(1 + metadata.children.len() + metadata.related.len());
    // Every write this plugin's controller makes, fenced by the term it runs in (events
    // by the term each was queued in).
    let (unfenced, client) = (client.clone(), crate::lease::guard(&client, &tenure));
    let wiring = Wiring {
        parent: discovery::resolve(&client, &metadata.parent).await?.into(),
        queue: Arc::new(queue::Queue::new(&metadata.name)),
        client,
        options,
        metadata,
        sync,
        per_object: memory.0,
        shard,
    };
    let (mut controller, cache) = wiring.parents();
    let mut children = Vec::new();
    for kind in &wiring.metadata.children {
        let (child, stream) = wiring.children(kind).await?;
        controller = controller.owns_stream_with(stream, child.resource.clone());
        children.push(child);
    }
    let mut related = Vec::new();
    for (index, kind) in wiring.metadata.related.iter().enumerate() {
        let (cache, stream, wake) = related::watch(&wiring, index, kind).await?;
        controller = controller.watches_stream_with(stream, wake, cache.resource.clone());
        related.push(cache);
    }
    let canary = wiring.options.canary.clone();
    controller = controller.reconcile_all_on(reloads(
        plugin.clone(),
        canary,
        cache.clone(),
        wiring.queue.clone(),
    ));
    synced::tell(synced_rx.clone(), synced);
    let name = wiring.metadata.name.clone();
    let busy = events::Busy::default();
    let (recorder, writing) = events::start(
        (unfenced, tenure.clone()),
        &name,
        {
            let memory = wiring.per_object.clone();
            move || memory.sweep_events()
        },
        &busy,
    );
    let shared = Arc::new(wiring.shared(
        plugin,
        cache,
        (children, related),
        tenure,
        synced_rx,
        (recorder, busy),
    ));
    tracing::info!(plugin = %name, parent = %shared.parent.kind, child_kinds = shared.children.len(), related_kinds = shared.related.len(), "controller started");
    controller
        .graceful_shutdown_on(shutdown)
        .run(reconcile::reconcile, reconcile::error_policy, shared)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "reconcile round ended with an error");
            }
        })
        .await;
    writing.finish().await;
    tracing::info!(plugin = %name, "controller stopped");
    Ok(())
}

impl Wiring {
    /// What every reconcile of this plugin shares.
    fn shared(
        self,
        plugin: watch::Receiver<Arc<dyn Reconcile>>,
        cache: Store<compact::Compact>,
        (children, related): (Vec<ChildKind>, Vec<related::RelatedKind>),
        tenure: Tenure,
        synced: watch::Receiver<bool>,
        (events, busy): (events::Recorder, events::Busy),
    ) -> Shared {
        let name = self.metadata.name;
        let metrics = crate::ops::metrics::get();
        metrics.start_plugin(&name, crate::engine::Fault::CAUSES, events::Dropped::CAUSES);
        metrics
            .max_concurrent
            .get_or_create(&crate::ops::metrics::ControllerLabel {
                controller: name.clone(),
            })
            .set(i64::from(self.options.concurrency));
        let cpu_meter = metrics
            .cpu_seconds
            .get_or_create(&crate::ops::metrics::PluginLabel { plugin: name.clone() })
            .clone();
        let reporter = Reporter {
            controller: format!("capstan-{name}"),
            instance: std::env::var("POD_NAME").ok(),
        };
        let sink: Box<dyn sink::Sink> = match &self.options.preview {
            Some(preview) => Box::new(sink::Dry(preview.clone())),
            None => Box::new(sink::Live),
        };
        Shared {
            sink,
            cpu: throttle::CpuBudget::new(self.options.cpu_millicores).metered(cpu_meter),
            creations: creations::Budget::new(self.options.creations_per_second, std::time::Instant::now()),
            reporter,
            events,
            busy,
            client: self.client,
            versions: version::Versions::new(plugin, self.options.canary.clone()),
            parent: self.parent,
            cache,
            children,
            related,
            options: self.options,
            per_object: self.per_object,
            queue: self.queue,
            tenure,
            synced,
        }
    }
}

/// A new plugin version (or canary, or its removal) reconciles every parent once: a
/// parent whose version did not change finds its quiet answer and calls nothing.
fn reloads(
    plugin: watch::Receiver<Arc<dyn Reconcile>>,
    canary: watch::Receiver<Option<Canary>>,
    cache: Store<compact::Compact>,
    queue: Arc<queue::Queue>,
) -> impl futures::Stream<Item = ()> + Send + 'static {
    futures::stream::select(changes(plugin), changes(canary)).map(move |()| {
        for o in cache.state() {
            queue.add(ObjectKey::of(&*o));
        }
    })
}

/// Each change sent on `rx` from now on (the controller starts with what it holds now),
/// until its sender is gone.
fn changes<T: Send + Sync + 'static>(
    mut rx: watch::Receiver<T>,
) -> impl futures::Stream<Item = ()> + Send + 'static {
    rx.mark_unchanged();
    futures::stream::unfold(
        rx,
        |mut rx| async move { rx.changed().await.ok().map(|()| ((), rx)) },
    )
}
