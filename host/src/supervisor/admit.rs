//! Starting a plugin file that appears (or is fixed) while the host runs: admitted as at
//! start ([`crate::admission`], under the rules the file was first given), and one plugin
//! per name. A file that breaks a rule is refused alone, with a line naming why (and, for
//! a name, both files); everything else keeps running. Concurrency is not a rule: plugins
//! share the instance pool fairly.

use std::path::Path;

use crate::admission::{self, Rules};
use crate::controller::{Canary, Options};
use crate::engine::Metadata;
use crate::ops::health::PluginState;

use super::{Supervisor, count, file_key, refused};

/// Why `refused`, a file of plugin `name`, is not run: `holder` has that name.
pub(crate) fn name_taken(name: &str, holder: &str, refused: &Path) -> String {
    format!(
        "plugin name {name} is taken by {holder}; {} is refused (rename one plugin)",
        refused.display()
    )
}

/// The canary that runs beside `stable` after its admission `admitted` (logged either
/// way): a refused one leaves every parent to the stable version.
pub(crate) fn canary_admitted(
    rules: &Rules,
    stable: &Metadata,
    admitted: Result<Canary, String>,
) -> Option<Canary> {
    let path = rules
        .entry()
        .canary
        .as_ref()
        .map(|c| c.path.display().to_string());
    let path = path.unwrap_or_default();
    match admitted {
        Ok(c) => {
            let version = &c.plugin.metadata().version;
            tracing::info!(plugin = %stable.name, version = %version, canary = %path, selector = %c.selector, "canary loaded");
            Some(c)
        }
        Err(why) => {
            tracing::warn!(plugin = %stable.name, canary = %path, error = %why, "canary refused; the stable version reconciles every parent");
            None
        }
    }
}

impl Supervisor {
    /// The canary of `rules` for `stable`, admitted from `bytes` or (`None`) from its
    /// file; `None` when the entry names none or it is refused (said in the log).
    pub(super) async fn canary(
        &self,
        bytes: Option<Vec<u8>>,
        rules: &Rules,
        stable: &Metadata,
        options: &Options,
    ) -> Option<Canary> {
        rules.entry().canary.as_ref()?;
        let (engine, r, m, o) = (
            self.engine.clone(),
            rules.clone(),
            stable.clone(),
            options.clone(),
        );
        let admitting = tokio::task::spawn_blocking(move || match bytes {
            Some(bytes) => Some(admission::admit_canary(&engine, &bytes, &r, &m, &o)),
            None => admission::admit_canary_file(&engine, &r, &m, &o),
        });
        let admitted = match self.beating(admitting).await? {
            Ok(admitted) => admitted?,
            Err(e) => Err(format!("loading failed: {e}")),
        };
        canary_admitted(rules, stable, admitted)
    }

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
        let canary = self.canary(None, &rules, plugin.metadata(), &options).await;
        self.start(rules, plugin, options, canary);
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
