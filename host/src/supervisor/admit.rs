//! Starting a plugin file that appears (or is fixed) while the host runs: admitted as at
//! start ([`crate::admission`], under the rules the file was first given), and one plugin
//! per name. A file that breaks a rule is refused alone, with a line naming why (and, for
//! a name, both files); everything else keeps running. Concurrency is not a rule: plugins
//! share the instance pool fairly.

use std::path::Path;

use crate::admission::Rules;
use crate::ops::health::PluginState;

use super::{Supervisor, count, file_key, refused};

/// Why `refused`, a file of plugin `name`, is not run: `holder` has that name.
pub(crate) fn name_taken(name: &str, holder: &str, refused: &Path) -> String {
    format!(
        "plugin name {name} is taken by {holder}; {} is refused (rename one plugin)",
        refused.display()
    )
}

impl Supervisor {
    /// Start a new (or fixed) plugin file under `rules`.
    pub(super) async fn add(&mut self, rules: Rules, bytes: Vec<u8>) {
        let path = rules.path().to_path_buf();
        let (plugin, options) = match self.admit(bytes, &rules).await {
            Ok(admitted) => admitted,
            Err(e) => return self.refuse("", &path, e),
        };
        let name = plugin.metadata().name.clone();
        if let Some(holder) = self.holder(&name) {
            return self.refuse(&name, &path, name_taken(&name, &holder, &path));
        }
        tracing::info!(plugin = %name, path = %path.display(), "new plugin started");
        count(&name, "started");
        self.broken.retain(|(b, _)| b.path() != path);
        self.health.forget(&file_key(&path));
        self.start(rules, plugin, options);
    }

    /// Report a refused file in `/readyz` and the log; it is tried again when it changes.
    fn refuse(&self, name: &str, path: &Path, why: String) {
        refused(name, path, &why);
        self.health.plugin(&file_key(path), PluginState::Failed(why));
    }

    /// The file (or the built-in reconciler) that runs plugin `name`, if one does.
    pub(super) fn holder(&self, name: &str) -> Option<String> {
        let unit = self.units.iter().find(|u| u.name() == name)?;
        Some(unit.watch.as_ref().map_or_else(
            || "a built-in reconciler".to_string(),
            |(w, _)| w.path().display().to_string(),
        ))
    }
}
