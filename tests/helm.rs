//! The Helm chart `charts/capstan`, proven with the pinned `helm` (built from Go modules by
//! `scripts/k8s-build.sh helm`) and the real local control plane: `helm lint` and
//! `helm template` over every values file in `charts/capstan/ci`, a server-side dry run
//! of everything rendered, restricted Pod Security admission of the pod, `helm install`,
//! and `capstan run` authenticated as the chart's own ServiceAccount (a TokenRequest
//! token) with the arguments and volumes the installed Deployment declares: Echo→Job
//! converges, the Lease is held, a new plugin ConfigMap is hot-reloaded without a
//! rollout, and everything no plugin declared is a 403.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use capstan::dev::{Plane, Versions, cache_root};
use capstan_tests::host::{echo_resource, eventually, first_listed, http_get, scheduled_echo_resource};
use capstan_tests::{capstan_bin, plugin, workspace};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::serde::Deserialize;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::{Value, json};

const VERSIONS_ENV: &str = include_str!("../scripts/versions.env");

fn chart() -> PathBuf {
    workspace().join("charts/capstan")
}

fn ci_values(name: &str) -> String {
    chart().join("ci").join(name).display().to_string()
}

/// The pinned helm, built into the cache by `scripts/k8s-build.sh helm` when missing.
fn helm_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let version = VERSIONS_ENV
            .lines()
            .find_map(|l| l.trim().strip_prefix("HELM_VERSION="))
            .expect("scripts/versions.env pins HELM_VERSION")
            .trim();
        let bin = cache_root().join(format!("helm-{version}/bin/helm"));
        if !bin.exists() {
            let status = Command::new(workspace().join("scripts/k8s-build.sh"))
                .arg("helm")
                .stdout(Stdio::null())
                .status()
                .expect("scripts/k8s-build.sh runs");
            assert!(status.success(), "scripts/k8s-build.sh helm failed");
        }
        bin
    })
}

/// `helm ARGS` with its own config/cache/data dirs; only with `kubeconfig` may it reach
/// a cluster. Ok(stdout) on success, Err(stderr) otherwise.
fn helm(args: &[&str], kubeconfig: Option<&Path>) -> Result<String, String> {
    // One stable home under target/tmp: nothing accumulates in /tmp.
    let home = Path::new(env!("CARGO_TARGET_TMPDIR")).join("helm-home");
    let out = Command::new(helm_bin())
        .args(args)
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_DATA_HOME", home.join("data"))
        .env(
            "KUBECONFIG",
            kubeconfig.map_or_else(|| home.join("no-cluster"), Path::to_path_buf),
        )
        .output()
        .expect("helm runs");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

fn helm_ok(args: &[&str], kubeconfig: Option<&Path>) -> Result<String> {
    helm(args, kubeconfig).map_err(|e| anyhow::anyhow!("helm {}: {e}", args.join(" ")))
}

/// `--set-file` of a plugin's `.wasm` as the chart-made ConfigMap source.
fn wasm_from(name: &str, file: &Path) -> String {
    format!("plugins.{name}.source.wasm={}", file.display())
}

/// The YAML documents of a multi-document text, nulls dropped.
fn documents(text: &str) -> Result<Vec<Value>> {
    let mut docs = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(text) {
        let value = Value::deserialize(doc)?;
        if !value.is_null() {
            docs.push(value);
        }
    }
    Ok(docs)
}

/// `helm template` of release `capstan` in namespace `ns` for the pinned Kubernetes.
fn render(ns: &str, args: &[&str]) -> Result<Vec<Value>> {
    let kube_version = Versions::pinned().kubernetes;
    let chart = chart();
    let mut all = vec!["template", "capstan", chart.to_str().unwrap(), "-n", ns];
    all.extend_from_slice(&["--kube-version", &kube_version]);
    all.extend_from_slice(args);
    documents(&helm_ok(&all, None)?)
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

fn one<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    let found = of_kind(docs, kind);
    assert_eq!(found.len(), 1, "one {kind} expected, got {}", found.len());
    found[0]
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| a.iter().filter_map(|s| s.as_str().map(String::from)).collect())
        .unwrap_or_default()
}

/// One permission: (API group, resource, verb, resource name or "").
type Grant = (String, String, String, String);

fn grants(role: &Value) -> BTreeSet<Grant> {
    let mut out = BTreeSet::new();
    for rule in role["rules"].as_array().into_iter().flatten() {
        let names = strings(&rule["resourceNames"]);
        let names = if names.is_empty() {
            vec![String::new()]
        } else {
            names
        };
        for g in strings(&rule["apiGroups"]) {
            for r in strings(&rule["resources"]) {
                for v in strings(&rule["verbs"]) {
                    for n in &names {
                        out.insert((g.clone(), r.clone(), v.clone(), n.clone()));
                    }
                }
            }
        }
    }
    out
}

fn grant(group: &str, resource: &str, verbs: &[&str]) -> BTreeSet<Grant> {
    verbs
        .iter()
        .map(|v| (group.into(), resource.into(), v.to_string(), String::new()))
        .collect()
}

/// What a plugin with `parent` (no finalizer) and `children` needs, and nothing more.
fn plugin_grants(group: &str, parent: &str, children: &[(&str, &str)]) -> BTreeSet<Grant> {
    let mut g = grant(group, parent, &["get", "list", "watch"]);
    g.extend(grant(group, &format!("{parent}/status"), &["patch", "update"]));
    g.extend(grant(group, &format!("{parent}/finalizers"), &["update"]));
    for (child_group, child) in children {
        g.extend(grant(
            child_group,
            child,
            &["create", "delete", "get", "list", "patch", "watch"],
        ));
    }
    g
}

fn echo_grants() -> BTreeSet<Grant> {
    plugin_grants("capstan.dev", "echoes", &[("batch", "jobs")])
}

fn scheduled_echo_grants() -> BTreeSet<Grant> {
    plugin_grants("capstan.dev", "scheduledechoes", &[("batch", "cronjobs")])
}

fn event_grants() -> BTreeSet<Grant> {
    grant("events.k8s.io", "events", &["create", "patch"])
}

fn lease_grants(name: &str) -> BTreeSet<Grant> {
    let mut g: BTreeSet<Grant> = ["get", "list", "watch", "update", "patch"]
        .iter()
        .map(|v| {
            (
                "coordination.k8s.io".into(),
                "leases".into(),
                v.to_string(),
                name.into(),
            )
        })
        .collect();
    g.extend(grant("coordination.k8s.io", "leases", &["create"]));
    g
}

fn union(sets: impl IntoIterator<Item = BTreeSet<Grant>>) -> BTreeSet<Grant> {
    sets.into_iter().flatten().collect()
}

/// No role anywhere grants a wildcard or Secrets.
fn assert_no_wildcards_or_secrets(docs: &[Value]) {
    for role in docs
        .iter()
        .filter(|d| d["kind"] == "Role" || d["kind"] == "ClusterRole")
    {
        for (g, r, v, _) in grants(role) {
            assert!(
                !g.contains('*') && !r.contains('*') && !v.contains('*'),
                "wildcard in {role}"
            );
            assert!(!r.starts_with("secrets"), "secrets in {role}");
        }
    }
}

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
    serde_yaml::from_str(cm["data"]["config.yaml"].as_str().unwrap()).unwrap()
}

fn api_error(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

/// Asserts `result` is the API server's 403.
fn forbidden<T: std::fmt::Debug>(what: &str, result: kube::Result<T>) {
    match result {
        Err(e) if api_error(&e) == Some(403) => {}
        other => panic!("{what}: expected 403 Forbidden, got {other:?}"),
    }
}

/// The resource of a rendered object's apiVersion/kind, through discovery; None when
/// this API server does not serve it.
async fn resource_of(client: &kube::Client, doc: &Value) -> Option<(ApiResource, bool)> {
    let (group, version) = match doc["apiVersion"].as_str()?.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", doc["apiVersion"].as_str()?),
    };
    let gvk = GroupVersionKind::gvk(group, version, doc["kind"].as_str()?);
    let (ar, caps) = kube::discovery::pinned_kind(client, &gvk).await.ok()?;
    Some((ar, caps.scope == kube::discovery::Scope::Namespaced))
}

fn dynamic_api(client: &kube::Client, ar: &ApiResource, namespaced: bool, doc: &Value) -> Api<DynamicObject> {
    match doc["metadata"]["namespace"].as_str() {
        Some(ns) if namespaced => Api::namespaced_with(client.clone(), ns, ar),
        _ => Api::all_with(client.clone(), ar),
    }
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

/// A namespace whose pods must meet the restricted Pod Security Standard.
async fn restricted_namespace(plane: &Plane, prefix: &str) -> Result<String> {
    let ns = plane.namespace(prefix).await?;
    let namespaces: Api<Namespace> = Api::all(plane.client().await?);
    let labels = json!({"metadata": {"labels": {
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/enforce-version": "latest",
    }}});
    namespaces
        .patch(&ns, &PatchParams::default(), &Patch::Merge(&labels))
        .await?;
    Ok(ns)
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

#[test]
fn inspect_prints_the_values_entry_the_chart_takes() -> Result<()> {
    let ha: Value = serde_yaml::from_str(&std::fs::read_to_string(ci_values("ha-values.yaml"))?)?;
    let dir = std::env::temp_dir().join(format!("capstan-helm-inspect-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    for name in ["echo", "scheduled-echo"] {
        let out = Command::new(capstan_bin())
            .args(["inspect", "--helm-values"])
            .arg(plugin(name))
            .output()?;
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8(out.stdout)?;
        let printed: Value = serde_yaml::from_str(&text)?;
        let entry = &printed["plugins"][name];
        // The ci values were written from this output: the same kinds, key for key.
        assert_eq!(entry["parent"], ha["plugins"][name]["parent"], "{name}");
        assert_eq!(entry["children"], ha["plugins"][name]["children"], "{name}");
        assert!(entry.get("source").is_none(), "the source is the user's to add");

        // The user's flow: that output as a values file plus the file itself installs.
        let values = dir.join(format!("{name}.yaml"));
        std::fs::write(&values, &text)?;
        let docs = render(
            "capstan",
            &[
                "-f",
                values.to_str().unwrap(),
                "--set-file",
                &wasm_from(name, &plugin(name)),
            ],
        )?;
        let role = one(&docs, "ClusterRole");
        let expected = match name {
            "echo" => echo_grants(),
            _ => scheduled_echo_grants(),
        };
        assert_eq!(grants(role), union([expected, event_grants()]), "{name}");
    }
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}

#[test]
fn typos_and_unusable_plugins_fail_helm_with_one_clear_message() {
    let echo = wasm_from("echo", &plugin("echo"));
    let single = ci_values("single-values.yaml");
    let chart = chart();
    let chart = chart.to_str().unwrap();
    let big_file = std::env::temp_dir().join(format!("capstan-big-{}.wasm", std::process::id()));
    let mut bytes = b"\0asm\x0d\0\x01\0".to_vec();
    bytes.resize(1_100_000, 0xff);
    std::fs::write(&big_file, bytes).unwrap();
    let big = wasm_from("echo", &big_file);
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["--set-file", &big],
            "a ConfigMap holds at most 1048576: ship it in a volume",
        ),
        (
            vec!["--set", "replicaz=2"],
            "additional properties 'replicaz' not allowed",
        ),
        (
            vec!["--set", "leaderElection.leaseDuraton=20s"],
            "additional properties 'leaseDuraton' not allowed",
        ),
        (
            vec!["--set", "plugins.echo.limits.deadlin=1s"],
            "additional properties 'deadlin' not allowed",
        ),
        (
            vec!["--set", "plugins.echo.parent.namespace=true"],
            "additional properties 'namespace' not allowed",
        ),
        (vec!["--set", "resync=soon"], "/resync"),
        (vec!["--set", "logFormat=yaml"], "/logFormat"),
        (
            vec!["--set", "replicas=2"],
            "more than one host needs leader election",
        ),
        (
            vec!["--set", "plugins.echo.source.wasm=echo.wasm"],
            "plugins.echo.source.wasm is not a WebAssembly file",
        ),
        (
            vec!["--set", "plugins.echo.source.volume.emptyDir.medium=Memory"],
            "plugins.echo.source needs exactly one of wasm",
        ),
        (
            vec!["--set", "plugins.echo.source.file=other.wasm"],
            "plugins.echo.source.file goes with source.volume",
        ),
    ];
    for (extra, needle) in cases {
        let mut args = vec!["template", "capstan", chart, "-f", &single];
        // --set-file wins over --set; the case that sets the wasm itself goes without.
        if !extra.iter().any(|a| a.starts_with("plugins.echo.source.wasm=")) {
            args.extend(["--set-file", &echo]);
        }
        args.extend(extra.iter());
        let Err(err) = helm(&args, None) else {
            panic!("{extra:?} must fail");
        };
        assert!(err.contains(needle), "{extra:?}: {needle:?} not in {err}");
        // One error, not a wall of text.
        assert!(err.trim().lines().count() <= 4, "{extra:?}: {err}");
    }
    // A values file without any plugin says what to add.
    let Err(err) = helm(&["template", "capstan", chart], None) else {
        panic!("no plugins must fail");
    };
    assert!(err.contains("capstan inspect --helm-values"), "{err}");
    std::fs::remove_file(big_file).ok();
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

#[test]
fn hot_reload_keeps_the_pod_template_and_without_it_a_new_plugin_rolls_the_deployment() -> Result<()> {
    let dir = std::env::temp_dir().join(format!("capstan-helm-rollout-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let v2 = dir.join("echo-v2.wasm");
    std::fs::write(
        &v2,
        with_custom_section(&std::fs::read(plugin("echo"))?, "capstan-test", b"v2"),
    )?;
    let template = |hot: bool, wasm: &Path| -> Result<Value> {
        let hot = format!("hotReload.enabled={hot}");
        let docs = render(
            "capstan",
            &[
                "-f",
                &ci_values("single-values.yaml"),
                "--set",
                &hot,
                "--set-file",
                &wasm_from("echo", wasm),
            ],
        )?;
        Ok(one(&docs, "Deployment")["spec"]["template"].clone())
    };
    let v1 = plugin("echo");
    assert_eq!(
        template(true, &v1)?,
        template(true, &v2)?,
        "hot reload: no rollout"
    );
    assert_ne!(
        template(false, &v1)?,
        template(false, &v2)?,
        "no hot reload: a rollout"
    );
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}

#[test]
fn secrets_are_granted_by_the_operator_never_by_the_plugin() -> Result<()> {
    let dir = std::env::temp_dir().join(format!("capstan-helm-secrets-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let values = dir.join("vault.yaml");
    // What `capstan inspect --helm-values` prints for a plugin that declares Secret.
    std::fs::write(
        &values,
        "plugins:\n  vault:\n    source: {volume: {emptyDir: {}}, file: vault.wasm}\n    \
         parent: {group: example.com, version: v1, kind: Vault, plural: vaults, namespaced: true}\n    \
         children: [{group: \"\", version: v1, kind: Secret, plural: secrets, namespaced: true}]\n",
    )?;
    let refused = render("capstan", &["-f", values.to_str().unwrap()]).unwrap_err();
    assert!(
        refused.to_string().contains("plugins.vault.allowSecrets=true"),
        "{refused}"
    );
    let docs = render(
        "capstan",
        &[
            "-f",
            values.to_str().unwrap(),
            "--set",
            "plugins.vault.allowSecrets=true",
        ],
    )?;
    let config = one(&docs, "ConfigMap")["data"]["config.yaml"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(config.contains("allowSecrets: true"), "{config}");
    let granted = of_kind(&docs, "ClusterRole").iter().any(|r| {
        r["rules"].as_array().into_iter().flatten().any(|rule| {
            rule["resources"]
                .as_array()
                .is_some_and(|rs| rs.iter().any(|x| x == "secrets"))
        })
    });
    assert!(granted, "the operator's grant becomes RBAC for Secrets");
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}

/// A copy of a component with one more custom section: another valid plugin file with
/// the same behaviour.
fn with_custom_section(wasm: &[u8], name: &str, payload: &[u8]) -> Vec<u8> {
    fn leb(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let mut body = Vec::new();
    leb(name.len(), &mut body);
    body.extend_from_slice(name.as_bytes());
    body.extend_from_slice(payload);
    let mut out = wasm.to_vec();
    out.push(0);
    leb(body.len(), &mut out);
    out.extend(body);
    out
}

fn base64_decode(text: &str) -> Result<Vec<u8>> {
    // serde_json + k8s-openapi's ByteString already implement base64; reuse it.
    let bytes: k8s_openapi::ByteString = serde_json::from_value(json!(text))?;
    Ok(bytes.0)
}

/// A kubeconfig for the plane's API server (same server and CA) that authenticates as
/// `ns/name` with a fresh TokenRequest token.
async fn service_account_kubeconfig(
    plane: &Plane,
    ns: &str,
    name: &str,
    path: &Path,
) -> Result<kube::Client> {
    let admin = plane.client().await?;
    // No audiences: the API server's own.
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let token = Api::<ServiceAccount>::namespaced(admin, ns)
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .with_context(|| format!("TokenRequest for {ns}/{name}"))?
        .status
        .and_then(|s| s.token)
        .context("a TokenRequest answer without a token")?;
    let plane_config: Value = serde_yaml::from_str(&std::fs::read_to_string(plane.kubeconfig())?)?;
    let cluster = plane_config["clusters"][0]["cluster"].clone();
    let config = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "plane", "cluster": cluster}],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": "plane", "user": name, "namespace": ns}}],
        "current-context": name,
    });
    std::fs::write(path, serde_yaml::to_string(&config)?)?;
    let kc = Kubeconfig::read_from(path)?;
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    Ok(kube::Client::try_from(config)?)
}

/// Lays a ConfigMap out in `dir` the way kubelet does: a timestamped directory, a
/// `..data` symlink swapped atomically to it, and one `key -> ..data/key` link per key.
fn project_config_map(cm: &ConfigMap, dir: &Path, generation: u32) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let stamp = format!("..{generation}");
    let payload = dir.join(&stamp);
    std::fs::create_dir_all(&payload)?;
    let mut keys = Vec::new();
    for (k, v) in cm.data.iter().flatten() {
        std::fs::write(payload.join(k), v)?;
        keys.push(k.clone());
    }
    for (k, v) in cm.binary_data.iter().flatten() {
        std::fs::write(payload.join(k), &v.0)?;
        keys.push(k.clone());
    }
    let tmp = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(&stamp, &tmp)?;
    std::fs::rename(&tmp, dir.join("..data"))?;
    for k in keys {
        let link = dir.join(&k);
        if link.symlink_metadata().is_err() {
            std::os::unix::fs::symlink(format!("..data/{k}"), link)?;
        }
    }
    Ok(())
}

/// `capstan run` on this machine standing in for one pod of an installed Deployment:
/// its volumes laid out under `root` (ConfigMaps read from the cluster, image volumes
/// filled with the built plugin), its arguments with the in-pod paths moved under
/// `root`, its environment with the downward API resolved, and the ServiceAccount's
/// token as the only credential.
struct PodOnThisMachine {
    child: Child,
    root: PathBuf,
    log: PathBuf,
    pod_name: String,
}

impl Drop for PodOnThisMachine {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl PodOnThisMachine {
    async fn start(
        admin: &kube::Client,
        deployment: &Deployment,
        pod_name: &str,
        kubeconfig: &Path,
        root: &Path,
        images: &[(&str, PathBuf)],
    ) -> Result<Self> {
        let ns = deployment.metadata.namespace.clone().context("namespace")?;
        let spec = deployment.spec.template.spec.clone().context("pod spec")?;
        let c = &spec.containers[0];
        let volumes = spec.volumes.clone().unwrap_or_default();
        let local = |p: &str| root.join(p.trim_start_matches('/'));
        for mount in c.volume_mounts.iter().flatten() {
            let v = volumes
                .iter()
                .find(|v| v.name == mount.name)
                .context("mounted volume")?;
            let dir = local(&mount.mount_path);
            if let Some(source) = &v.config_map {
                let cm = Api::<ConfigMap>::namespaced(admin.clone(), &ns)
                    .get(&source.name)
                    .await?;
                project_config_map(&cm, &dir, 1)?;
            } else if let Some(image) = &v.image {
                let reference = image.reference.as_deref().unwrap_or_default();
                let (_, file) = images
                    .iter()
                    .find(|(r, _)| *r == reference)
                    .with_context(|| format!("no local content for image {reference}"))?;
                std::fs::create_dir_all(&dir)?;
                std::fs::copy(file, dir.join(file.file_name().unwrap()))?;
            } else if v.empty_dir.is_some() {
                std::fs::create_dir_all(&dir)?;
            } else {
                bail!("volume {} has a source this test does not lay out", v.name);
            }
        }
        let mounts: Vec<String> = c
            .volume_mounts
            .iter()
            .flatten()
            .map(|m| m.mount_path.clone())
            .collect();
        let args: Vec<String> = c
            .args
            .iter()
            .flatten()
            .map(|a| {
                if a.starts_with("--metrics-addr=") {
                    return "--metrics-addr=127.0.0.1:0".to_string();
                }
                if a.starts_with("--health-addr=") {
                    return "--health-addr=127.0.0.1:0".to_string();
                }
                match a.split_once('=') {
                    Some((flag, path)) if mounts.iter().any(|m| path.starts_with(m.as_str())) => {
                        format!("{flag}={}", local(path).display())
                    }
                    _ => a.clone(),
                }
            })
            .collect();
        ensure!(
            args.iter()
                .any(|a| a.starts_with("--config=") && a.contains(&*root.to_string_lossy()))
        );
        let log = root.join("host.log");
        let mut command = Command::new(capstan_bin());
        command
            .args(&args)
            .env("KUBECONFIG", kubeconfig)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?);
        for e in c.env.iter().flatten() {
            let field = e
                .value_from
                .as_ref()
                .and_then(|f| f.field_ref.as_ref())
                .map(|f| f.field_path.as_str());
            let value = match (e.value.as_deref(), field) {
                (Some(v), _) => v.to_string(),
                (None, Some("metadata.name")) => pod_name.to_string(),
                (None, Some("metadata.namespace")) => ns.clone(),
                other => bail!("env {} from {other:?}", e.name),
            };
            command.env(&e.name, value);
        }
        let child = command.spawn().context("starting capstan run")?;
        Ok(Self {
            child,
            root: root.to_path_buf(),
            log,
            pod_name: pod_name.to_string(),
        })
    }

    fn log(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn metrics_address(&self) -> Option<String> {
        self.log()
            .into_iter()
            .find(|l| l["message"] == "serving metrics")
            .and_then(|l| l["address"].as_str().map(String::from))
    }

    fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(format!("capstan run exited ({status}):\n{}", self.log_text())),
            _ => None,
        }
    }
}

/// Creates an Echo (as admin) and waits for its Job and for status Succeeded.
async fn echo_converges(
    admin: &kube::Client,
    host: &mut PodOnThisMachine,
    ns: &str,
    name: &str,
) -> Result<Job> {
    let echoes: Api<DynamicObject> = Api::namespaced_with(admin.clone(), ns, &echo_resource());
    let echo: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "capstan.dev/v1alpha1", "kind": "Echo",
        "metadata": {"name": name}, "spec": {"message": format!("hello from {name}")},
    }))?;
    let uid = echoes.create(&PostParams::default(), &echo).await?.metadata.uid;
    let jobs: Api<Job> = Api::namespaced(admin.clone(), ns);
    let job = eventually(
        &format!("the Job of Echo {ns}/{name}"),
        Duration::from_secs(60),
        async || {
            if let Some(e) = host.exited() {
                bail!(e);
            }
            let list = jobs.list(&ListParams::default()).await?.items;
            Ok(list.into_iter().find(|j| {
                j.metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|o| Some(&o.uid) == uid.as_ref())
            }))
        },
    )
    .await?;
    eventually(
        &format!("Echo {ns}/{name} Succeeded"),
        Duration::from_secs(90),
        async || {
            let e = echoes.get(name).await?;
            Ok((e.data["status"]["phase"] == "Succeeded").then_some(()))
        },
    )
    .await
    .with_context(|| host.log_text())?;
    Ok(job)
}

/// Every rendered object exists in the cluster holding at least the rendered fields.
async fn assert_installed_as_rendered(admin: &kube::Client, manifest: &[Value]) -> Result<()> {
    for doc in manifest {
        let (ar, namespaced) = resource_of(admin, doc).await.context("a served kind")?;
        let name = doc["metadata"]["name"].as_str().unwrap();
        let live = dynamic_api(admin, &ar, namespaced, doc)
            .get(name)
            .await
            .with_context(|| format!("{} {name} installed", doc["kind"]))?;
        let live = serde_json::to_value(live)?;
        if let Err(path) = subset(doc, &live, String::new()) {
            bail!(
                "{} {name}: live object differs from the rendered one at {path}",
                doc["kind"]
            );
        }
    }
    Ok(())
}

/// Ok when every field of `want` is in `have` (arrays element by element).
fn subset(want: &Value, have: &Value, path: String) -> Result<(), String> {
    match (want, have) {
        (Value::Object(w), Value::Object(h)) => {
            for (k, v) in w {
                subset(v, h.get(k).unwrap_or(&Value::Null), format!("{path}.{k}"))?;
            }
            Ok(())
        }
        (Value::Array(w), Value::Array(h)) if w.len() == h.len() => {
            for (i, (a, b)) in w.iter().zip(h).enumerate() {
                subset(a, b, format!("{path}[{i}]"))?;
            }
            Ok(())
        }
        (w, h) if w == h => Ok(()),
        (w, h) => Err(format!("{path}: {w} != {h}")),
    }
}

async fn crds_established(admin: &kube::Client) -> Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(admin.clone());
    for entry in std::fs::read_dir(chart().join("crds"))? {
        let file: Value = serde_yaml::from_str(&std::fs::read_to_string(entry?.path())?)?;
        let name = file["metadata"]["name"].as_str().unwrap().to_string();
        let live = eventually(
            &format!("CRD {name} Established"),
            Duration::from_secs(60),
            async || {
                let crd = crds.get_opt(&name).await?;
                Ok(crd.filter(|c| {
                    c.status
                        .iter()
                        .flat_map(|s| s.conditions.iter().flatten())
                        .any(|c| c.type_ == "Established" && c.status == "True")
                }))
            },
        )
        .await?;
        subset(&file["spec"], &serde_json::to_value(&live.spec)?, name.clone())
            .map_err(|p| anyhow::anyhow!("CRD differs from crds/ at {p}"))?;
    }
    Ok(())
}

/// Names of the Deployment's pods once `replicas` of them are available: admitted by
/// the restricted namespace and run by kwok's fake node.
async fn available_pods(admin: &kube::Client, ns: &str, name: &str, replicas: i32) -> Result<Vec<String>> {
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), ns);
    eventually(
        &format!("{replicas} available pods of {name}"),
        Duration::from_secs(90),
        async || {
            let d = deployments.get(name).await?;
            let available = d.status.as_ref().and_then(|s| s.available_replicas).unwrap_or(0);
            if available < replicas {
                return Ok(None);
            }
            let selector = "app.kubernetes.io/instance=".to_string()
                + &d.metadata.labels.unwrap()["app.kubernetes.io/instance"];
            let pods = Api::<Pod>::namespaced(admin.clone(), ns)
                .list(&ListParams::default().labels(&selector))
                .await?;
            Ok(Some(
                pods.items.into_iter().filter_map(|p| p.metadata.name).collect(),
            ))
        },
    )
    .await
}

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
            Ok((holder.as_deref() == Some(host.pod_name.as_str())).then_some(()))
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
