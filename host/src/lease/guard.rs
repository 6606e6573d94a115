//! Writes fenced by a [`Tenure`]: a controller's client refuses every write (create,
//! update, patch, delete) once the term it runs in is over, at the moment the request
//! is sent. A reconcile that was paused mid-way (SIGSTOP, a stalled thread) and resumes
//! after its term ended cannot write what it had computed; reads go through.
//!
//! Every request but a watch is also bounded in time ([`WRITE_TIMEOUT`]): a half-open
//! connection (a load balancer that dropped it, a stalled API server) would otherwise hold
//! the reconcile's worker until TCP gives up, a quarter of an hour later — a write, or the
//! read a write path makes (the GET after a create's conflict, a hand-over's GET), where
//! with a single replica no term ever ends to cancel it. Watches are reads that last
//! minutes by design, and go unbounded.

use std::time::Duration;

use http::{Method, Request};
use tower::{Layer, Service};

use super::Tenure;

/// `client`, whose writes fail with [`Fenced`] while `tenure` is not held.
pub fn guard(client: &kube::Client, tenure: &Tenure) -> kube::Client {
    crate::layered::layered(client, GuardLayer(tenure.clone()))
}

/// How long a controller's request (a write, or a read that is not a watch) may take: the
/// API server answers one in milliseconds, seconds when loaded.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a write was not sent.
#[derive(Debug, thiserror::Error)]
#[error("write refused: this replica no longer holds the lease it reconciles under")]
pub struct Fenced;

/// Why a request failed: no answer in time.
#[derive(Debug, thiserror::Error)]
#[error("request timed out: no answer from the API server within {WRITE_TIMEOUT:?}")]
pub struct TimedOut;

#[derive(Clone)]
struct GuardLayer(Tenure);

impl<S> Layer<S> for GuardLayer {
    type Service = Guard<S>;

    fn layer(&self, inner: S) -> Guard<S> {
        Guard {
            inner,
            tenure: self.0.clone(),
        }
    }
}

/// The service [`guard`] puts in front of a client.
#[derive(Clone)]
pub struct Guard<S> {
    inner: S,
    tenure: Tenure,
}

impl<S, B> Service<Request<B>> for Guard<S>
where
    S: Service<Request<B>, Error = kube::Error>,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
{
    type Response = S::Response;
    type Error = kube::Error;
    type Future = futures::future::BoxFuture<'static, Result<S::Response, kube::Error>>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), kube::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let reads = matches!(*request.method(), Method::GET | Method::HEAD | Method::OPTIONS);
        if reads && is_watch(request.uri()) {
            return Box::pin(self.inner.call(request));
        }
        if !reads && !self.tenure.is_held() {
            return Box::pin(std::future::ready(Err(kube::Error::Service(Box::new(Fenced)))));
        }
        let call = self.inner.call(request);
        Box::pin(async move {
            match tokio::time::timeout(WRITE_TIMEOUT, call).await {
                Ok(answer) => answer,
                Err(_) => Err(kube::Error::Service(Box::new(TimedOut))),
            }
        })
    }
}

/// Whether a GET is a watch (`?watch=true`, or `1` as older clients send it).
fn is_watch(uri: &http::Uri) -> bool {
    uri.query()
        .into_iter()
        .flat_map(|q| q.split('&'))
        .any(|pair| matches!(pair, "watch=true" | "watch=1"))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, PostParams};

    use super::*;
    use crate::lease::Fence;

    /// An API server that answers every request with an empty ConfigMap.
    fn client() -> kube::Client {
        let router = axum::Router::new().fallback(async || {
            (
                [(http::header::CONTENT_TYPE, "application/json")],
                r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}"#,
            )
        });
        kube::Client::new(router, "ns")
    }

    #[tokio::test]
    async fn writes_fail_outside_the_term_and_reads_pass() {
        let (fence, tenure) = Fence::new(Duration::from_secs(10));
        let maps: Api<ConfigMap> = Api::namespaced(guard(&client(), &tenure.pin()), "ns");
        let map = ConfigMap::default();
        let refused = maps.create(&PostParams::default(), &map).await.unwrap_err();
        assert!(
            refused.to_string().contains("no longer holds the lease"),
            "{refused}"
        );
        maps.get("x").await.expect("reads pass");

        fence.renewed(tokio::time::Instant::now());
        let maps: Api<ConfigMap> = Api::namespaced(guard(&client(), &tenure.pin()), "ns");
        maps.create(&PostParams::default(), &map)
            .await
            .expect("held: written");
        fence.end();
        assert!(maps.create(&PostParams::default(), &map).await.is_err(), "fenced");
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_the_server_never_answers_times_out() {
        let stalled = axum::Router::new().fallback(async || {
            std::future::pending::<()>().await;
            ""
        });
        let (fence, tenure) = Fence::new(Duration::from_secs(3600));
        fence.renewed(tokio::time::Instant::now());
        let client = guard(&kube::Client::new(stalled, "ns"), &tenure.pin());
        let maps: Api<ConfigMap> = Api::namespaced(client, "ns");
        let started = tokio::time::Instant::now();
        let error = maps
            .create(&PostParams::default(), &ConfigMap::default())
            .await
            .unwrap_err();
        assert!(error.to_string().contains("timed out"), "{error}");
        assert_eq!(started.elapsed(), WRITE_TIMEOUT);

        // So does the read a write path makes (review L2: the GET after a create's
        // conflict held its worker for good); a watch is left to run as long as it lasts.
        let started = tokio::time::Instant::now();
        let error = maps.get("x").await.unwrap_err();
        assert!(error.to_string().contains("timed out"), "{error}");
        assert_eq!(started.elapsed(), WRITE_TIMEOUT);
        let params = kube::api::WatchParams::default();
        let watch = maps.watch(&params, "0");
        let waited = tokio::time::timeout(WRITE_TIMEOUT * 4, watch).await;
        assert!(waited.is_err(), "a watch is not cut at the write timeout");
    }
}
