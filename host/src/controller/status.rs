//! Writing a parent's status: only when it would change something by this plugin's own
//! fields ([`apply::status_unchanged`]), never over another plugin's fields, never as
//! ping-pong.

use kube::ResourceExt;
use kube::api::DynamicObject;

use super::Shared;
use super::churn;
use super::events::warn;
use super::outcome::{Error, Writes};
use crate::apply;
use crate::ops::metrics::PluginLabel;

/// Apply the response's status unless that would change nothing.
pub(super) async fn write(
    parent: &DynamicObject,
    plugin: &str,
    shared: &Shared,
    status: &serde_json::Value,
) -> Result<Writes, Error> {
    if apply::status_unchanged(status, parent, plugin) {
        return Ok(Writes::default());
    }
    let seen = parent.resource_version().unwrap_or_default();
    churn::guard(shared, parent, plugin, "status", (&apply::digest(status), &seen)).await?;
    let written = apply::status(&shared.client, &shared.parent, parent, status, plugin).await?;
    let writes = Writes::wrote(plugin);
    let message = match written {
        apply::StatusWrite::Written(version) => {
            super::written::parent(shared, parent, version);
            return Ok(writes);
        }
        apply::StatusWrite::HeldBy(message) => message,
    };
    let label = PluginLabel {
        plugin: plugin.into(),
    };
    crate::ops::metrics::get()
        .status_conflicts
        .get_or_create(&label)
        .inc();
    let message =
        format!("status not written: {message} (a status field belongs to the plugin that set it first)");
    warn(shared, parent, "StatusConflict", &message);
    Err(Error::StatusHeld(message))
}
