//! kubelet and kube-proxy: their configuration files and command lines, derived from
//! what the machine is (cgroup version, capabilities) rather than from one machine.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde_json::json;

use crate::node::REAL_NODE;
use crate::node::network::{NODE_IP, POD_CIDR};
use crate::node::preflight::{Cgroups, Machine};

/// Files and ports of the node's agents.
#[derive(Debug, Clone)]
pub(crate) struct Agents {
    pub dir: PathBuf,
    pub runtime_socket: PathBuf,
    pub ca: PathBuf,
    pub kubelet_kubeconfig: PathBuf,
    pub proxy_kubeconfig: PathBuf,
    pub kubelet_port: u16,
    pub kubelet_healthz: u16,
    pub proxy_healthz: u16,
    pub proxy_metrics: u16,
}

impl Agents {
    /// kubelet's root dir (pods' volumes, plugins, checkpoints).
    pub fn kubelet_root(&self) -> PathBuf {
        self.dir.join("kubelet")
    }

    /// Writes `kubelet.yaml` and returns kubelet's command line.
    pub fn kubelet(&self, machine: &Machine) -> Result<Vec<String>> {
        let mut config = json!({
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": NODE_IP.to_string(),
            "port": self.kubelet_port,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": self.kubelet_healthz,
            "containerRuntimeEndpoint": format!("unix://{}", self.runtime_socket.display()),
            "podLogsDir": self.dir.join("pod-logs"),
            // containerd 1.x has no RuntimeConfig call to say which driver it uses.
            "cgroupDriver": "cgroupfs",
            "failSwapOn": false,
            "authentication": {
                "anonymous": { "enabled": false },
                "webhook": { "enabled": true },
                "x509": { "clientCAFile": self.ca },
            },
            "authorization": { "mode": "Webhook" },
            "clusterDomain": "cluster.local",
            // A local plane's disk is often fuller than a cluster's; evict only when nearly
            // full. Images here cannot be pulled again, so they are never collected.
            "evictionHard": { "memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%", "nodefs.inodesFree": "1%" },
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": false,
        });
        if machine.cgroups == Cgroups::V1 {
            config["failCgroupV1"] = json!(false);
        }
        if !machine.sys_resource {
            // kubelet's default -999 cannot be set without CAP_SYS_RESOURCE.
            config["oomScoreAdj"] = json!(0);
        }
        let path = self.dir.join("kubelet.yaml");
        write_json(&path, &config)?;
        Ok(vec![
            format!("--config={}", path.display()),
            format!("--kubeconfig={}", self.kubelet_kubeconfig.display()),
            format!("--root-dir={}", self.kubelet_root().display()),
            format!("--cert-dir={}", self.dir.join("kubelet-certs").display()),
            format!("--hostname-override={REAL_NODE}"),
            format!("--node-ip={NODE_IP}"),
        ])
    }

    /// Writes `kube-proxy.yaml` and returns kube-proxy's command line. It touches no
    /// sysctl: conntrack limits and `route_localnet` stay as they are.
    pub fn kube_proxy(&self) -> Result<Vec<String>> {
        let (net, bits) = POD_CIDR;
        let config = json!({
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": { "kubeconfig": self.proxy_kubeconfig },
            "hostnameOverride": REAL_NODE,
            "mode": "iptables",
            "clusterCIDR": format!("{net}/{bits}"),
            "healthzBindAddress": format!("127.0.0.1:{}", self.proxy_healthz),
            "metricsBindAddress": format!("127.0.0.1:{}", self.proxy_metrics),
            "nodePortAddresses": [format!("{NODE_IP}/32")],
            "conntrack": { "maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s" },
            "iptables": { "localhostNodePorts": false },
        });
        let path = self.dir.join("kube-proxy.yaml");
        write_json(&path, &config)?;
        Ok(vec![format!("--config={}", path.display())])
    }
}

/// JSON is YAML; both agents read either.
fn write_json(path: &Path, value: &serde_json::Value) -> Result<()> {
    std::fs::write(path, serde_json::to_vec_pretty(value)?)
        .with_context(|| format!("writing {}", path.display()))
}
