//! A real node beside the plane: containerd and runc run the containers, a CNI bridge
//! gives pods addresses, kubelet registers the node and kube-proxy makes Services work.
//! Started after the plane's other components and taken apart without a trace; one per
//! machine, since its links and packet-filter rules are the machine's.

mod iptables;
mod kubelet;
mod mirror;
mod network;
pub(crate) mod preflight;
mod record;
pub(crate) mod runtime;
mod teardown;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};

use crate::api::{self, FAKE_NODE};
use crate::binaries::Binaries;
use crate::components::{CONTAINERD, KUBE_PROXY, KUBELET, REGISTRY, http_get};
use crate::image;
use crate::process;
use crate::starter::Starter;

pub(crate) use record::Record;

/// The real node's name.
pub const REAL_NODE: &str = "capstan-node";

/// The node's dir inside a plane's dir.
pub(crate) fn node_dir(plane_dir: &Path) -> PathBuf {
    plane_dir.join("node")
}

/// Kubeconfig paths the plane wrote for the node's agents.
pub(crate) struct Kubeconfigs {
    pub kubelet: PathBuf,
    pub kube_proxy: PathBuf,
}

/// Starts containerd, kubelet and kube-proxy for the plane in `plane_dir`, each waited
/// for; returns once the node is Ready and Services are proxied.
pub(crate) async fn start(
    starter: &mut Starter<'_>,
    client: &kube::Client,
    kubeconfigs: Kubeconfigs,
) -> Result<()> {
    let layout = starter.layout;
    let machine = tokio::task::spawn_blocking(preflight::check).await??;
    let dir = node_dir(layout.dir);
    clear_stale(&dir)?;
    network::check_free(&machine.tools)?;
    std::fs::create_dir_all(&dir)?;
    Record::take(&dir, &machine.tools)?;
    let plane_dir = layout.dir.to_path_buf();
    starter.started.on_failure(move || stop(&plane_dir));
    network::set_up(&machine.tools, layout.ports.apiserver)?;

    let runtime = runtime::Runtime {
        dir: dir.join("containerd"),
    };
    let mirror = mirror::Mirror {
        dir: dir.join("mirror"),
        port: process::free_port()?,
    };
    runtime.write_config(&machine, &mirror::Mirror::hosts_dir(&mirror.dir))?;
    network::write_cni_config(&runtime.cni_conf_dir(), &runtime.cni_ipam_dir())?;
    let ctr = machine.tools.ctr.clone();
    let (rt, ctr_for_probe) = (runtime.clone(), ctr.clone());
    starter
        .start(
            CONTAINERD,
            &machine.tools.containerd,
            runtime.args(),
            "its socket to answer",
            move || {
                let (rt, ctr) = (rt.clone(), ctr_for_probe.clone());
                async move {
                    tokio::task::spawn_blocking(move || rt.answers(&ctr))
                        .await
                        .unwrap_or(false)
                }
            },
        )
        .await?;
    let images = load_base_images(&runtime, &ctr, layout.bins, &machine.tools.busybox, &dir)?;
    mirror.write(&images)?;
    let port = mirror.port;
    starter
        .start(
            REGISTRY,
            &layout.bins.registry,
            mirror.args(),
            "GET /v2/",
            move || async move { http_get(port, "/v2/").await.is_some() },
        )
        .await?;

    let agents = kubelet::Agents {
        dir: dir.clone(),
        runtime_socket: runtime.socket(),
        ca: layout.pki.ca.cert.clone(),
        kubelet_kubeconfig: kubeconfigs.kubelet,
        proxy_kubeconfig: kubeconfigs.kube_proxy,
        kubelet_port: process::free_port()?,
        kubelet_healthz: process::free_port()?,
        proxy_healthz: process::free_port()?,
        proxy_metrics: process::free_port()?,
    };
    let args = agents.kubelet(&machine)?;
    starter
        .start(
            KUBELET,
            &layout.bins.kubelet,
            args,
            &format!("node {REAL_NODE} to be Ready"),
            || api::node_ready(client, REAL_NODE),
        )
        .await?;
    let port = agents.proxy_healthz;
    starter
        .start(
            KUBE_PROXY,
            &layout.bins.kube_proxy,
            agents.kube_proxy()?,
            "GET /healthz",
            move || async move { http_get(port, "/healthz").await.is_some() },
        )
        .await?;
    Ok(())
}

/// Builds busybox and pause from this machine's binaries and imports them; their archives.
fn load_base_images(
    runtime: &runtime::Runtime,
    ctr: &Path,
    bins: &Binaries,
    busybox: &Path,
    dir: &Path,
) -> Result<Vec<PathBuf>> {
    let images = dir.join("images");
    let archives = [
        image::pause_image(&bins.pause, &images.join("pause.tar"))?,
        image::busybox_image(busybox, &images.join("busybox.tar"))?,
    ];
    for archive in &archives {
        runtime
            .import(ctr, &archive.path)
            .with_context(|| format!("importing {} into the node", archive.names.join(", ")))?;
    }
    Ok(archives.into_iter().map(|a| a.path).collect())
}

/// Imports an image archive into the node of the plane in `plane_dir`.
pub fn load_image(plane_dir: &Path, archive: &Path) -> Result<()> {
    let dir = node_dir(plane_dir);
    let Some(record) = Record::load()?.filter(|r| r.dir == dir) else {
        bail!(
            "no real node runs from {}; start one with `capstan dev up --real-node`",
            plane_dir.display()
        );
    };
    let runtime = runtime::Runtime {
        dir: dir.join("containerd"),
    };
    runtime.import(&record.tools.ctr, archive).map(drop)
}

/// A node recorded on this machine whose processes are gone is taken apart first; one
/// that still runs from another plane is not ours to touch.
fn clear_stale(dir: &Path) -> Result<()> {
    let Some(record) = Record::load()? else {
        return Ok(());
    };
    if record.dir != dir && teardown::runs_from(&record.dir) {
        bail!(
            "a real node already runs on this machine from {}; stop it first (capstan dev down --dir {})",
            record.dir.display(),
            record.dir.parent().unwrap_or(&record.dir).display()
        );
    }
    stop_record(&record);
    Ok(())
}

fn stop_record(record: &Record) {
    teardown::tear_down(record);
    Record::remove();
}

/// Takes apart the node of the plane in `plane_dir`, if this machine's record names it.
/// Idempotent; the plane's other processes may be gone already.
pub(crate) fn stop(plane_dir: &Path) {
    let dir = node_dir(plane_dir);
    match Record::load() {
        Ok(Some(record)) if record.dir == dir => stop_record(&record),
        Ok(_) => {}
        Err(e) => eprintln!("capstan dev: {e:#}"),
    }
}

/// Mounts left at or under the node's dir and the system paths it may create.
pub fn leftover_mounts(plane_dir: &Path) -> Vec<PathBuf> {
    let mut roots = vec![node_dir(plane_dir)];
    roots.extend(["/run/containerd", "/run/netns", "/var/lib/kubelet"].map(PathBuf::from));
    teardown::mounted(&roots)
}

/// Keeps pods off kwok's fake node: they are meant for the real one.
pub(crate) async fn taint_fake_node(client: &kube::Client) -> Result<()> {
    let patch = serde_json::json!({
        "spec": { "taints": [{ "key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule" }] }
    });
    Api::<Node>::all(client.clone())
        .patch(FAKE_NODE, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .context("tainting kwok's node")?;
    Ok(())
}
