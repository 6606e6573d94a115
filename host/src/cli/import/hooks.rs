//! Where a Metacontroller hook's code is, by the conventions of Metacontroller's own
//! examples: the webhook's URL names a Service of the example, the Service selects a
//! Deployment, the Deployment runs a script from a ConfigMap that a kustomization
//! generates from files beside it.

use std::path::PathBuf;

use anyhow::{Context, bail};
use serde_json::Value;

use super::example::Example;

/// A hook's source file and the URL path it is called at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct HookFile {
    /// The script on disk, as the ConfigMap generator names it.
    pub script: PathBuf,
    /// The webhook's path (`/sync`), which the script's handler is told.
    pub url_path: String,
    /// What ran it under Metacontroller, and so what runs it in the plugin.
    pub runtime: Runtime,
}

/// The runtimes of Metacontroller's examples that the importer knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Runtime {
    /// A Python script serving HTTP with `http.server`, run by `python`.
    Python,
    /// Metacontroller's nodejs server: `/NAME` is `hooks/NAME.js`, a fission-style
    /// `module.exports = async function (context)`.
    Fission,
    /// Metacontroller's jsonnetd: `/NAME` is `NAME.jsonnet` in its working directory, a
    /// function of the request.
    Jsonnet,
}

impl Runtime {
    /// The hooks' language, as the importer names it.
    pub fn language(self) -> &'static str {
        match self {
            Runtime::Python => "Python",
            Runtime::Fission => "JavaScript",
            Runtime::Jsonnet => "Jsonnet",
        }
    }
}

/// The file behind the hook at `field` (`spec.hooks.sync`) of a controller.
pub(super) fn resolve(example: &Example, field: &str, hook: &Value) -> anyhow::Result<HookFile> {
    let webhook = hook
        .get("webhook")
        .with_context(|| format!("{field}: no webhook (only webhooks are imported)"))?;
    let (service, namespace, url_path, shown) = target(field, webhook)?;
    let svc = example
        .of_kind("Service")
        .map(|(_, o)| o)
        .find(|s| {
            s["metadata"]["name"] == service.as_str()
                && namespace.as_deref().is_none_or(|ns| s["metadata"]["namespace"] == ns)
        })
        .with_context(|| {
            format!("{field}.webhook: {shown} is no Service of the example: a hook served outside it cannot be imported")
        })?;
    let deployment = serving(example, svc)
        .with_context(|| format!("{field}.webhook: no Deployment of the example serves Service {service}"))?;
    let (script, runtime) = script_of(example, deployment, &url_path)?;
    Ok(HookFile {
        script,
        url_path,
        runtime,
    })
}

/// (service, namespace, path, how the field showed it) of a webhook's `url` or `service`.
fn target(field: &str, webhook: &Value) -> anyhow::Result<(String, Option<String>, String, String)> {
    if let Some(url) = webhook["url"].as_str() {
        let rest = url
            .split_once("://")
            .map(|(_, r)| r)
            .with_context(|| format!("{field}.webhook.url {url}: not a URL"))?;
        let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
        let host = host.split(':').next().unwrap_or(host);
        let mut labels = host.split('.');
        let service = labels.next().unwrap_or_default().to_string();
        let namespace = labels.next().map(str::to_string);
        return Ok((service, namespace, format!("/{path}"), format!("url {url}")));
    }
    let service = &webhook["service"];
    let name = service["name"]
        .as_str()
        .with_context(|| format!("{field}.webhook: neither url nor service.name"))?;
    let path = webhook["path"].as_str().unwrap_or("/");
    let namespace = service["namespace"].as_str().map(str::to_string);
    Ok((
        name.to_string(),
        namespace,
        path.to_string(),
        format!("service {name}"),
    ))
}

/// The Deployment whose pods `service` selects.
fn serving<'a>(example: &'a Example, service: &Value) -> Option<&'a Value> {
    let selector = service["spec"]["selector"].as_object()?;
    example.of_kind("Deployment").map(|(_, d)| d).find(|d| {
        let labels = &d["spec"]["template"]["metadata"]["labels"];
        !selector.is_empty() && selector.iter().all(|(k, v)| &labels[k] == v)
    })
}

/// The script a Deployment's first container runs for `url_path`, and its runtime: a
/// Python script the command names, or the nodejs server's `NAME.js` (jsonnetd's
/// `NAME.jsonnet`) for `/NAME`.
fn script_of(example: &Example, deployment: &Value, url_path: &str) -> anyhow::Result<(PathBuf, Runtime)> {
    let name = deployment["metadata"]["name"].as_str().unwrap_or_default();
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let image = container["image"].as_str().unwrap_or_default();
    let words: Vec<&str> = ["command", "args"]
        .iter()
        .flat_map(|f| container[f].as_array().into_iter().flatten())
        .filter_map(Value::as_str)
        .collect();
    let program = |w: &str| w.rsplit('/').next().unwrap_or(w).to_string();
    let python = words.first().is_some_and(|w| program(w).starts_with("python"));
    if let Some(script) = words.iter().find(|w| w.ends_with(".py")).filter(|_| python) {
        return Ok((mounted(example, deployment, script)?, Runtime::Python));
    }
    let repository = image.split(['@', ':']).next().unwrap_or(image);
    let (server, extension, runtime) = match program(repository).as_str() {
        "nodejs-server" => ("the nodejs server", "js", Runtime::Fission),
        "jsonnetd" => ("jsonnetd", "jsonnet", Runtime::Jsonnet),
        _ => bail!(
            "Deployment {name}: its runtime (image {image}, command {words:?}) is not one the importer knows: a Python script run by python, metacontroller/nodejs-server or metacontroller/jsonnetd"
        ),
    };
    let hook = url_path
        .trim_start_matches('/')
        .split('/')
        .next()
        .unwrap_or_default();
    anyhow::ensure!(
        !hook.is_empty(),
        "Deployment {name}: {server} serves /NAME from NAME.{extension}, and the webhook's path {url_path:?} names none"
    );
    let script = mounted_file(example, deployment, &format!("{hook}.{extension}"))?;
    Ok((script, runtime))
}

/// The file at absolute `path` in the container, from the generated ConfigMap mounted there.
fn mounted(example: &Example, deployment: &Value, path: &str) -> anyhow::Result<PathBuf> {
    let name = deployment["metadata"]["name"].as_str().unwrap_or_default();
    let mounts = config_map_mounts(deployment);
    let (at, config_map) = mounts
        .iter()
        .find(|(at, _)| path.starts_with(&format!("{}/", at.trim_end_matches('/'))))
        .with_context(|| format!("Deployment {name}: no ConfigMap volume is mounted where {path} is"))?;
    let file = &path[at.trim_end_matches('/').len() + 1..];
    generated(example, config_map, file)
        .with_context(|| format!("Deployment {name}: no configMapGenerator {config_map} holds {file}"))
}

/// The file named `file` in any generated ConfigMap the container mounts.
fn mounted_file(example: &Example, deployment: &Value, file: &str) -> anyhow::Result<PathBuf> {
    let name = deployment["metadata"]["name"].as_str().unwrap_or_default();
    config_map_mounts(deployment)
        .iter()
        .find_map(|(_, config_map)| generated(example, config_map, file))
        .with_context(|| format!("Deployment {name}: no ConfigMap it mounts holds {file}"))
}

/// (mount path, ConfigMap name) of each ConfigMap volume the first container mounts.
fn config_map_mounts(deployment: &Value) -> Vec<(String, String)> {
    let pod = &deployment["spec"]["template"]["spec"];
    let volumes = pod["volumes"].as_array().map(Vec::as_slice).unwrap_or_default();
    (pod["containers"][0]["volumeMounts"]
        .as_array()
        .into_iter()
        .flatten())
    .filter_map(|m| {
        let volume = volumes.iter().find(|v| v["name"] == m["name"])?;
        let config_map = volume["configMap"]["name"].as_str()?;
        Some((m["mountPath"].as_str()?.to_string(), config_map.to_string()))
    })
    .collect()
}

/// The generator `config_map`'s file named `file`.
fn generated(example: &Example, config_map: &str, file: &str) -> Option<PathBuf> {
    (example.generated.iter())
        .filter(|(generated, _)| generated == config_map)
        .flat_map(|(_, files)| files)
        .find(|f| f.file_name().is_some_and(|n| n.to_string_lossy() == file))
        .cloned()
}
