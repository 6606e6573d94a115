//! `capstan inspect`: what a plugin declares.

use std::process::ExitCode;

use clap::Args;
use serde::Serialize;

use crate::engine::{Metadata, WIT_PACKAGE};

/// Arguments of `capstan inspect`.
#[derive(Args, Debug)]
pub struct InspectArgs {
    #[command(flatten)]
    plugin: super::PluginArgs,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Report<'a> {
    wit: &'a str,
    size_bytes: u64,
    #[serde(flatten)]
    metadata: &'a Metadata,
}

pub fn run(args: InspectArgs) -> anyhow::Result<ExitCode> {
    let plugin = args.plugin.load()?;
    let size_bytes = std::fs::metadata(&args.plugin.plugin)?.len();
    let report = Report {
        wit: WIT_PACKAGE,
        size_bytes,
        metadata: plugin.metadata(),
    };
    print!("{}", serde_yaml::to_string(&report)?);
    Ok(ExitCode::SUCCESS)
}
