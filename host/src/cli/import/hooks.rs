//! Where a Metacontroller hook's code is, by the conventions of Metacontroller's own
//! examples: the webhook's URL names a Service of the example, the Service selects a
//! Deployment, the Deployment runs a script from a ConfigMap that a kustomization
//! generates from files beside it.

use std::path::PathBuf;

use anyhow::{Context, bail};
use serde_json::Value;

use super::example::Example;

/// A hook's source file and the URL path it is called at.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct HookFile {
    /// The script on disk, as the ConfigMap generator names it.
    pub script: PathBuf,
    /// The webhook's path (`/sync`), which the script's handler is told.
    pub url_path: String,
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
    let script = script_of(example, deployment)?;
    Ok(HookFile { script, url_path })
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

/// The script a Deployment's first container runs, found in the generated ConfigMap its
/// volume mounts.
fn script_of(example: &Example, deployment: &Value) -> anyhow::Result<PathBuf> {
    let name = deployment["metadata"]["name"].as_str().unwrap_or_default();
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let image = container["image"].as_str().unwrap_or_default();
    let words: Vec<&str> = ["command", "args"]
        .iter()
        .flat_map(|f| container[f].as_array().into_iter().flatten())
        .filter_map(Value::as_str)
        .collect();
    let python = words
        .first()
        .is_some_and(|w| w.rsplit('/').next().unwrap_or(w).starts_with("python"));
    let Some(script) = words.iter().find(|w| w.ends_with(".py")).filter(|_| python) else {
        bail!(
            "Deployment {name}: its runtime (image {image}, command {words:?}) is not one the importer knows: a Python script run by python"
        );
    };
    let mount = container["volumeMounts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| Some((m["name"].as_str()?, m["mountPath"].as_str()?)))
        .find(|(_, at)| script.starts_with(&format!("{}/", at.trim_end_matches('/'))))
        .with_context(|| format!("Deployment {name}: no volume is mounted where {script} is"))?;
    let config_map = pod["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| v["name"] == mount.0)
        .and_then(|v| v["configMap"]["name"].as_str())
        .with_context(|| format!("Deployment {name}: volume {} is not a ConfigMap", mount.0))?;
    let file = script[mount.1.trim_end_matches('/').len() + 1..].to_string();
    example
        .generated
        .iter()
        .filter(|(generated, _)| generated == config_map)
        .flat_map(|(_, files)| files)
        .find(|f| f.file_name().is_some_and(|n| n.to_string_lossy() == file))
        .cloned()
        .with_context(|| format!("Deployment {name}: no configMapGenerator {config_map} holds {file}"))
}
