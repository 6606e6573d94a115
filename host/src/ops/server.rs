//! `/healthz`, `/readyz` and `/metrics` over HTTP, on addresses that may use port 0.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;

/// Readiness: plugins loaded, every cache synced, and the API server reachable.
#[derive(Clone)]
pub struct Readiness(Arc<Conditions>);

struct Conditions {
    synced: AtomicBool,
    api: AtomicBool,
}

impl Default for Readiness {
    fn default() -> Self {
        Readiness(Arc::new(Conditions {
            synced: AtomicBool::new(false),
            api: AtomicBool::new(true),
        }))
    }
}

impl Readiness {
    /// Mark the caches synced (or not, e.g. while shutting down).
    pub fn set(&self, ready: bool) {
        self.0.synced.store(ready, Ordering::SeqCst);
    }

    /// Record whether the API server answers; returns what was recorded before.
    pub fn set_api(&self, reachable: bool) -> bool {
        self.0.api.swap(reachable, Ordering::SeqCst)
    }

    /// Whether the host is ready.
    pub fn get(&self) -> bool {
        self.why_not().is_none()
    }

    /// What keeps the host from being ready.
    pub fn why_not(&self) -> Option<&'static str> {
        if !self.0.synced.load(Ordering::SeqCst) {
            Some("caches not synced")
        } else if !self.0.api.load(Ordering::SeqCst) {
            Some("API server unreachable")
        } else {
            None
        }
    }
}

/// Probe the API server every `period`; readiness follows whether it answers in time.
pub async fn probe_api(client: kube::Client, ready: Readiness, period: std::time::Duration) {
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let answered = tokio::time::timeout(period, client.apiserver_version())
            .await
            .is_ok_and(|r| r.is_ok());
        if ready.set_api(answered) != answered {
            if answered {
                tracing::info!("API server reachable again");
            } else {
                tracing::warn!("API server unreachable; not ready");
            }
        }
    }
}

/// Bind `addr` and serve `routes`; returns the bound address (useful with port 0).
async fn serve(addr: SocketAddr, routes: Router, what: &str) -> anyhow::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen for {what} on {addr}: {e}"))?;
    let bound = listener.local_addr()?;
    tracing::info!(address = %bound, "serving {what}");
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, routes).await {
            tracing::error!(error = %e, "HTTP server stopped");
        }
    });
    Ok(bound)
}

/// Serve `/healthz` and `/readyz` on `addr`.
pub async fn health(addr: SocketAddr, ready: Readiness) -> anyhow::Result<SocketAddr> {
    let routes = Router::new().route("/healthz", get(|| async { "ok" })).route(
        "/readyz",
        get(move || {
            let why_not = ready.why_not();
            async move {
                match why_not {
                    None => (StatusCode::OK, "ok"),
                    Some(why) => (StatusCode::SERVICE_UNAVAILABLE, why),
                }
            }
        }),
    );
    serve(addr, routes, "health probes").await
}

/// Serve `/metrics` on `addr`.
pub async fn metrics(addr: SocketAddr) -> anyhow::Result<SocketAddr> {
    let routes = Router::new().route(
        "/metrics",
        get(|| async {
            (
                [("content-type", "text/plain; version=0.0.4; charset=utf-8")],
                super::metrics::get().encode(),
            )
        }),
    );
    serve(addr, routes, "metrics").await
}
