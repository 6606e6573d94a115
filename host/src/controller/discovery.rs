//! A plugin's kinds against API discovery: served, with the plural and scope the plugin
//! declared.

use std::time::Duration;

use anyhow::Context as _;
use kube::Client;
use kube::api::GroupVersionKind;
use kube::discovery::{ApiResource, Scope};
use kube::error::DiscoveryError;

use crate::engine::Kind;

/// Resolve a plugin's kind through API discovery: served, and with the plural and scope
/// the plugin declared (the host checks rather than trusts them: a cluster-scoped kind
/// declared as namespaced would slip past the namespace rules).
pub(super) async fn resolve(client: &Client, kind: &Kind) -> anyhow::Result<ApiResource> {
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
    declared_as_served(kind, &resource.plural, caps.scope == Scope::Namespaced)?;
    Ok(resource)
}

/// How long one discovery request may take before the plugin is reported and retried.
const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(10);

/// A declared kind must match discovery in plural and scope.
fn declared_as_served(kind: &Kind, plural: &str, namespaced: bool) -> anyhow::Result<()> {
    anyhow::ensure!(
        kind.plural == plural,
        "kind {kind} is declared with plural {:?} but the API server serves it as {plural:?}",
        kind.plural
    );
    let scope = |n: bool| if n { "namespaced" } else { "cluster-scoped" };
    anyhow::ensure!(
        kind.namespaced == namespaced,
        "kind {kind} is declared {} but the API server serves it {}",
        scope(kind.namespaced),
        scope(namespaced)
    );
    Ok(())
}

/// Check every kind of a plugin is served, before anything is started for it.
pub async fn served(client: &Client, metadata: &crate::engine::Metadata) -> anyhow::Result<()> {
    resolve(client, &metadata.parent).await?;
    for kind in metadata.children.iter().chain(&metadata.related) {
        resolve(client, kind).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declared_plural_and_scope_must_match_discovery() {
        let binding = Kind {
            group: "rbac.authorization.k8s.io".into(),
            version: "v1".into(),
            kind: "ClusterRoleBinding".into(),
            plural: "clusterrolebindings".into(),
            namespaced: true,
        };
        let e = declared_as_served(&binding, "clusterrolebindings", false).unwrap_err();
        assert!(
            e.to_string()
                .contains("declared namespaced but the API server serves it cluster-scoped"),
            "{e}"
        );
        let e = declared_as_served(&binding, "bindings", true).unwrap_err();
        assert!(e.to_string().contains("plural"), "{e}");
        assert!(declared_as_served(&binding, "clusterrolebindings", true).is_ok());
    }
}
