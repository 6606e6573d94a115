//! Command lines and readiness probes of the plane's five components (the real node's
//! three are in `dev::node`).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Result;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::binaries::{Binaries, KWOK_STAGES};
use crate::certs::Pki;
use crate::process::Proc;

pub(crate) const ETCD: &str = "etcd";
pub(crate) const APISERVER: &str = "kube-apiserver";
pub(crate) const KCM: &str = "kube-controller-manager";
pub(crate) const SCHEDULER: &str = "kube-scheduler";
pub(crate) const KWOK: &str = "kwok";
pub(crate) const CONTAINERD: &str = "containerd";
pub(crate) const KUBELET: &str = "kubelet";
pub(crate) const KUBE_PROXY: &str = "kube-proxy";
pub(crate) const REGISTRY: &str = "registry";

/// Service IPs; pods get addresses from a separate range so the two never overlap.
pub(crate) const SERVICE_CIDR: &str = "10.0.0.0/24";
const POD_CIDR: &str = "10.244.0.0/16";
/// The annotation kwok is told to look for, so it never touches a node it did not get.
pub(crate) const KWOK_ANNOTATION: (&str, &str) = ("kwok.x-k8s.io/node", "fake");

/// Loopback ports of a running plane; 0 for a component that is not running.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortMap {
    /// etcd client port.
    pub etcd_client: u16,
    /// etcd peer port (bound even for a single member).
    pub etcd_peer: u16,
    /// kube-apiserver secure port.
    pub apiserver: u16,
    /// kube-controller-manager secure (health) port.
    pub controller_manager: u16,
    /// kube-scheduler secure (health) port.
    pub scheduler: u16,
    /// kwok's HTTP server.
    pub kwok: u16,
}

/// Everything a command line needs to know about the plane's files.
pub(crate) struct Layout<'a> {
    pub dir: &'a Path,
    pub pki: &'a Pki,
    pub ports: PortMap,
    pub bins: &'a Binaries,
    /// Whether kube-apiserver serves `shardSelector` (alpha gate `ShardedListAndWatch`).
    pub sharded_watch: bool,
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

impl Layout<'_> {
    pub fn log(&self, component: &str) -> PathBuf {
        self.dir.join(format!("{component}.log"))
    }

    pub fn kubeconfig(&self, component: &str) -> PathBuf {
        self.dir.join(format!("{component}.kubeconfig"))
    }

    pub fn etcd(&self) -> Vec<String> {
        let client = format!("http://127.0.0.1:{}", self.ports.etcd_client);
        let peer = format!("http://127.0.0.1:{}", self.ports.etcd_peer);
        vec![
            "--name=capstan".into(),
            format!("--data-dir={}", s(&self.dir.join("etcd"))),
            format!("--listen-client-urls={client}"),
            format!("--advertise-client-urls={client}"),
            format!("--listen-peer-urls={peer}"),
            format!("--initial-advertise-peer-urls={peer}"),
            format!("--initial-cluster=capstan={peer}"),
            // A throwaway plane: durability is not worth the fsync latency.
            "--unsafe-no-fsync".into(),
            "--log-level=warn".into(),
        ]
    }

    pub fn apiserver(&self) -> Vec<String> {
        let pki = self.pki;
        let mut args = vec![
            format!("--etcd-servers=http://127.0.0.1:{}", self.ports.etcd_client),
            "--bind-address=127.0.0.1".into(),
            "--advertise-address=127.0.0.1".into(),
            format!("--secure-port={}", self.ports.apiserver),
            format!("--tls-cert-file={}", s(&pki.apiserver.cert)),
            format!("--tls-private-key-file={}", s(&pki.apiserver.key)),
            format!("--client-ca-file={}", s(&pki.ca.cert)),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
            format!("--service-account-key-file={}", s(&pki.sa_pub)),
            format!("--service-account-signing-key-file={}", s(&pki.sa_key)),
            format!("--service-cluster-ip-range={SERVICE_CIDR}"),
            "--authorization-mode=Node,RBAC".into(),
            "--allow-privileged=true".into(),
            // Endpoints may not point at loopback, and nothing here dials the service anyway.
            "--endpoint-reconciler-type=none".into(),
            format!("--cert-dir={}", s(&self.dir.join("apiserver-certs"))),
            // For logs, exec and port-forward on a real node: its InternalIP, as this client.
            format!("--kubelet-client-certificate={}", s(&pki.apiserver_kubelet.cert)),
            format!("--kubelet-client-key={}", s(&pki.apiserver_kubelet.key)),
            "--kubelet-preferred-address-types=InternalIP".into(),
            // Priority and fairness queues and accounts every request; one client's
            // plane has no tenants to be fair between. Off, a fault test's API server
            // took 33-34 CPU-s instead of 38, and its hosts 22-23 instead of 31.
            "--enable-priority-and-fairness=false".into(),
        ];
        if self.sharded_watch {
            args.push("--feature-gates=ShardedListAndWatch=true".into());
        }
        args
    }

    pub fn controller_manager(&self) -> Vec<String> {
        let pki = self.pki;
        vec![
            format!("--kubeconfig={}", s(&self.kubeconfig(KCM))),
            "--controllers=*".into(),
            // PersistentVolumeClaims bind, as on kind: the default StorageClass's volumes
            // are directories on this machine (see `api::create_default_storage_class`).
            "--enable-hostpath-provisioner".into(),
            "--use-service-account-credentials=true".into(),
            "--leader-elect=false".into(),
            format!("--service-account-private-key-file={}", s(&pki.sa_key)),
            format!("--root-ca-file={}", s(&pki.ca.cert)),
            format!("--cluster-signing-cert-file={}", s(&pki.ca.cert)),
            format!("--cluster-signing-key-file={}", s(&pki.ca.key)),
            format!("--service-cluster-ip-range={SERVICE_CIDR}"),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={}", self.ports.controller_manager),
            format!("--cert-dir={}", s(&self.dir.join("kcm-certs"))),
        ]
    }

    pub fn scheduler(&self) -> Vec<String> {
        vec![
            format!("--kubeconfig={}", s(&self.kubeconfig(SCHEDULER))),
            "--leader-elect=false".into(),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={}", self.ports.scheduler),
            format!("--cert-dir={}", s(&self.dir.join("scheduler-certs"))),
        ]
    }

    pub fn kwok(&self) -> Vec<String> {
        let mut args = vec![
            format!("--kubeconfig={}", s(&self.kubeconfig(KWOK))),
            "--manage-all-nodes=false".into(),
            format!(
                "--manage-nodes-with-annotation-selector={}={}",
                KWOK_ANNOTATION.0, KWOK_ANNOTATION.1
            ),
            format!("--cidr={POD_CIDR}"),
            "--node-ip=127.0.0.1".into(),
            // Without an address kwok serves nothing; with one it must not be a fixed port.
            format!("--server-address=127.0.0.1:{}", self.ports.kwok),
        ];
        for stage in KWOK_STAGES {
            let file = self.bins.kwok_stages.join(format!("{stage}.yaml"));
            args.push(format!("--config={}", s(&file)));
        }
        args
    }
}

/// Polls `ready` until it holds, failing early (naming the log) if the process exits.
pub(crate) async fn wait_until<F, Fut>(
    proc: &mut Proc,
    timeout: Duration,
    waiting_for: &str,
    mut ready: F,
) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(err) = proc.exited() {
            return Err(err);
        }
        if ready().await {
            return Ok(());
        }
        if Instant::now() >= deadline {
            // The process might have died while we probed; that is the better message.
            if let Some(err) = proc.exited() {
                return Err(err);
            }
            let secs = timeout.as_secs();
            return Err(proc.failure(&format!("not ready after {secs} s (waiting for {waiting_for})")));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A plain-HTTP GET on loopback; `None` on any failure. Enough for etcd's and kwok's
/// health endpoints without pulling in an HTTP client.
pub(crate) async fn http_get(port: u16, path: &str) -> Option<String> {
    let io = async {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).await.ok()?;
        let req = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n");
        stream.write_all(req.as_bytes()).await.ok()?;
        let mut buf = Vec::new();
        stream.read_to_end(&mut buf).await.ok()?;
        let text = String::from_utf8_lossy(&buf).into_owned();
        let (head, body) = text.split_once("\r\n\r\n")?;
        let ok = head.starts_with("HTTP/1.") && head.split_whitespace().nth(1) == Some("200");
        ok.then(|| body.to_string())
    };
    tokio::time::timeout(Duration::from_secs(2), io)
        .await
        .ok()
        .flatten()
}

/// Whether a TLS endpoint accepts TCP connections: the components without a plain-HTTP
/// endpoint serve health over TLS with a self-signed cert, so listening is the signal.
pub(crate) async fn listening(port: u16) -> bool {
    let connect = TcpStream::connect(("127.0.0.1", port));
    matches!(
        tokio::time::timeout(Duration::from_secs(1), connect).await,
        Ok(Ok(_))
    )
}
