//! Taking a node apart so that nothing is left: no process, mount, link, packet-filter
//! chain, changed sysctl or directory outside the plane's own. Works from the record
//! alone, so it also cleans up after a node whose starter was killed.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::node::iptables::Snapshot;
use crate::node::network;
use crate::node::record::Record;
use crate::process;

/// Stops and removes everything `record` names; errors are logged, never fatal, so one
/// stuck piece does not leave the others behind.
pub(crate) fn tear_down(record: &Record) {
    let node_dir = record.dir.display().to_string();
    // Agents, runtime and shims all carry the node's dir in their command lines.
    kill_all(|cmdline| cmdline.contains(&node_dir));
    kill_pods();
    unmount_under(&mounted_roots(record));
    for snapshot in &record.iptables {
        if let Err(e) = Snapshot::restore(snapshot) {
            eprintln!("capstan dev: restoring the packet filter: {e:#}");
        }
    }
    network::tear_down(&record.tools);
    for (key, value) in &record.sysctls {
        if network::read_sysctl(key).as_deref() != Some(value.as_str())
            && let Err(e) = network::write_sysctl(key, value)
        {
            eprintln!("capstan dev: {e:#}");
        }
    }
    for path in record.created.iter().rev().chain([&record.dir]) {
        if let Err(e) = std::fs::remove_dir_all(path)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            eprintln!("capstan dev: removing {}: {e}", path.display());
        }
    }
}

/// Directories under which every mount is the node's.
fn mounted_roots(record: &Record) -> Vec<PathBuf> {
    let mut roots = vec![record.dir.clone()];
    roots.extend(record.created.iter().cloned());
    roots
}

/// Whether any process still runs with `dir` in its command line.
pub(crate) fn runs_from(dir: &Path) -> bool {
    let dir = dir.display().to_string();
    processes().iter().any(|(_, cmdline)| cmdline.contains(&dir))
}

/// SIGKILLs every process whose command line matches, and waits for them to go.
fn kill_all(matches: impl Fn(&str) -> bool) {
    let me = std::process::id();
    let pids: Vec<u32> = processes()
        .into_iter()
        .filter(|(pid, cmdline)| *pid != me && matches(cmdline))
        .map(|(pid, _)| pid)
        .collect();
    kill_and_wait(&pids);
}

fn kill_and_wait(pids: &[u32]) {
    for pid in pids {
        // SAFETY: kill(2) with a pid read from /proc; a gone process gives ESRCH.
        unsafe {
            libc::kill(*pid as libc::pid_t, libc::SIGKILL);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while pids.iter().any(|p| process::alive(*p)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        for pid in pids {
            // SAFETY: reaps our own children (none but in tests); ECHILD otherwise.
            unsafe {
                libc::waitpid(*pid as libc::pid_t, std::ptr::null_mut(), libc::WNOHANG);
            }
        }
    }
}

/// `(pid, command line)` of every process.
fn processes() -> Vec<(u32, String)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let raw = std::fs::read(e.path().join("cmdline")).ok()?;
            Some((pid, String::from_utf8_lossy(&raw).replace('\0', " ")))
        })
        .collect()
}

/// The cgroup kubelet puts every pod under (cgroupfs driver, default root).
const PODS_CGROUP: &str = "kubepods";

/// Kills every process in the pods' cgroups and removes those cgroups, in each mounted
/// hierarchy (v1 controllers, or the v2 unified one).
fn kill_pods() {
    let roots: Vec<PathBuf> = mounts()
        .into_iter()
        .filter(|m| m.fstype == "cgroup" || m.fstype == "cgroup2")
        .map(|m| m.point.join(PODS_CGROUP))
        .filter(|p| p.is_dir())
        .collect();
    let mut pids = Vec::new();
    for root in &roots {
        walk(root, &mut |dir| {
            let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
            pids.extend(procs.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
        });
    }
    pids.sort_unstable();
    pids.dedup();
    kill_and_wait(&pids);
    let deadline = Instant::now() + Duration::from_secs(10);
    for root in &roots {
        // A cgroup can be removed only once its last task is gone; that may take a moment.
        while root.exists() && Instant::now() < deadline {
            let mut dirs = Vec::new();
            walk(root, &mut |d| dirs.push(d.to_path_buf()));
            for d in dirs.iter().rev() {
                let _ = std::fs::remove_dir(d);
            }
            if root.exists() {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

/// Calls `f` on `dir` and every directory below it, parents first.
fn walk(dir: &Path, f: &mut impl FnMut(&Path)) {
    f(dir);
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                walk(&e.path(), f);
            }
        }
    }
}

struct Mount {
    point: PathBuf,
    fstype: String,
}

/// This process's mount table (`/proc/self/mountinfo`).
fn mounts() -> Vec<Mount> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    info.lines()
        .filter_map(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            let point = unescape(fields.get(4)?);
            let sep = fields.iter().position(|f| *f == "-")?;
            Some(Mount {
                point: PathBuf::from(point),
                fstype: fields.get(sep + 1)?.to_string(),
            })
        })
        .collect()
}

/// mountinfo escapes space, tab, newline and backslash as octal.
fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' {
            let code: String = chars.by_ref().take(3).collect();
            if let Ok(b) = u8::from_str_radix(&code, 8) {
                out.push(b as char);
                continue;
            }
            out.push(c);
            out.push_str(&code);
        } else {
            out.push(c);
        }
    }
    out
}

/// Lazily unmounts everything mounted at or under `roots`, deepest first, until none is left
/// (a mount may be stacked on another at the same point).
fn unmount_under(roots: &[PathBuf]) {
    for _ in 0..20 {
        let mut points: Vec<PathBuf> = mounts()
            .into_iter()
            .map(|m| m.point)
            .filter(|p| roots.iter().any(|r| p.starts_with(r)))
            .collect();
        if points.is_empty() {
            return;
        }
        points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
        for p in points {
            let Ok(c) = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()) else {
                continue;
            };
            // SAFETY: umount2 with a NUL-terminated path; MNT_DETACH never blocks.
            unsafe {
                libc::umount2(c.as_ptr(), libc::MNT_DETACH);
            }
        }
    }
}

/// Whether anything is mounted at or under `roots` (for `dev status` and the tests).
pub(crate) fn mounted(roots: &[PathBuf]) -> Vec<PathBuf> {
    mounts()
        .into_iter()
        .map(|m| m.point)
        .filter(|p| roots.iter().any(|r| p.starts_with(r)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_points_are_unescaped() {
        assert_eq!(unescape(r"/a\040b/c\011d"), "/a b/c\td");
        assert_eq!(unescape("/plain"), "/plain");
        assert!(mounts().iter().any(|m| m.point == Path::new("/")));
    }
}
