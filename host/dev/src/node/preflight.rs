//! What a real node needs from the machine, found (not assumed) before anything starts:
//! root, Linux, overlayfs, the runtime's programs, and how cgroups and capabilities look.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};

/// Which cgroup hierarchy the machine mounts at `/sys/fs/cgroup`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cgroups {
    /// Per-controller hierarchies (with or without a `unified` one beside them).
    V1,
    /// One unified hierarchy.
    V2,
}

/// The machine as the node will find it.
#[derive(Debug, Clone)]
pub(crate) struct Machine {
    pub cgroups: Cgroups,
    /// CAP_SYS_RESOURCE: without it nothing may lower an OOM score below 0.
    pub sys_resource: bool,
    /// Whether AppArmor is enabled in the kernel.
    pub apparmor: bool,
    pub tools: Tools,
}

/// Programs from the machine's packages that the node runs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Tools {
    pub containerd: PathBuf,
    pub ctr: PathBuf,
    pub runc: PathBuf,
    pub iptables: PathBuf,
    pub iptables_save: PathBuf,
    pub iptables_restore: PathBuf,
    /// `ip6tables-save`/`-restore`: kubelet and kube-proxy also write IPv6 chains.
    pub ip6tables_save: Option<PathBuf>,
    pub ip6tables_restore: Option<PathBuf>,
    pub ip: PathBuf,
    /// A statically linked busybox, the image Echo's Jobs run.
    pub busybox: PathBuf,
    /// Where the CNI plugins live (`bridge`, `host-local`, `loopback`).
    pub cni_bin: PathBuf,
}

/// `(program, Debian package)` of each tool, in the order they are reported.
const PROGRAMS: [(&str, &str); 8] = [
    ("containerd", "containerd"),
    ("ctr", "containerd"),
    ("runc", "runc"),
    ("iptables", "iptables"),
    ("iptables-save", "iptables"),
    ("iptables-restore", "iptables"),
    ("ip", "iproute2"),
    ("busybox", "busybox-static"),
];
const CNI_DIRS: [&str; 3] = ["/usr/lib/cni", "/opt/cni/bin", "/usr/libexec/cni"];
const CNI_PLUGINS: [&str; 3] = ["bridge", "host-local", "loopback"];
const SBIN: [&str; 6] = [
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
];

/// Checks everything at once and fails with one line per missing piece.
pub(crate) fn check() -> Result<Machine> {
    let mut problems = Vec::new();
    if !cfg!(target_os = "linux") {
        bail!("a real node needs Linux");
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("a real node needs root: containerd, runc and kubelet mount, create network links and cgroups");
    }
    if !filesystem_supported("overlay") {
        problems.push("the kernel has no overlayfs (containerd's snapshotter): modprobe overlay".to_string());
    }
    let found: Vec<Option<PathBuf>> = PROGRAMS.iter().map(|(p, _)| find(p)).collect();
    for ((program, package), path) in PROGRAMS.iter().zip(&found) {
        if path.is_none() {
            problems.push(format!("{program} is missing: apt-get install {package}"));
        }
    }
    let cni_bin = CNI_DIRS
        .iter()
        .map(Path::new)
        .find(|d| CNI_PLUGINS.iter().all(|p| d.join(p).is_file()));
    if cni_bin.is_none() {
        problems.push("the CNI plugins (bridge, host-local, loopback) are missing: apt-get install containernetworking-plugins".to_string());
    }
    if let Some(busybox) = &found[7]
        && !is_static(busybox)
    {
        problems.push(format!(
            "{} is dynamically linked and cannot be an image alone: apt-get install busybox-static",
            busybox.display()
        ));
    }
    let cgroups = cgroups();
    if cgroups.is_none() {
        problems.push("no cgroup hierarchy is mounted at /sys/fs/cgroup".to_string());
    }
    if !problems.is_empty() {
        bail!("a real node cannot start here:\n  {}", problems.join("\n  "));
    }
    let get = |i: usize| found[i].clone().expect("checked above");
    Ok(Machine {
        cgroups: cgroups.expect("checked above"),
        sys_resource: has_capability(CAP_SYS_RESOURCE),
        apparmor: std::fs::read_to_string("/sys/module/apparmor/parameters/enabled")
            .is_ok_and(|v| v.trim() == "Y"),
        tools: Tools {
            containerd: get(0),
            ctr: get(1),
            runc: get(2),
            iptables: get(3),
            iptables_save: get(4),
            iptables_restore: get(5),
            ip6tables_save: find("ip6tables-save"),
            ip6tables_restore: find("ip6tables-restore"),
            ip: get(6),
            busybox: get(7),
            cni_bin: cni_bin.expect("checked above").to_path_buf(),
        },
    })
}

/// A program on PATH or in the usual sbin directories (root's PATH may lack them).
pub(crate) fn find(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(SBIN.iter().map(PathBuf::from))
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

fn filesystem_supported(fs: &str) -> bool {
    std::fs::read_to_string("/proc/filesystems")
        .is_ok_and(|t| t.lines().any(|l| l.split_whitespace().last() == Some(fs)))
}

fn cgroups() -> Option<Cgroups> {
    if Path::new("/sys/fs/cgroup/cgroup.controllers").is_file() {
        Some(Cgroups::V2)
    } else if Path::new("/sys/fs/cgroup/memory").is_dir() {
        Some(Cgroups::V1)
    } else {
        None
    }
}

const CAP_SYS_RESOURCE: u32 = 24;

/// Whether this process has `cap` in its effective set (`CapEff` in /proc/self/status).
fn has_capability(cap: u32) -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|bits| bits & (1 << cap) != 0)
}

/// Whether an ELF file has no program interpreter (`PT_INTERP`), i.e. is statically linked.
fn is_static(path: &Path) -> bool {
    let Ok(bytes) = std::fs::read(path) else {
        return false;
    };
    elf_interpreter(&bytes).is_none() && bytes.starts_with(b"\x7fELF")
}

/// The `PT_INTERP` string of a 64-bit little-endian ELF file, if it has one.
pub(crate) fn elf_interpreter(bytes: &[u8]) -> Option<String> {
    let u16_at = |o: usize| bytes.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    let u32_at = |o: usize| {
        bytes
            .get(o..o + 4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
    };
    let u64_at = |o: usize| {
        bytes
            .get(o..o + 8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
    };
    if !bytes.starts_with(b"\x7fELF\x02\x01") {
        return None;
    }
    let phoff = u64_at(0x20)? as usize;
    let phentsize = u16_at(0x36)? as usize;
    let phnum = u16_at(0x38)? as usize;
    (0..phnum).find_map(|i| {
        let ph = phoff + i * phentsize;
        (u32_at(ph)? == 3).then_some(())?;
        let (off, size) = (u64_at(ph + 8)? as usize, u64_at(ph + 32)? as usize);
        let raw = bytes.get(off..off + size)?;
        Some(String::from_utf8_lossy(raw).trim_end_matches('\0').to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_interpreter_of_a_dynamic_binary() {
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let interp = elf_interpreter(&me).expect("test binaries are dynamically linked");
        assert!(interp.contains("ld-linux"), "{interp}");
        assert_eq!(elf_interpreter(b"not an elf"), None);
    }
}
