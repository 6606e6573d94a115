//! What the plane does through the API: readiness, the fake node, namespaces and CRDs.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::{Namespace, Node, ServiceAccount};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PatchParams, PostParams};

use crate::components::KWOK_ANNOTATION;

/// Name of the one fake node kwok runs pods on.
pub const FAKE_NODE: &str = "kwok-node-0";
const FIELD_MANAGER: &str = "capstan-dev";

/// Whether the apiserver reports ready (`GET /readyz` answers `ok`).
pub(crate) async fn readyz(client: &kube::Client) -> bool {
    let Ok(req) = http::Request::get("/readyz").body(Vec::new()) else {
        return false;
    };
    matches!(client.request_text(req).await, Ok(body) if body.trim() == "ok")
}

/// Creates the fake node kwok manages, sized for hundreds of pods.
pub(crate) async fn create_fake_node(client: &kube::Client) -> Result<()> {
    let node: Node = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": FAKE_NODE,
            "annotations": { KWOK_ANNOTATION.0: KWOK_ANNOTATION.1 },
            "labels": {
                "kubernetes.io/hostname": FAKE_NODE,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
            },
        },
        // Nodes keep status given on create; kwok's node-initialize stage keeps it too.
        "status": {
            "allocatable": { "cpu": "1000", "memory": "1Ti", "pods": "1000" },
            "capacity": { "cpu": "1000", "memory": "1Ti", "pods": "1000" },
        },
    }))?;
    create_once(&Api::<Node>::all(client.clone()), &node)
        .await
        .context("creating the fake node")
}

/// Creates `object`, or finds it there already (a plane started again on its state).
async fn create_once<K>(api: &Api<K>, object: &K) -> Result<(), kube::Error>
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.create(&PostParams::default(), object).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Creates the default StorageClass, `standard`, whose claims kube-controller-manager's
/// host-path provisioner binds to directories on this machine: controllers that make
/// PersistentVolumeClaims (StatefulSet-like ones) run as they would on kind.
pub(crate) async fn create_default_storage_class(client: &kube::Client) -> Result<()> {
    let class: StorageClass = serde_json::from_value(serde_json::json!({
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {
            "name": "standard",
            "annotations": { "storageclass.kubernetes.io/is-default-class": "true" },
        },
        "provisioner": "kubernetes.io/host-path",
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "Immediate",
    }))?;
    create_once(&Api::<StorageClass>::all(client.clone()), &class)
        .await
        .context("creating the default StorageClass")
}

/// Whether node `name` reports `Ready=True` (kwok or its kubelet has picked it up).
pub(crate) async fn node_ready(client: &kube::Client, name: &str) -> bool {
    let api: Api<Node> = Api::all(client.clone());
    let Ok(node) = api.get(name).await else {
        return false;
    };
    node.status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// A random suffix for names; `RandomState` is seeded per instance, which is all we need.
fn random_suffix() -> String {
    let mut h = RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    format!("{:08x}", h.finish() as u32)
}

/// Turns a prefix into something a namespace name can start with.
fn sanitize(prefix: &str) -> String {
    let mut out: String = prefix
        .chars()
        .map(|c| c.to_ascii_lowercase())
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .take(40)
        .collect();
    out = out.trim_matches('-').to_string();
    if out.is_empty() || !out.starts_with(|c: char| c.is_ascii_lowercase()) {
        out.insert(0, 't');
    }
    out
}

/// Creates `<prefix>-<random>`; with `wait_for_sa`, also waits until the namespace's
/// `default` ServiceAccount exists, because pods created before it are rejected.
pub(crate) async fn create_namespace(
    client: &kube::Client,
    prefix: &str,
    wait_for_sa: bool,
) -> Result<String> {
    let api: Api<Namespace> = Api::all(client.clone());
    let name = format!("{}-{}", sanitize(prefix), random_suffix());
    let mut ns = Namespace::default();
    ns.metadata.name = Some(name.clone());
    ns.metadata.labels = Some([("capstan.dev/test-namespace".to_string(), "true".to_string())].into());
    api.create(&PostParams::default(), &ns)
        .await
        .with_context(|| format!("creating namespace {name}"))?;
    if wait_for_sa {
        let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), &name);
        let deadline = Instant::now() + Duration::from_secs(60);
        while sas.get_opt("default").await?.is_none() {
            if Instant::now() >= deadline {
                bail!(
                    "namespace {name}: the default ServiceAccount did not appear in 60 s (is kube-controller-manager running?)"
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(name)
}

/// Server-side applies each CRD, then waits until all are Established.
pub(crate) async fn install_crds(
    client: &kube::Client,
    crds: &[CustomResourceDefinition],
    timeout: Duration,
) -> Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply(FIELD_MANAGER).force();
    for crd in crds {
        let name = crd.metadata.name.clone().context("a CRD without metadata.name")?;
        let mut crd = crd.clone();
        // Fields from a read-back object that an apply must not carry.
        crd.metadata.resource_version = None;
        crd.metadata.managed_fields = None;
        crd.metadata.uid = None;
        crd.metadata.creation_timestamp = None;
        crd.status = None;
        api.patch(&name, &params, &kube::api::Patch::Apply(&crd))
            .await
            .with_context(|| format!("applying CRD {name}"))?;
    }
    let deadline = Instant::now() + timeout;
    for crd in crds {
        let name = crd.metadata.name.as_deref().unwrap_or_default();
        loop {
            let current = api
                .get(name)
                .await
                .with_context(|| format!("reading CRD {name}"))?;
            let conditions = current.status.and_then(|s| s.conditions).unwrap_or_default();
            if conditions
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
            {
                break;
            }
            if Instant::now() >= deadline {
                bail!(
                    "CRD {name} not Established after {} s: {conditions:?}",
                    timeout.as_secs()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_prefixes_become_valid_labels() {
        assert_eq!(sanitize("Echo_Test"), "echo-test");
        assert_eq!(sanitize("--"), "t");
        assert_eq!(sanitize("9lives"), "t9lives");
        assert!(sanitize(&"x".repeat(100)).len() <= 40);
        assert_ne!(random_suffix(), random_suffix());
    }
}
