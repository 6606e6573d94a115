//! Helpers shared by the Helm chart tests (`helm_render`, `helm_dry_run`, `helm_install`,
//! `node`): the pinned `helm` and `helm template` of `charts/capstan`, picking
//! rendered objects apart, the exact RBAC a plugin needs, and the API server's view of
//! rendered objects (discovery, 403s, restricted namespaces).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::workspace;
use anyhow::Result;
use capstan::dev::{Plane, Versions};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::{Value, json};

pub mod pod;

pub fn chart() -> PathBuf {
    workspace().join("charts/capstan")
}

pub fn ci_values(name: &str) -> String {
    chart().join("ci").join(name).display().to_string()
}

/// The pinned helm, built into the cache by `scripts/k8s-build.sh helm` when missing.
pub fn helm_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| crate::pinned_tool("helm", "HELM_VERSION", "helm"))
}

/// `helm ARGS` with its own config/cache/data dirs; only with `kubeconfig` may it reach
/// a cluster. Ok(stdout) on success, Err(stderr) otherwise.
pub fn helm(args: &[&str], kubeconfig: Option<&Path>) -> Result<String, String> {
    helm_in(Path::new("."), args, kubeconfig)
}

/// [`helm`] run in `dir`, where the arguments' relative paths are.
pub fn helm_in(dir: &Path, args: &[&str], kubeconfig: Option<&Path>) -> Result<String, String> {
    // One stable home under target/tmp: nothing accumulates in /tmp.
    let home = crate::target_dir().join("tmp/helm-home");
    let out = Command::new(helm_bin())
        .current_dir(dir)
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

pub fn helm_ok(args: &[&str], kubeconfig: Option<&Path>) -> Result<String> {
    helm(args, kubeconfig).map_err(|e| anyhow::anyhow!("helm {}: {e}", args.join(" ")))
}

/// `--set-file` of a plugin's `.wasm` as the chart-made ConfigMap source.
pub fn wasm_from(name: &str, file: &Path) -> String {
    format!("plugins.{name}.source.wasm={}", file.display())
}

/// The YAML documents of a multi-document text, nulls dropped.
pub fn documents(text: &str) -> Result<Vec<Value>> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(text)?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

/// `helm template` of release `capstan` in namespace `ns` for the pinned Kubernetes.
pub fn render(ns: &str, args: &[&str]) -> Result<Vec<Value>> {
    let kube_version = Versions::pinned().kubernetes;
    let chart = chart();
    let mut all = vec!["template", "capstan", chart.to_str().unwrap(), "-n", ns];
    all.extend_from_slice(&["--kube-version", &kube_version]);
    all.extend_from_slice(args);
    documents(&helm_ok(&all, None)?)
}

pub fn of_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

pub fn one<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    let found = of_kind(docs, kind);
    assert_eq!(found.len(), 1, "one {kind} expected, got {}", found.len());
    found[0]
}

/// The host config (`config.yaml`) of the chart's one ConfigMap, as text.
pub fn host_config(docs: &[Value]) -> &str {
    one(docs, "ConfigMap")["data"]["config.yaml"]
        .as_str()
        .unwrap_or_default()
}

pub fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| a.iter().filter_map(|s| s.as_str().map(String::from)).collect())
        .unwrap_or_default()
}

/// One permission: (API group, resource, verb, resource name or "").
pub type Grant = (String, String, String, String);

pub fn grants(role: &Value) -> BTreeSet<Grant> {
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

pub fn grant(group: &str, resource: &str, verbs: &[&str]) -> BTreeSet<Grant> {
    verbs
        .iter()
        .map(|v| (group.into(), resource.into(), v.to_string(), String::new()))
        .collect()
}

/// What a plugin with `parent` (no finalizer) and `children` needs, and nothing more.
pub fn plugin_grants(group: &str, parent: &str, children: &[(&str, &str)]) -> BTreeSet<Grant> {
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

/// Echo's: its Jobs, and read-only ConfigMaps (`spec.messageFrom`).
pub fn echo_grants() -> BTreeSet<Grant> {
    let mut g = plugin_grants("capstan.dev", "echoes", &[("batch", "jobs")]);
    g.extend(grant("", "configmaps", &["get", "list", "watch"]));
    g
}

pub fn scheduled_echo_grants() -> BTreeSet<Grant> {
    plugin_grants("capstan.dev", "scheduledechoes", &[("batch", "cronjobs")])
}

pub fn event_grants() -> BTreeSet<Grant> {
    grant("events.k8s.io", "events", &["create", "patch"])
}

pub fn lease_grants(name: &str) -> BTreeSet<Grant> {
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

pub fn union(sets: impl IntoIterator<Item = BTreeSet<Grant>>) -> BTreeSet<Grant> {
    sets.into_iter().flatten().collect()
}

/// No role anywhere grants a wildcard or Secrets.
pub fn assert_no_wildcards_or_secrets(docs: &[Value]) {
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

pub fn api_error(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

/// Asserts `result` is the API server's 403.
pub fn forbidden<T: std::fmt::Debug>(what: &str, result: kube::Result<T>) {
    match result {
        Err(e) if api_error(&e) == Some(403) => {}
        other => panic!("{what}: expected 403 Forbidden, got {other:?}"),
    }
}

/// The resource of a rendered object's apiVersion/kind, through discovery; None when
/// this API server does not serve it.
pub async fn resource_of(client: &kube::Client, doc: &Value) -> Option<(ApiResource, bool)> {
    let (group, version) = match doc["apiVersion"].as_str()?.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", doc["apiVersion"].as_str()?),
    };
    let gvk = GroupVersionKind::gvk(group, version, doc["kind"].as_str()?);
    let (ar, caps) = kube::discovery::pinned_kind(client, &gvk).await.ok()?;
    Some((ar, caps.scope == kube::discovery::Scope::Namespaced))
}

pub fn dynamic_api(
    client: &kube::Client,
    ar: &ApiResource,
    namespaced: bool,
    doc: &Value,
) -> Api<DynamicObject> {
    match doc["metadata"]["namespace"].as_str() {
        Some(ns) if namespaced => Api::namespaced_with(client.clone(), ns, ar),
        _ => Api::all_with(client.clone(), ar),
    }
}

/// A namespace whose pods must meet the restricted Pod Security Standard.
pub async fn restricted_namespace(plane: &Plane, prefix: &str) -> Result<String> {
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

/// A copy of a component with one more custom section: another valid plugin file with
/// the same behaviour.
pub fn with_custom_section(wasm: &[u8], name: &str, payload: &[u8]) -> Vec<u8> {
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

/// Ok when every field of `want` is in `have` (arrays element by element).
pub fn subset(want: &Value, have: &Value, path: String) -> Result<(), String> {
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
