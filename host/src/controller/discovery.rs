//! A plugin's kinds against API discovery: served, with the plural and scope the plugin
//! declared.

use std::time::Duration;

use anyhow::Context as _;
use kube::Client;
use kube::api::GroupVersionKind;
use kube::discovery::{ApiResource, Scope};
use kube::error::DiscoveryError;

use capstan_contract::declared::as_served;

use crate::engine::Kind;

/// Resolve a plugin's kind through API discovery: served, and with the plural and scope
/// the plugin declared (the host checks rather than trusts them: a cluster-scoped kind
/// declared as namespaced would slip past the namespace rules).
pub async fn resolve(client: &Client, kind: &Kind) -> anyhow::Result<ApiResource> {
    let gvk = GroupVersionKind::gvk(&kind.group, &kind.version, &kind.kind);
    let (resource, caps) =
        match tokio::time::timeout(DISCOVERY_TIMEOUT, kube::discovery::pinned_kind(client, &gvk)).await {
            Ok(Ok(found)) => found,
            // kube's error for an unknown kind wraps the server's 404 page; its text helps nobody.
            Ok(Err(kube::Error::Api(e))) if e.code == 404 => {
                anyhow::bail!("kind {kind} is not served by the API server")
            }
            Ok(Err(kube::Error::Discovery(
                DiscoveryError::MissingKind(_)
                | DiscoveryError::MissingApiGroup(_)
                | DiscoveryError::MissingResource(_),
            ))) => anyhow::bail!("kind {kind} is not served by the API server"),
            Ok(Err(e)) => return Err(e).with_context(|| format!("cannot discover kind {kind}")),
            Err(_) => anyhow::bail!("discovery of kind {kind} timed out after {DISCOVERY_TIMEOUT:?}"),
        };
    as_served(kind, &resource.plural, caps.scope == Scope::Namespaced).map_err(anyhow::Error::msg)?;
    Ok(resource)
}

/// How long one discovery request may take before the plugin is reported and retried.
const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(10);

/// Check every kind of a plugin is served, before anything is started for it.
pub async fn served(client: &Client, metadata: &crate::engine::Metadata) -> anyhow::Result<()> {
    resolve(client, &metadata.parent).await?;
    for kind in metadata.children.iter().chain(&metadata.related) {
        resolve(client, kind).await?;
    }
    Ok(())
}
