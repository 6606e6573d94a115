//! Putting a `shardSelector` on the wire. kube-rs 5 has no field for it in `ListParams`,
//! `WatchParams` or `watcher::Config`, so a tower layer on the client appends it to the URI
//! of every list and watch request (a GET on a collection path; a watch is one with
//! `watch=true`) for the collections it was given. Requests for anything else (single
//! objects, writes, other collections) pass untouched, so one client can serve a whole
//! controller; but a list of a named collection is filtered whoever makes it, so a plugin's
//! related query over such a collection needs an unsharded client. The selector is fixed
//! for the client's life: when the ranges change, the controller restarts with a new client.

use std::sync::Arc;
use std::task::{Context, Poll};

use anyhow::{Context as _, Result};
use http::uri::{PathAndQuery, Uri};
use http::{Method, Request};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::ApiResource;
use kube::client::ClientBuilder;
use tower::{Layer, Service};

use crate::shard::range::Range;
use crate::shard::selector::{ShardKey, render};

/// A collection (group, version, plural) whose list and watch requests carry the selector.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Collection {
    /// API group; empty for the core group.
    pub group: String,
    /// API version, e.g. `v1`.
    pub version: String,
    /// Resource plural, e.g. `configmaps`.
    pub plural: String,
}

impl Collection {
    /// The collection of a typed resource, e.g. `Collection::of::<ConfigMap>()`.
    pub fn of<K: kube::Resource<DynamicType = ()>>() -> Collection {
        Collection {
            group: K::group(&()).into_owned(),
            version: K::version(&()).into_owned(),
            plural: K::plural(&()).into_owned(),
        }
    }

    /// The collection of a dynamic resource.
    pub fn from_api_resource(ar: &ApiResource) -> Collection {
        Collection {
            group: ar.group.clone(),
            version: ar.version.clone(),
            plural: ar.plural.clone(),
        }
    }

    /// The list path: in `namespace`, or across all namespaces (and for cluster-scoped kinds).
    pub fn path(&self, namespace: Option<&str>) -> String {
        let base = if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        };
        match namespace {
            Some(ns) => format!("{base}/namespaces/{ns}/{}", self.plural),
            None => format!("{base}/{}", self.plural),
        }
    }

    /// Whether `path` is one of [`Collection::path`]'s: a single object or subresource
    /// (one segment more) is not, nor is `/api/v1/namespaces/<name>`.
    fn is_listed_at(&self, path: &str) -> bool {
        let rest = if self.group.is_empty() {
            path.strip_prefix("/api/")
        } else {
            path.strip_prefix("/apis/")
                .and_then(|p| p.strip_prefix(self.group.as_str()))
                .and_then(|p| p.strip_prefix('/'))
        };
        let Some(rest) = rest
            .and_then(|p| p.strip_prefix(self.version.as_str()))
            .and_then(|p| p.strip_prefix('/'))
        else {
            return false;
        };
        match rest.split('/').collect::<Vec<_>>().as_slice() {
            [plural] => *plural == self.plural,
            ["namespaces", ns, plural] => !ns.is_empty() && *plural == self.plural,
            _ => false,
        }
    }
}

/// Adds `shardSelector` to the list and watch requests of the given collections.
#[derive(Clone, Debug)]
pub struct SelectorLayer {
    /// `shardSelector=<percent-encoded selector>`, ready to append.
    param: Arc<str>,
    collections: Arc<[Collection]>,
}

impl SelectorLayer {
    /// A layer adding `selector` (e.g. from [`render`]) for `collections`.
    pub fn new(selector: &str, collections: impl IntoIterator<Item = Collection>) -> SelectorLayer {
        SelectorLayer {
            param: format!("shardSelector={}", encode(selector)).into(),
            collections: collections.into_iter().collect(),
        }
    }

    fn apply<B>(&self, mut req: Request<B>) -> Request<B> {
        let uri = req.uri();
        if req.method() != Method::GET || !self.collections.iter().any(|c| c.is_listed_at(uri.path())) {
            return req;
        }
        let query = uri.query().unwrap_or("");
        if query.split('&').any(|kv| kv.starts_with("shardSelector=")) {
            return req;
        }
        let sep = if query.is_empty() { "" } else { "&" };
        let mut parts = uri.clone().into_parts();
        // Cannot fail: the path and query come from a valid URI and the parameter is
        // percent-encoded down to unreserved characters.
        if let Ok(pq) = PathAndQuery::try_from(format!("{}?{query}{sep}{}", uri.path(), self.param)) {
            parts.path_and_query = Some(pq);
            if let Ok(with) = Uri::from_parts(parts) {
                *req.uri_mut() = with;
            }
        }
        req
    }
}

impl<S> Layer<S> for SelectorLayer {
    type Service = SelectorService<S>;

    fn layer(&self, inner: S) -> SelectorService<S> {
        SelectorService {
            layer: self.clone(),
            inner,
        }
    }
}

/// The service [`SelectorLayer`] wraps a client's stack in.
#[derive(Clone, Debug)]
pub struct SelectorService<S> {
    layer: SelectorLayer,
    inner: S,
}

impl<S, B> Service<Request<B>> for SelectorService<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> S::Future {
        let req = self.layer.apply(req);
        self.inner.call(req)
    }
}

/// A client on `config` (the host's: `kube::Config::infer()`, what `Client::try_default`
/// uses) whose list and watch requests for `collections` carry `selector`.
pub fn client(
    config: kube::Config,
    selector: &str,
    collections: impl IntoIterator<Item = Collection>,
) -> Result<kube::Client> {
    let builder = ClientBuilder::try_from(config).context("building a Kubernetes client")?;
    Ok(builder
        .with_layer(&SelectorLayer::new(selector, collections))
        .build())
}

/// Whether the API server filters by `shardSelector` (feature gate `ShardedListAndWatch`),
/// probed on the Namespace list (which needs RBAC to list Namespaces; see `served_at`).
pub async fn served(client: &kube::Client) -> Result<bool> {
    served_at(client, &Collection::of::<Namespace>(), None).await
}

/// Whether the API server filters `collection` by `shardSelector`: one `limit=1` list with
/// a selector of the whole space, which drops nothing whatever the answer.
///
/// The answer is the list's `metadata.shardInfo`: upstream sets it only when it applied a
/// selector (`SetShardInfoOnList`, gate checked). The other idea, a malformed selector,
/// is a poor signal (both seen on v1.37.2 in `tests/cluster/shard.rs`): without the gate the
/// parameter is decoded but ignored, so even `shardRange(` gets a 200; with it, the store
/// returns a plain error, so a 500 (not a 400 Invalid), indistinguishable from a real fault.
/// An older server, without the field at all, also reads as false.
pub async fn served_at(
    client: &kube::Client,
    collection: &Collection,
    namespace: Option<&str>,
) -> Result<bool> {
    let path = collection.path(namespace);
    let selector = encode(&render(ShardKey::Uid, &[Range::FULL]));
    let req = Request::get(format!("{path}?limit=1&shardSelector={selector}"))
        .body(Vec::new())
        .context("building the shardSelector probe")?;
    let list: serde_json::Value = client
        .request(req)
        .await
        .with_context(|| format!("probing {path} for shardSelector support"))?;
    Ok(list.pointer("/metadata/shardInfo/selector").is_some())
}

/// Percent-encodes all but RFC 3986's unreserved characters, so any text is a valid query value.
/// The longest `shardSelector` query parameter sent: proxies in front of API servers
/// commonly cap a request line at 8 KB, and list and watch requests carry more besides.
pub const MAX_SELECTOR_BYTES: usize = 4096;

/// The `shardSelector` for `ranges` under `key`, percent-encoded within `max` bytes: when
/// the exact one is longer, the ranges closest together are merged (a superset, so the
/// server sends a few objects more, which the host's own predicate drops).
pub fn bounded_selector(key: ShardKey, ranges: &[Range], max: usize) -> String {
    let mut ranges = crate::shard::range::normalize(ranges);
    loop {
        let text = render(key, &ranges);
        if encode(&text).len() <= max || ranges.len() < 2 {
            return text;
        }
        // Merge across the narrowest gap.
        let i = (0..ranges.len() - 1)
            .min_by_key(|&i| u128::from(ranges[i + 1].start()) - ranges[i].end())
            .unwrap_or(0);
        let merged = Range::wide(u128::from(ranges[i].start()), ranges[i + 1].end());
        ranges.splice(i..=i + 1, merged);
    }
}

fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 2);
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::ConfigMap;

    use super::*;
    use crate::shard::range::{SPACE_END, width};
    use crate::shard::ring::Ring;

    /// The selector's size at 3, 10 and 50 replicas, and after a takeover (a member holding
    /// its share and a departed one's): exact while it fits, a slightly wider superset when not.
    #[test]
    fn selectors_stay_under_the_bound_at_3_10_and_50_replicas() {
        for n in [3, 10, 50] {
            let names: Vec<String> = (0..n).map(|i| format!("capstan-{i}")).collect();
            let ring = Ring::new(names.iter().cloned());
            let survivors = Ring::new(names[1..].iter().cloned());
            let mut widest = 0;
            let mut extra: f64 = 0.0;
            for (case, ranges) in [
                ("steady", ring.ranges(&names[1])),
                ("takeover", survivors.ranges(&names[1])),
            ] {
                let exact = encode(&render(ShardKey::Uid, &ranges)).len();
                let sent = bounded_selector(ShardKey::Uid, &ranges, MAX_SELECTOR_BYTES);
                assert!(encode(&sent).len() <= MAX_SELECTOR_BYTES, "{n} replicas, {case}");
                let covered = width(&parse_ranges(&sent)) as f64 / width(&ranges) as f64 - 1.0;
                println!(
                    "{n} replicas, {case}: {} ranges, exact selector {exact} B, sent {} B, {:.1}% of the space more",
                    ranges.len(),
                    encode(&sent).len(),
                    covered * width(&ranges) as f64 / SPACE_END as f64 * 100.0
                );
                widest = widest.max(encode(&sent).len());
                extra = extra.max(covered);
                // The sent selector covers every hash the replica owns.
                assert!(crate::shard::range::subtract(&ranges, &parse_ranges(&sent)).is_empty());
            }
            if n <= 10 {
                assert!(
                    extra < 0.5,
                    "{n} replicas: the bound widens the selector by {extra:.2}"
                );
            }
        }
    }

    /// The ranges in a rendered selector.
    fn parse_ranges(selector: &str) -> Vec<Range> {
        selector
            .split(" || ")
            .filter_map(|r| {
                let mut bounds = r.split('\'').skip(1).step_by(2);
                let start = u64::from_str_radix(bounds.next()?.trim_start_matches("0x"), 16).ok()?;
                let end = u128::from_str_radix(bounds.next()?.trim_start_matches("0x"), 16).ok()?;
                Range::new(start, end)
            })
            .collect()
    }

    fn sent(layer: &SelectorLayer, method: Method, uri: &str) -> String {
        let req = Request::builder()
            .method(method)
            .uri(uri)
            .body(())
            .expect("a valid request");
        layer.apply(req).uri().to_string()
    }

    #[test]
    fn lists_and_watches_of_named_collections_get_the_selector() {
        let layer = SelectorLayer::new(
            "a b'()|",
            [Collection::of::<ConfigMap>(), Collection::of::<Deployment>()],
        );
        let p = "shardSelector=a%20b%27%28%29%7C";
        // What goes between the URI and the parameter: nothing after an empty query.
        for (uri, joint) in [
            ("/api/v1/namespaces/ns/configmaps?", ""),
            ("/api/v1/configmaps", "?"),
            ("/api/v1/configmaps?&watch=true&resourceVersion=5", "&"),
            ("/apis/apps/v1/namespaces/ns/deployments?limit=500", "&"),
        ] {
            assert_eq!(sent(&layer, Method::GET, uri), format!("{uri}{joint}{p}"));
        }
    }

    #[test]
    fn everything_else_passes_untouched() {
        let layer = SelectorLayer::new(
            "s",
            [Collection::of::<ConfigMap>(), Collection::of::<Namespace>()],
        );
        for uri in [
            "/api/v1/namespaces/ns/configmaps/one",
            "/api/v1/namespaces/ns/secrets?watch=true",
            "/api/v1/namespaces/configmaps",
            "/api/v1/namespaces/ns",
            "/apis/apps/v1/namespaces/ns/configmaps",
            "/api/v2/configmaps",
            "/api/v1/configmaps?shardSelector=mine",
        ] {
            assert_eq!(sent(&layer, Method::GET, uri), uri);
        }
        assert_eq!(
            sent(&layer, Method::POST, "/api/v1/namespaces/ns/configmaps"),
            "/api/v1/namespaces/ns/configmaps"
        );
        assert_eq!(
            sent(&layer, Method::GET, "/api/v1/namespaces"),
            "/api/v1/namespaces?shardSelector=s"
        );
    }

    #[test]
    fn paths_round_trip_through_the_matcher() {
        let cm = Collection::of::<ConfigMap>();
        assert_eq!(cm.path(Some("ns")), "/api/v1/namespaces/ns/configmaps");
        let dep = Collection::of::<Deployment>();
        assert_eq!(dep.path(None), "/apis/apps/v1/deployments");
        for c in [cm, dep] {
            assert!(c.is_listed_at(&c.path(None)) && c.is_listed_at(&c.path(Some("x"))));
        }
    }
}
