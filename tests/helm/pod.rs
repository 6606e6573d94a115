//! `capstan run` on this machine standing in for a pod of an installed chart, and what
//! the install tests check around it: the ServiceAccount's own kubeconfig, ConfigMap
//! volumes laid out as kubelet does, Echo convergence, the release as rendered, the CRDs
//! and the Deployment's available pods. Used by `helm_install.rs`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::capstan_bin;
use crate::host::{echo_resource, eventually};
use anyhow::{Context, Result, bail, ensure};
use capstan::dev::Plane;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::{Value, json};

use super::{chart, dynamic_api, resource_of, subset};

/// A kubeconfig for the plane's API server (same server and CA) that authenticates as
/// `ns/name` with a fresh TokenRequest token.
pub async fn service_account_kubeconfig(
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
    let plane_config: Value = serde_saphyr::from_str(&std::fs::read_to_string(plane.kubeconfig())?)?;
    let cluster = plane_config["clusters"][0]["cluster"].clone();
    let config = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "plane", "cluster": cluster}],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": "plane", "user": name, "namespace": ns}}],
        "current-context": name,
    });
    std::fs::write(path, serde_saphyr::to_string(&config)?)?;
    let kc = Kubeconfig::read_from(path)?;
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    Ok(kube::Client::try_from(config)?)
}

/// Lays a ConfigMap out in `dir` the way kubelet does: a timestamped directory, a
/// `..data` symlink swapped atomically to it, and one `key -> ..data/key` link per key.
pub fn project_config_map(cm: &ConfigMap, dir: &Path, generation: u32) -> Result<()> {
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
pub struct PodOnThisMachine {
    child: Child,
    /// Where the pod's volumes are laid out (its filesystem root).
    pub root: PathBuf,
    log: PathBuf,
    /// The pod it stands in for (`POD_NAME`).
    pub pod_name: String,
}

impl Drop for PodOnThisMachine {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl PodOnThisMachine {
    pub async fn start(
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
            } else if let Some(source) = &v.secret {
                // Laid out as kubelet projects a ConfigMap: the same ..data flip.
                let name = source.secret_name.as_deref().unwrap_or_default();
                let secret = Api::<Secret>::namespaced(admin.clone(), &ns).get(name).await?;
                let as_files = ConfigMap {
                    binary_data: secret.data,
                    ..ConfigMap::default()
                };
                project_config_map(&as_files, &dir, 1)?;
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
            // The pod's environment, not the user's: a compile cache its arguments did not
            // name would land in the pod's own home (under `root`), never in ~/.cache.
            .env("HOME", root)
            .env_remove("XDG_CACHE_HOME")
            .env_remove("CAPSTAN_CACHE_DIR")
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

    pub fn log(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn metrics_address(&self) -> Option<String> {
        self.log()
            .into_iter()
            .find(|l| l["message"] == "serving metrics")
            .and_then(|l| l["address"].as_str().map(String::from))
    }

    pub fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(format!("capstan run exited ({status}):\n{}", self.log_text())),
            _ => None,
        }
    }
}

/// Creates an Echo (as admin) and waits for its Job and for status Succeeded.
pub async fn echo_converges(
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
pub async fn assert_installed_as_rendered(admin: &kube::Client, manifest: &[Value]) -> Result<()> {
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

pub async fn crds_established(admin: &kube::Client) -> Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(admin.clone());
    for entry in std::fs::read_dir(chart().join("crds"))? {
        let file: Value = serde_saphyr::from_str(&std::fs::read_to_string(entry?.path())?)?;
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
pub async fn available_pods(
    admin: &kube::Client,
    ns: &str,
    name: &str,
    replicas: i32,
) -> Result<Vec<String>> {
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
