//! A plane that outlives the process that started it, for `capstan dev up` / `down`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::binaries::cache_root;
use crate::boot;
use crate::components::PortMap;
use crate::plane::resolve_binaries;
use crate::process::{self, Lifetime};
use crate::{Plane, PlaneConfig};

const STATE_FILE: &str = "plane.json";

/// What `<dir>/plane.json` records about a detached plane.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DetachedState {
    /// Admin kubeconfig.
    pub kubeconfig: PathBuf,
    /// Apiserver URL.
    pub server: String,
    /// Loopback ports in use.
    pub ports: PortMap,
    /// The processes, in start order.
    pub components: Vec<DetachedProcess>,
}

/// One process of a detached plane; it leads its own session and process group.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DetachedProcess {
    /// Component name, e.g. `kube-apiserver`.
    pub name: String,
    /// Pid, which is also the process group id.
    pub pid: u32,
    /// Start time (clock ticks since boot), so a recycled pid is never signalled.
    pub start_time: Option<u64>,
    /// Its log file.
    pub log: PathBuf,
}

impl DetachedProcess {
    /// Whether this very process (same pid and start time) is still alive.
    pub fn running(&self) -> bool {
        process::alive(self.pid) && process::start_time(self.pid) == self.start_time
    }
}

/// Default directory for `capstan dev`: `<cache root>/dev`.
pub fn default_dev_dir() -> PathBuf {
    cache_root().join("dev")
}

impl Plane {
    /// Starts a plane (as `config` says; its `dir` is replaced by `dir`) that keeps running after this process exits (own
    /// sessions, no PDEATHSIG), records it in `<dir>/plane.json` and returns the admin
    /// kubeconfig path. If the plane recorded there is still running, just returns its
    /// kubeconfig. Builds missing binaries first.
    pub async fn start_detached(dir: &Path, config: PlaneConfig) -> Result<PathBuf> {
        if let Some(state) = Self::detached_state(dir)? {
            let has_node = state
                .components
                .iter()
                .any(|p| p.name == crate::components::KUBELET);
            if state.components.iter().all(DetachedProcess::running) {
                if has_node != config.real_node {
                    let (runs, asked) = if has_node {
                        ("with", "without")
                    } else {
                        ("without", "with")
                    };
                    anyhow::bail!(
                        "a plane {runs} a real node runs in {}; stop it (capstan dev down) to start one {asked}",
                        dir.display()
                    );
                }
                return Ok(state.kubeconfig);
            }
            // Half dead: clear out the rest and start over.
            Self::stop_detached(dir)?;
        }
        let config = PlaneConfig {
            dir: Some(dir.to_path_buf()),
            ..config
        };
        let bins = resolve_binaries(&config).await?;
        let mut attempt = 0;
        let booted = loop {
            attempt += 1;
            match boot::boot(&config, &bins, dir, Lifetime::Detached).await {
                Ok(b) => break b,
                Err(e) if attempt < 3 && process::is_port_clash(&e) => continue,
                Err(e) => return Err(e),
            }
        };
        let state = DetachedState {
            kubeconfig: booted.kubeconfig.clone(),
            server: booted.server.clone(),
            ports: booted.ports,
            components: booted
                .procs
                .iter()
                .map(|p| DetachedProcess {
                    name: p.name.to_string(),
                    pid: p.pid(),
                    start_time: process::start_time(p.pid()),
                    log: p.log.clone(),
                })
                .collect(),
        };
        let path = dir.join(STATE_FILE);
        let tmp = dir.join(format!("{STATE_FILE}.tmp"));
        let written = std::fs::write(&tmp, serde_json::to_vec_pretty(&state)?)
            .and_then(|()| std::fs::rename(&tmp, &path))
            .with_context(|| format!("writing {}", path.display()));
        match written {
            Ok(()) => Ok(state.kubeconfig),
            Err(e) => {
                // Untracked processes could never be stopped by `stop_detached`.
                for p in booted.procs.into_iter().rev() {
                    process::stop_foreign(p.pid(), None, Duration::ZERO);
                }
                Err(e)
            }
        }
    }

    /// Reads `<dir>/plane.json`; `None` if no detached plane was recorded there.
    pub fn detached_state(dir: &Path) -> Result<Option<DetachedState>> {
        let path = dir.join(STATE_FILE);
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .with_context(|| format!("parsing {}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
        }
    }

    /// Stops the plane recorded in `<dir>/plane.json` (SIGTERM to each process group,
    /// SIGKILL after a grace period), waits for it and removes the record. Returns
    /// whether anything was running. Logs and data stay in `dir`.
    pub fn stop_detached(dir: &Path) -> Result<bool> {
        let Some(state) = Self::detached_state(dir)? else {
            return Ok(false);
        };
        let mut any = false;
        for p in state.components.iter().rev() {
            if p.running() {
                any = true;
                process::stop_foreign(p.pid, p.start_time, Duration::from_secs(5));
            }
        }
        crate::node::stop(dir);
        let path = dir.join(STATE_FILE);
        std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
        Ok(any)
    }
}
