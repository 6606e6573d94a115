//! Leader election on a `coordination.k8s.io` Lease, with fencing.
//!
//! The algorithm is client-go's (optimistic-concurrency updates of one Lease; a holder's
//! lease counts as expired `leaseDurationSeconds` after this process last *saw the record
//! change*, so clocks need not agree), with two differences that matter to a controller:
//!
//! - **Fencing.** A leader that has not renewed for `renew_deadline` stops being leader at
//!   once, even while its renew request is still hanging — before any standby may consider
//!   the lease expired (`renew_deadline < lease_duration`). Reconciles watch [`Leader::lost`]
//!   and are cancelled with it.
//! - **Fast hand-over.** Standbys watch the Lease, so a released lease is taken within one
//!   API round trip rather than on the next retry tick. The watch backs off while the API
//!   is unavailable (kube-runtime's default backoff), so an outage does not make it spin.
//!
//! Every task the elector spawns ends with it: [`Elector::release`] stops them before it
//! returns, and dropping an [`Elector`] stops them and fences (leadership ends).
//!
//! kube-lease-manager (the maintained crate for this, kube 5 compatible) was considered: it
//! renews on a whole-second grace period and keeps reporting leadership while renewals
//! fail, i.e. it does not fence, which is the property this module exists for.
//!
//! ```no_run
//! # async fn demo(client: kube::Client) {
//! use capstan::leader::{self, Settings};
//! let settings = Settings::new("capstan", "default", leader::identity());
//! let (leader, elector) = leader::start(client, settings);
//! if leader.acquired().await {
//!     // reconcile until `leader.lost()` resolves
//! }
//! elector.release().await;
//! # }
//! ```

use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::{Mutex, Notify, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Lease name, namespace, identity and timings (client-go's defaults: 15 s / 10 s / 2 s).
#[derive(Clone, Debug)]
pub struct Settings {
    /// Lease name.
    pub name: String,
    /// Lease namespace.
    pub namespace: String,
    /// This process's identity in `holderIdentity`.
    pub identity: String,
    /// How long a lease is valid after its last renewal, as standbys see it.
    pub lease_duration: Duration,
    /// A leader that could not renew for this long stops leading.
    pub renew_deadline: Duration,
    /// Time between attempts to acquire or renew.
    pub retry_period: Duration,
}

impl Settings {
    /// Settings with client-go's default timings.
    pub fn new(name: impl Into<String>, namespace: impl Into<String>, identity: impl Into<String>) -> Self {
        Settings {
            name: name.into(),
            namespace: namespace.into(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    /// Check the timings make fencing possible: the duration other replicas read from the
    /// Lease (whole seconds) must be longer than the renew deadline, after which this leader
    /// stops leading.
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.renew_deadline < self.lease_duration,
            "--renew-deadline ({:?}) must be shorter than --lease-duration ({:?}), or two leaders could overlap",
            self.renew_deadline,
            self.lease_duration
        );
        // Other replicas time the lease by what is recorded, not by the flag.
        let recorded = self.recorded_lease_seconds();
        anyhow::ensure!(
            self.renew_deadline < Duration::from_secs(recorded.unsigned_abs().into()),
            "--lease-duration {:?} is recorded in the Lease as {recorded}s, which must be longer than --renew-deadline {:?}, or two leaders could overlap",
            self.lease_duration,
            self.renew_deadline
        );
        anyhow::ensure!(
            self.retry_period < self.renew_deadline,
            "--retry-period ({:?}) must be shorter than --renew-deadline ({:?})",
            self.retry_period,
            self.renew_deadline
        );
        Ok(())
    }

    /// `leaseDurationSeconds` as written into the Lease: whole seconds, rounded down.
    fn recorded_lease_seconds(&self) -> i32 {
        i32::try_from(self.lease_duration.as_secs()).unwrap_or(i32::MAX)
    }
}

/// This process's identity: the pod name, or hostname and pid outside a pod.
pub fn identity() -> String {
    if let Ok(pod) = std::env::var("POD_NAME")
        && !pod.is_empty()
    {
        return pod;
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "capstan".into());
    format!("{host}_{}", std::process::id())
}

/// Whether this process may reconcile; cheap to clone and to query.
#[derive(Clone, Debug)]
pub struct Leader {
    leading: watch::Receiver<bool>,
    stopping: watch::Receiver<bool>,
}

impl Leader {
    /// A leader without election: always leading (a single replica).
    pub fn always() -> Leader {
        let (_, leading) = watch::channel(true);
        let (_, stopping) = watch::channel(false);
        Leader { leading, stopping }
    }

    /// Leading right now.
    pub fn is_leading(&self) -> bool {
        *self.leading.borrow()
    }

    /// Wait until leading (`true`), or until the process is shutting down (`false`).
    pub async fn acquired(&self) -> bool {
        let mut leading = self.leading.clone();
        let mut stopping = self.stopping.clone();
        tokio::select! {
            r = leading.wait_for(|l| *l) => r.is_ok(),
            _ = stopping.wait_for(|s| *s) => false,
        }
    }

    /// Resolves once this process is no longer leading.
    pub async fn lost(&self) {
        let mut leading = self.leading.clone();
        if leading.wait_for(|l| !*l).await.is_err() {
            // The sender is gone with leadership still held (`Leader::always`): never lost.
            std::future::pending::<()>().await;
        }
    }
}

/// The running election; [`Elector::release`] hands the lease over on shutdown.
///
/// Dropping it without `release` stops its tasks and ends leadership (reconciles are
/// fenced) but leaves the lease to expire.
pub struct Elector {
    inner: Arc<Inner>,
    /// Acquires and renews the lease, and fences.
    campaign: JoinHandle<()>,
    /// Wakes the campaign when the Lease changes.
    watcher: JoinHandle<()>,
    stopping: watch::Sender<bool>,
}

struct Inner {
    api: Api<Lease>,
    settings: Settings,
    leading: watch::Sender<bool>,
    /// The resourceVersion last seen and when (our clock): the basis of expiry.
    observed: Mutex<Option<(String, Instant)>>,
    changed: Notify,
}

/// Start campaigning for the lease in the background.
pub fn start(client: kube::Client, settings: Settings) -> (Leader, Elector) {
    let (leading_tx, leading) = watch::channel(false);
    let (stopping_tx, stopping) = watch::channel(false);
    let inner = Arc::new(Inner {
        api: Api::namespaced(client, &settings.namespace),
        settings,
        leading: leading_tx,
        observed: Mutex::new(None),
        changed: Notify::new(),
    });
    set_status(&inner.settings.name, false);
    let watcher = tokio::spawn(watch_lease(inner.clone()));
    let campaign = tokio::spawn(campaign(inner.clone()));
    let leader = Leader { leading, stopping };
    (
        leader,
        Elector {
            inner,
            campaign,
            watcher,
            stopping: stopping_tx,
        },
    )
}

impl Elector {
    /// Stop waiting reconciles from taking new work, and stop watching the Lease (only a
    /// fast acquisition needs it). Leadership is kept, and renewed, until release.
    pub fn stop_waiters(&self) {
        let _ = self.stopping.send(true);
        self.watcher.abort();
    }

    /// Stop campaigning and, if leading, release the lease so a standby takes over at once.
    /// No task of the elector is running when this returns.
    pub async fn release(mut self) {
        self.stop_waiters();
        self.campaign.abort();
        let _ = (&mut self.campaign).await;
        let _ = (&mut self.watcher).await;
        let inner = &self.inner;
        let was_leading = inner.leading.send_replace(false);
        set_status(&inner.settings.name, false);
        if !was_leading {
            return;
        }
        let released = tokio::time::timeout(inner.settings.retry_period, release(inner)).await;
        match released {
            Ok(Ok(())) => tracing::info!(lease = %inner.settings.name, "lease released"),
            Ok(Err(e)) => tracing::warn!(lease = %inner.settings.name, error = %e, "could not release lease"),
            Err(_) => tracing::warn!(lease = %inner.settings.name, "releasing the lease timed out"),
        }
    }
}

impl Drop for Elector {
    /// Stop every task; leadership ends with the renewals (a no-op after `release`).
    fn drop(&mut self) {
        self.campaign.abort();
        self.watcher.abort();
        if self.inner.leading.send_replace(false) {
            set_status(&self.inner.settings.name, false);
            tracing::warn!(lease = %self.inner.settings.name, "elector dropped; reconciles fenced");
        }
    }
}

fn set_status(name: &str, leading: bool) {
    crate::ops::metrics::get()
        .leader
        .get_or_create(&crate::ops::metrics::LeaseLabel { name: name.into() })
        .set(i64::from(leading));
}

async fn campaign(inner: Arc<Inner>) {
    let s = &inner.settings;
    loop {
        // Standby: try at every retry tick, and at once when the lease changes.
        loop {
            let attempt = Instant::now();
            match tokio::time::timeout(s.retry_period, try_acquire_or_renew(&inner)).await {
                Ok(Ok(true)) => break,
                Ok(Ok(false)) => {}
                Ok(Err(e)) => tracing::debug!(error = %e, "lease acquire attempt failed"),
                Err(_) => tracing::debug!("lease acquire attempt timed out"),
            }
            tokio::select! {
                _ = tokio::time::sleep_until(attempt + s.retry_period) => {}
                _ = inner.changed.notified() => {}
            }
        }
        let mut renewed = Instant::now();
        let _ = inner.leading.send(true);
        set_status(&s.name, true);
        tracing::info!(lease = %s.name, identity = %s.identity, "became leader");

        // Leader: renew every retry period; fence when the renew deadline passes.
        loop {
            let deadline = renewed + s.renew_deadline;
            tokio::time::sleep_until((Instant::now() + s.retry_period).min(deadline)).await;
            let attempt = Instant::now();
            if attempt >= deadline {
                tracing::warn!(lease = %s.name, "could not renew the lease within the renew deadline");
                break;
            }
            match tokio::time::timeout_at(deadline, try_acquire_or_renew(&inner)).await {
                Ok(Ok(true)) => renewed = attempt,
                Ok(Ok(false)) => {
                    tracing::warn!(lease = %s.name, "lease taken by another holder");
                    break;
                }
                Ok(Err(e)) => tracing::warn!(lease = %s.name, error = %e, "lease renewal failed"),
                Err(_) => {
                    tracing::warn!(lease = %s.name, "could not renew the lease within the renew deadline");
                    break;
                }
            }
        }
        let _ = inner.leading.send(false);
        set_status(&s.name, false);
        tracing::warn!(lease = %s.name, identity = %s.identity, "stopped leading; reconciles fenced");
    }
}

/// Wake the campaign whenever the Lease changes, so a released lease is taken at once.
async fn watch_lease(inner: Arc<Inner>) {
    let mut events = std::pin::pin!(lease_events(inner.api.clone(), &inner.settings.name));
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_)) => inner.changed.notify_one(),
            Ok(_) => {}
            Err(e) => {
                tracing::debug!(lease = %inner.settings.name, error = %e, "lease watch failed; backing off")
            }
        }
    }
}

/// The Lease's watch events; after an error the stream pauses (kube-runtime's default
/// backoff: 0.8 s doubling to 30 s, with jitter) instead of re-listing at once.
fn lease_events(
    api: Api<Lease>,
    name: &str,
) -> impl Stream<Item = Result<watcher::Event<Lease>, watcher::Error>> + Send + use<> {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    watcher(api, config).default_backoff()
}

fn now() -> MicroTime {
    MicroTime(Timestamp::now())
}

/// One round of client-go's `tryAcquireOrRenew`: `Ok(true)` when we hold the lease after it.
async fn try_acquire_or_renew(inner: &Inner) -> Result<bool, kube::Error> {
    let s = &inner.settings;
    let duration = s.recorded_lease_seconds();
    let Some(mut lease) = inner.api.get_opt(&s.name).await? else {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(s.name.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(s.identity.clone()),
                lease_duration_seconds: Some(duration),
                acquire_time: Some(now()),
                renew_time: Some(now()),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }),
        };
        return match inner.api.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(e),
        };
    };
    let version = lease.metadata.resource_version.clone().unwrap_or_default();
    let observed_at = {
        let mut observed = inner.observed.lock().await;
        match &*observed {
            Some((v, at)) if *v == version => *at,
            _ => {
                let at = Instant::now();
                *observed = Some((version, at));
                at
            }
        }
    };
    let spec = lease.spec.take().unwrap_or_default();
    let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
    let ours = holder.as_deref() == Some(s.identity.as_str());
    let valid_for = Duration::from_secs(spec.lease_duration_seconds.unwrap_or(0).max(0) as u64);
    if holder.is_some() && !ours && observed_at.elapsed() < valid_for {
        return Ok(false);
    }
    lease.spec = Some(LeaseSpec {
        holder_identity: Some(s.identity.clone()),
        lease_duration_seconds: Some(duration),
        acquire_time: if ours { spec.acquire_time } else { Some(now()) },
        renew_time: Some(now()),
        lease_transitions: Some(spec.lease_transitions.unwrap_or(0) + i32::from(!ours)),
        ..spec
    });
    // The resourceVersion we read makes this a compare-and-swap: a racing standby gets 409.
    match inner.api.replace(&s.name, &PostParams::default(), &lease).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Give the lease up: no holder and a 1 s duration, as client-go's `ReleaseOnCancel` does.
async fn release(inner: &Inner) -> Result<(), kube::Error> {
    let s = &inner.settings;
    let mut lease = inner.api.get(&s.name).await?;
    let mut spec = lease.spec.take().unwrap_or_default();
    if spec.holder_identity.as_deref() != Some(s.identity.as_str()) {
        return Ok(());
    }
    spec.holder_identity = None;
    spec.lease_duration_seconds = Some(1);
    spec.renew_time = Some(now());
    lease.spec = Some(spec);
    inner.api.replace(&s.name, &PostParams::default(), &lease).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    use axum::body::Body;
    use axum::extract::{Request, State};
    use axum::http::{Method, StatusCode, header};
    use axum::response::{IntoResponse, Response};
    use serde_json::{Value, json};

    use super::*;

    const NAMESPACE: &str = "ns";
    const NAME: &str = "capstan";

    fn timings(lease: u64, renew: u64, retry: u64) -> Settings {
        Settings {
            lease_duration: Duration::from_millis(lease),
            renew_deadline: Duration::from_millis(renew),
            retry_period: Duration::from_millis(retry),
            ..Settings::new(NAME, NAMESPACE, "me")
        }
    }

    #[test]
    fn lease_duration_truncated_to_the_renew_deadline_is_refused() {
        let error = timings(1500, 1200, 500).validate().unwrap_err().to_string();
        assert_eq!(
            error,
            "--lease-duration 1.5s is recorded in the Lease as 1s, which must be longer than \
             --renew-deadline 1.2s, or two leaders could overlap"
        );
        // Equal is not longer: a standby could take over the moment this leader fences.
        let error = timings(1900, 1000, 500).validate().unwrap_err().to_string();
        assert!(error.contains("recorded in the Lease as 1s"), "{error}");
        // Under a second is recorded as 0 s.
        let error = timings(900, 600, 100).validate().unwrap_err().to_string();
        assert!(error.contains("recorded in the Lease as 0s"), "{error}");
    }

    #[test]
    fn whole_second_lease_durations_longer_than_the_renew_deadline_are_accepted() {
        timings(15_000, 10_000, 2_000).validate().unwrap();
        timings(2_000, 1_500, 500).validate().unwrap();
        Settings::new(NAME, NAMESPACE, "me").validate().unwrap();
    }

    #[test]
    fn renew_deadline_not_shorter_than_the_lease_duration_is_refused() {
        let error = timings(10_000, 12_000, 2_000).validate().unwrap_err().to_string();
        assert!(error.contains("must be shorter than --lease-duration"), "{error}");
        let error = timings(15_000, 10_000, 10_000)
            .validate()
            .unwrap_err()
            .to_string();
        assert!(error.contains("--retry-period"), "{error}");
    }

    /// An in-process API server holding one Lease, with optimistic concurrency.
    #[derive(Clone, Default)]
    struct FakeApi {
        lease: Arc<std::sync::Mutex<Option<Value>>>,
        versions: Arc<AtomicUsize>,
        /// List (and watch) requests on the Lease collection: always 503.
        lists: Arc<AtomicUsize>,
        /// Every request hangs, as in a network partition.
        hang: Arc<AtomicBool>,
    }

    impl FakeApi {
        fn client(&self) -> kube::Client {
            let router = axum::Router::new().fallback(handle).with_state(self.clone());
            kube::Client::new(router, NAMESPACE)
        }

        fn holder(&self) -> Option<String> {
            let lease = self.lease.lock().unwrap();
            let holder = &lease.as_ref().expect("a lease")["spec"]["holderIdentity"];
            holder.as_str().map(str::to_string)
        }

        fn store(&self, mut lease: Value) -> Value {
            let version = self.versions.fetch_add(1, Ordering::SeqCst) + 1;
            lease["metadata"]["resourceVersion"] = json!(version.to_string());
            *self.lease.lock().unwrap() = Some(lease.clone());
            lease
        }
    }

    fn reply(code: StatusCode, body: &Value) -> Response {
        (
            code,
            [(header::CONTENT_TYPE, "application/json")],
            body.to_string(),
        )
            .into_response()
    }

    fn failure(code: StatusCode) -> Response {
        let reason = match code {
            StatusCode::NOT_FOUND => "NotFound",
            StatusCode::CONFLICT => "Conflict",
            _ => "ServiceUnavailable",
        };
        let status = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": code.to_string(), "reason": reason, "code": code.as_u16(),
        });
        reply(code, &status)
    }

    async fn handle(State(api): State<FakeApi>, request: Request<Body>) -> Response {
        if api.hang.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        let collection = format!("/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases");
        let one = format!("{collection}/{NAME}");
        let (method, path) = (request.method().clone(), request.uri().path().to_string());
        let body: Value = match axum::body::to_bytes(request.into_body(), usize::MAX).await {
            Ok(bytes) if !bytes.is_empty() => serde_json::from_slice(&bytes).expect("a JSON body"),
            _ => Value::Null,
        };
        let stored = api.lease.lock().unwrap().clone();
        match (method, path) {
            (Method::GET, p) if p == collection => {
                api.lists.fetch_add(1, Ordering::SeqCst);
                failure(StatusCode::SERVICE_UNAVAILABLE)
            }
            (Method::GET, p) if p == one => match stored {
                Some(lease) => reply(StatusCode::OK, &lease),
                None => failure(StatusCode::NOT_FOUND),
            },
            (Method::POST, p) if p == collection => match stored {
                Some(_) => failure(StatusCode::CONFLICT),
                None => reply(StatusCode::CREATED, &api.store(body)),
            },
            (Method::PUT, p) if p == one => {
                let current = stored.map(|l| l["metadata"]["resourceVersion"].clone());
                if current.is_none_or(|v| v != body["metadata"]["resourceVersion"]) {
                    return failure(StatusCode::CONFLICT);
                }
                reply(StatusCode::OK, &api.store(body))
            }
            _ => failure(StatusCode::NOT_FOUND),
        }
    }

    /// Polls the runtime until `done`, for work already scheduled (an aborted task's drop).
    async fn settle(done: impl Fn() -> bool) -> bool {
        for _ in 0..1000 {
            if done() {
                return true;
            }
            tokio::task::yield_now().await;
        }
        done()
    }

    const GUARD: Duration = Duration::from_secs(10);

    #[tokio::test]
    async fn lease_watch_backs_off_while_the_api_fails() {
        let api = FakeApi::default();
        let mut events = std::pin::pin!(lease_events(Api::namespaced(api.client(), NAMESPACE), NAME));
        // `Init` comes before the first list, whose failure is the first error.
        loop {
            match tokio::time::timeout(GUARD, events.next())
                .await
                .expect("an event")
            {
                Some(Ok(watcher::Event::Init)) => continue,
                Some(Err(_)) => break,
                other => panic!("expected the list to fail, got {other:?}"),
            }
        }
        assert_eq!(api.lists.load(Ordering::SeqCst), 1);
        // Without a backoff the watcher re-lists at once; the default waits at least 0.8 s.
        let next = tokio::time::timeout(Duration::from_millis(300), events.next()).await;
        assert!(next.is_err(), "the watch retried without backing off");
        assert_eq!(api.lists.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn release_stops_every_task_and_gives_the_lease_up() {
        let api = FakeApi::default();
        let (leader, elector) = start(api.client(), Settings::new(NAME, NAMESPACE, "me"));
        let acquired = tokio::time::timeout(GUARD, leader.acquired()).await;
        assert!(acquired.expect("acquired in time"));
        assert_eq!(api.holder().as_deref(), Some("me"));

        elector.stop_waiters();
        assert!(leader.is_leading(), "leadership is kept until release");
        assert!(
            settle(|| elector.watcher.is_finished()).await,
            "the lease watch still runs"
        );

        let inner = Arc::downgrade(&elector.inner);
        elector.release().await;
        assert!(
            inner.upgrade().is_none(),
            "a task of the elector outlived release"
        );
        assert!(!leader.is_leading());
        assert_eq!(api.holder(), None);
    }

    #[tokio::test]
    async fn dropping_the_elector_fences_and_stops_every_task() {
        let api = FakeApi::default();
        let (leader, elector) = start(api.client(), Settings::new(NAME, NAMESPACE, "me"));
        assert!(
            tokio::time::timeout(GUARD, leader.acquired())
                .await
                .expect("acquired in time")
        );
        let inner = Arc::downgrade(&elector.inner);
        drop(elector);
        assert!(!leader.is_leading(), "leading without anyone renewing");
        tokio::time::timeout(GUARD, leader.lost())
            .await
            .expect("lost resolves");
        assert!(
            settle(|| inner.upgrade().is_none()).await,
            "a task of the elector outlived it"
        );
    }

    #[tokio::test]
    async fn leader_fences_at_the_renew_deadline_while_renewal_hangs() {
        let api = FakeApi::default();
        let (leader, elector) = start(api.client(), timings(2_000, 400, 100));
        assert!(
            tokio::time::timeout(GUARD, leader.acquired())
                .await
                .expect("acquired in time")
        );
        api.hang.store(true, Ordering::SeqCst);
        let hung = Instant::now();
        tokio::time::timeout(GUARD, leader.lost()).await.expect("fenced");
        // Fenced at the renew deadline, before any standby could consider the lease expired.
        assert!(hung.elapsed() < Duration::from_secs(2), "{:?}", hung.elapsed());
        assert!(!leader.is_leading());
        drop(elector);
    }
}
