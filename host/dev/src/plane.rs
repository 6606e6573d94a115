//! The `Plane` handle: start, use, share and tear down a local control plane.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use tempfile::TempDir;

use crate::api;
use crate::binaries::Binaries;
use crate::boot::{self, Booted};
use crate::components::PortMap;
use crate::kubeconfig;
use crate::process::{self, Lifetime, Proc};

/// Env var naming a kubeconfig that [`Plane::shared`] uses instead of starting a plane.
/// Deliberately not `KUBECONFIG`, so tests never reach a real cluster by accident.
pub const EXTERNAL_KUBECONFIG_ENV: &str = "CAPSTAN_TEST_KUBECONFIG";

/// How to start a plane; `Default` is the full plane on free ports in a temp dir.
#[derive(Debug, Clone)]
pub struct PlaneConfig {
    /// Where certs, kubeconfigs, etcd data and `<component>.log` go. A given dir is kept
    /// after the plane stops, and earlier plane state in it is replaced on start;
    /// `None` means a temp dir removed on drop (kept if start fails, for its logs).
    pub dir: Option<PathBuf>,
    /// Binaries to run; `None` means the pinned cache, built first if missing.
    pub binaries: Option<Binaries>,
    /// Loopback ports; 0 (the default) picks a free one.
    pub ports: PortMap,
    /// Run kube-controller-manager (Jobs, garbage collection, service accounts, ...).
    pub controller_manager: bool,
    /// Run kube-scheduler.
    pub scheduler: bool,
    /// Run kwok with one fake node, so scheduled pods "run" and Job pods complete.
    pub kwok: bool,
    /// How long each component gets to become ready.
    pub start_timeout: Duration,
    /// Start a real node too (`dev::node`): pods run in containers. Needs root and the
    /// runtime's packages; kwok's node, if any, is tainted so pods go to the real one.
    pub real_node: bool,
    /// Turn on kube-apiserver's alpha `ShardedListAndWatch` gate (the `shardSelector` list
    /// and watch parameter, KEP-5866), so sharded hosts can be tried locally.
    pub sharded_watch: bool,
}

impl Default for PlaneConfig {
    fn default() -> Self {
        Self {
            dir: None,
            binaries: None,
            ports: PortMap::default(),
            controller_manager: true,
            scheduler: true,
            kwok: true,
            start_timeout: Duration::from_secs(90),
            real_node: false,
            sharded_watch: true,
        }
    }
}

impl PlaneConfig {
    /// Only etcd and kube-apiserver: enough for CRUD and watches, much lighter.
    pub fn api_only() -> Self {
        Self {
            controller_manager: false,
            scheduler: false,
            kwok: false,
            ..Self::default()
        }
    }
}

/// A running local control plane (or, for [`Plane::shared`] with
/// `CAPSTAN_TEST_KUBECONFIG` set, a handle on an existing cluster).
#[derive(Debug)]
pub struct Plane {
    pub(crate) dir: Option<PathBuf>,
    kubeconfig: PathBuf,
    server: Option<String>,
    ports: PortMap,
    pub(crate) procs: Mutex<Vec<Proc>>,
    temp: Mutex<Option<TempDir>>,
    controllers: bool,
    started_in: Option<Duration>,
}

impl Plane {
    /// Starts a plane and waits until every enabled component is ready.
    pub async fn start(config: PlaneConfig) -> Result<Plane> {
        let bins = resolve_binaries(&config).await?;
        let auto_ports = config.ports == PortMap::default();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let (dir, temp) = match &config.dir {
                Some(d) => (d.clone(), None),
                None => {
                    let t = new_temp_dir()?;
                    (t.path().to_path_buf(), Some(t))
                }
            };
            match boot::boot(&config, &bins, &dir, Lifetime::Attached).await {
                Ok(booted) => return Ok(Self::from_booted(booted, dir, temp, &config)),
                // Another process can grab a port between our probe and the bind.
                Err(e) if auto_ports && attempt < 3 && process::is_port_clash(&e) => continue,
                Err(e) => {
                    // The error names a log file in there: keep it readable.
                    if let Some(t) = temp {
                        let _ = t.keep();
                    }
                    return Err(e);
                }
            }
        }
    }

    fn from_booted(b: Booted, dir: PathBuf, temp: Option<TempDir>, config: &PlaneConfig) -> Self {
        Self {
            dir: Some(dir),
            kubeconfig: b.kubeconfig,
            server: Some(b.server),
            ports: b.ports,
            procs: Mutex::new(b.procs),
            temp: Mutex::new(temp),
            controllers: config.controller_manager,
            started_in: Some(b.started_in),
        }
    }

    /// A handle on an existing cluster: starts and stops nothing.
    pub fn external(kubeconfig: impl Into<PathBuf>) -> Plane {
        Self {
            dir: None,
            kubeconfig: kubeconfig.into(),
            server: None,
            ports: PortMap::default(),
            procs: Mutex::new(Vec::new()),
            temp: Mutex::new(None),
            controllers: true,
            started_in: None,
        }
    }

    /// The plane every test in this process shares, started on first use. Its processes
    /// die with the test process (PDEATHSIG) and its temp dir goes at exit. With
    /// `CAPSTAN_TEST_KUBECONFIG` set, that cluster is used instead and nothing starts.
    pub async fn shared() -> Result<&'static Plane> {
        static SHARED: tokio::sync::OnceCell<Plane> = tokio::sync::OnceCell::const_new();
        extern "C" fn stop_shared() {
            if let Some(plane) = SHARED.get() {
                plane.shutdown();
            }
        }
        Self::shared_in(&SHARED, PlaneConfig::default(), stop_shared).await
    }

    /// Like [`Plane::shared`], with a real node (`PlaneConfig::real_node`): the plane for
    /// tests where containers must really run. Taken apart at exit like the node of
    /// `capstan dev down`.
    pub async fn shared_real_node() -> Result<&'static Plane> {
        static SHARED: tokio::sync::OnceCell<Plane> = tokio::sync::OnceCell::const_new();
        extern "C" fn stop_shared() {
            if let Some(plane) = SHARED.get() {
                plane.shutdown();
            }
        }
        let config = PlaneConfig {
            real_node: true,
            ..PlaneConfig::default()
        };
        Self::shared_in(&SHARED, config, stop_shared).await
    }

    async fn shared_in(
        cell: &'static tokio::sync::OnceCell<Plane>,
        config: PlaneConfig,
        at_exit: extern "C" fn(),
    ) -> Result<&'static Plane> {
        cell.get_or_try_init(|| async {
            if let Some(kc) = std::env::var_os(EXTERNAL_KUBECONFIG_ENV).filter(|v| !v.is_empty()) {
                return Ok(Plane::external(kc));
            }
            let plane = Plane::start(config).await?;
            // SAFETY: registering a plain extern "C" fn; it only kills and removes files.
            unsafe {
                libc::atexit(at_exit);
            }
            Ok(plane)
        })
        .await
    }

    /// An admin client, built on the calling runtime (a static plane outlives any one
    /// test's runtime, so clients are not cached).
    pub async fn client(&self) -> Result<kube::Client> {
        kubeconfig::client(&self.kubeconfig).await
    }

    /// Path of the admin kubeconfig (cluster-admin via `system:masters`).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The plane's directory (logs, certs, kubeconfigs); `None` for an external cluster.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// The apiserver URL; `None` for an external cluster.
    pub fn server(&self) -> Option<&str> {
        self.server.as_deref()
    }

    /// The loopback ports in use (all 0 for an external cluster).
    pub fn ports(&self) -> PortMap {
        self.ports
    }

    /// Whether this handle points at an existing cluster rather than one it started.
    pub fn is_external(&self) -> bool {
        self.server.is_none()
    }

    /// How long start took, from the first file written to the fake node being Ready.
    pub fn startup_time(&self) -> Option<Duration> {
        self.started_in
    }

    /// `(component, pid)` of every process still owned by this plane.
    pub fn pids(&self) -> Vec<(&'static str, u32)> {
        self.procs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|p| (p.name, p.pid()))
            .collect()
    }

    /// Resident memory of all the plane's processes together, in bytes.
    pub fn rss_bytes(&self) -> u64 {
        self.pids()
            .iter()
            .map(|(_, pid)| capstan_engine::rss_bytes(*pid))
            .sum()
    }

    /// Imports an OCI image archive (see [`crate::image`]) into this plane's real node.
    pub fn load_image(&self, archive: &Path) -> Result<()> {
        let dir = self
            .dir
            .as_deref()
            .context("an external cluster has no node of ours")?;
        crate::node::load_image(dir, archive)
    }

    /// Applies the CRDs and waits until each is Established.
    pub async fn install_crds(&self, crds: &[CustomResourceDefinition]) -> Result<()> {
        api::install_crds(&self.client().await?, crds, Duration::from_secs(60)).await
    }

    /// Creates a namespace `<prefix>-<random>` so tests can share one plane; when
    /// controllers run, returns once its `default` ServiceAccount exists.
    pub async fn namespace(&self, prefix: &str) -> Result<String> {
        api::create_namespace(&self.client().await?, prefix, self.controllers).await
    }

    /// Kills every process (whole process groups), waits for them and removes a temp
    /// dir. Idempotent; `Drop` calls it.
    pub fn shutdown(&self) {
        let mut procs = self.procs.lock().unwrap_or_else(|p| p.into_inner());
        // Reverse start order: clients first, etcd last.
        while let Some(mut p) = procs.pop() {
            p.kill(Duration::ZERO);
        }
        if let Some(dir) = &self.dir
            && self.server.is_some()
        {
            crate::node::stop(dir);
        }
        drop(self.temp.lock().unwrap_or_else(|p| p.into_inner()).take());
    }
}

impl Drop for Plane {
    fn drop(&mut self) {
        self.shutdown();
    }
}

pub(crate) async fn resolve_binaries(config: &PlaneConfig) -> Result<Binaries> {
    let ensure = if config.real_node {
        Binaries::ensure_node
    } else {
        Binaries::ensure
    };
    match &config.binaries {
        Some(b) => Ok(b.clone()),
        None => tokio::task::spawn_blocking(ensure)
            .await
            .context("the binaries lookup panicked")?,
    }
}

/// A fresh dir under `$TMPDIR/capstan-planes`, named after our pid so dirs left by
/// processes that died without cleaning up (Ctrl-C, abort) can be swept.
fn new_temp_dir() -> Result<TempDir> {
    let root = std::env::temp_dir().join("capstan-planes");
    std::fs::create_dir_all(&root).with_context(|| format!("creating {}", root.display()))?;
    sweep_stale(&root);
    tempfile::Builder::new()
        .prefix(&format!("p{}-", std::process::id()))
        .tempdir_in(&root)
        .with_context(|| format!("creating a plane dir in {}", root.display()))
}

fn sweep_stale(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let pid = name
            .to_str()
            .and_then(|n| n.strip_prefix('p'))
            .and_then(|n| n.split('-').next())
            .and_then(|n| n.parse::<u32>().ok());
        if let Some(pid) = pid
            && pid != std::process::id()
            && !process::alive(pid)
        {
            // A real node that died with its plane still has mounts in there.
            crate::node::stop(&entry.path());
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}
