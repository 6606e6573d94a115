//! Admitting a plugin file that appears (or is fixed) while the host runs, under the
//! rules the host applies to its plugins at start: one plugin per name, its kinds
//! granted, its memory within the host's budget. A file that breaks a rule is refused
//! alone, with a line naming why (and, for a name, both files); everything else keeps
//! running. Concurrency is not a rule: plugins share the instance pool fairly.

use std::path::{Path, PathBuf};

use crate::engine::Limits;
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
    /// Start a new (or fixed) plugin file with the directory's defaults.
    pub(super) async fn add(&mut self, path: PathBuf, bytes: Vec<u8>) {
        let options = self.dir.as_ref().map(|(_, d)| d.clone()).unwrap_or_default();
        let plugin = match self
            .load(bytes, Limits::default(), (options.settings.clone(), None))
            .await
        {
            Ok(plugin) => plugin,
            Err(e) => return self.refuse("", &path, e),
        };
        let name = plugin.metadata().name.clone();
        if let Some(holder) = self.holder(&name) {
            return self.refuse(&name, &path, name_taken(&name, &holder, &path));
        }
        if let Err(why) = capstan_contract::declared::declared(plugin.metadata(), &options.allow) {
            return self.refuse(&name, &path, why);
        }
        tracing::info!(plugin = %name, path = %path.display(), "new plugin started");
        count(&name, "started");
        self.broken.retain(|b| b.path() != path);
        self.health.forget(&file_key(&path));
        self.start(path, plugin, options);
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
            |w| w.path().display().to_string(),
        ))
    }
}
