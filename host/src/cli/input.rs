//! Reading YAML or JSON files of one or more documents, with the path in every error.

use std::path::Path;

use anyhow::Context;

use crate::engine::{DispatchError, Json, Plugin, RelatedParent, Request};

/// Every non-empty document in a YAML or JSON file (`---` separates YAML documents).
pub fn documents(path: &Path) -> anyhow::Result<Vec<serde_json::Value>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let docs =
        serde_saphyr::from_multiple_with_options::<serde_json::Value>(&text, crate::config::yaml_options())
            .with_context(|| format!("{} is not valid YAML or JSON", path.display()))?
            .into_iter()
            .filter(|doc| !doc.is_null())
            .collect::<Vec<_>>();
    if let Some(i) = docs.iter().position(|d| !d.is_object()) {
        anyhow::bail!("{}: document {} is not an object", path.display(), i + 1);
    }
    Ok(docs)
}

/// Every document of every file, in order.
pub fn all_documents(paths: &[impl AsRef<Path>]) -> anyhow::Result<Vec<serde_json::Value>> {
    let mut all = Vec::new();
    for path in paths {
        all.extend(documents(path.as_ref())?);
    }
    Ok(all)
}

/// The fixture files of `capstan test` and `capstan bench`.
#[derive(clap::Args, Debug)]
pub struct FixtureArgs {
    /// Parent object(s), YAML or JSON (`test` reconciles each document, `bench` the first).
    /// Without it and without a plugin, `test` runs the project's cases.
    #[arg(long)]
    pub parent: Option<std::path::PathBuf>,
    /// Observed children, YAML or JSON, one or more documents per file.
    #[arg(long, num_args = 1..)]
    pub children: Vec<std::path::PathBuf>,
    /// Objects the plugin may read (e.g. ConfigMaps), YAML or JSON: each parent gets those
    /// its `related` queries select, under the rules `capstan run` applies.
    #[arg(long, num_args = 1..)]
    pub related: Vec<std::path::PathBuf>,
    /// The time the plugin is told it is (RFC 3339); fixed so outputs are reproducible,
    /// the same default as the SDK's fixtures.
    #[arg(long, default_value = capstan_contract::FIXTURE_NOW, value_parser = parse_now)]
    pub now: k8s_openapi::jiff::Timestamp,
}

pub(crate) fn parse_now(text: &str) -> Result<k8s_openapi::jiff::Timestamp, String> {
    text.parse()
        .map_err(|e| format!("{text:?} is not an RFC 3339 time such as 2026-11-24T09:30:00Z: {e}"))
}

/// Why no request could be made for a parent.
pub enum Unrequestable {
    /// The plugin's `related` call failed.
    Dispatch(DispatchError),
    /// Its queries broke the rules.
    Refused(String),
}

/// The request for `parent`: its related objects picked from `candidates` by the plugin's
/// own queries, checked and answered as `capstan run` does.
pub fn request(
    plugin: &Plugin,
    parent: serde_json::Value,
    children: Vec<serde_json::Value>,
    candidates: &[serde_json::Value],
    now: k8s_openapi::jiff::Timestamp,
    finalizing: bool,
    allow: &capstan_contract::Allowances,
) -> Result<Request, Unrequestable> {
    let metadata = plugin.metadata();
    let queries = plugin
        .related(&RelatedParent::of(&Json::from(&parent)))
        .map_err(Unrequestable::Dispatch)?;
    let of = capstan_contract::related::Parent::of(metadata, &parent);
    let resolved =
        capstan_contract::related::resolve(metadata, of, &queries, allow).map_err(Unrequestable::Refused)?;
    Ok(Request {
        related: capstan_contract::related::select(metadata, &resolved, candidates)
            .map_err(Unrequestable::Refused)?
            .iter()
            .map(Json::from)
            .collect(),
        parent: parent.into(),
        children: children.iter().map(Json::from).collect(),
        now: Some(now),
        finalizing,
    })
}

impl FixtureArgs {
    /// The parent documents; at least one.
    pub fn parents(&self) -> anyhow::Result<Vec<serde_json::Value>> {
        let parent = self
            .parent
            .as_ref()
            .context("--parent is required: the parent object(s) to reconcile")?;
        let parents = documents(parent)?;
        anyhow::ensure!(
            !parents.is_empty(),
            "{}: no parent object found",
            parent.display()
        );
        Ok(parents)
    }

    /// All observed children.
    pub fn children(&self) -> anyhow::Result<Vec<serde_json::Value>> {
        all_documents(&self.children)
    }

    /// Every object the plugin may read.
    pub fn related(&self) -> anyhow::Result<Vec<serde_json::Value>> {
        all_documents(&self.related)
    }
}
