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
//!   API round trip rather than on the next retry tick.
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

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::watcher;
use tokio::sync::{Mutex, Notify, watch};
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

    /// Check the timings make fencing possible.
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.renew_deadline < self.lease_duration,
            "--renew-deadline ({:?}) must be shorter than --lease-duration ({:?}), or two leaders could overlap",
            self.renew_deadline,
            self.lease_duration
        );
        anyhow::ensure!(
            self.retry_period < self.renew_deadline,
            "--retry-period ({:?}) must be shorter than --renew-deadline ({:?})",
            self.retry_period,
            self.renew_deadline
        );
        anyhow::ensure!(
            self.lease_duration.as_secs() >= 1,
            "--lease-duration must be at least 1s"
        );
        Ok(())
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
            // The elector is gone with leadership still held: never lost while running.
            std::future::pending::<()>().await;
        }
    }
}

/// The running election; [`Elector::release`] hands the lease over on shutdown.
pub struct Elector {
    inner: Arc<Inner>,
    task: tokio::task::JoinHandle<()>,
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
    let task = tokio::spawn(campaign(inner.clone()));
    let leader = Leader { leading, stopping };
    (
        leader,
        Elector {
            inner,
            task,
            stopping: stopping_tx,
        },
    )
}

impl Elector {
    /// Stop waiting reconciles from taking new work (leadership is kept until release).
    pub fn stop_waiters(&self) {
        let _ = self.stopping.send(true);
    }

    /// Stop campaigning and, if leading, release the lease so a standby takes over at once.
    pub async fn release(self) {
        self.stop_waiters();
        self.task.abort();
        let _ = self.task.await;
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

fn set_status(name: &str, leading: bool) {
    crate::ops::metrics::get()
        .leader
        .get_or_create(&crate::ops::metrics::LeaseLabel { name: name.into() })
        .set(i64::from(leading));
}

async fn campaign(inner: Arc<Inner>) {
    let s = &inner.settings;
    tokio::spawn(watch_lease(inner.clone()));
    set_status(&s.name, false);
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
    let config = watcher::Config::default().fields(&format!("metadata.name={}", inner.settings.name));
    let mut events = std::pin::pin!(watcher(inner.api.clone(), config));
    while let Some(event) = events.next().await {
        if matches!(event, Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_))) {
            inner.changed.notify_one();
        }
    }
}

fn now() -> MicroTime {
    MicroTime(Timestamp::now())
}

/// One round of client-go's `tryAcquireOrRenew`: `Ok(true)` when we hold the lease after it.
async fn try_acquire_or_renew(inner: &Inner) -> Result<bool, kube::Error> {
    let s = &inner.settings;
    let duration = i32::try_from(s.lease_duration.as_secs()).unwrap_or(i32::MAX);
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
