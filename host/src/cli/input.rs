//! Reading YAML or JSON files of one or more documents, with the path in every error.

use std::path::Path;

use anyhow::Context;
use serde::Deserialize;

/// Every non-empty document in a YAML or JSON file (`---` separates YAML documents).
pub fn documents(path: &Path) -> anyhow::Result<Vec<serde_json::Value>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let docs = serde_yaml::Deserializer::from_str(&text)
        .map(|doc| {
            serde_json::Value::deserialize(doc)
                .with_context(|| format!("{} is not valid YAML or JSON", path.display()))
        })
        .filter(|doc| !matches!(doc, Ok(serde_json::Value::Null)))
        .collect::<anyhow::Result<Vec<_>>>()?;
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
