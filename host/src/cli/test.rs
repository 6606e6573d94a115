//! `capstan test`: run a compiled plugin offline, in the real sandbox, on fixture files —
//! what `kwctl run` and `crossplane render` are for their ecosystems.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use serde_json::{Value, json};

use super::input;
use crate::engine::{DispatchError, Request};

/// Arguments of `capstan test`.
#[derive(Args, Debug)]
pub struct TestArgs {
    #[command(flatten)]
    plugin: super::PluginArgs,
    #[command(flatten)]
    fixtures: input::FixtureArgs,
    /// Reconcile as if the parent were being deleted (finalizer cleanup).
    #[arg(long)]
    finalizing: bool,
    /// Expected output; exit 1 with a diff when the actual output differs semantically.
    #[arg(long)]
    expect: Option<PathBuf>,
}

pub fn run(args: TestArgs) -> anyhow::Result<ExitCode> {
    let plugin = args.plugin.load()?;
    let parents = args.fixtures.parents()?;
    let children = args.fixtures.children()?;
    let outcomes: Vec<Value> = parents
        .into_iter()
        .map(|parent| {
            let request = Request {
                parent,
                children: children.clone(),
                finalizing: args.finalizing,
            };
            outcome(plugin.reconcile(&request))
        })
        .collect::<anyhow::Result<_>>()?;
    let actual = to_yaml(&outcomes)?;
    print!("{actual}");

    let Some(expect) = args.expect else {
        return Ok(ExitCode::SUCCESS);
    };
    let expected = input::documents(&expect)?;
    if canonical(expected.clone()) == canonical(outcomes) {
        eprintln!("ok: output matches {}", expect.display());
        return Ok(ExitCode::SUCCESS);
    }
    let diff = similar::TextDiff::from_lines(&to_yaml(&expected)?, &actual)
        .unified_diff()
        .header(&expect.display().to_string(), "actual")
        .to_string();
    eprintln!("mismatch: output differs from {}\n{diff}", expect.display());
    Ok(ExitCode::from(1))
}

/// A response, or the error as data so fixtures can expect failures too.
fn outcome(result: Result<crate::engine::Response, DispatchError>) -> anyhow::Result<Value> {
    Ok(match result {
        Ok(response) => serde_json::to_value(response).context("serializing the response")?,
        Err(DispatchError::Retry(m)) => json!({ "error": { "retry": m } }),
        Err(DispatchError::Fatal(m)) => json!({ "error": { "fatal": m } }),
        Err(DispatchError::Fault(f)) => {
            json!({ "error": { "fault": f.cause(), "message": f.to_string() } })
        }
    })
}

fn canonical(mut docs: Vec<Value>) -> Vec<Value> {
    docs.iter_mut().for_each(Value::sort_all_objects);
    docs
}

fn to_yaml(docs: &[Value]) -> anyhow::Result<String> {
    let mut out = String::new();
    for doc in canonical(docs.to_vec()) {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(&doc)?);
    }
    Ok(out)
}
