//! `/healthz`, `/readyz` and `/metrics` over HTTP, on addresses that may use port 0.

use std::net::SocketAddr;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use tokio_util::sync::CancellationToken;

use super::health::Health;

/// Probe the API server every `period`; readiness follows whether it answers in time.
pub async fn probe_api(client: kube::Client, ready: Health, period: std::time::Duration) {
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

/// Bind `addr` and serve `routes` until `stop`; returns the bound address (useful with
/// port 0).
async fn serve(
    addr: SocketAddr,
    routes: Router,
    what: &str,
    stop: CancellationToken,
) -> anyhow::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen for {what} on {addr}: {e}"))?;
    let bound = listener.local_addr()?;
    tracing::info!(address = %bound, "serving {what}");
    tokio::spawn(async move {
        let serving = axum::serve(listener, routes).with_graceful_shutdown(stop.cancelled_owned());
        if let Err(e) = serving.await {
            tracing::error!(error = %e, "HTTP server stopped");
        }
    });
    Ok(bound)
}

/// Serve `/healthz` (the host is not wedged) and `/readyz` (every plugin runs, the API
/// server answers; otherwise the body says what does not) on `addr` until `stop`.
pub async fn health(addr: SocketAddr, health: Health, stop: CancellationToken) -> anyhow::Result<SocketAddr> {
    let live = health.clone();
    let answer = |why: Option<String>| match why {
        None => (StatusCode::OK, "ok".to_string()),
        Some(why) => (StatusCode::SERVICE_UNAVAILABLE, why),
    };
    let routes = Router::new()
        .route(
            "/healthz",
            get(move || std::future::ready(answer(live.not_live()))),
        )
        .route(
            "/readyz",
            get(move || std::future::ready(answer(health.not_ready()))),
        );
    serve(addr, routes, "health probes", stop).await
}

/// Serve `/metrics` on `addr` until `stop`.
pub async fn metrics(addr: SocketAddr, stop: CancellationToken) -> anyhow::Result<SocketAddr> {
    let routes = Router::new().route(
        "/metrics",
        get(|| async {
            (
                // prometheus-client writes OpenMetrics text (`# EOF`, `_total` counters).
                [(
                    "content-type",
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                )],
                super::metrics::get().encode(),
            )
        }),
    );
    serve(addr, routes, "metrics", stop).await
}
