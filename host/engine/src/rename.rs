//! One plugin file run under another name: an operator runs the same plugin twice (with
//! other settings), or a benchmark loads copies. The renamed plugin has its own budget
//! floor, metrics and children's label; the name it declares is kept only to translate
//! its own label on its children.

use std::sync::Arc;

use super::{LoadError, Plugin, load, logs};

impl Plugin {
    /// The same plugin run under another name (its own budget floor, labels and
    /// metrics): one file deployed twice, with other settings or for a benchmark.
    pub fn renamed(&self, name: &str) -> Result<Plugin, LoadError> {
        let mut metadata = self.metadata().clone();
        metadata.name = name.to_string();
        load::validate_metadata(&mut metadata)?;
        let memory = self.engine.reserve(name, &self.limits, self.footprint)?;
        Ok(Plugin {
            kept: super::kept::Kept::of(&self.engine, &memory, &self.limits),
            memory,
            declared: Some(self.declared.clone().unwrap_or_else(|| self.name.clone())),
            name: Arc::from(name),
            metadata: Some(metadata),
            logs: Arc::new(logs::LogBudget::new(self.limits.log_bytes_per_second)),
            ..self.clone()
        })
    }

    /// This plugin under the name an operator configured, if any.
    pub fn named(self, name: Option<&str>) -> Result<Plugin, LoadError> {
        match name {
            Some(name) if name != self.name.as_ref() => self.renamed(name),
            _ => Ok(self),
        }
    }
}

/// A renamed plugin labels its children with the name it declares (as Echo does): that
/// label becomes the name it runs under, which the host would set anyway. Any other
/// value is left for the host's check to refuse.
pub(super) fn relabel(children: &mut [serde_json::Value], declared: &str, name: &str) {
    for child in children {
        // `get_mut`, not indexing: a child that is not an object is the host's check's to refuse.
        let label = child
            .get_mut("metadata")
            .and_then(|m| m.get_mut("labels"))
            .and_then(|l| l.get_mut(capstan_contract::PLUGIN_LABEL));
        if let Some(label) = label
            && label.as_str() == Some(declared)
        {
            *label = name.into();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::relabel;
    use serde_json::json;

    #[test]
    fn a_renamed_plugins_own_label_becomes_its_new_name_and_nothing_else_changes() {
        let mut children = vec![
            json!({"metadata": {"labels": {"capstan.dev/plugin": "echo", "app": "echo"}}}),
            json!({"metadata": {"labels": {"capstan.dev/plugin": "other"}}}),
            json!({"metadata": {"name": "unlabelled"}}),
            json!("not an object"),
        ];
        relabel(&mut children, "echo", "echo-a");
        assert_eq!(
            children[0]["metadata"]["labels"],
            json!({"capstan.dev/plugin": "echo-a", "app": "echo"})
        );
        assert_eq!(
            children[1]["metadata"]["labels"]["capstan.dev/plugin"], "other",
            "for the check to refuse"
        );
        assert_eq!(children[2], json!({"metadata": {"name": "unlabelled"}}));
        assert_eq!(children[3], "not an object");
    }
}
