//! The node's container runtime: containerd with runc, its state under the node's dir,
//! configured for what the machine can do (no CAP_SYS_RESOURCE, no AppArmor, cgroupfs).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

use crate::node::network::output;
use crate::node::preflight::Machine;

/// The image every pod's sandbox runs; the node imports a locally built one under it.
pub(crate) const PAUSE_IMAGE: &str = "registry.k8s.io/pause:3.10";
/// The containerd namespace the CRI plugin (and so kubelet) uses.
pub(crate) const CRI_NAMESPACE: &str = "k8s.io";

/// containerd's files under the node's dir.
#[derive(Debug, Clone)]
pub(crate) struct Runtime {
    pub dir: PathBuf,
}

impl Runtime {
    pub fn socket(&self) -> PathBuf {
        self.dir.join("containerd.sock")
    }

    pub fn config(&self) -> PathBuf {
        self.dir.join("config.toml")
    }

    pub fn cni_conf_dir(&self) -> PathBuf {
        self.dir.join("cni")
    }

    pub fn cni_ipam_dir(&self) -> PathBuf {
        self.dir.join("cni-ipam")
    }

    /// Writes `config.toml` (containerd 1.x, config version 2); `hosts` is where each
    /// registry host's `hosts.toml` names the node's mirror.
    pub fn write_config(&self, machine: &Machine, hosts: &Path) -> Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let d = |p: &str| toml_string(&self.dir.join(p));
        let tools = &machine.tools;
        let config = format!(
            r#"version = 2
root = {root}
state = {state}
# Snapshotters and plugins this node never uses: less to start, less noise in the log.
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = {socket}

[plugins."io.containerd.internal.v1.opt"]
  path = {opt}

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  # Without CAP_SYS_RESOURCE runc cannot give the pause container its -998.
  restrict_oom_score_adj = {restrict_oom}
  disable_apparmor = {no_apparmor}
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = {runc}
        Root = {runc_root}
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = {cni_bin}
    conf_dir = {cni_conf}
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = {hosts}
"#,
            root = d("root"),
            state = d("state"),
            socket = toml_string(&self.socket()),
            opt = d("opt"),
            restrict_oom = !machine.sys_resource,
            no_apparmor = !machine.apparmor,
            runc = toml_string(&tools.runc),
            runc_root = d("runc"),
            cni_bin = toml_string(&tools.cni_bin),
            cni_conf = toml_string(&self.cni_conf_dir()),
            hosts = toml_string(hosts),
        );
        std::fs::write(self.config(), config).with_context(|| format!("writing {}", self.config().display()))
    }

    /// containerd's command line.
    pub fn args(&self) -> Vec<String> {
        vec!["--config".into(), self.config().display().to_string()]
    }

    /// Whether containerd answers on its socket.
    pub fn answers(&self, ctr: &Path) -> bool {
        self.socket().exists() && self.ctr(ctr, &["version"]).is_ok()
    }

    /// Runs `ctr` against this containerd in the CRI namespace.
    pub fn ctr(&self, ctr: &Path, args: &[&str]) -> Result<String> {
        output(
            Command::new(ctr)
                .arg("--address")
                .arg(self.socket())
                .args(["--namespace", CRI_NAMESPACE])
                .args(args),
        )
    }

    /// Imports an OCI image-layout archive and unpacks it for the overlayfs snapshotter.
    pub fn import(&self, ctr: &Path, archive: &Path) -> Result<String> {
        let archive = archive
            .to_str()
            .context("an image archive path that is not UTF-8")?;
        self.ctr(ctr, &["images", "import", "--snapshotter", "overlayfs", archive])
    }
}

fn toml_string(p: &Path) -> String {
    format!("{:?}", p.display().to_string())
}
