//! Where the pinned control-plane binaries live, and building them when they are missing.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

/// The single source of the pinned versions, shared with `scripts/k8s-build.sh`.
const VERSIONS_ENV: &str = include_str!("../../../scripts/versions.env");
/// Embedded so an installed `capstan` binary can build the plane without the source tree.
const BUILD_SCRIPT: &str = include_str!("../../../scripts/k8s-build.sh");

/// Pinned upstream versions parsed from `scripts/versions.env`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versions {
    /// Kubernetes release, e.g. `v1.37.2`.
    pub kubernetes: String,
    /// etcd release, e.g. `v3.6.16`.
    pub etcd: String,
    /// kwok release, e.g. `v0.8.0`.
    pub kwok: String,
    /// CNCF Distribution registry release, e.g. `v3.1.2`: the real node's image mirror.
    pub registry: String,
}

impl Versions {
    /// The versions this crate was built against.
    pub fn pinned() -> Self {
        Self::parse(VERSIONS_ENV).expect("scripts/versions.env names every pinned version")
    }

    fn parse(text: &str) -> Result<Self> {
        let get = |key: &str| -> Result<String> {
            text.lines()
                .filter_map(|l| l.trim().strip_prefix(key)?.strip_prefix('='))
                .map(|v| v.trim().trim_matches('"').to_string())
                .next()
                .with_context(|| format!("versions.env has no {key}"))
        };
        Ok(Self {
            kubernetes: get("KUBERNETES_VERSION")?,
            etcd: get("ETCD_VERSION")?,
            kwok: get("KWOK_VERSION")?,
            registry: get("REGISTRY_VERSION")?,
        })
    }
}

/// Paths of every binary and data file a plane needs; fields are public so tests and
/// callers can point one at something else.
#[derive(Debug, Clone)]
pub struct Binaries {
    /// `etcd`.
    pub etcd: PathBuf,
    /// `kube-apiserver`.
    pub kube_apiserver: PathBuf,
    /// `kube-controller-manager`.
    pub kube_controller_manager: PathBuf,
    /// `kube-scheduler`.
    pub kube_scheduler: PathBuf,
    /// `kubectl` (not started by the plane; handy for callers).
    pub kubectl: PathBuf,
    /// `kwok`.
    pub kwok: PathBuf,
    /// Directory holding kwok's stage files (`pod-ready.yaml`, ...).
    pub kwok_stages: PathBuf,
    /// `kubelet`, for a real node (built only when one is asked for).
    pub kubelet: PathBuf,
    /// `kube-proxy`, the real node's Service proxy.
    pub kube_proxy: PathBuf,
    /// `registry`, which serves the real node's images to pulls that must ask a registry.
    pub registry: PathBuf,
    /// The pause container's program, static, from the same Kubernetes module.
    pub pause: PathBuf,
}

/// The kwok stages the plane loads: nodes become Ready, pods run, Job pods complete.
pub(crate) const KWOK_STAGES: [&str; 5] = [
    "node-initialize",
    "node-heartbeat",
    "pod-ready",
    "pod-complete",
    "pod-delete",
];

/// Cache root, resolved exactly as `k8s-build.sh` does so both agree.
pub fn cache_root() -> PathBuf {
    if let Some(dir) = std::env::var_os("CAPSTAN_CACHE").filter(|v| !v.is_empty()) {
        return PathBuf::from(dir);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| home_dir().join(".cache"));
    base.join("capstan")
}

pub(crate) fn home_dir() -> PathBuf {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/"))
}

impl Binaries {
    /// Paths in the cache for the pinned versions; they may not exist (see [`Self::missing`]).
    pub fn in_cache(root: &Path) -> Self {
        let v = Versions::pinned();
        let kube = root.join(format!("k8s-{}", v.kubernetes)).join("bin");
        let kwok = root.join(format!("kwok-{}", v.kwok));
        Self {
            etcd: root.join(format!("etcd-{}", v.etcd)).join("bin/etcd"),
            kube_apiserver: kube.join("kube-apiserver"),
            kube_controller_manager: kube.join("kube-controller-manager"),
            kube_scheduler: kube.join("kube-scheduler"),
            kubectl: kube.join("kubectl"),
            kwok: kwok.join("bin/kwok"),
            kwok_stages: kwok.join("stages"),
            kubelet: kube.join("kubelet"),
            kube_proxy: kube.join("kube-proxy"),
            pause: kube.join("pause"),
            registry: root.join(format!("registry-{}", v.registry)).join("bin/registry"),
        }
    }

    /// Files that are absent or not executable.
    pub fn missing(&self) -> Vec<PathBuf> {
        let bins = [
            &self.etcd,
            &self.kube_apiserver,
            &self.kube_controller_manager,
            &self.kube_scheduler,
            &self.kubectl,
            &self.kwok,
        ];
        let stages = KWOK_STAGES
            .iter()
            .map(|s| self.kwok_stages.join(format!("{s}.yaml")));
        bins.into_iter()
            .filter(|p| !is_executable(p))
            .cloned()
            .chain(stages.filter(|p| !p.is_file()))
            .collect()
    }

    /// The real node's binaries that are absent or not executable.
    pub fn missing_node(&self) -> Vec<PathBuf> {
        [&self.kubelet, &self.kube_proxy, &self.pause, &self.registry]
            .into_iter()
            .filter(|p| !is_executable(p))
            .cloned()
            .collect()
    }

    /// Finds the cached binaries; fails naming what is missing and how to build it.
    pub fn locate() -> Result<Self> {
        let root = cache_root();
        let bins = Self::in_cache(&root);
        let missing = bins.missing();
        if let Some(first) = missing.first() {
            bail!(
                "control-plane binaries missing in {} ({} of them, e.g. {}); build them with scripts/k8s-build.sh or Binaries::ensure()",
                root.display(),
                missing.len(),
                first.display()
            );
        }
        Ok(bins)
    }

    /// Like [`Self::locate`], but builds whatever is missing with the embedded build
    /// script first (needs Go; takes several minutes the first time, progress on stderr).
    pub fn ensure() -> Result<Self> {
        if let Ok(bins) = Self::locate() {
            return Ok(bins);
        }
        build("all", Self::locate)
    }

    /// Like [`Self::ensure`], and also the real node's kubelet, kube-proxy, pause and
    /// image registry.
    pub fn ensure_node() -> Result<Self> {
        let bins = Self::ensure()?;
        if bins.missing_node().is_empty() {
            return Ok(bins);
        }
        let node = || {
            let bins = Self::locate()?;
            match bins.missing_node().first() {
                Some(first) => bail!(
                    "the real node's binaries are still missing after the build (e.g. {})",
                    first.display()
                ),
                None => Ok(bins),
            }
        };
        build("node", node)
    }
}

/// Runs the embedded build script for `target` under the cache lock, then `locate`.
fn build(target: &str, locate: impl Fn() -> Result<Binaries>) -> Result<Binaries> {
    if find_on_path("go").is_none() {
        bail!("cannot build the control plane: Go is not installed (need go >= 1.24 on PATH)");
    }
    // Two test binaries may get here at once; one builds, the other then finds it all.
    let _lock = BuildLock::acquire(&cache_root())?;
    if let Ok(bins) = locate() {
        return Ok(bins);
    }
    let work = tempfile::Builder::new()
        .prefix("capstan-k8s-build-")
        .tempdir()
        .context("creating a temp dir for the build script")?;
    let script = work.path().join("k8s-build.sh");
    std::fs::write(&script, BUILD_SCRIPT)?;
    std::fs::write(work.path().join("versions.env"), VERSIONS_ENV)?;
    // The script reads CAPSTAN_CACHE itself; pass ours so both always agree.
    let status = Command::new("bash")
        .arg(&script)
        .arg(target)
        .env("CAPSTAN_CACHE", cache_root())
        .current_dir(work.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .status()
        .context("running bash for k8s-build.sh")?;
    if !status.success() {
        bail!("building the control plane failed ({status}); see the k8s-build output above");
    }
    locate()
}

/// An exclusive `flock` on the cache root, released when dropped (or when we die).
struct BuildLock {
    _file: std::fs::File,
}

impl BuildLock {
    fn acquire(root: &Path) -> Result<Self> {
        use std::os::fd::AsRawFd;
        std::fs::create_dir_all(root).with_context(|| format!("creating {}", root.display()))?;
        let path = root.join(".build.lock");
        let file = std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
        // SAFETY: flock on an fd we own; blocks until the other builder is done.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("locking {}", path.display()));
        }
        Ok(Self { _file: file })
    }
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_versions_env() {
        let text =
            "# c\nKUBERNETES_VERSION=v1.2.3\nETCD_VERSION=\"v3\"\nKWOK_VERSION=v0\nREGISTRY_VERSION=v9\n";
        let v = Versions::parse(text).unwrap();
        assert_eq!(v.registry, "v9");
        assert_eq!(v.kubernetes, "v1.2.3");
        assert_eq!(v.etcd, "v3");
        assert_eq!(v.kwok, "v0");
        let pinned = Versions::pinned();
        assert!(pinned.kubernetes.starts_with("v1."), "{pinned:?}");
    }
}
