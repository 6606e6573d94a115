//! Kubeconfig files for the admin and each component, and kube-rs clients from them.

use std::path::Path;

use anyhow::{Context, Result};
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::certs::CertFiles;

/// Writes a kubeconfig that reaches `server` as the holder of `client`, trusting `ca`.
/// Files are referenced by absolute path so the kubeconfig works from any directory.
pub(crate) fn write(path: &Path, server: &str, ca: &Path, client: &CertFiles) -> Result<()> {
    let doc = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{
            "name": "capstan",
            "cluster": { "server": server, "certificate-authority": ca },
        }],
        "users": [{
            "name": "capstan",
            "user": { "client-certificate": client.cert, "client-key": client.key },
        }],
        "contexts": [{
            "name": "capstan",
            "context": { "cluster": "capstan", "user": "capstan" },
        }],
        "current-context": "capstan",
    });
    let text = serde_saphyr::to_string(&doc)?;
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// A client for the kubeconfig at `path`. It is built on the calling task's runtime, so
/// tests that each run their own runtime must each build their own.
pub(crate) async fn client(path: &Path) -> Result<kube::Client> {
    let kc = Kubeconfig::read_from(path).with_context(|| format!("reading kubeconfig {}", path.display()))?;
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .with_context(|| format!("loading kubeconfig {}", path.display()))?;
    kube::Client::try_from(config).with_context(|| format!("building a client from {}", path.display()))
}
