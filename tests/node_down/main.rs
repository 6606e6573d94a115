//! `capstan dev up --real-node` then `capstan dev down` after pods ran: the machine is as
//! it was — no process, mount, link, packet-filter chain or system directory left.
//! Its own test binary: one real node per machine, and `tests/node/main.rs` holds its own.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Result, ensure};
use capstan::dev::node::leftover_mounts;
use capstan_tests::host::eventually;
use capstan_tests::{arg, capstan};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::json;

/// Every `table/chain` of both packet-filter families.
fn chains() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for save in ["iptables-save", "ip6tables-save"] {
        let Ok(dump) = Command::new(save).output() else {
            continue;
        };
        let mut table = String::new();
        for line in String::from_utf8_lossy(&dump.stdout).lines() {
            if let Some(t) = line.strip_prefix('*') {
                table = t.to_string();
            } else if let Some(chain) = line.strip_prefix(':').and_then(|l| l.split_whitespace().next()) {
                out.insert(format!("{save} {table}/{chain}"));
            }
        }
    }
    out
}

fn links() -> String {
    let out = Command::new("ip")
        .args(["-br", "link"])
        .output()
        .expect("ip runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn processes_under(dir: &Path) -> Vec<String> {
    let dir = dir.display().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            e.file_name().to_str()?.parse::<u32>().ok()?;
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            cmdline.contains(&dir).then_some(cmdline)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_down_after_pods_ran_leaves_nothing_behind() -> Result<()> {
    let before = chains();
    let system = [
        "/run/containerd",
        "/run/netns",
        "/var/lib/kubelet",
        "/var/log/containers",
        "/var/lib/cni",
    ];
    let existed: Vec<bool> = system.iter().map(|p| Path::new(p).exists()).collect();
    let dir = tempfile::Builder::new().prefix("capstan-node-down-").tempdir()?;
    let up = capstan(&["dev", "up", "--real-node", "--dir", arg(dir.path())]);
    ensure!(
        up.status.success(),
        "dev up: {}",
        String::from_utf8_lossy(&up.stderr)
    );
    let status = capstan(&["dev", "status", "--dir", arg(dir.path())]);
    let status = String::from_utf8_lossy(&status.stdout).into_owned();
    for component in ["containerd", "kubelet", "kube-proxy"] {
        assert!(
            status.contains(&format!("name: {component}")),
            "{component} in dev status:\n{status}"
        );
    }
    assert!(links().contains("capstan-node"), "{}", links());

    // A pod that keeps running (mounts, a sandbox, a shim, a veth) when the plane stops.
    let kc = Kubeconfig::read_from(dir.path().join("kubeconfig"))?;
    let client: kube::Client = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await?
        .try_into()?;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sleeper"},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.37.0", "command": ["sleep", "3600"]}]},
    }))?;
    eventually(
        "the ServiceAccount admission to allow pods",
        Duration::from_secs(60),
        async || Ok(pods.create(&PostParams::default(), &pod).await.ok().map(drop)),
    )
    .await?;
    eventually("the pod Running", Duration::from_secs(90), async || {
        let p = pods.get("sleeper").await?;
        Ok((p.status.and_then(|s| s.phase).as_deref() == Some("Running")).then_some(()))
    })
    .await?;
    ensure!(
        !leftover_mounts(dir.path()).is_empty(),
        "a running pod mounts its root file system"
    );

    let down = capstan(&["dev", "down", "--dir", arg(dir.path())]);
    ensure!(
        down.status.success(),
        "dev down: {}",
        String::from_utf8_lossy(&down.stderr)
    );
    assert_eq!(
        leftover_mounts(dir.path()),
        Vec::<std::path::PathBuf>::new(),
        "mounts left"
    );
    assert!(!links().contains("capstan-"), "links left:\n{}", links());
    let after = chains();
    let added: Vec<&String> = after.difference(&before).collect();
    assert!(added.is_empty(), "packet-filter chains left: {added:?}");
    for (path, existed) in system.iter().zip(existed) {
        assert_eq!(Path::new(path).exists(), existed, "{path} left as it was");
    }
    assert!(!dir.path().join("node").exists(), "the node's dir is removed");
    let left = processes_under(dir.path());
    assert!(left.is_empty(), "processes left: {left:?}");
    let kubepods = std::fs::read_dir("/sys/fs/cgroup")?
        .flatten()
        .map(|e| e.path().join("kubepods"))
        .find(|p| p.exists());
    assert_eq!(kubepods, None, "the pods' cgroups are removed");
    let status = capstan(&["dev", "status", "--dir", arg(dir.path())]);
    assert!(!status.status.success(), "dev status after down");
    Ok(())
}
