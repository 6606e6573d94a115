//! Capstan in a cluster for real: the local plane with a real node (containerd, runc, CNI,
//! kubelet, kube-proxy), the host's own image built offline and loaded into it, the chart
//! installed unchanged. Echo's Job pods really run and print; the host runs as a pod under
//! the restricted security context; hot reload, leader failover, Services and uninstall
//! are seen from the cluster's side.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use capstan::dev::Plane;
use capstan::dev::image::{build_binary, capstan_image};
use capstan_tests::host::{Host, echo_resource, eventually, install_plugin_crd, pod_of};
use capstan_tests::plugin;
use capstan_tests::toolchains::built;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, LogParams, PostParams};
use serde_json::json;
use tokio::sync::{Mutex, OnceCell};

use capstan_tests::helm::{chart, ci_values, helm_ok, restricted_namespace, wasm_from, with_custom_section};

/// Tests take turns: one node, two cores.
static TURN: Mutex<()> = Mutex::const_new(());

/// The plane with its real node, and Capstan's image loaded into it.
async fn plane() -> Result<&'static Plane> {
    static IMAGE: OnceCell<()> = OnceCell::const_new();
    let plane = Plane::shared_real_node().await?;
    IMAGE
        .get_or_try_init(|| async {
            let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("node-image");
            let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
                .parent()
                .unwrap()
                .to_path_buf();
            // The Dockerfile's binary (no default features); the dev profile, because which
            // libraries it needs does not depend on optimisation and a release build costs
            // CI minutes. It is stripped, as the Dockerfile's is.
            let built = tokio::task::spawn_blocking(move || -> Result<PathBuf> {
                let binary = build_binary(&workspace, "dev", &dir)?;
                let archive = capstan_image(&binary, &dir.join("capstan.tar"))?;
                Ok(archive.path)
            })
            .await??;
            plane.load_image(&built)
        })
        .await?;
    Ok(plane)
}

/// `helm install|upgrade` arguments: one host watching every namespace, echo from the
/// chart's ConfigMap, the image only from the node (never pulled).
fn install_args<'a>(ns: &'a str, values: &'a str, echo: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "-n",
        ns,
        "-f",
        values,
        "--set-file",
        echo,
        "--set",
        "image.pullPolicy=Never",
        "--set",
        "metrics.serviceMonitor.enabled=false",
        "--wait",
        "--timeout",
        "120s",
    ];
    args.extend(extra);
    args
}

/// Installs the chart into a new restricted namespace `<prefix>-…` with `extra` values;
/// returns it and a namespace of its own for Echos (their Jobs run as root busybox).
async fn installed(plane: &Plane, prefix: &str, extra: &[&str]) -> Result<(String, String)> {
    let ns = restricted_namespace(plane, prefix).await?;
    let apps = plane.namespace(&format!("{prefix}-apps")).await?;
    let values = ci_values("single-values.yaml");
    let echo = wasm_from("echo", &plugin("echo"));
    let chart = chart();
    let mut args = vec!["install", "capstan", chart.to_str().unwrap()];
    args.extend(install_args(&ns, &values, &echo, extra));
    helm_ok(&args, Some(plane.kubeconfig()))?;
    Ok((ns, apps))
}

/// The release's `count` pods, once each is Ready.
async fn ready_pods(admin: &kube::Client, ns: &str, count: usize) -> Result<Vec<Pod>> {
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    eventually(
        &format!("{count} Ready host pods"),
        Duration::from_secs(120),
        async || {
            let list = pods
                .list(&ListParams::default().labels("app.kubernetes.io/name=capstan"))
                .await?
                .items;
            let ready: Vec<Pod> = list
                .into_iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .filter(|p| {
                    p.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
                })
                .collect();
            Ok((ready.len() == count).then_some(ready))
        },
    )
    .await
}

/// The pid (on this machine) of the container process `comm` of pod `uid`, found by the
/// pod's cgroup: what the runtime really started, not what the API says.
fn container_process(uid: &str, comm: &str) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let cgroup = std::fs::read_to_string(e.path().join("cgroup")).ok()?;
        let name = std::fs::read_to_string(e.path().join("comm")).ok()?;
        (cgroup.contains(uid) && name.trim() == comm).then_some(pid)
    })
}

/// `(real uid, whether / is mounted read-only)` of a process.
fn identity(pid: u32) -> Result<(u32, bool)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .context("no Uid line")?;
    let mounts = std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))?;
    let root = mounts
        .lines()
        .find(|l| l.split_whitespace().nth(4) == Some("/"))
        .context("no root mount")?;
    let options = root.split_whitespace().nth(5).unwrap_or_default();
    Ok((uid, options.split(',').any(|o| o == "ro")))
}

async fn pod_log(admin: &kube::Client, ns: &str, pod: &str) -> Result<String> {
    Ok(Api::<Pod>::namespaced(admin.clone(), ns)
        .logs(pod, &LogParams::default())
        .await?)
}

/// Creates an Echo and waits for its Job's pod to have really run; returns the pod's log.
async fn echo_runs(admin: &kube::Client, ns: &str, name: &str, message: &str) -> Result<String> {
    let echoes: Api<DynamicObject> = Api::namespaced_with(admin.clone(), ns, &echo_resource());
    let echo: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "capstan.dev/v1alpha1", "kind": "Echo",
        "metadata": {"name": name}, "spec": {"message": message},
    }))?;
    echoes.create(&PostParams::default(), &echo).await?;
    let job_name = eventually(
        &format!("Echo {ns}/{name} Succeeded"),
        Duration::from_secs(120),
        async || {
            let e = echoes.get(name).await?;
            Ok((e.data["status"]["phase"] == "Succeeded")
                .then(|| e.data["status"]["jobName"].as_str().map(str::to_string))
                .flatten())
        },
    )
    .await?;
    let job = Api::<Job>::namespaced(admin.clone(), ns).get(&job_name).await?;
    ensure!(
        job.status.and_then(|s| s.succeeded) == Some(1),
        "Job {job_name} did not succeed"
    );
    let pods = Api::<Pod>::namespaced(admin.clone(), ns)
        .list(&ListParams::default().labels(&format!("job-name={job_name}")))
        .await?;
    let pod = pods.items.first().context("the Job's pod")?;
    ensure!(
        pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(capstan::dev::node::REAL_NODE),
        "the Job's pod ran on {:?}",
        pod.spec.as_ref().and_then(|s| s.node_name.clone())
    );
    pod_log(admin, ns, pod.metadata.name.as_deref().unwrap()).await
}

fn release_uninstalled(ns: &str, kubeconfig: &Path) -> Result<()> {
    helm_ok(
        &["uninstall", "capstan", "-n", ns, "--wait", "--timeout", "60s"],
        Some(kubeconfig),
    )
    .map(drop)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_runs_the_host_from_its_own_image_and_echo_jobs_really_run() -> Result<()> {
    let _turn = TURN.lock().await;
    let plane = plane().await?;
    let admin = plane.client().await?;
    let kubeconfig = Some(plane.kubeconfig());
    let hot = [
        "--set",
        "hotReload.enabled=true",
        "--set",
        "hotReload.interval=1s",
    ];
    let (ns, apps) = installed(plane, "node", &hot).await?;

    // Ready: the kubelet ran the pod's /readyz probe against the host in the container.
    let pod = ready_pods(&admin, &ns, 1).await?.remove(0);
    let pod_name = pod.metadata.name.clone().unwrap();
    let uid = pod.metadata.uid.clone().unwrap();
    let pid = container_process(&uid, "capstan").context("the host's container process on this machine")?;
    let (user, read_only) = identity(pid)?;
    assert_eq!(
        user, 65532,
        "the runtime runs the host as the chart's non-root user"
    );
    assert!(
        read_only,
        "the runtime mounts the host's root file system read-only"
    );

    // What a user sees first: `kubectl logs` of the host at the default level.
    let log = pod_log(&admin, &ns, &pod_name).await?;
    for line in [
        "serving metrics",
        "serving health probes",
        "plugin loaded",
        "caches synced; ready",
    ] {
        assert!(log.contains(line), "`{line}` in the pod's log:\n{log}");
    }

    // An Echo's Job pod runs on the real node and prints the message verbatim: no shell
    // between the message and echo, whatever it holds.
    let message = "Grüße, 世界 — $HOME `id` $(rm -rf /) ; echo 'x' \"y\" | cat > /tmp/z & \\n *";
    let printed = echo_runs(&admin, &apps, "verbatim", message).await?;
    assert_eq!(printed, format!("{message}\n"));

    // The metrics Service answers on its ClusterIP, through kube-proxy's rules.
    let service = Api::<Service>::namespaced(admin.clone(), &ns)
        .get("capstan-metrics")
        .await?;
    let spec = service.spec.context("a Service spec")?;
    let address = format!(
        "{}:{}",
        spec.cluster_ip.context("a ClusterIP")?,
        spec.ports.unwrap()[0].port
    );
    let metrics = eventually("the metrics Service", Duration::from_secs(30), async || {
        Ok(capstan_tests::host::http_get(&address, "/metrics")
            .ok()
            .map(|(_, body)| body))
    })
    .await?;
    // Its series exist from the start at 0; the Echo above was reconciled, so it counts.
    let reconciled = capstan_tests::host::sample(
        &metrics,
        r#"controller_runtime_reconcile_total{controller="echo",result="success"}"#,
    );
    assert!(reconciled >= 1.0, "{metrics}");

    // `helm upgrade` with a new plugin version: the ConfigMap changes, kubelet projects it
    // into the running pod, and the host swaps it in without a restart.
    let (values, chart, echo_file) = (ci_values("single-values.yaml"), chart(), plugin("echo"));
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("node-upgrade");
    std::fs::create_dir_all(&dir)?;
    let v2 = dir.join("echo-v2.wasm");
    std::fs::write(
        &v2,
        with_custom_section(&std::fs::read(&echo_file)?, "capstan-test", b"v2"),
    )?;
    let echo_v2 = wasm_from("echo", &v2);
    let mut upgrade = vec!["upgrade", "capstan", chart.to_str().unwrap()];
    upgrade.extend(install_args(&ns, &values, &echo_v2, &hot));
    helm_ok(&upgrade, kubeconfig)?;
    eventually(
        "the host in the pod to reload echo",
        Duration::from_secs(120),
        async || {
            Ok(pod_log(&admin, &ns, &pod_name)
                .await?
                .contains("plugin reloaded")
                .then_some(()))
        },
    )
    .await?;
    let after = Api::<Pod>::namespaced(admin.clone(), &ns).get(&pod_name).await?;
    assert_eq!(after.metadata.uid.as_deref(), Some(uid.as_str()), "same pod");
    let restarts = after
        .status
        .and_then(|s| s.container_statuses)
        .unwrap_or_default();
    assert!(
        restarts.iter().all(|c| c.restart_count == 0),
        "no restart: {restarts:?}"
    );
    assert_eq!(
        echo_runs(&admin, &apps, "after-reload", "reloaded").await?,
        "reloaded\n"
    );

    // Uninstall leaves nothing of the release; the CRDs stay, as helm keeps `crds/`.
    release_uninstalled(&ns, plane.kubeconfig())?;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);
    eventually("the host pod gone", Duration::from_secs(60), async || {
        let left = pods
            .list(&ListParams::default().labels("app.kubernetes.io/name=capstan"))
            .await?;
        Ok(left.items.is_empty().then_some(()))
    })
    .await?;
    let instance = "app.kubernetes.io/instance=capstan";
    let roles = Api::<ClusterRole>::all(admin.clone())
        .list(&ListParams::default().labels(instance))
        .await?;
    let bindings = Api::<ClusterRoleBinding>::all(admin.clone())
        .list(&ListParams::default().labels(instance))
        .await?;
    let ours = |name: &Option<String>| name.as_deref().is_some_and(|n| n.contains(&ns));
    assert!(
        !roles.items.iter().any(|r| ours(&r.metadata.name)),
        "ClusterRoles left"
    );
    assert!(
        !bindings.items.iter().any(|r| ours(&r.metadata.name)),
        "ClusterRoleBindings left"
    );
    let crds: Api<CustomResourceDefinition> = Api::all(admin.clone());
    assert!(
        crds.get_opt("echoes.capstan.dev").await?.is_some(),
        "helm keeps the CRDs"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standby_pod_takes_over_when_the_leader_pod_is_deleted() -> Result<()> {
    let _turn = TURN.lock().await;
    let plane = plane().await?;
    let admin = plane.client().await?;
    let ha = [
        "--set",
        "replicas=2",
        "--set",
        "leaderElection.enabled=true",
        "--set",
        "leaderElection.leaseDuration=6s",
        "--set",
        "leaderElection.renewDeadline=4s",
        "--set",
        "leaderElection.retryPeriod=1s",
    ];
    let (ns, apps) = installed(plane, "node-ha", &ha).await?;
    ready_pods(&admin, &ns, 2).await?;
    let leases: Api<Lease> = Api::namespaced(admin.clone(), &ns);
    let holder = async || -> Result<Option<String>> {
        let lease = leases.get_opt("capstan").await?;
        // The identity is the pod's name and a suffix of its process (`pod_of`).
        Ok(lease
            .and_then(|l| l.spec?.holder_identity)
            .filter(|h| !h.is_empty())
            .map(|h| pod_of(&h).to_string()))
    };
    let leader = eventually("a leader", Duration::from_secs(60), async || holder().await).await?;
    assert_eq!(echo_runs(&admin, &apps, "before", "before").await?, "before\n");

    let deleted = Instant::now();
    Api::<Pod>::namespaced(admin.clone(), &ns)
        .delete(&leader, &DeleteParams::default())
        .await?;
    let next = eventually("another leader", Duration::from_secs(60), async || {
        Ok(holder().await?.filter(|h| *h != leader))
    })
    .await?;
    let takeover = deleted.elapsed();
    assert_eq!(
        echo_runs(&admin, &apps, "after", "after failover").await?,
        "after failover\n"
    );
    let converged = deleted.elapsed();
    println!(
        "takeover: {next} leads {:.1} s after leader pod {leader} was deleted; a new Echo's Job pod ran and Succeeded {:.1} s after",
        takeover.as_secs_f64(),
        converged.as_secs_f64()
    );
    release_uninstalled(&ns, plane.kubeconfig())
}

/// Fails loudly, naming the piece, when the machine cannot run a node at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_is_ready_and_kwoks_node_takes_no_pods() -> Result<()> {
    let _turn = TURN.lock().await;
    let plane = Plane::shared_real_node().await?;
    let admin = plane.client().await?;
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(admin.clone());
    let node = nodes.get(capstan::dev::node::REAL_NODE).await?;
    let addresses = node.status.and_then(|s| s.addresses).unwrap_or_default();
    let internal = addresses
        .iter()
        .find(|a| a.type_ == "InternalIP")
        .context("an InternalIP")?;
    if internal.address.starts_with("127.") {
        bail!("the node's InternalIP is loopback: the API server could not reach its kubelet");
    }
    let fake = nodes.get(capstan::dev::FAKE_NODE).await?;
    let taints = fake.spec.and_then(|s| s.taints).unwrap_or_default();
    assert!(
        taints.iter().any(|t| t.effect == "NoSchedule"),
        "kwok's node is tainted: {taints:?}"
    );
    Ok(())
}

/// A pod that always pulls its image (`image: busybox`, tag `latest`) pulls it from the
/// node's image mirror, offline, and runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_that_always_pulls_runs_from_the_nodes_image_mirror() -> Result<()> {
    let _turn = TURN.lock().await;
    let plane = Plane::shared_real_node().await?;
    let admin = plane.client().await?;
    let ns = plane.namespace("mirror").await?;
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "pulls"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "busybox", "imagePullPolicy": "Always",
                            "command": ["sh", "-c", "echo pulled"]}],
        },
    }))?;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);
    pods.create(&PostParams::default(), &pod).await?;
    let phase = eventually("the pod to finish", Duration::from_secs(120), async || {
        let phase = pods.get("pulls").await?.status.and_then(|s| s.phase);
        Ok(phase.filter(|p| p == "Succeeded" || p == "Failed"))
    })
    .await?;
    let status = pods.get("pulls").await?.status;
    assert_eq!(phase, "Succeeded", "{status:?}");
    assert_eq!(pod_log(&admin, &ns, "pulls").await?.trim(), "pulled");
    Ok(())
}

/// How long a debug host may take to load Echo in Python or JavaScript that this test
/// process built: the component (19 and 12 MB, an interpreter inside) is compiled with
/// Cranelift (builds are not byte-reproducible, so no other process's entry matches).
/// Measured with `capstan inspect` of the debug build on an empty cache, beside the faults
/// test's three replicas on 2 cores: Python 76 s of CPU in 130 s, JS 59 s of CPU in 104 s. That compile is where the two minutes the Echo was given went.
/// With one core kept busy as well, the compile may get half of what it got then: 360 s.
const COLD_LOAD: Duration = Duration::from_secs(360);

/// Echo in Python and in JavaScript, run by `capstan run` on this machine against the
/// plane (their components are too large for the chart's ConfigMap): each Echo's Job
/// really runs on the node and prints its message, as the Rust Echo's does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_in_python_and_javascript_run_jobs_on_the_real_node() -> Result<()> {
    let _turn = TURN.lock().await;
    let plane = Plane::shared_real_node().await?;
    install_plugin_crd(plane, "echo").await?;
    let admin = plane.client().await?;
    for (lang, project) in [("python", "plugins/echo-py"), ("js", "plugins/echo-js")] {
        let wasm = tokio::task::spawn_blocking(move || built(project)).await?;
        let ns = plane.namespace(&format!("polyglot-{lang}")).await?;
        let dir = tempfile::tempdir()?;
        let plugins = dir.path().join("plugins");
        std::fs::create_dir_all(&plugins)?;
        std::fs::copy(&wasm, plugins.join("echo.wasm"))?;
        let args = ["--plugins", plugins.to_str().unwrap(), "--namespace", &ns];
        let mut host = Host::start(plane, &args, &dir.path().join("host.log"), &[])?;
        // The Echo's two minutes start once the host runs it: before that it compiles the
        // component, cold (see COLD_LOAD).
        host.ready(COLD_LOAD).await?;
        let message = format!("hello from {lang}");
        let log = echo_runs(&admin, &ns, "hello", &message).await;
        let log =
            log.with_context(|| std::fs::read_to_string(dir.path().join("host.log")).unwrap_or_default())?;
        ensure!(log.trim() == message, "{lang}: the pod printed {log:?}");
    }
    Ok(())
}
