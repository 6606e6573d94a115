//! The plugin's finalizer on each parent: added to live parents, removed when the plugin
//! answers `finalized` — and the escape hatch operators expect when it never does: a
//! deletion that has waited longer than `limits.finalizerTimeout` (10 minutes) raises a `FinalizerStuck` Warning
//! saying how to let go, and the annotation [`RELEASE_ANNOTATION`]`=true` on the parent
//! removes the finalizer without the plugin's cleanup.

use std::time::Duration;

use kube::api::DynamicObject;
use kube::{Resource, ResourceExt};

use super::Shared;
use super::events::warn;
use super::outcome::{Error, count_write};
use crate::apply;

/// Annotation an admin sets on a stuck parent to remove the plugin's finalizer.
pub const RELEASE_ANNOTATION: &str = "capstan.dev/release-finalizer";

/// Whether the parent carries the plugin's finalizer: a deleted parent without it needs
/// nothing from the plugin.
pub(super) fn held(parent: &DynamicObject, metadata: &crate::engine::Metadata) -> bool {
    let finalizer = metadata.finalizer.as_deref();
    finalizer.is_some_and(|f| parent.finalizers().iter().any(|x| x == f))
}

/// Let a deleted parent go without the plugin's cleanup when an admin annotated it so;
/// `true` when it was let go.
pub(super) async fn release_if_annotated(
    parent: &DynamicObject,
    metadata: &crate::engine::Metadata,
    shared: &Shared,
) -> Result<bool, Error> {
    let annotated = parent
        .annotations()
        .get(RELEASE_ANNOTATION)
        .is_some_and(|v| v == "true");
    if !annotated {
        return Ok(false);
    }
    release(parent, metadata, shared).await?;
    let message = format!(
        "finalizer released by the {RELEASE_ANNOTATION} annotation, without plugin {}'s cleanup",
        metadata.name
    );
    warn(shared, parent, "FinalizerReleased", &message);
    Ok(true)
}

/// Add the plugin's finalizer to a live parent that lacks it; `true` when it was added
/// (the update wakes the parent again, which then reconciles as usual).
pub(super) async fn add_if_missing(
    parent: &DynamicObject,
    metadata: &crate::engine::Metadata,
    shared: &Shared,
) -> Result<bool, Error> {
    let Some(finalizer) = metadata.finalizer.as_deref() else {
        return Ok(false);
    };
    // A preview adds nothing: it reconciles the parent as though the finalizer were on.
    if held(parent, metadata) || shared.preview().is_some() {
        return Ok(false);
    }
    let mut finalizers = parent.finalizers().to_vec();
    finalizers.push(finalizer.to_string());
    let version = apply::finalizers(&shared.client, &shared.parent, parent, finalizers).await?;
    super::written::parent(shared, parent, version);
    count_write(&metadata.name);
    Ok(true)
}

/// Remove the plugin's finalizer once it answered `finalized`.
pub(super) async fn release(
    parent: &DynamicObject,
    metadata: &crate::engine::Metadata,
    shared: &Shared,
) -> Result<(), Error> {
    if shared.preview().is_some() {
        return Ok(());
    }
    let finalizers = parent
        .finalizers()
        .iter()
        .filter(|f| Some(f.as_str()) != metadata.finalizer.as_deref())
        .cloned()
        .collect();
    let version = apply::finalizers(&shared.client, &shared.parent, parent, finalizers).await?;
    super::written::parent(shared, parent, version);
    count_write(&metadata.name);
    Ok(())
}

/// Warn (within the event budget) when a deletion has waited too long for the plugin,
/// naming the way out; the answer is when to look again (the warning is due then).
pub(super) async fn stuck(parent: &DynamicObject, shared: &Shared, plugin: &str) -> Option<Duration> {
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
    warn(shared, parent, "FinalizerStuck", &message);
    let label = crate::ops::metrics::PluginLabel {
        plugin: plugin.into(),
    };
    crate::ops::metrics::get()
        .finalizers_stuck
        .get_or_create(&label)
        .inc();
    Some(timeout)
}
