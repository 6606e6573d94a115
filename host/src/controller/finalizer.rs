//! The plugin's finalizer on each parent: added to live parents, removed when the plugin
//! answers `finalized` — and the escape hatch operators expect when it never does: a
//! deletion that has waited longer than `limits.finalizerTimeout` (10 minutes) raises a `FinalizerStuck` Warning
//! saying how to let go, and the annotation [`RELEASE_ANNOTATION`]`=true` on the parent
//! removes the finalizer without the plugin's cleanup.
//!
//! A plugin's finalizer is the one its running version declares *or* the one the host
//! recorded on the parent when it added it ([`names`]): a new version that renames or
//! drops its finalizer still finalizes (or lets go of) every parent an earlier version
//! marked, instead of leaving them in Terminating for good.

use std::time::Duration;

use kube::api::DynamicObject;
use kube::{Resource, ResourceExt};

use super::outcome::Error;
use super::sink::{At, Warning};
use crate::engine::Metadata;

mod names;
pub use names::RECORD_ANNOTATION;

/// Annotation an admin sets on a stuck parent to remove the plugin's finalizer.
pub const RELEASE_ANNOTATION: &str = "capstan.dev/release-finalizer";

/// Whether the parent carries one of the plugin's finalizers: a deleted parent without
/// any needs nothing from the plugin.
pub(super) fn held(parent: &DynamicObject, metadata: &Metadata) -> bool {
    !names::on(parent, metadata).is_empty()
}

/// Let a deleted parent go without the plugin's cleanup when an admin annotated it so, or
/// when the running version declares no finalizer (an earlier one marked the parent);
/// `true` when it was let go.
pub(super) async fn let_go(at: &At<'_>, metadata: &Metadata) -> Result<bool, Error> {
    let parent = at.parent;
    let annotated = parent
        .annotations()
        .get(RELEASE_ANNOTATION)
        .is_some_and(|v| v == "true");
    let message = if annotated {
        format!(
            "finalizer released by the {RELEASE_ANNOTATION} annotation, without plugin {}'s cleanup",
            metadata.name
        )
    } else if metadata.finalizer.is_none() {
        format!(
            "finalizer {} released: plugin {} version {} declares none, so nothing waits for its cleanup",
            names::on(parent, metadata).join(", "),
            metadata.name,
            metadata.version
        )
    } else {
        return Ok(false);
    };
    release(at, metadata).await?;
    at.shared
        .sink
        .warn(at, Warning::plain("FinalizerReleased", message));
    Ok(true)
}

/// Have a live parent carry the plugin's finalizer or not, as its answer says (`wanted`);
/// `true` when the parent was written.
pub(super) async fn hold(at: &At<'_>, metadata: &Metadata, wanted: bool) -> Result<bool, Error> {
    if wanted {
        return add_if_missing(at, metadata).await;
    }
    if names::on(at.parent, metadata).is_empty() {
        return Ok(false);
    }
    release(at, metadata).await?;
    Ok(true)
}

/// Put the running version's finalizer on a live parent — in place of an earlier
/// version's, and recorded as the plugin's — or take an earlier version's off when this
/// one declares none; `true` when the parent was written.
async fn add_if_missing(at: &At<'_>, metadata: &Metadata) -> Result<bool, Error> {
    let Some(change) = names::wanted(at.parent, metadata) else {
        return Ok(false);
    };
    let record = change.record.as_deref();
    at.shared.sink.finalizers(at, change.finalizers, record).await
}

/// Remove every one of the plugin's finalizers once it answered `finalized` (or was let go).
pub(super) async fn release(at: &At<'_>, metadata: &Metadata) -> Result<(), Error> {
    let ours = names::on(at.parent, metadata);
    let finalizers = at
        .parent
        .finalizers()
        .iter()
        .filter(|f| !ours.contains(f))
        .cloned()
        .collect();
    at.shared.sink.finalizers(at, finalizers, None).await?;
    Ok(())
}

/// Warn (within the event budget) when a deletion has waited too long for the plugin,
/// naming the way out; the answer is when to look again (the warning is due then).
pub(super) fn stuck(at: &At<'_>, plugin: &str) -> Option<Duration> {
    let (parent, shared) = (at.parent, at.shared);
    let since = parent.meta().deletion_timestamp.as_ref()?;
    let timeout = shared.options.finalizer_timeout;
    let waited = k8s_openapi::jiff::Timestamp::now().as_second() - since.0.as_second();
    let due = timeout.as_secs() as i64 - waited;
    if due > 0 {
        return Some(Duration::from_secs(due as u64));
    }
    let message = format!(
        "deletion has waited {waited}s for plugin {plugin} to finish its cleanup; to let go without it: kubectl annotate {} {} {RELEASE_ANNOTATION}=true",
        shared.parent.plural,
        parent.name_any()
    );
    let warning = Warning {
        counter: Some(|m| &m.finalizers_stuck),
        ..Warning::plain("FinalizerStuck", message)
    };
    shared.sink.warn(at, warning);
    Some(timeout)
}
