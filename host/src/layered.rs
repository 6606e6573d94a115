//! A client with a tower layer in front of another client, keeping the host's own
//! credentials and TLS instead of building a new client from a config: how the shard
//! selector ([`crate::shard::Filter::client`]) and the write fence ([`crate::lease::guard`])
//! reach every request a controller makes.

use tower::{Layer, Service};

/// `client` with `layer` in front: every request goes through `layer`, then `client`.
pub fn layered<L>(client: &kube::Client, layer: L) -> kube::Client
where
    L: Layer<Sending>,
    L::Service: Service<
            http::Request<kube::client::Body>,
            Response = http::Response<kube::client::Body>,
            Error = kube::Error,
        > + Send
        + 'static,
    <L::Service as Service<http::Request<kube::client::Body>>>::Future: Send + 'static,
{
    let inner = tower::ServiceBuilder::new()
        .layer(layer)
        .service(Sending(client.clone()));
    kube::Client::new(inner, client.default_namespace())
}

/// A client as a tower service.
#[derive(Clone)]
pub struct Sending(kube::Client);

impl Service<http::Request<kube::client::Body>> for Sending {
    type Response = http::Response<kube::client::Body>;
    type Error = kube::Error;
    type Future = futures::future::BoxFuture<'static, Result<Self::Response, kube::Error>>;

    fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), kube::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<kube::client::Body>) -> Self::Future {
        let client = self.0.clone();
        Box::pin(async move { client.send(request).await })
    }
}
