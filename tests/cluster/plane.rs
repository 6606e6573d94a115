//! The local control plane, proven end to end: CRDs, Jobs through scheduler and kwok,
//! garbage collection, planes side by side, teardown and start-up errors.
//! Timings and memory are printed; run with `--nocapture` to see them.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use capstan::dev::{Binaries, FAKE_NODE, Plane, PlaneConfig};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, PersistentVolumeClaim, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
mod common;

use common::{
    HEAVY, HELPER, echo_crd, echo_job, eventually, gone, log_of, processes_mentioning, run_helper, shared,
};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, PostParams};

#[tokio::test]
async fn crd_is_established_and_custom_objects_round_trip() -> Result<()> {
    let plane = shared().await;
    let crd = echo_crd();
    plane.install_crds(std::slice::from_ref(&crd)).await?;
    // Installing again (e.g. from another test) must be a no-op, not a conflict.
    plane.install_crds(std::slice::from_ref(&crd)).await?;

    let client = plane.client().await?;
    let installed = Api::<CustomResourceDefinition>::all(client.clone())
        .get("echoes.capstan.dev")
        .await?;
    let established = installed.status.and_then(|s| s.conditions).unwrap_or_default();
    assert!(
        established
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
    );

    let ns = plane.namespace("crd").await?;
    let gvk = GroupVersionKind::gvk("capstan.dev", "v1alpha1", "Echo");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "echoes");
    let api: Api<DynamicObject> = Api::namespaced_with(client, &ns, &ar);
    let mut echo = DynamicObject::new("hello", &ar);
    echo.data = serde_json::json!({ "spec": { "message": "hello, plane" } });
    api.create(&PostParams::default(), &echo).await?;

    let back = api.get("hello").await?;
    assert_eq!(back.data["spec"]["message"], "hello, plane");
    assert_eq!(back.metadata.namespace.as_deref(), Some(ns.as_str()));
    assert!(back.metadata.uid.is_some());
    // The schema is enforced: the apiserver really serves this CRD, not a stub.
    let mut bad = DynamicObject::new("bad", &ar);
    bad.data = serde_json::json!({ "spec": {} });
    let err = api.create(&PostParams::default(), &bad).await.unwrap_err();
    assert!(matches!(&err, kube::Error::Api(s) if s.code == 422), "{err}");
    Ok(())
}

#[tokio::test]
async fn job_runs_to_completion_on_the_fake_node() -> Result<()> {
    let plane = shared().await;
    let t0 = Instant::now();
    let ns = plane.namespace("job").await?;
    eprintln!("job: namespace ready in {:.1} s", t0.elapsed().as_secs_f64());
    let client = plane.client().await?;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let t0 = Instant::now();
    jobs.create(&PostParams::default(), &echo_job("hi")).await?;
    let done = eventually("Job hi to complete", Duration::from_secs(180), || async {
        let job = jobs.get("hi").await?;
        let conds = job
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default();
        if conds.iter().any(|c| c.type_ == "Failed" && c.status == "True") {
            bail!("Job failed: {:?}", job.status);
        }
        Ok(conds
            .iter()
            .any(|c| c.type_ == "Complete" && c.status == "True")
            .then_some(job))
    })
    .await?;
    eprintln!("job: Complete in {:.1} s", t0.elapsed().as_secs_f64());
    assert_eq!(done.status.as_ref().and_then(|s| s.succeeded), Some(1));

    let pods: Api<Pod> = Api::namespaced(client, &ns);
    let list = pods.list(&ListParams::default().labels("job-name=hi")).await?;
    assert_eq!(list.items.len(), 1);
    let pod = &list.items[0];
    let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
    // The scheduler placed it; on our own plane the only node is kwok's.
    if plane.is_external() {
        assert!(node.is_some(), "pod never scheduled");
    } else {
        assert_eq!(node, Some(FAKE_NODE));
    }
    assert_eq!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded")
    );
    Ok(())
}

#[tokio::test]
async fn a_claim_of_the_default_storage_class_binds_and_its_pod_runs() -> Result<()> {
    let plane = shared().await;
    let ns = plane.namespace("claim").await?;
    let client = plane.client().await?;
    let claim: PersistentVolumeClaim = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }))?;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    claims.create(&PostParams::default(), &claim).await?;
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "uses-data"},
        "spec": {
            "containers": [{"name": "c", "image": "busybox", "volumeMounts": [{"name": "d", "mountPath": "/d"}]}],
            "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}],
        },
    }))?;
    let pods: Api<Pod> = Api::namespaced(client, &ns);
    pods.create(&PostParams::default(), &pod).await?;
    let phase = |p: &Pod| p.status.as_ref().and_then(|s| s.phase.clone());
    eventually(
        "the claim bound and its pod running",
        Duration::from_secs(120),
        || async {
            let bound = claims.get("data").await?.status.and_then(|s| s.phase);
            let running = phase(&pods.get("uses-data").await?);
            Ok((bound.as_deref() == Some("Bound") && running.as_deref() == Some("Running")).then_some(()))
        },
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn owned_configmap_is_garbage_collected() -> Result<()> {
    let plane = shared().await;
    let ns = plane.namespace("gc").await?;
    let cms: Api<ConfigMap> = Api::namespaced(plane.client().await?, &ns);
    let mut owner = ConfigMap::default();
    owner.metadata.name = Some("owner".into());
    let owner = cms.create(&PostParams::default(), &owner).await?;
    let child: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": "child",
            "ownerReferences": [{
                "apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
                "uid": owner.metadata.uid.clone().context("owner uid")?,
                "blockOwnerDeletion": true, "controller": true,
            }],
        },
        "data": { "k": "v" },
    }))?;
    cms.create(&PostParams::default(), &child).await?;
    // The collector has had its chance to (wrongly) delete a child whose owner still
    // exists once it has collected an orphan created after that child: a ConfigMap whose
    // owner never existed.
    let orphan: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": "orphan",
            "ownerReferences": [{
                "apiVersion": "v1", "kind": "ConfigMap", "name": "never-existed",
                "uid": "00000000-0000-0000-0000-000000000001",
            }],
        },
    }))?;
    cms.create(&PostParams::default(), &orphan).await?;
    eventually("the orphan to be collected", Duration::from_secs(90), || async {
        Ok(cms.get_opt("orphan").await?.is_none().then_some(()))
    })
    .await?;
    assert!(
        cms.get_opt("child").await?.is_some(),
        "child deleted while its owner exists"
    );

    cms.delete("owner", &DeleteParams::background()).await?;
    let t0 = Instant::now();
    eventually("child to be collected", Duration::from_secs(90), || async {
        Ok(cms.get_opt("child").await?.is_none().then_some(()))
    })
    .await?;
    eprintln!(
        "gc: child collected {:.1} s after the owner's delete",
        t0.elapsed().as_secs_f64()
    );
    assert!(cms.get_opt("owner").await?.is_none());
    Ok(())
}

#[tokio::test]
async fn two_planes_run_side_by_side() -> Result<()> {
    let first = shared().await;
    let _turn = HEAVY.lock().await;
    let second = Plane::start(PlaneConfig::api_only()).await?;
    eprintln!(
        "api-only plane: started in {:.1} s, RSS {} MiB",
        second.startup_time().unwrap_or_default().as_secs_f64(),
        second.rss_bytes() / (1 << 20)
    );
    assert_eq!(second.pids().len(), 2, "api-only runs etcd and kube-apiserver");
    if !first.is_external() {
        assert_ne!(first.server(), second.server());
    }
    let (a, b) = (first.client().await?, second.client().await?);
    assert_eq!(
        a.apiserver_version().await?.git_version,
        b.apiserver_version().await?.git_version
    );
    // Separate etcds: a namespace made in one plane does not exist in the other.
    let ns = second.namespace("second").await?;
    assert!(Api::<Namespace>::all(b).get_opt(&ns).await?.is_some());
    assert!(Api::<Namespace>::all(a).get_opt(&ns).await?.is_none());
    Ok(())
}

#[tokio::test]
async fn dropping_a_plane_leaves_no_process_or_dir() -> Result<()> {
    let _turn = HEAVY.lock().await;
    let plane = Plane::start(PlaneConfig::default()).await?;
    eprintln!(
        "full plane: started in {:.1} s, RSS {} MiB",
        plane.startup_time().unwrap_or_default().as_secs_f64(),
        plane.rss_bytes() / (1 << 20)
    );
    let pids = plane.pids();
    let rss: Vec<String> = pids
        .iter()
        .map(|(name, pid)| {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            let kb = status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .unwrap_or("?")
                .trim();
            format!("{name} {kb}")
        })
        .collect();
    eprintln!("full plane RSS: {}", rss.join(", "));
    let names: Vec<_> = pids.iter().map(|(n, _)| *n).collect();
    assert_eq!(
        names,
        [
            "etcd",
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
            "kwok"
        ]
    );
    let dir = plane.dir().context("plane dir")?.to_path_buf();
    assert_eq!(processes_mentioning(&dir).len(), pids.len());
    for (_, pid) in &pids {
        assert!(!gone(*pid));
    }
    let t0 = Instant::now();
    drop(plane);
    eprintln!("full plane: dropped in {} ms", t0.elapsed().as_millis());
    for (name, pid) in pids {
        assert!(gone(pid), "{name} (pid {pid}) survived the drop");
    }
    assert!(processes_mentioning(&dir).is_empty());
    assert!(!dir.exists(), "temp dir {} left behind", dir.display());
    Ok(())
}

#[tokio::test]
async fn occupied_port_is_reported_with_component_and_log() -> Result<()> {
    let taken = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = taken.local_addr()?.port();
    let mut config = PlaneConfig::api_only();
    config.ports.apiserver = port;
    let err = format!("{:#}", Plane::start(config).await.unwrap_err());
    eprintln!("error: {err}");
    assert!(!err.contains('\n'), "one line: {err}");
    assert!(err.starts_with("kube-apiserver "), "{err}");
    assert!(
        err.contains(&format!("127.0.0.1:{port} is already in use")),
        "{err}"
    );
    let (log, dir) = log_of(&err);
    assert!(log.ends_with("kube-apiserver.log"));
    assert!(std::fs::read_to_string(&log)?.contains("already in use"));
    // Fixed ports are checked before anything starts: nothing may be left running.
    assert!(
        processes_mentioning(&dir).is_empty(),
        "processes left from {}",
        dir.display()
    );
    let _ = std::fs::remove_dir_all(dir);
    Ok(())
}

#[tokio::test]
async fn missing_or_crashing_binary_is_reported_with_component_and_log() -> Result<()> {
    let real = Binaries::ensure()?;

    let mut config = PlaneConfig::api_only();
    config.binaries = Some(Binaries {
        kube_apiserver: "/nonexistent/kube-apiserver".into(),
        ..real.clone()
    });
    let err = format!("{:#}", Plane::start(config).await.unwrap_err());
    eprintln!("error: {err}");
    assert!(
        err.starts_with("kube-apiserver cannot start: binary not found at /nonexistent/kube-apiserver"),
        "{err}"
    );
    let (log, dir) = log_of(&err);
    assert!(log.ends_with("kube-apiserver.log"));
    assert!(
        processes_mentioning(&dir).is_empty(),
        "etcd left running in {}",
        dir.display()
    );
    let _ = std::fs::remove_dir_all(dir);

    // A binary that starts and dies at once: the error says so and quotes its log.
    let mut config = PlaneConfig::api_only();
    config.binaries = Some(Binaries {
        etcd: real.kubectl.clone(),
        ..real.clone()
    });
    let err = format!("{:#}", Plane::start(config).await.unwrap_err());
    eprintln!("error: {err}");
    assert!(!err.contains('\n'), "one line: {err}");
    assert!(err.starts_with("etcd exited during start"), "{err}");
    let (log, dir) = log_of(&err);
    assert!(log.ends_with("etcd.log"));
    assert!(
        std::fs::read_to_string(&log)?.contains("unknown flag"),
        "kubectl rejects etcd's flags"
    );
    let _ = std::fs::remove_dir_all(dir);
    Ok(())
}

#[tokio::test]
async fn hung_component_times_out_naming_its_log_and_is_killed() -> Result<()> {
    let real = Binaries::ensure()?;
    // An "etcd" that runs but never serves, and has a child in its process group.
    let fake = tempfile::tempdir()?;
    let script = fake.path().join("etcd");
    std::fs::write(
        &script,
        "#!/bin/sh\necho \"hung etcd $*\"\nwhile :; do sleep 1; done\n",
    )?;
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    let mut config = PlaneConfig::api_only();
    config.binaries = Some(Binaries { etcd: script, ..real });
    config.start_timeout = Duration::from_secs(2);

    let err = format!("{:#}", Plane::start(config).await.unwrap_err());
    eprintln!("error: {err}");
    assert!(!err.contains('\n'), "one line: {err}");
    assert!(
        err.starts_with("etcd not ready after 2 s (waiting for GET /health)"),
        "{err}"
    );
    let (log, dir) = log_of(&err);
    assert!(std::fs::read_to_string(&log)?.contains("hung etcd --name=capstan"));
    assert!(
        processes_mentioning(&dir).is_empty(),
        "the hung etcd was not killed"
    );
    let _ = std::fs::remove_dir_all(dir);
    Ok(())
}

/// Not a test of its own: the body of the child process of `run_helper`.
#[tokio::test]
async fn helper_process() -> Result<()> {
    let Ok(task) = std::env::var(HELPER) else {
        return Ok(());
    };
    match task.split_once(':') {
        Some(("detach", dir)) => {
            let kubeconfig = Plane::start_detached(Path::new(dir), PlaneConfig::default()).await?;
            println!("KUBECONFIG={}", kubeconfig.display());
        }
        _ if task == "ensure" => match Binaries::ensure() {
            Ok(_) => println!("ENSURE=ok"),
            Err(e) => println!("ENSURE={e:#}"),
        },
        _ if task == "abort" => {
            // Dies like a Ctrl-C'd or panic=abort test: no Drop, no atexit.
            let plane = Plane::shared().await?;
            let dir = plane.dir().map(|d| d.display().to_string()).unwrap_or_default();
            let pids: Vec<String> = plane.pids().iter().map(|(_, p)| p.to_string()).collect();
            println!("PIDS={} DIR={dir}", pids.join(","));
            std::process::abort();
        }
        _ => bail!("unknown helper task {task}"),
    }
    Ok(())
}

#[tokio::test]
async fn plane_dies_with_an_aborted_test_process() -> Result<()> {
    let _turn = HEAVY.lock().await;
    let out = run_helper("abort", &[])?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "the helper aborts");
    let at = stdout.find("PIDS=").context("helper printed no pids")?;
    let line = stdout[at..].lines().next().unwrap_or_default();
    let (pids, dir) = line["PIDS=".len()..]
        .split_once(" DIR=")
        .context("malformed helper line")?;
    let pids: Vec<u32> = pids.split(',').map(str::parse).collect::<Result<_, _>>()?;
    assert_eq!(pids.len(), 5, "{line}");
    // SIGKILL from PDEATHSIG is immediate, but reaping by init may lag a moment.
    eventually(
        "the plane to die with its process",
        Duration::from_secs(10),
        || async { Ok(pids.iter().all(|p| gone(*p)).then_some(())) },
    )
    .await?;
    assert!(processes_mentioning(Path::new(dir)).is_empty());
    // The aborted process could not remove its dir; the next plane's start sweeps it.
    assert!(Path::new(dir).exists());
    let next = Plane::start(PlaneConfig::api_only()).await?;
    assert!(!Path::new(dir).exists(), "stale dir {dir} not swept");
    drop(next);
    Ok(())
}

#[tokio::test]
async fn detached_plane_outlives_its_process_and_stops_by_dir() -> Result<()> {
    let _turn = HEAVY.lock().await;
    let dir = tempfile::tempdir()?;
    let task = format!("detach:{}", dir.path().display());
    let t0 = Instant::now();
    let out = run_helper(&task, &[])?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "helper failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!(
        "detached plane: up in {:.1} s (helper process exited)",
        t0.elapsed().as_secs_f64()
    );

    let state = Plane::detached_state(dir.path())?.context("plane.json written")?;
    let kubeconfig = state.kubeconfig.clone();
    assert!(
        stdout.contains(&format!("KUBECONFIG={}", kubeconfig.display())),
        "{stdout}"
    );
    assert_eq!(state.components.len(), 5);
    for p in &state.components {
        assert!(!gone(p.pid), "{} died with the process that started it", p.name);
        // Own session and group, so Ctrl-C in the starting shell spares it.
        // SAFETY: plain syscalls on pids read from plane.json.
        let (pgid, sid) = unsafe { (libc::getpgid(p.pid as i32), libc::getsid(p.pid as i32)) };
        assert_eq!(
            (pgid as u32, sid as u32),
            (p.pid, p.pid),
            "{} leads its own session",
            p.name
        );
    }
    // The starter is gone, yet the plane works: Jobs still complete.
    let plane = Plane::external(&kubeconfig);
    let client = plane.client().await?;
    assert!(!client.apiserver_version().await?.git_version.is_empty());
    let ns = plane.namespace("detached").await?;
    let jobs: Api<Job> = Api::namespaced(client, &ns);
    jobs.create(&PostParams::default(), &echo_job("hi")).await?;
    eventually("Job hi to succeed", Duration::from_secs(120), || async {
        let status = jobs.get("hi").await?.status.unwrap_or_default();
        Ok((status.succeeded == Some(1)).then_some(()))
    })
    .await?;
    // `up` again while it runs: same plane, nothing new started.
    assert_eq!(
        Plane::start_detached(dir.path(), PlaneConfig::default()).await?,
        kubeconfig
    );
    let again = Plane::detached_state(dir.path())?.unwrap();
    assert_eq!(again.components[1].pid, state.components[1].pid);

    // An attached plane must not take over (and wipe) a dir whose plane is running.
    let config = PlaneConfig {
        dir: Some(dir.path().to_path_buf()),
        ..PlaneConfig::api_only()
    };
    let err = Plane::start(config).await.unwrap_err().to_string();
    assert!(err.contains("a detached plane is running"), "{err}");

    let t0 = Instant::now();
    assert!(Plane::stop_detached(dir.path())?);
    eprintln!("detached plane: down in {} ms", t0.elapsed().as_millis());
    for p in &state.components {
        assert!(gone(p.pid), "{} (pid {}) survived stop_detached", p.name, p.pid);
    }
    assert!(Plane::detached_state(dir.path())?.is_none());
    assert!(
        dir.path().join("kube-apiserver.log").is_file(),
        "logs stay for reading"
    );
    assert!(!Plane::stop_detached(dir.path())?, "stopping twice is a no-op");
    Ok(())
}

#[tokio::test]
async fn ensure_without_go_fails_in_one_line() -> Result<()> {
    let cache = tempfile::tempdir()?;
    let no_tools = tempfile::tempdir()?;
    let cache_path = cache.path().to_string_lossy().into_owned();
    let path = no_tools.path().to_string_lossy().into_owned();
    let out = run_helper("ensure", &[("CAPSTAN_CACHE", &cache_path), ("PATH", &path)])?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    // The harness prints "test helper_process ... " on the same line first.
    let at = stdout.find("ENSURE=").context("helper printed no result")?;
    let line = stdout[at + "ENSURE=".len()..].lines().next().unwrap_or_default();
    assert!(line.contains("Go is not installed"), "{line}");
    assert!(line.starts_with("cannot build the control plane"), "{line}");
    let built = std::fs::read_dir(cache.path())?.count();
    assert_eq!(built, 0, "nothing built, nothing locked");
    Ok(())
}

/// `capstan dev` as a user runs it: `build` prints where the binaries are, `up` starts a
/// detached plane and prints `export KUBECONFIG=…` last, `status` shows it, `down` stops
/// every process, and `status` then says so with exit 1.
#[tokio::test]
async fn capstan_dev_build_up_status_down_from_the_command_line() -> Result<()> {
    let _turn = HEAVY.lock().await;
    let dir = tempfile::tempdir()?;
    let state = dir.path().join("plane");
    let capstan = capstan_tests::capstan_bin();
    let run = |args: &[&str]| -> Result<std::process::Output> {
        Ok(std::process::Command::new(&capstan)
            .args(args)
            .env("CAPSTAN_CACHE_DIR", capstan_tests::compile_cache())
            .output()?)
    };
    let text = |out: &std::process::Output| String::from_utf8_lossy(&out.stdout).into_owned();
    let plane_dir = state.to_str().context("utf-8 dir")?;

    let build = run(&["dev", "build"])?;
    assert!(
        build.status.success(),
        "{}",
        String::from_utf8_lossy(&build.stderr)
    );
    assert!(
        Path::new(text(&build).trim()).join("kube-apiserver").exists(),
        "{}",
        text(&build)
    );

    let up = run(&["dev", "up", "--dir", plane_dir, "--no-kcm"])?;
    assert!(up.status.success(), "{}", String::from_utf8_lossy(&up.stderr));
    let last = text(&up).lines().last().unwrap_or_default().to_string();
    let kubeconfig = last.strip_prefix("export KUBECONFIG=").context(last.clone())?;
    let plane = Plane::external(Path::new(kubeconfig));
    assert!(
        !plane
            .client()
            .await?
            .apiserver_version()
            .await?
            .git_version
            .is_empty()
    );

    let status = run(&["dev", "status", "--dir", plane_dir])?;
    assert!(status.status.success());
    let shown: serde_json::Value = serde_saphyr::from_str(&text(&status))?;
    let pids: Vec<u32> = shown["components"]
        .as_array()
        .context("components listed")?
        .iter()
        .filter_map(|c| c["pid"].as_u64().map(|p| p as u32))
        .collect();
    assert_eq!(
        pids.len(),
        4,
        "etcd, apiserver, scheduler, kwok: {}",
        text(&status)
    );

    let down = run(&["dev", "down", "--dir", plane_dir])?;
    assert_eq!(text(&down).trim(), "stopped");
    eventually("every component to exit", Duration::from_secs(30), || async {
        Ok(pids.iter().all(|&p| gone(p)).then_some(()))
    })
    .await?;
    let after = run(&["dev", "status", "--dir", plane_dir])?;
    assert_eq!(
        (after.status.code(), text(&after).trim()),
        (Some(1), "not running")
    );
    Ok(())
}
