//! `helm install` of `charts/capstan` into the real local control plane, then
//! `capstan run` as one of the installed pods with only the chart's ServiceAccount token:
//! with leader election (the HA values: the Lease held, Echo→Job and ScheduledEcho→CronJob
//! converge, 403 for everything no plugin declared, `--reuse-values` refused, a
//! `helm upgrade` with a new plugin hot-reloaded without a rollout), namespace-scoped
//! (confined to its namespace), and with Echo pulled from a registry (TLS, pull Secret,
//! digest pinned).

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use capstan::dev::Plane;
use capstan_tests::host::{
    echo_resource, eventually, first_listed, http_get, pod_of, scheduled_echo_resource,
};
use capstan_tests::plugin;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use capstan_tests::helm::pod::{
    PodOnThisMachine, assert_installed_as_rendered, available_pods, crds_established, echo_converges,
    project_config_map, service_account_kubeconfig,
};
use capstan_tests::helm::{
    chart, ci_values, documents, forbidden, helm, helm_ok, of_kind, one, restricted_namespace, wasm_from,
    with_custom_section,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn installed_chart_runs_the_host_as_its_service_account_with_leader_election() -> Result<()> {
    let plane = Plane::shared().await?;
    let admin = plane.client().await?;
    let ns = restricted_namespace(plane, "helm-ha").await?;
    let apps = plane.namespace("helm-ha-apps").await?;
    let kubeconfig = Some(plane.kubeconfig());
    let chart = chart();
    let chart = chart.to_str().unwrap();
    let values = ci_values("ha-values.yaml");
    let echo_file = plugin("echo");
    let echo = wasm_from("echo", &echo_file);
    // No Prometheus Operator here: its CRD is not served.
    let install: [&str; 9] = [
        chart,
        "-n",
        ns.as_str(),
        "-f",
        values.as_str(),
        "--set-file",
        echo.as_str(),
        "--set",
        "metrics.serviceMonitor.enabled=false",
    ];
    let mut args = vec!["install", "capstan"];
    args.extend(install);
    let notes = helm_ok(&args, kubeconfig)?;
    assert!(
        notes.contains(&format!("kubectl -n {ns} rollout status deployment/capstan")),
        "{notes}"
    );
    assert!(
        notes.contains(&format!("kubectl -n {ns} get lease capstan-leader")),
        "{notes}"
    );

    // Everything exists as rendered: Deployment, ServiceAccount, RBAC, ConfigMaps, CRDs.
    let manifest = documents(&helm_ok(&["get", "manifest", "capstan", "-n", &ns], kubeconfig)?)?;
    let kinds: BTreeSet<&str> = manifest.iter().filter_map(|d| d["kind"].as_str()).collect();
    for k in [
        "Deployment",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "ConfigMap",
        "Service",
    ] {
        assert!(kinds.contains(k), "{k} not in the release: {kinds:?}");
    }
    assert_installed_as_rendered(&admin, &manifest).await?;
    crds_established(&admin).await?;
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), &ns);
    let stored = cms
        .get("capstan-plugin-echo")
        .await?
        .binary_data
        .context("binaryData")?;
    assert!(
        stored["echo.wasm"].0 == std::fs::read(&echo_file)?,
        "echo.wasm differs in the cluster"
    );
    // Both replicas' pods pass restricted Pod Security admission (kwok runs them).
    let pods = available_pods(&admin, &ns, "capstan", 2).await?;

    // The host, as one of those pods, with the chart's ServiceAccount token only.
    let dir = std::env::temp_dir().join(format!("capstan-helm-{ns}"));
    std::fs::create_dir_all(&dir)?;
    let sa_kubeconfig = dir.join("sa.kubeconfig");
    let sa = service_account_kubeconfig(plane, &ns, "capstan", &sa_kubeconfig).await?;
    let deployment = Api::<Deployment>::namespaced(admin.clone(), &ns)
        .get("capstan")
        .await?;
    let images = [(
        "ghcr.io/capstan-dev/plugins/scheduled-echo:0.1.0",
        plugin("scheduled-echo"),
    )];
    let mut host = PodOnThisMachine::start(
        &admin,
        &deployment,
        &pods[0],
        &sa_kubeconfig,
        &dir.join("pod"),
        &images,
    )
    .await?;

    // It leads: the Lease in the release namespace names this pod.
    let leases: Api<Lease> = Api::namespaced(admin.clone(), &ns);
    eventually(
        "the Lease held by the host",
        Duration::from_secs(60),
        async || {
            if let Some(e) = host.exited() {
                bail!(e);
            }
            let lease = leases.get_opt("capstan-leader").await?;
            let holder = lease.and_then(|l| l.spec).and_then(|s| s.holder_identity);
            Ok((holder.as_deref().map(pod_of) == Some(host.pod_name.as_str())).then_some(()))
        },
    )
    .await?;

    // Echo→Job converges, and ScheduledEcho (from the image volume) → CronJob.
    let job = echo_converges(&admin, &mut host, &apps, "hello").await?;
    assert_eq!(
        job.metadata.labels.as_ref().unwrap()["capstan.dev/plugin"],
        "echo"
    );
    let scheduled: Api<DynamicObject> =
        Api::namespaced_with(admin.clone(), &apps, &scheduled_echo_resource());
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "capstan.dev/v1alpha1", "kind": "ScheduledEcho",
        "metadata": {"name": "nightly"}, "spec": {"message": "hi", "schedule": "*/5 * * * *"},
    }))?;
    scheduled.create(&PostParams::default(), &object).await?;
    let cronjobs: Api<CronJob> = Api::namespaced(admin.clone(), &apps);
    first_listed("the ScheduledEcho's CronJob", &cronjobs, Duration::from_secs(60)).await?;
    let metrics = host.metrics_address().context("metrics address logged")?;
    let body = http_get(&metrics, "/metrics")?.1;
    assert!(
        body.contains(r#"leader_election_master_status{name="capstan-leader"} 1"#),
        "{body}"
    );
    // Events carry the pod as reporting instance (POD_NAME from the downward API), and the
    // field selector NOTES.txt suggests finds them.
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(admin.clone(), &apps);
    let reported = events
        .list(&ListParams::default().fields("reportingComponent=capstan-echo"))
        .await?
        .items;
    assert!(!reported.is_empty(), "no events from capstan-echo");
    for e in &reported {
        assert_eq!(e.reporting_instance.as_deref(), Some(host.pod_name.as_str()));
    }

    // The same identity may do what the plugins declared and nothing else.
    let echoes_all: Api<DynamicObject> = Api::all_with(sa.clone(), &echo_resource());
    echoes_all
        .list(&ListParams::default())
        .await
        .context("the SA lists Echoes")?;
    Api::<Job>::all(sa.clone())
        .list(&ListParams::default())
        .await
        .context("the SA lists Jobs")?;
    forbidden(
        "list Secrets in the release namespace",
        Api::<Secret>::namespaced(sa.clone(), &ns)
            .list(&ListParams::default())
            .await,
    );
    forbidden(
        "list Secrets everywhere",
        Api::<Secret>::all(sa.clone()).list(&ListParams::default()).await,
    );
    forbidden(
        "get a Secret",
        Api::<Secret>::namespaced(sa.clone(), &apps).get("any").await,
    );
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "undeclared"}, "data": {"a": "b"}}))?;
    forbidden(
        "create a ConfigMap (no plugin declares it)",
        Api::<ConfigMap>::namespaced(sa.clone(), &apps)
            .create(&PostParams::default(), &cm)
            .await,
    );
    let deploy: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "undeclared"},
        "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "b"}},
            "spec": {"containers": [{"name": "c", "image": "x"}]}}},
    }))?;
    forbidden(
        "create a Deployment (no plugin declares it)",
        Api::<Deployment>::namespaced(sa.clone(), &apps)
            .create(&PostParams::default(), &deploy)
            .await,
    );
    forbidden(
        "list Pods",
        Api::<Pod>::namespaced(sa.clone(), &apps)
            .list(&ListParams::default())
            .await,
    );
    forbidden(
        "get another Lease",
        Api::<Lease>::namespaced(sa.clone(), &ns)
            .get("someone-else")
            .await,
    );
    let spec_patch = json!({"spec": {"message": "rewritten"}});
    forbidden(
        "patch an Echo's spec (only its status is the host's)",
        Api::<DynamicObject>::namespaced_with(sa.clone(), &apps, &echo_resource())
            .patch("hello", &PatchParams::default(), &Patch::Merge(&spec_patch))
            .await,
    );

    // --reuse-values cannot carry a binary through helm's JSON release record; the chart
    // says so instead of shipping a mangled plugin.
    let upgrade = ["upgrade", "capstan", chart, "-n", &ns, "--reuse-values"];
    let Err(err) = helm(&upgrade, kubeconfig) else {
        panic!("--reuse-values with a ConfigMap plugin must fail");
    };
    assert!(err.contains("plugins.echo.source.wasm was mangled"), "{err}");

    // A new plugin file: `helm upgrade --set-file` changes the ConfigMap, not the pods,
    // and the running host swaps it in once kubelet has projected it.
    let generation = deployment.metadata.generation;
    let v2 = dir.join("echo-v2.wasm");
    let v2_bytes = with_custom_section(&std::fs::read(&echo_file)?, "capstan-test", b"v2");
    std::fs::write(&v2, &v2_bytes)?;
    let echo_v2 = wasm_from("echo", &v2);
    let mut args = vec!["upgrade", "capstan"];
    args.extend(install);
    args.extend(["--set-file", &echo_v2]);
    helm_ok(&args, kubeconfig)?;
    let cm = cms.get("capstan-plugin-echo").await?;
    assert!(cm.binary_data.as_ref().unwrap()["echo.wasm"].0 == v2_bytes);
    let after = Api::<Deployment>::namespaced(admin.clone(), &ns)
        .get("capstan")
        .await?;
    assert_eq!(
        after.metadata.generation, generation,
        "no rollout with hot reload"
    );
    let mount = host.root.join("etc/capstan/plugins/echo");
    project_config_map(&cm, &mount, 2)?;
    eventually("the host to reload echo", Duration::from_secs(30), async || {
        Ok(host
            .log()
            .iter()
            .any(|l| l["message"] == "plugin reloaded" && l["plugin"] == "echo")
            .then_some(()))
    })
    .await
    .with_context(|| host.log_text())?;
    echo_converges(&admin, &mut host, &apps, "after-reload").await?;
    let cached = std::fs::read_dir(host.root.join("var/cache/capstan/compiled"))?
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "cwasm"))
        })
        .count();
    assert_eq!(
        cached, 3,
        "echo, its upgrade and scheduled-echo compiled into the cache volume"
    );

    drop(host);
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_scoped_install_is_confined_to_its_namespace() -> Result<()> {
    let plane = Plane::shared().await?;
    let admin = plane.client().await?;
    let ns = restricted_namespace(plane, "helm-ns").await?;
    let watched = plane.namespace("helm-ns-watched").await?;
    let other = plane.namespace("helm-ns-other").await?;
    let kubeconfig = Some(plane.kubeconfig());

    // The user's own ConfigMap holds the plugin; values name it as the volume.
    let echo_file = plugin("echo");
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "my-plugins"},
        "binaryData": {"echo.wasm": serde_json::to_value(k8s_openapi::ByteString(std::fs::read(&echo_file)?))?},
    }))?;
    Api::<ConfigMap>::namespaced(admin.clone(), &ns)
        .create(&PostParams::default(), &cm)
        .await?;
    let chart = chart();
    let set_watch = format!("watchNamespace={watched}");
    helm_ok(
        &[
            "install",
            "scoped",
            chart.to_str().unwrap(),
            "-n",
            &ns,
            "-f",
            &ci_values("namespaced-values.yaml"),
            "--set",
            &set_watch,
        ],
        kubeconfig,
    )?;
    let manifest = documents(&helm_ok(&["get", "manifest", "scoped", "-n", &ns], kubeconfig)?)?;
    assert_installed_as_rendered(&admin, &manifest).await?;
    assert!(
        of_kind(&manifest, "ClusterRole").is_empty() && of_kind(&manifest, "ClusterRoleBinding").is_empty()
    );
    assert_eq!(one(&manifest, "Role")["metadata"]["namespace"], watched.as_str());
    crds_established(&admin).await?;
    let pods = available_pods(&admin, &ns, "scoped-capstan", 1).await?;

    let dir = std::env::temp_dir().join(format!("capstan-helm-{ns}"));
    std::fs::create_dir_all(&dir)?;
    let sa_kubeconfig = dir.join("sa.kubeconfig");
    let sa = service_account_kubeconfig(plane, &ns, "scoped-capstan", &sa_kubeconfig).await?;
    let deployment = Api::<Deployment>::namespaced(admin.clone(), &ns)
        .get("scoped-capstan")
        .await?;
    let mut host = PodOnThisMachine::start(
        &admin,
        &deployment,
        &pods[0],
        &sa_kubeconfig,
        &dir.join("pod"),
        &[],
    )
    .await?;
    echo_converges(&admin, &mut host, &watched, "inside").await?;

    Api::<DynamicObject>::namespaced_with(sa.clone(), &watched, &echo_resource())
        .list(&ListParams::default())
        .await
        .context("the SA lists Echoes in its namespace")?;
    forbidden(
        "list Echoes in all namespaces",
        Api::<DynamicObject>::all_with(sa.clone(), &echo_resource())
            .list(&ListParams::default())
            .await,
    );
    forbidden(
        "list Echoes in another namespace",
        Api::<DynamicObject>::namespaced_with(sa.clone(), &other, &echo_resource())
            .list(&ListParams::default())
            .await,
    );
    let job: Job = serde_json::from_value(json!({
        "metadata": {"name": "outside"},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}},
    }))?;
    forbidden(
        "create a Job in another namespace",
        Api::<Job>::namespaced(sa.clone(), &other)
            .create(&PostParams::default(), &job)
            .await,
    );
    forbidden(
        "list Secrets in the watched namespace",
        Api::<Secret>::namespaced(sa.clone(), &watched)
            .list(&ListParams::default())
            .await,
    );
    forbidden(
        "get a Lease (no leader election)",
        Api::<Lease>::namespaced(sa.clone(), &ns)
            .get("scoped-capstan")
            .await,
    );

    drop(host);
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn installed_chart_pulls_its_signed_plugin_from_a_registry_with_the_pull_secret_ca_and_key()
-> Result<()> {
    use capstan_tests::oci::Registry;
    let registry = Registry::secured()?;
    let ca = registry.ca.clone().context("a secured registry has a CA")?;
    let auth = registry.auth_file()?;
    let pushed = capstan_tests::capstan(&[
        "push",
        capstan_tests::arg(&plugin("echo")),
        &registry.reference("plugins/echo:1.0"),
        "--registry-ca",
        capstan_tests::arg(&ca),
        "--registry-auth",
        capstan_tests::arg(&auth),
    ]);
    anyhow::ensure!(
        pushed.status.success(),
        "{}",
        String::from_utf8_lossy(&pushed.stderr)
    );
    let pinned = String::from_utf8(pushed.stdout)?.trim().to_string();
    // Signed with a key of the operator's, whose public half the policy names.
    let keys = tempfile::tempdir()?;
    let prefix = keys.path().join("release");
    let registry_flags = [
        "--registry-ca",
        capstan_tests::arg(&ca),
        "--registry-auth",
        capstan_tests::arg(&auth),
    ];
    for args in [
        vec![
            "generate-key-pair",
            "--output-prefix",
            capstan_tests::arg(&prefix),
        ],
        [
            &["sign", &pinned, "--key", &format!("{}.key", prefix.display())][..],
            &registry_flags,
        ]
        .concat(),
    ] {
        let out = capstan_tests::capstan(&args);
        anyhow::ensure!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }

    let plane = Plane::shared().await?;
    let admin = plane.client().await?;
    let ns = restricted_namespace(plane, "helm-oci").await?;
    let watched = plane.namespace("helm-oci-watched").await?;
    let kubeconfig = Some(plane.kubeconfig());
    let dir = tempfile::tempdir()?;
    // What an operator makes: `kubectl create secret docker-registry` and a CA ConfigMap.
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "regcred"}, "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": serde_json::to_value(k8s_openapi::ByteString(std::fs::read(&auth)?))?},
    }))?;
    Api::<Secret>::namespaced(admin.clone(), &ns)
        .create(&PostParams::default(), &secret)
        .await?;
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "registry-ca"}, "data": {"ca.crt": std::fs::read_to_string(&ca)?},
    }))?;
    Api::<ConfigMap>::namespaced(admin.clone(), &ns)
        .create(&PostParams::default(), &cm)
        .await?;
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "plugin-keys"},
        "data": {"release.pub": std::fs::read_to_string(keys.path().join("release.pub"))?},
    }))?;
    Api::<ConfigMap>::namespaced(admin.clone(), &ns)
        .create(&PostParams::default(), &cm)
        .await?;
    // The namespaced values with the registry as Echo's source.
    let namespaced = std::fs::read_to_string(ci_values("namespaced-values.yaml"))?;
    let volume =
        "    source:\n      volume:\n        configMap:\n          name: my-plugins\n      file: echo.wasm\n";
    anyhow::ensure!(
        namespaced.contains(volume),
        "namespaced-values.yaml's echo source moved"
    );
    let values = dir.path().join("values.yaml");
    std::fs::write(
        &values,
        format!(
            "{}registry: {{pullSecret: regcred, caConfigMap: registry-ca, requireDigest: true, verify: {{keysConfigMap: plugin-keys, keys: [release.pub]}}}}\n",
            namespaced.replace(volume, &format!("    source: {{oci: '{pinned}'}}\n"))
        ),
    )?;
    let chart = chart();
    let set_watch = format!("watchNamespace={watched}");
    let args = [
        "install",
        "pulled",
        chart.to_str().unwrap(),
        "-n",
        &ns,
        "-f",
        capstan_tests::arg(&values),
        "--set",
        &set_watch,
    ];
    helm_ok(&args, kubeconfig)?;
    crds_established(&admin).await?;
    let pods = available_pods(&admin, &ns, "pulled-capstan", 1).await?;

    let sa_kubeconfig = dir.path().join("sa.kubeconfig");
    service_account_kubeconfig(plane, &ns, "pulled-capstan", &sa_kubeconfig).await?;
    let deployment = Api::<Deployment>::namespaced(admin.clone(), &ns)
        .get("pulled-capstan")
        .await?;
    let mut host = PodOnThisMachine::start(
        &admin,
        &deployment,
        &pods[0],
        &sa_kubeconfig,
        &dir.path().join("pod"),
        &[],
    )
    .await?;
    echo_converges(&admin, &mut host, &watched, "pulled").await?;
    let said = host.log();
    anyhow::ensure!(
        said.iter()
            .any(|l| l["message"] == "plugin pulled" && l["reference"] == pinned.as_str()),
        "the pod says what it pulled:\n{}",
        host.log_text()
    );
    anyhow::ensure!(
        said.iter().any(|l| l["message"] == "plugin signature verified"
            && l["key"].as_str().is_some_and(|k| k.ends_with("release.pub"))),
        "the pod checked the signature under the policy:\n{}",
        host.log_text()
    );
    Ok(())
}
