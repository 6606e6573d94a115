//! `capstan inspect`: what a plugin declares.

use std::collections::BTreeMap;
use std::process::ExitCode;

use clap::Args;
use serde::Serialize;

use crate::engine::{Kind, Metadata};

/// Arguments of `capstan inspect`.
#[derive(Args, Debug)]
pub struct InspectArgs {
    #[command(flatten)]
    plugin: super::PluginArgs,
    /// Print the plugin's entry for the Helm chart's values (its kinds, from which the
    /// chart generates RBAC) instead of the report.
    #[arg(long)]
    helm_values: bool,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Report<'a> {
    wit: String,
    size_bytes: u64,
    #[serde(flatten)]
    metadata: &'a Metadata,
}

/// `plugins.<name>` of `charts/capstan/values.yaml`, without the source.
#[derive(Serialize)]
struct HelmValues<'a> {
    plugins: BTreeMap<&'a str, HelmPlugin<'a>>,
}

#[derive(Serialize)]
struct HelmPlugin<'a> {
    parent: &'a Kind,
    children: &'a [Kind],
    #[serde(skip_serializing_if = "<[Kind]>::is_empty")]
    related: &'a [Kind],
    #[serde(skip_serializing_if = "Option::is_none")]
    finalizer: Option<&'a str>,
}

fn helm_values(metadata: &Metadata, file: &str) -> anyhow::Result<String> {
    let name = metadata.name.as_str();
    let values = HelmValues {
        plugins: BTreeMap::from([(
            name,
            HelmPlugin {
                parent: &metadata.parent,
                children: &metadata.children,
                related: &metadata.related,
                finalizer: metadata.finalizer.as_deref(),
            },
        )]),
    };
    Ok(format!(
        "# Values for charts/capstan: the kinds {name} {version} declares (the chart's RBAC comes from them).\n\
         # Add its source: --set-file plugins.{name}.source.wasm={file}, or plugins.{name}.source.volume and .file.\n{}",
        serde_saphyr::to_string(&values)?,
        version = metadata.version,
    ))
}

pub fn run(args: InspectArgs) -> anyhow::Result<ExitCode> {
    let (path, plugin) = args.plugin.load()?;
    if args.helm_values {
        let file = path.file_name().unwrap_or_default().to_string_lossy();
        print!("{}", helm_values(plugin.metadata(), &file)?);
        return Ok(ExitCode::SUCCESS);
    }
    let size_bytes = std::fs::metadata(&path)?.len();
    let report = Report {
        wit: format!("capstan:reconciler@{}", plugin.contract_version()),
        size_bytes,
        metadata: plugin.metadata(),
    };
    print!("{}", serde_saphyr::to_string(&report)?);
    Ok(ExitCode::SUCCESS)
}
