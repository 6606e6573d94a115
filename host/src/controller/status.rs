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
use crate::key::ObjectKey;
use crate::ops::metrics::PluginLabel;
use crate::preview::{Change, Finding, Preview, fields};

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
    if let Some(preview) = shared.preview() {
        return preview_status(parent, plugin, shared, status, preview).await;
    }
    let seen = parent.resource_version().unwrap_or_default();
    let digest = apply::digest(status);
    if !churn::guard(shared, parent, plugin, "status", (&digest, &seen)).await? {
        return Ok(Writes::default());
    }
    let written = apply::status(&shared.client, &shared.parent, parent, status, plugin).await?;
    let message = match written {
        // Answered at the version it was made over: the status held this already (a
        // condition list another controller shares looks unapplied here).
        apply::StatusWrite::Written(version) if version == seen => {
            let churn = &shared.per_object.churn;
            churn.unchanged(&ObjectKey::of(parent), "status", &digest, &version);
            return Ok(Writes::default());
        }
        apply::StatusWrite::Written(version) => {
            super::written::parent(shared, parent, version);
            return Ok(Writes::wrote(plugin));
        }
        apply::StatusWrite::HeldBy(message) => {
            super::outcome::count_write(plugin);
            message
        }
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

/// What applying the status would store, asked with a dry run (or laid over the live
/// status without permission for one), as the fields that would change.
async fn preview_status(
    parent: &DynamicObject,
    plugin: &str,
    shared: &Shared,
    status: &serde_json::Value,
    preview: &Preview,
) -> Result<Writes, Error> {
    let live = parent.data.get("status").cloned().unwrap_or_default();
    let stored = if preview.is_local() {
        apply::dry::Dry::Forbidden
    } else {
        apply::dry::status(&shared.client, &shared.parent, parent, status, plugin).await?
    };
    let key = ObjectKey::of(parent);
    let finding = Finding::new(&key, Change::Change, &shared.parent.kind, key.to_string());
    let after = match stored {
        apply::dry::Dry::Stored(object) => object.get("status").cloned().unwrap_or_default(),
        apply::dry::Dry::Forbidden | apply::dry::Dry::Held(_) => {
            preview.compare_locally();
            fields::overlay(&live, status)
        }
        apply::dry::Dry::Conflict(m) => {
            let message = format!("status not written: {m}");
            preview.found(
                &key,
                Finding {
                    change: Change::Refuse,
                    ..finding
                }
                .because(message.clone()),
            );
            return Err(Error::StatusHeld(message));
        }
    };
    let mut changes = fields::changes(&live, &after);
    if changes.is_empty() {
        return Ok(Writes::default());
    }
    for c in &mut changes {
        c.path = format!("status.{}", c.path);
    }
    preview.found(&key, finding.with_fields(changes));
    Ok(Writes::would())
}
