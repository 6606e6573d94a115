//! Reading YAML or JSON files of one or more documents, with the path in every error.

use std::path::Path;

use anyhow::Context;

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
    #[arg(long)]
    pub parent: std::path::PathBuf,
    /// Observed children, YAML or JSON, one or more documents per file.
    #[arg(long, num_args = 1..)]
    pub children: Vec<std::path::PathBuf>,
}

impl FixtureArgs {
    /// The parent documents; at least one.
    pub fn parents(&self) -> anyhow::Result<Vec<serde_json::Value>> {
        let parents = documents(&self.parent)?;
        anyhow::ensure!(
            !parents.is_empty(),
            "{}: no parent object found",
            self.parent.display()
        );
        Ok(parents)
    }

    /// All observed children.
    pub fn children(&self) -> anyhow::Result<Vec<serde_json::Value>> {
        all_documents(&self.children)
    }
}
