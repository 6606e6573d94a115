//! A response's children against the rules and the cluster: where they may live (the
//! parent's home namespace), whether the response may be written at all, which to create,
//! update or leave alone, which name is held by someone else (never adopted), and which
//! observed child to delete.

use std::sync::Arc;
use std::time::Duration;

use crate::key::ObjectKey;
use kube::ResourceExt;
use kube::api::DynamicObject;

use super::Shared;
use super::compact::Compact;
use super::events::warn;
use super::reconcile::{Error, Observed, count_write};
use crate::apply;
use crate::ops::metrics::PluginLabel;
use crate::validate;

/// What to do with one desired child.
pub(super) struct Step {
    child: validate::Child,
    kind: usize,
    /// The last apply was of this very object and it still holds.
    unchanged: bool,
    /// No object of this name exists yet (as far as the caches and the API know).
    create: bool,
    /// The resourceVersion of the object as observed ("" when none exists).
    seen: String,
}

/// Match every desired child to what exists: the parent's own children are updated (or
/// left alone when unchanged); a name that is free is created; a name held by an object
/// this parent and plugin do not control refuses the whole response — the host never
/// adopts (client-go's sample-controller: "already exists and is not managed by").
pub(super) async fn claim(
    parent: &DynamicObject,
    metadata: &crate::engine::Metadata,
    shared: &Shared,
    desired: Vec<validate::Child>,
    observed: &[Observed],
    observed_json: &[serde_json::Value],
) -> Result<Vec<Step>, Error> {
    let uid = parent.uid().unwrap_or_default();
    let mut plan = Vec::with_capacity(desired.len());
    for child in desired {
        let Some(kind) = shared.children.iter().position(|c| c.kind == child.kind) else {
            continue;
        };
        let current = observed
            .iter()
            .zip(observed_json)
            .find(|(o, _)| o.kind == kind && same(&o.object, &child));
        if let Some((o, json)) = current {
            let unchanged = apply::unchanged(&child.object, json);
            plan.push(Step {
                child,
                kind,
                unchanged,
                create: false,
                seen: o.object.resource_version().unwrap_or_default(),
            });
            continue;
        }
        let existing = existing(shared, kind, &child).await?;
        if let Some(existing) = &existing
            && !apply::controlled_by(&**existing, &uid, &metadata.name)
        {
            return Err(conflict(shared, parent, &metadata.name, &child, existing).await);
        }
        plan.push(Step {
            child,
            kind,
            unchanged: false,
            create: existing.is_none(),
            seen: existing.and_then(|e| e.resource_version()).unwrap_or_default(),
        });
    }
    Ok(plan)
}

/// The object that holds a desired child's name, from the cache (which holds only
/// this plugin's children) or else from the API.
async fn existing(
    shared: &Shared,
    kind: usize,
    child: &validate::Child,
) -> Result<Option<Arc<Compact>>, Error> {
    let c = &shared.children[kind];
    if let Some(cached) = c
        .cache
        .get(&ObjectKey::new(child.namespace.as_deref(), &child.name))
    {
        return Ok(Some(cached));
    }
    let fetched = apply::get(
        &shared.client,
        &c.resource,
        child.namespace.as_deref(),
        &child.name,
    )
    .await?;
    Ok(fetched.map(|o| Arc::new(Compact::of(&o))))
}

/// Refuse a response that names an object someone else controls: a `ChildConflict`
/// Warning, `capstan_child_conflicts_total`, and the error that backs the parent off.
async fn conflict(
    shared: &Shared,
    parent: &DynamicObject,
    plugin: &str,
    child: &validate::Child,
    existing: &Compact,
) -> Error {
    let message = format!(
        "{} already exists and is not controlled by this {} (its controller: {}); nothing applied",
        describe(child),
        shared.parent.kind,
        apply::controller_of(existing)
    );
    let label = PluginLabel {
        plugin: plugin.into(),
    };
    crate::ops::metrics::get()
        .child_conflicts
        .get_or_create(&label)
        .inc();
    warn(shared, parent, "ChildConflict", &message).await;
    Error::Conflict(message)
}

/// `Kind namespace/name` of a child, for messages.
fn describe(child: &validate::Child) -> String {
    let namespace = child.namespace.as_deref().map(|n| format!("{n}/"));
    format!(
        "{} {}{}",
        child.kind.kind,
        namespace.unwrap_or_default(),
        child.name
    )
}

/// Same kind's cache, same namespace and name.
fn same(object: &Compact, child: &validate::Child) -> bool {
    object.name_any() == child.name && object.namespace() == child.namespace
}

/// Server-side apply every child that would change (unless that is ping-pong). Creations
/// are rate-limited per plugin: one that multiplies its children (or, granted its own
/// kind, itself) is slowed, not stopped — a creation over the rate is left for later, and
/// the answer says when to come back for it. Nothing waits in line, so shutdown never
/// waits for a plugin's budget.
pub(super) async fn apply(
    shared: &Shared,
    parent: &DynamicObject,
    plugin: &str,
    plan: &[Step],
) -> Result<Option<Duration>, Error> {
    let mut deferred = None;
    for step in plan.iter().filter(|s| !s.unchanged) {
        if step.create
            && let Err(wait) = shared.creation()
        {
            tracing::debug!(wait = ?wait, child = %describe(&step.child), "plugin over its creation rate; later");
            deferred = Some(wait);
            continue;
        }
        let digest = step.child.object["metadata"]["annotations"][apply::APPLIED_ANNOTATION]
            .as_str()
            .unwrap_or_default();
        let content = (digest, step.seen.as_str());
        super::churn::guard(shared, parent, plugin, &describe(&step.child), content).await?;
        apply::apply(
            &shared.client,
            &shared.children[step.kind].resource,
            &step.child,
            plugin,
        )
        .await?;
        count_write(plugin);
    }
    Ok(deferred)
}

/// Delete every observed child the response no longer holds.
pub(super) async fn prune(
    shared: &Shared,
    plugin: &str,
    plan: &[Step],
    observed: &[Observed],
) -> Result<(), Error> {
    for o in observed {
        if !plan.iter().any(|s| s.kind == o.kind && same(&o.object, &s.child)) {
            apply::prune(&shared.client, &shared.children[o.kind].resource, &*o.object).await?;
            count_write(plugin);
        }
    }
    Ok(())
}

/// Count and report a response (or related queries) that broke the rules; `what`
/// says what was not done.
async fn refused(parent: &DynamicObject, metadata: &crate::engine::Metadata, shared: &Shared, what: &str) {
    let label = PluginLabel {
        plugin: metadata.name.clone(),
    };
    crate::ops::metrics::get().refused.get_or_create(&label).inc();
    warn(shared, parent, "InvalidResponse", what).await;
}

/// Count and report related queries that broke the rules.
pub(super) async fn refused_related(
    parent: &DynamicObject,
    metadata: &crate::engine::Metadata,
    shared: &Shared,
    message: String,
) -> Error {
    refused(
        parent,
        metadata,
        shared,
        &format!("nothing dispatched: {message}"),
    )
    .await;
    Error::RelatedRefused(message)
}

/// Validate the whole response (children and events) before anything of it is written.
pub(super) async fn check(
    parent: &DynamicObject,
    metadata: &crate::engine::Metadata,
    shared: &Shared,
    children: Vec<serde_json::Value>,
    events: &[crate::engine::Event],
) -> Result<Vec<validate::Child>, Error> {
    let own = parent.namespace();
    let home = home(metadata, own.as_deref(), &parent.metadata, &shared.options);
    let reasons = events.iter().map(|e| e.reason.as_str());
    match validate::response(metadata, home, children, reasons, &shared.options.allow) {
        Ok(desired) => Ok(desired),
        Err(r) => {
            refused(parent, metadata, shared, &format!("nothing applied: {r}")).await;
            Err(Error::Refused(r))
        }
    }
}

/// Where a parent's children and related objects live: its namespace, or a Namespace
/// parent itself — unless the host watches one namespace and this is another, whose
/// children it could never observe (then the plain cluster-scoped rules apply).
pub(super) fn home<'a>(
    metadata: &crate::engine::Metadata,
    own: Option<&'a str>,
    parent: &'a kube::api::ObjectMeta,
    options: &super::Options,
) -> Option<&'a str> {
    let name = parent.name.as_deref().unwrap_or_default();
    let home = capstan_contract::home_namespace(metadata, own, name, &options.allow);
    match (&options.namespace, metadata.parent.namespaced) {
        (Some(watched), false) if home != Some(watched.as_str()) => None,
        _ => home,
    }
}
