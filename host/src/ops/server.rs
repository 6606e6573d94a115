//! `/healthz`, `/readyz` and `/metrics` over HTTP, on addresses that may use port 0.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;

/// Readiness: plugins loaded and every cache synced.
#[derive(Clone, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    /// Mark the host ready (or not, e.g. during an outage).
    pub fn set(&self, ready: bool) {
        self.0.store(ready, Ordering::SeqCst);
    }

    /// Whether the host is ready.
    pub fn get(&self) -> bool {
        self.0.load(Ordering::SeqCst)
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
            let ready = ready.get();
            async move {
                if ready {
                    (StatusCode::OK, "ok")
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, "not ready")
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
