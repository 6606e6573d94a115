//! Bringing a plane up, component by component, each waited for before the next.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::dev::api;
use crate::dev::binaries::Binaries;
use crate::dev::certs::Pki;
use crate::dev::components::{
    APISERVER, ETCD, KCM, KWOK, Layout, PortMap, SCHEDULER, http_get, listening, wait_until,
};
use crate::dev::kubeconfig;
use crate::dev::process::{self, Lifetime, Proc};
use crate::dev::{Plane, PlaneConfig};

/// A plane whose components all answered.
pub(crate) struct Booted {
    pub kubeconfig: PathBuf,
    pub server: String,
    pub ports: PortMap,
    pub procs: Vec<Proc>,
    pub started_in: Duration,
}

/// Kills what was started so far if boot fails or its future is dropped half-way.
struct Started(Vec<Proc>);

impl Drop for Started {
    fn drop(&mut self) {
        for p in self.0.iter_mut().rev() {
            p.kill(Duration::ZERO);
        }
    }
}

/// Files a previous plane left in a reused dir; each start is a fresh cluster.
const STATE: [&str; 6] = [
    "etcd",
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

/// Whether a start failed only because an auto-picked port was taken meanwhile.
pub(crate) fn is_port_clash(err: &anyhow::Error) -> bool {
    format!("{err:#}").contains("address already in use")
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
    wipe_state(dir)?;
    let ports = resolve_ports(config)?;
    let pki = Pki::generate(&dir.join("pki"))?;
    let layout = Layout {
        dir,
        pki: &pki,
        ports,
        bins,
    };
    check_fixed_ports(config, &ports, &layout)?;

    let server = format!("https://127.0.0.1:{}", ports.apiserver);
    let admin_kc = dir.join("kubeconfig");
    kubeconfig::write(&admin_kc, &server, &pki.ca.cert, &pki.admin)?;
    for (name, certs) in [
        (KCM, &pki.controller_manager),
        (SCHEDULER, &pki.scheduler),
        (KWOK, &pki.kwok),
    ] {
        kubeconfig::write(&layout.kubeconfig(name), &server, &pki.ca.cert, certs)?;
    }

    let timeout = config.start_timeout;
    let mut started = Started(Vec::new());
    let spawn = |name: &'static str, program: &Path, args: Vec<String>| {
        process::spawn(name, program, args, dir, layout.log(name), lifetime)
    };

    started.0.push(spawn(ETCD, &bins.etcd, layout.etcd())?);
    let etcd_port = ports.etcd_client;
    wait_until(
        started.0.last_mut().unwrap(),
        timeout,
        "GET /health",
        || async move {
            http_get(etcd_port, "/health")
                .await
                .is_some_and(|b| b.contains("\"health\":\"true\""))
        },
    )
    .await?;

    started
        .0
        .push(spawn(APISERVER, &bins.kube_apiserver, layout.apiserver())?);
    let client = kubeconfig::client(&admin_kc).await?;
    wait_until(started.0.last_mut().unwrap(), timeout, "GET /readyz", || {
        api::readyz(&client)
    })
    .await?;

    if config.controller_manager {
        started.0.push(spawn(
            KCM,
            &bins.kube_controller_manager,
            layout.controller_manager(),
        )?);
        let port = ports.controller_manager;
        wait_until(
            started.0.last_mut().unwrap(),
            timeout,
            "its port to listen",
            || listening(port),
        )
        .await?;
    }
    if config.scheduler {
        started
            .0
            .push(spawn(SCHEDULER, &bins.kube_scheduler, layout.scheduler())?);
        let port = ports.scheduler;
        wait_until(
            started.0.last_mut().unwrap(),
            timeout,
            "its port to listen",
            || listening(port),
        )
        .await?;
    }
    if config.kwok {
        api::create_fake_node(&client).await?;
        started.0.push(spawn(KWOK, &bins.kwok, layout.kwok())?);
        let port = ports.kwok;
        let kwok = started.0.last_mut().unwrap();
        wait_until(kwok, timeout, "GET /healthz", || async move {
            http_get(port, "/healthz").await.is_some()
        })
        .await?;
        let node_ready = format!("node {} to be Ready", api::FAKE_NODE);
        wait_until(kwok, timeout, &node_ready, || api::fake_node_ready(&client)).await?;
    }

    Ok(Booted {
        kubeconfig: admin_kc,
        server,
        ports,
        procs: std::mem::take(&mut started.0),
        started_in: t0.elapsed(),
    })
}
