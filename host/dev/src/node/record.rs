//! The machine-wide record of the one real node: what it changed outside its own dir, so
//! that whoever stops it — `dev down`, a test's exit, or the next start after a crash —
//! can put the machine back.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::node::iptables::{self, Snapshot};
use crate::node::network;
use crate::node::preflight::Tools;

/// Where the record lives: one real node per machine (its links, addresses and the
/// `kubernetes` Service rule are machine-wide).
const RECORD: &str = "/run/capstan/node.json";

/// Paths outside the node's dir that containerd, runc, CNI or kubelet create on their own.
const SYSTEM_PATHS: [&str; 10] = [
    "/run/containerd",
    "/run/netns",
    "/var/lib/kubelet",
    "/var/log/containers",
    "/var/log/pods",
    "/var/lib/cni",
    "/var/lib/containerd",
    "/opt/containerd",
    "/etc/cni",
    "/run/capstan",
];

/// Sysctls kubelet, the CNI bridge or kube-proxy may set, restored at teardown.
const SYSCTLS: [&str; 9] = [
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
    "net/ipv4/ip_forward",
    "net/ipv4/conf/all/route_localnet",
    "net/ipv6/conf/all/forwarding",
];

/// What one real node changed, written before it changes anything.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Record {
    /// The node's own dir (runtime state, kubelet root, configs).
    pub dir: PathBuf,
    pub tools: Tools,
    /// System paths that did not exist before the node started.
    pub created: Vec<PathBuf>,
    /// `(sysctl, value before)`.
    pub sysctls: Vec<(String, String)>,
    /// The packet filter's chains before.
    pub iptables: Vec<Snapshot>,
}

impl Record {
    /// Takes stock of the machine before a node starts in `dir`, and saves it.
    pub fn take(dir: &Path, tools: &Tools) -> Result<Record> {
        let record = Record {
            dir: dir.to_path_buf(),
            tools: tools.clone(),
            created: SYSTEM_PATHS
                .iter()
                .map(PathBuf::from)
                .filter(|p| !p.exists())
                .collect(),
            sysctls: SYSCTLS
                .iter()
                .filter_map(|k| Some((k.to_string(), network::read_sysctl(k)?)))
                .collect(),
            iptables: iptables::snapshot(tools)?,
        };
        let path = Path::new(RECORD);
        std::fs::create_dir_all(path.parent().expect("an absolute path"))?;
        std::fs::write(path, serde_json::to_vec_pretty(&record)?)
            .with_context(|| format!("writing {RECORD}"))?;
        Ok(record)
    }

    /// The record of the machine's node, if one was started and not torn down.
    pub fn load() -> Result<Option<Record>> {
        match std::fs::read(RECORD) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .with_context(|| format!("parsing {RECORD}")),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("reading {RECORD}")),
        }
    }

    /// Forgets the record once its node is gone.
    pub fn remove() {
        let _ = std::fs::remove_file(RECORD);
    }
}
