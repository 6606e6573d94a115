//! Leader election on a `coordination.k8s.io` Lease, with fencing.
//!
//! The algorithm is client-go's (optimistic-concurrency updates of one Lease), under the
//! lease discipline of the `lease` module that shard membership shares:
//!
//! - **Fencing.** Leadership is a `Tenure` whose term ends `renew_deadline` after the
//!   start of the last successful renewal, even while a renew request still hangs or the
//!   process was paused — before any standby may consider the lease expired
//!   (`renew_deadline < lease_duration`). Reconciles are pinned to the term they started
//!   in and cancelled with it; their writes are refused after it.
//! - **Expiry** of another holder's lease is timed from when this process saw the record
//!   change (`lease::Observed`), so clocks need not agree.
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
//! let (tenure, elector) = leader::start(client, settings);
//! if tenure.acquired().await {
//!     // reconcile until `tenure.lost()` resolves
//! }
//! elector.release().await;
//! # }
//! ```

use std::sync::Arc;

use futures::{Stream, StreamExt};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::{Mutex, Notify};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::lease::{Fence, Holder, Observed, Tenure};
pub use crate::lease::{Settings, identity};

/// The running election; [`Elector::release`] hands the lease over on shutdown.
///
/// Dropping it without `release` stops its tasks and ends leadership (reconciles are
/// fenced) but leaves the lease to expire.
pub struct Elector {
    inner: Arc<Inner>,
    /// Acquires and renews the lease.
    campaign: JoinHandle<()>,
    /// Wakes the campaign when the Lease changes.
    watcher: JoinHandle<()>,
}

struct Inner {
    api: Api<Lease>,
    settings: Settings,
    /// Leadership's terms.
    fence: Fence,
    /// When this process saw the Lease change: the basis of its expiry.
    observed: Mutex<Observed>,
    changed: Notify,
}

/// Start campaigning for the lease in the background.
pub fn start(client: kube::Client, settings: Settings) -> (Tenure, Elector) {
    let (fence, tenure) = Fence::new(settings.renew_deadline);
    fence.limit_jumps(settings.lease_duration - settings.renew_deadline);
    let inner = Arc::new(Inner {
        api: Api::namespaced(client, &settings.namespace),
        settings,
        fence,
        observed: Mutex::new(Observed::default()),
        changed: Notify::new(),
    });
    set_status(&inner.settings.name, false);
    let watcher = tokio::spawn(watch_lease(inner.clone()));
    let campaign = tokio::spawn(campaign(inner.clone()));
    (
        tenure,
        Elector {
            inner,
            campaign,
            watcher,
        },
    )
}

impl Elector {
    /// Stop waiting reconciles from taking new work, and stop watching the Lease (only a
    /// fast acquisition needs it). Leadership is kept, and renewed, until release.
    pub fn stop_waiters(&self) {
        self.inner.fence.stop_waiters();
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
        let was_leading = inner.fence.end();
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
        if self.inner.fence.end() {
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
    let retry = inner.settings.retry_period;
    crate::lease::hold(&inner.fence, retry, &mut Campaign { inner: &inner }).await;
}

/// Leader election's side of the renew loop.
struct Campaign<'a> {
    inner: &'a Inner,
}

impl Holder for Campaign<'_> {
    type Plan = ();

    async fn round(&mut self, _: bool) -> Result<Option<()>, kube::Error> {
        Ok(try_acquire_or_renew(self.inner).await?.then_some(()))
    }

    fn beginning(&mut self) {
        let s = &self.inner.settings;
        set_status(&s.name, true);
        tracing::info!(lease = %s.name, identity = %s.identity, "became leader");
    }

    fn commit(&mut self, (): (), _: Tenure, _: bool) {}

    fn lapsed(&mut self) {
        let s = &self.inner.settings;
        set_status(&s.name, false);
        tracing::warn!(lease = %s.name, identity = %s.identity, "stopped leading; reconciles fenced");
    }

    async fn wait(&mut self, next: Instant, held: bool) {
        // A standby also tries the moment the Lease changes (released, say).
        tokio::select! {
            () = crate::lease::clock::sleep_until(next) => {}
            () = self.inner.changed.notified(), if !held => {}
        }
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
    MicroTime(crate::lease::wall_clock())
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
    let unchanged = inner
        .observed
        .lock()
        .await
        .see(&s.name, &version, crate::lease::now());
    let spec = lease.spec.take().unwrap_or_default();
    let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
    let ours = holder.as_deref() == Some(s.identity.as_str());
    let valid_for = crate::lease::valid_for(Some(&spec));
    if holder.is_some() && !ours && unchanged < valid_for {
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
    use std::time::Duration;

    use axum::body::Body;
    use axum::extract::{Request, State};
    use axum::http::{Method, StatusCode, header};
    use axum::response::{IntoResponse, Response};
    use serde_json::{Value, json};

    use super::*;

    const NAMESPACE: &str = "ns";
    const NAME: &str = "capstan";

    fn timings(lease: u64, renew: u64, retry: u64) -> Settings {
        Settings::timings(NAME, NAMESPACE, lease, renew, retry)
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
        /// Every request fails with 503.
        fail: Arc<AtomicBool>,
        /// GETs answer this older copy: a read served out of order, from a lagging cache.
        stale: Arc<std::sync::Mutex<Option<Value>>>,
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
        if api.fail.load(Ordering::SeqCst) {
            return failure(StatusCode::SERVICE_UNAVAILABLE);
        }
        let collection = format!("/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases");
        let one = format!("{collection}/{NAME}");
        let (method, path) = (request.method().clone(), request.uri().path().to_string());
        let body: Value = match axum::body::to_bytes(request.into_body(), usize::MAX).await {
            Ok(bytes) if !bytes.is_empty() => serde_json::from_slice(&bytes).expect("a JSON body"),
            _ => Value::Null,
        };
        let stored = api.lease.lock().unwrap().clone();
        let read = api.stale.lock().unwrap().clone().or_else(|| stored.clone());
        match (method, path) {
            (Method::GET, p) if p == collection => {
                api.lists.fetch_add(1, Ordering::SeqCst);
                failure(StatusCode::SERVICE_UNAVAILABLE)
            }
            (Method::GET, p) if p == one => match read {
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
        assert!(leader.is_held(), "leadership is kept until release");
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
        assert!(!leader.is_held());
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
        assert!(!leader.is_held(), "leading without anyone renewing");
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
        assert!(!leader.is_held());
        drop(elector);
    }

    #[tokio::test]
    async fn failing_renewals_keep_the_term_until_the_deadline_and_a_pause_begins_a_new_one() {
        let api = FakeApi::default();
        let (leader, elector) = start(api.client(), timings(2_000, 600, 100));
        assert!(
            tokio::time::timeout(GUARD, leader.acquired())
                .await
                .expect("acquired")
        );
        let term = leader.pin();
        // Errors for less than the deadline: the same term goes on.
        api.fail.store(true, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert!(term.is_held(), "a few failed renewals do not fence");
        api.fail.store(false, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(term.is_held(), "renewed in time: one term");
        // Errors past the deadline: fenced, whatever comes after.
        api.fail.store(true, Ordering::SeqCst);
        let failing = Instant::now();
        tokio::time::timeout(GUARD, term.lost()).await.expect("fenced");
        assert!(
            failing.elapsed() < Duration::from_millis(900),
            "{:?}",
            failing.elapsed()
        );
        api.fail.store(false, Ordering::SeqCst);
        assert!(
            tokio::time::timeout(GUARD, leader.acquired())
                .await
                .expect("leads again")
        );
        assert!(!term.is_held(), "reconciles of the first term stay fenced");
        drop(elector);
    }

    #[tokio::test]
    async fn a_stale_read_never_renews_and_the_next_fresh_one_begins_a_new_term() {
        let api = FakeApi::default();
        let (leader, elector) = start(api.client(), timings(2_000, 600, 100));
        assert!(
            tokio::time::timeout(GUARD, leader.acquired())
                .await
                .expect("acquired")
        );
        let term = leader.pin();
        // Reads now come back older than what was written: the write that follows carries
        // an old resourceVersion and is refused, so the leader cannot renew on it.
        let old = api.lease.lock().unwrap().clone();
        *api.stale.lock().unwrap() = old;
        tokio::time::timeout(GUARD, term.lost()).await.expect("fenced");
        assert!(!leader.is_held());
        *api.stale.lock().unwrap() = None;
        assert!(
            tokio::time::timeout(GUARD, leader.acquired())
                .await
                .expect("leads again")
        );
        assert!(!term.is_held(), "the term that read stale data stays over");
        drop(elector);
    }
}
