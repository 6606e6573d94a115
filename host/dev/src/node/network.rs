//! The node's network: a bridge link carrying the node's own address (never loopback, or
//! the API server could not reach the kubelet), the pods' bridge, the CNI configuration,
//! and one DNAT rule for the `kubernetes` Service, whose API server listens on loopback.

use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::node::preflight::Tools;

/// The link that carries the node's address.
pub(crate) const NODE_LINK: &str = "capstan-node";
/// The node's InternalIP, a /32 on [`NODE_LINK`].
pub(crate) const NODE_IP: Ipv4Addr = Ipv4Addr::new(10, 250, 0, 1);
/// The pods' bridge; created here so it can accept the DNAT to loopback before any pod.
pub(crate) const POD_BRIDGE: &str = "capstan-cni0";
/// Pod addresses on the real node, apart from kwok's 10.244.0.0/16 and the Services'.
pub(crate) const POD_CIDR: (Ipv4Addr, u8) = (Ipv4Addr::new(10, 88, 0, 0), 16);
/// The CNI network's name (what the runtime reports for each pod).
const NETWORK: &str = "capstan";
/// The nat chain holding the `kubernetes` Service rule.
pub(crate) const CHAIN: &str = "CAPSTAN-NODE";
/// The `kubernetes` Service's ClusterIP: the first address of the plane's Service range.
const KUBERNETES_SERVICE: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);

/// Refuses to start if the node's or the pods' addresses are already routed here.
pub(crate) fn check_free(tools: &Tools) -> Result<()> {
    let routes = output(Command::new(&tools.ip).args(["-o", "-4", "route", "show", "table", "all"]))?;
    let ours = [(NODE_IP, 32), POD_CIDR];
    for line in routes.lines() {
        let Some(dest) = line.split_whitespace().next() else {
            continue;
        };
        let Some((net, bits)) = parse_cidr(dest) else {
            continue;
        };
        if line.contains(NODE_LINK) || line.contains(POD_BRIDGE) {
            continue;
        }
        if let Some((ip, len)) = ours.iter().find(|(ip, len)| overlaps((net, bits), (*ip, *len))) {
            bail!(
                "the real node's addresses {ip}/{len} overlap a route already here ({}); free that range first",
                line.trim()
            );
        }
    }
    Ok(())
}

fn parse_cidr(s: &str) -> Option<(Ipv4Addr, u8)> {
    match s.split_once('/') {
        Some((ip, bits)) => Some((ip.parse().ok()?, bits.parse().ok()?)),
        None => Some((s.parse().ok()?, 32)),
    }
}

fn overlaps(a: (Ipv4Addr, u8), b: (Ipv4Addr, u8)) -> bool {
    let bits = a.1.min(b.1);
    let mask = if bits == 0 { 0 } else { u32::MAX << (32 - bits) };
    u32::from(a.0) & mask == u32::from(b.0) & mask
}

/// Creates both links, lets the pods' bridge take DNAT to loopback, and adds the
/// `kubernetes` Service rule towards the API server on `127.0.0.1:apiserver_port`.
pub(crate) fn set_up(tools: &Tools, apiserver_port: u16) -> Result<()> {
    let ip = |args: &[&str]| run(Command::new(&tools.ip).args(args));
    ip(&["link", "add", NODE_LINK, "type", "bridge"])?;
    ip(&["addr", "add", &format!("{NODE_IP}/32"), "dev", NODE_LINK])?;
    ip(&["link", "set", NODE_LINK, "up"])?;
    ip(&["link", "add", POD_BRIDGE, "type", "bridge"])?;
    ip(&["link", "set", POD_BRIDGE, "up"])?;
    write_sysctl(&format!("net/ipv4/conf/{POD_BRIDGE}/route_localnet"), "1")?;
    let iptables = |args: &[&str]| run(Command::new(&tools.iptables).args(["-w", "-t", "nat"]).args(args));
    iptables(&["-N", CHAIN])?;
    let to = format!("127.0.0.1:{apiserver_port}");
    iptables(&[
        "-A",
        CHAIN,
        "-d",
        &format!("{KUBERNETES_SERVICE}/32"),
        "-p",
        "tcp",
        "--dport",
        "443",
        "-m",
        "comment",
        "--comment",
        "capstan dev: the kubernetes Service",
        "-j",
        "DNAT",
        "--to-destination",
        &to,
    ])?;
    // Before kube-proxy's chains, which know no endpoint for this Service.
    iptables(&["-I", "PREROUTING", "1", "-j", CHAIN])?;
    iptables(&["-I", "OUTPUT", "1", "-j", CHAIN])?;
    Ok(())
}

/// Deletes both links (the pods' veths go with their network namespaces). Idempotent.
pub(crate) fn tear_down(tools: &Tools) {
    for link in [POD_BRIDGE, NODE_LINK] {
        let _ = Command::new(&tools.ip).args(["link", "del", link]).output();
    }
}

/// The CNI configuration the runtime reads: a bridge network with host-local addresses
/// kept under the node's dir (not `/var/lib/cni`). No masquerade: nothing leaves the
/// machine, and its rules would outlive a killed pod.
pub(crate) fn write_cni_config(conf_dir: &Path, ipam_dir: &Path) -> Result<()> {
    std::fs::create_dir_all(conf_dir)?;
    let (net, bits) = POD_CIDR;
    let conf = serde_json::json!({
        "cniVersion": "1.0.0",
        "name": NETWORK,
        "plugins": [{
            "type": "bridge",
            "bridge": POD_BRIDGE,
            "isGateway": true,
            "ipMasq": false,
            "hairpinMode": true,
            "ipam": {
                "type": "host-local",
                "ranges": [[{ "subnet": format!("{net}/{bits}") }]],
                "routes": [{ "dst": "0.0.0.0/0" }],
                "dataDir": ipam_dir,
            },
        }],
    });
    let path = conf_dir.join("10-capstan.conflist");
    std::fs::write(&path, serde_json::to_vec_pretty(&conf)?)
        .with_context(|| format!("writing {}", path.display()))
}

/// Reads a sysctl (`net/ipv4/...` form); `None` if it does not exist here.
pub(crate) fn read_sysctl(key: &str) -> Option<String> {
    std::fs::read_to_string(Path::new("/proc/sys").join(key))
        .ok()
        .map(|v| v.trim().to_string())
}

/// Writes a sysctl (`net/ipv4/...` form).
pub(crate) fn write_sysctl(key: &str, value: &str) -> Result<()> {
    let path = Path::new("/proc/sys").join(key);
    std::fs::write(&path, value).with_context(|| format!("setting {} to {value}", path.display()))
}

/// Runs a command, failing with its stderr on one line.
pub(crate) fn run(cmd: &mut Command) -> Result<()> {
    output(cmd).map(drop)
}

/// Runs a command and returns its stdout, failing with its stderr on one line.
pub(crate) fn output(cmd: &mut Command) -> Result<String> {
    let shown = format!("{cmd:?}").replace('"', "");
    let out = cmd.output().with_context(|| format!("running {shown}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        bail!(
            "{shown} failed ({}): {}",
            out.status,
            err.trim().replace('\n', "; ")
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_overlap_when_either_contains_the_other() {
        let cidr = |s| parse_cidr(s).unwrap();
        assert!(overlaps(cidr("10.88.0.0/16"), cidr("10.88.3.0/24")));
        assert!(overlaps(cidr("10.0.0.0/8"), cidr("10.88.0.0/16")));
        assert!(overlaps(cidr("10.250.0.1"), cidr("10.250.0.0/24")));
        assert!(!overlaps(cidr("10.88.0.0/16"), cidr("10.89.0.0/16")));
        assert!(!overlaps(cidr("192.0.2.0/24"), cidr("10.250.0.1/32")));
        assert_eq!(parse_cidr("default"), None);
    }
}
