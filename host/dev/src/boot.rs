//! Bringing a plane up, component by component, each waited for before the next.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::api;
use crate::binaries::Binaries;
use crate::certs::Pki;
use crate::components::{
    APISERVER, ETCD, KCM, KUBE_PROXY, KUBELET, KWOK, Layout, PortMap, SCHEDULER, http_get, listening,
    wait_until,
};
use crate::kubeconfig;
use crate::node;
use crate::process::{self, Lifetime, Proc};
use crate::starter::{Started, Starter};
use crate::{Plane, PlaneConfig};

/// A plane whose components all answered.
pub(crate) struct Booted {
    pub kubeconfig: PathBuf,
    pub server: String,
    pub ports: PortMap,
    pub procs: Vec<Proc>,
    pub started_in: Duration,
}

/// Files a previous plane left in a reused dir; each start is a fresh cluster.
const STATE: [&str; 7] = [
    "etcd",
    "node",
    "pki",
    "apiserver-certs",
    "kcm-certs",
    "scheduler-certs",
    "plane.json",
];

pub(crate) fn wipe_state(dir: &Path) -> Result<()> {
    for name in STATE {
        let p = dir.join(name);
        let res = if p.is_dir() {
            std::fs::remove_dir_all(&p)
        } else {
            std::fs::remove_file(&p)
        };
        match res {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(e).with_context(|| format!("removing {}", p.display()));
            }
            _ => {}
        }
    }
    Ok(())
}

fn resolve_ports(config: &PlaneConfig) -> Result<PortMap> {
    let want = config.ports;
    let pick = |p: u16, enabled: bool| -> Result<u16> {
        match (enabled, p) {
            (false, _) => Ok(0),
            (true, 0) => process::free_port(),
            (true, p) => Ok(p),
        }
    };
    Ok(PortMap {
        etcd_client: pick(want.etcd_client, true)?,
        etcd_peer: pick(want.etcd_peer, true)?,
        apiserver: pick(want.apiserver, true)?,
        controller_manager: pick(want.controller_manager, config.controller_manager)?,
        scheduler: pick(want.scheduler, config.scheduler)?,
        kwok: pick(want.kwok, config.kwok)?,
    })
}

/// Refuses ports the caller fixed that are taken, before anything starts.
fn check_fixed_ports(config: &PlaneConfig, ports: &PortMap, layout: &Layout<'_>) -> Result<()> {
    let fixed = [
        (ETCD, config.ports.etcd_client, ports.etcd_client),
        (ETCD, config.ports.etcd_peer, ports.etcd_peer),
        (APISERVER, config.ports.apiserver, ports.apiserver),
        (KCM, config.ports.controller_manager, ports.controller_manager),
        (SCHEDULER, config.ports.scheduler, ports.scheduler),
        (KWOK, config.ports.kwok, ports.kwok),
    ];
    for (name, asked, port) in fixed {
        if asked != 0 && port != 0 && process::port_in_use(port) {
            let what = format!("cannot start: port 127.0.0.1:{port} is already in use");
            return Err(process::pre_spawn_error(name, &layout.log(name), &what));
        }
    }
    Ok(())
}

/// Starts every enabled component in `dir`, waiting for each; on error nothing is left running.
pub(crate) async fn boot(
    config: &PlaneConfig,
    bins: &Binaries,
    dir: &Path,
    lifetime: Lifetime,
) -> Result<Booted> {
    let t0 = Instant::now();
    prepare(dir)?;
    let ports = resolve_ports(config)?;
    let pki = Pki::generate(&dir.join("pki"), node::REAL_NODE)?;
    let layout = Layout {
        dir,
        pki: &pki,
        ports,
        bins,
        sharded_watch: config.sharded_watch,
    };
    check_fixed_ports(config, &ports, &layout)?;
    let server = format!("https://127.0.0.1:{}", ports.apiserver);
    let kubeconfig = write_kubeconfigs(&layout, &server)?;
    let mut starter = Starter {
        layout: &layout,
        lifetime,
        timeout: config.start_timeout,
        started: Started::default(),
    };
    let etcd_port = ports.etcd_client;
    starter
        .start(ETCD, &bins.etcd, layout.etcd(), "GET /health", || async move {
            http_get(etcd_port, "/health")
                .await
                .is_some_and(|b| b.contains("\"health\":\"true\""))
        })
        .await?;
    let client = kubeconfig::client(&kubeconfig).await?;
    let apiserver = (&bins.kube_apiserver, layout.apiserver());
    starter
        .start(APISERVER, apiserver.0, apiserver.1, "GET /readyz", || {
            api::readyz(&client)
        })
        .await?;
    start_optional(&mut starter, config, &client).await?;
    if config.real_node {
        let kubeconfigs = node::Kubeconfigs {
            kubelet: layout.kubeconfig(KUBELET),
            kube_proxy: layout.kubeconfig(KUBE_PROXY),
        };
        node::start(&mut starter, &client, kubeconfigs).await?;
        // Stopping the plane now takes the node apart; the guard must not.
        starter.started.keep();
    }
    Ok(Booted {
        kubeconfig,
        server,
        ports,
        procs: starter.started.take(),
        started_in: t0.elapsed(),
    })
}

/// Make `dir` ready for a new plane: created, its old state wiped — unless a detached
/// plane still runs from it.
fn prepare(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    // Wiping state under a live detached plane would pull etcd's data out from under it.
    if let Some(state) = Plane::detached_state(dir)?
        && state.components.iter().any(|p| p.running())
    {
        anyhow::bail!(
            "a detached plane is running in {}; stop it first (Plane::stop_detached)",
            dir.display()
        );
    }
    // A node left by a plane that died here still has mounts under the dir.
    node::stop(dir);
    wipe_state(dir)
}

/// The admin kubeconfig (returned) and one per component that talks to the API server.
fn write_kubeconfigs(layout: &Layout, server: &str) -> Result<PathBuf> {
    let (dir, pki) = (layout.dir, layout.pki);
    let admin = dir.join("kubeconfig");
    kubeconfig::write(&admin, server, &pki.ca.cert, &pki.admin)?;
    for (name, certs) in [
        (KCM, &pki.controller_manager),
        (SCHEDULER, &pki.scheduler),
        (KWOK, &pki.kwok),
        (KUBELET, &pki.kubelet),
        (KUBE_PROXY, &pki.kube_proxy),
    ] {
        kubeconfig::write(&layout.kubeconfig(name), server, &pki.ca.cert, certs)?;
    }
    Ok(admin)
}

/// The components a plane may go without: controller-manager, scheduler, kwok's node.
async fn start_optional(
    starter: &mut Starter<'_>,
    config: &PlaneConfig,
    client: &kube::Client,
) -> Result<()> {
    let (layout, bins) = (starter.layout, starter.layout.bins);
    if config.controller_manager {
        let port = layout.ports.controller_manager;
        let kcm = (&bins.kube_controller_manager, layout.controller_manager());
        starter
            .start(KCM, kcm.0, kcm.1, "its port to listen", || listening(port))
            .await?;
        api::create_default_storage_class(client).await?;
    }
    if config.scheduler {
        let port = layout.ports.scheduler;
        let scheduler = (&bins.kube_scheduler, layout.scheduler());
        starter
            .start(SCHEDULER, scheduler.0, scheduler.1, "its port to listen", || {
                listening(port)
            })
            .await?;
    }
    if config.kwok {
        api::create_fake_node(client).await?;
        if config.real_node {
            node::taint_fake_node(client).await?;
        }
        let port = layout.ports.kwok;
        starter
            .start(KWOK, &bins.kwok, layout.kwok(), "GET /healthz", || async move {
                http_get(port, "/healthz").await.is_some()
            })
            .await?;
        let node_ready = format!("node {} to be Ready", api::FAKE_NODE);
        let kwok = starter.started.last_mut().expect("kwok was just started");
        wait_until(kwok, starter.timeout, &node_ready, || {
            api::node_ready(client, api::FAKE_NODE)
        })
        .await?;
    }
    Ok(())
}
