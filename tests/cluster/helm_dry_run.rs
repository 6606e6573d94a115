//! Every values file in `charts/capstan/ci` against the real local control plane:
//! `helm lint --strict`, `helm template` with the exact RBAC, pod shape and config each
//! must produce, a server-side dry run (strict field validation) of every rendered object,
//! and the pod admitted by restricted Pod Security admission (and refused with privilege
//! escalation).

use anyhow::{Context, Result};
use capstan::dev::Plane;
use capstan_tests::plugin;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use capstan_tests::helm::{
    assert_no_wildcards_or_secrets, chart, ci_values, dynamic_api, echo_grants, event_grants, forbidden,
    grants, helm_ok, lease_grants, of_kind, one, render, resource_of, restricted_namespace,
    scheduled_echo_grants, strings, subset, union, wasm_from,
};

fn container(deployment: &Value) -> &Value {
    &deployment["spec"]["template"]["spec"]["containers"][0]
}

fn args(deployment: &Value) -> Vec<String> {
    strings(&container(deployment)["args"])
}

/// The restricted Pod Security Standard, probes, downward-API identity and resources.
fn assert_pod_shape(deployment: &Value) {
    let pod = &deployment["spec"]["template"]["spec"];
    let c = container(deployment);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault");
    let sc = &c["securityContext"];
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["runAsNonRoot"], true);
    assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["readinessProbe"]["httpGet"]["port"], "health");
    let port = |name: &str| {
        c["ports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .map(|p| p["containerPort"].clone())
    };
    assert_eq!(port("health"), Some(json!(8081)));
    assert_eq!(port("metrics"), Some(json!(8080)));
    let env = |name: &str| {
        c["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name)
            .map(|e| e["valueFrom"]["fieldRef"]["fieldPath"].clone())
    };
    assert_eq!(env("POD_NAME"), Some(json!("metadata.name")));
    assert_eq!(env("POD_NAMESPACE"), Some(json!("metadata.namespace")));
    assert!(c["resources"]["requests"]["memory"].is_string());
    assert!(c["resources"]["limits"]["memory"].is_string());
    let args = args(deployment);
    for a in [
        "--config=/etc/capstan/config/config.yaml",
        "--metrics-addr=0.0.0.0:8080",
        "--health-addr=0.0.0.0:8081",
        // The plugins' memory totals fit well inside the container's limit.
        "--memory-budget=384Mi",
    ] {
        assert!(args.iter().any(|x| x == a), "{a} missing from {args:?}");
    }
    // Compiled plugins go to an emptyDir, so a restarted container does not compile again.
    assert!(
        args.iter()
            .any(|a| a == "--cache-dir=/var/cache/capstan/compiled"),
        "{args:?}"
    );
    assert!(volume(deployment, "compile-cache")["emptyDir"]["sizeLimit"].is_string());
    // No subPath mounts: kubelet would never update them, and hot reload would see nothing.
    for m in c["volumeMounts"].as_array().unwrap() {
        assert!(m.get("subPath").is_none(), "{m}");
    }
}

fn volume<'a>(deployment: &'a Value, name: &str) -> &'a Value {
    deployment["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == name)
        .unwrap_or_else(|| panic!("volume {name} missing"))
}

/// The `--config` file the chart renders, parsed.
fn config(docs: &[Value]) -> Value {
    let cm = of_kind(docs, "ConfigMap")
        .into_iter()
        .find(|c| c["data"]["config.yaml"].is_string())
        .expect("the config ConfigMap");
    serde_saphyr::from_str(cm["data"]["config.yaml"].as_str().unwrap()).unwrap()
}

/// Server-side dry run (strict field validation) of every rendered object; returns the
/// kinds this API server does not serve (the ServiceMonitor, without the Prometheus
/// Operator's CRD), which are left unchecked.
async fn dry_run(client: &kube::Client, docs: &[Value]) -> Result<Vec<String>> {
    let params = PatchParams::apply("capstan-helm-test")
        .dry_run()
        .validation_strict();
    let mut unserved = Vec::new();
    for doc in docs {
        let kind = doc["kind"].as_str().unwrap_or_default().to_string();
        let Some((ar, namespaced)) = resource_of(client, doc).await else {
            unserved.push(kind);
            continue;
        };
        let name = doc["metadata"]["name"]
            .as_str()
            .context("a rendered object without a name")?;
        dynamic_api(client, &ar, namespaced, doc)
            .patch(name, &params, &Patch::Apply(doc))
            .await
            .with_context(|| format!("server-side dry run of {kind} {name}"))?;
    }
    Ok(unserved)
}

/// Dry-run creates a Pod from the Deployment's template in `ns`.
async fn dry_run_pod(client: &kube::Client, ns: &str, deployment: &Value) -> kube::Result<Pod> {
    let mut spec = deployment["spec"]["template"]["spec"].clone();
    // Admission would look the ServiceAccount up; every namespace has `default`.
    spec["serviceAccountName"] = json!("default");
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "capstan-admission-check", "namespace": ns},
        "spec": spec,
    }))
    .expect("a pod template is a pod spec");
    let params = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    Api::<Pod>::namespaced(client.clone(), ns)
        .create(&params, &pod)
        .await
}

fn base64_decode(text: &str) -> Result<Vec<u8>> {
    // serde_json + k8s-openapi's ByteString already implement base64; reuse it.
    let bytes: k8s_openapi::ByteString = serde_json::from_value(json!(text))?;
    Ok(bytes.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_values_file_lints_renders_and_passes_a_server_side_dry_run() -> Result<()> {
    let plane = Plane::shared().await?;
    let client = plane.client().await?;
    let release_ns = restricted_namespace(plane, "helm-render").await?;
    let watch_ns = plane.namespace("helm-render-watch").await?;
    let echo_wasm = std::fs::read(plugin("echo"))?;
    let echo = wasm_from("echo", &plugin("echo"));
    let chart = chart();
    let chart = chart.to_str().unwrap();

    // (values file, extra arguments)
    let set_watch = format!("watchNamespace={watch_ns}");
    let cases: [(&str, Vec<&str>); 3] = [
        ("single-values.yaml", vec!["--set-file", &echo]),
        ("ha-values.yaml", vec!["--set-file", &echo]),
        ("namespaced-values.yaml", vec!["--set", &set_watch]),
    ];
    for (file, extra) in &cases {
        let values = ci_values(file);
        let mut lint = vec!["lint", "--strict", chart, "-f", &values];
        lint.extend(extra.iter());
        let out = helm_ok(&lint, None)?;
        assert!(out.contains("0 chart(s) failed"), "{file}: {out}");

        let mut render_args = vec!["-f", values.as_str()];
        render_args.extend(extra.iter());
        let docs = render(&release_ns, &render_args)?;
        let deployment = one(&docs, "Deployment");
        assert_pod_shape(deployment);
        assert_no_wildcards_or_secrets(&docs);
        let a = args(deployment);
        let has = |s: &str| a.iter().any(|x| x == s);
        let config = config(&docs);
        let sa = one(&docs, "ServiceAccount")["metadata"]["name"].clone();
        for binding in docs
            .iter()
            .filter(|d| d["kind"].as_str().is_some_and(|k| k.ends_with("Binding")))
        {
            assert_eq!(
                binding["subjects"],
                json!([{"kind": "ServiceAccount", "name": sa, "namespace": release_ns}])
            );
        }
        match *file {
            "single-values.yaml" => {
                assert_eq!(deployment["spec"]["replicas"], 1);
                assert_eq!(deployment["spec"]["strategy"]["type"], "Recreate");
                assert!(!has("--leader-elect") && !has("--hot-reload"), "{a:?}");
                assert!(!a.iter().any(|x| x.starts_with("--namespace")), "{a:?}");
                assert_eq!(
                    grants(one(&docs, "ClusterRole")),
                    union([echo_grants(), event_grants()])
                );
                assert!(
                    of_kind(&docs, "Role").is_empty(),
                    "no Lease without leader election"
                );
                // The plugin rides in a chart-made ConfigMap, byte for byte.
                let cm = of_kind(&docs, "ConfigMap")
                    .into_iter()
                    .find(|c| c["binaryData"]["echo.wasm"].is_string())
                    .context("the echo plugin ConfigMap")?;
                let data = base64_decode(cm["binaryData"]["echo.wasm"].as_str().unwrap())?;
                assert!(data == echo_wasm, "echo.wasm differs after the ConfigMap");
                assert_eq!(
                    volume(deployment, "plugin-echo")["configMap"]["name"],
                    cm["metadata"]["name"]
                );
                assert_eq!(config["plugins"], json!([{"path": "../plugins/echo/echo.wasm"}]));
                assert!(of_kind(&docs, "PodDisruptionBudget").is_empty());
                assert!(of_kind(&docs, "ServiceMonitor").is_empty());
            }
            "ha-values.yaml" => {
                assert_eq!(deployment["spec"]["replicas"], 2);
                for flag in [
                    "--leader-elect".to_string(),
                    "--leader-election-id=capstan-leader".into(),
                    format!("--leader-election-namespace={release_ns}"),
                    "--lease-duration=6s".into(),
                    "--renew-deadline=4s".into(),
                    "--retry-period=1s".into(),
                    "--hot-reload".into(),
                ] {
                    assert!(has(&flag), "{flag} missing from {a:?}");
                }
                assert_eq!(
                    grants(one(&docs, "ClusterRole")),
                    union([echo_grants(), scheduled_echo_grants(), event_grants()])
                );
                let role = one(&docs, "Role");
                assert_eq!(role["metadata"]["namespace"], release_ns.as_str());
                assert_eq!(grants(role), lease_grants("capstan-leader"));
                // Any volume as a source: here an OCI artifact as an image volume.
                assert_eq!(
                    volume(deployment, "plugin-scheduled-echo")["image"]["reference"],
                    "ghcr.io/capstan-dev/plugins/scheduled-echo:0.1.0"
                );
                assert_eq!(
                    config["plugins"],
                    json!([
                        {"path": "../plugins/echo/echo.wasm", "concurrency": 4,
                         "limits": {"deadline": "500ms", "memory": 67108864, "responseBytes": 1048576, "maxChildren": 10}},
                        {"path": "../plugins/scheduled-echo/scheduled_echo.wasm", "resync": "5m"},
                    ])
                );
                assert_eq!(one(&docs, "PodDisruptionBudget")["spec"]["maxUnavailable"], 1);
                // The ServiceMonitor selects the metrics Service by its labels and port name.
                let monitor = one(&docs, "ServiceMonitor");
                let service = one(&docs, "Service");
                for (k, v) in monitor["spec"]["selector"]["matchLabels"].as_object().unwrap() {
                    assert_eq!(&service["metadata"]["labels"][k], v, "{k}");
                }
                assert_eq!(
                    monitor["spec"]["endpoints"][0]["port"],
                    service["spec"]["ports"][0]["name"]
                );
                assert_eq!(service["spec"]["ports"][0]["targetPort"], "metrics");
            }
            _ => {
                assert!(has(&format!("--namespace={watch_ns}")), "{a:?}");
                assert!(of_kind(&docs, "ClusterRole").is_empty());
                assert!(of_kind(&docs, "ClusterRoleBinding").is_empty());
                let role = one(&docs, "Role");
                assert_eq!(role["metadata"]["namespace"], watch_ns.as_str());
                assert_eq!(grants(role), union([echo_grants(), event_grants()]));
                assert_eq!(
                    one(&docs, "RoleBinding")["metadata"]["namespace"],
                    watch_ns.as_str()
                );
                // A ConfigMap the user manages, named in values.
                assert_eq!(
                    volume(deployment, "plugin-echo")["configMap"]["name"],
                    "my-plugins"
                );
                assert_eq!(config["plugins"], json!([{"path": "../plugins/echo/echo.wasm"}]));
            }
        }

        // The API server accepts every object as rendered.
        let unserved = dry_run(&client, &docs).await.with_context(|| file.to_string())?;
        let expected_unserved: Vec<String> = of_kind(&docs, "ServiceMonitor")
            .iter()
            .map(|_| "ServiceMonitor".to_string())
            .collect();
        assert_eq!(unserved, expected_unserved, "{file}");
        // And Pod Security admission (restricted) admits its pod, image volume included.
        let pod = dry_run_pod(&client, &release_ns, deployment)
            .await
            .with_context(|| format!("{file}: pod from the template"))?;
        // Every volume as rendered (image volumes included; admission adds the token's).
        let admitted = serde_json::to_value(&pod.spec)?;
        for v in deployment["spec"]["template"]["spec"]["volumes"]
            .as_array()
            .unwrap()
        {
            let kept = admitted["volumes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|a| a["name"] == v["name"]);
            let kept = kept.unwrap_or_else(|| panic!("{file}: volume {} dropped", v["name"]));
            subset(v, kept, String::new()).unwrap_or_else(|p| panic!("{file}: volume differs at {p}"));
        }
    }

    // The restricted check is live: the same pod with privilege escalation is refused.
    let docs = render(
        &release_ns,
        &["-f", &ci_values("single-values.yaml"), "--set-file", &echo],
    )?;
    let mut escalating = one(&docs, "Deployment").clone();
    escalating["spec"]["template"]["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] =
        json!(true);
    forbidden(
        "a pod allowing privilege escalation in a restricted namespace",
        dry_run_pod(&client, &release_ns, &escalating).await,
    );
    Ok(())
}
