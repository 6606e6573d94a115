//! A response's children against the rules and the cluster: where they may live (the
//! parent's home namespace), whether the response may be written at all, which to create,
//! update or leave alone, which name is held by someone else (never adopted), and which
//! observed child to delete.

use kube::ResourceExt;
use kube::api::DynamicObject;

use super::Shared;
use super::compact::Compact;
use super::events::warn;
use super::outcome::{Error, Observed, Writes};
use super::written::{Cache, Expected, Seen};
use crate::apply;
use crate::key::ObjectKey;
use crate::ops::metrics::PluginLabel;
use crate::preview::{self, Change, Finding, Preview};
use crate::validate;

mod create;

/// What to do with one desired child.
pub(super) struct Step {
    child: validate::Child,
    kind: usize,
    /// The last apply was of this very object and it still holds.
    unchanged: bool,
    /// The object observed under the child's name: (UID, resourceVersion); `None` when
    /// none is, and the child is to be created.
    observed: Option<(String, String)>,
    /// The observed child's fields are still held by its create: hand them to the
    /// plugin's applies before updating it.
    held_by_create: bool,
}

/// Match every desired child to what exists: the parent's own children are updated (or
/// left alone when unchanged); a name not in the caches is created; a name held by an
/// object this parent and plugin do not control refuses the whole response — the host
/// never adopts (client-go's sample-controller: "already exists and is not managed by").
/// Names held outside the caches are found by the creation itself ([`apply::create`]).
pub(super) async fn claim(
    parent: &DynamicObject,
    metadata: &crate::engine::Metadata,
    shared: &Shared,
    desired: Vec<validate::Child>,
    observed: &[Observed],
) -> Result<Vec<Step>, Error> {
    let mut plan = Vec::with_capacity(desired.len());
    for child in desired {
        let Some(kind) = shared.children.iter().position(|c| c.kind == child.kind) else {
            continue;
        };
        let current = observed
            .iter()
            .find(|o| o.kind == kind && same(&o.object, &child));
        if let Some(o) = current {
            let unchanged = apply::unchanged(&child.object, &*o.object);
            let (uid, seen) = (o.object.uid(), o.object.resource_version());
            plan.push(Step {
                child,
                kind,
                unchanged,
                observed: Some((uid.unwrap_or_default(), seen.unwrap_or_default())),
                held_by_create: apply::ownership::held_by_create(&o.object.metadata, &metadata.name),
            });
            continue;
        }
        // The caches hold this plugin's children of every parent: one found here and
        // not observed is another parent's.
        let key = ObjectKey::new(child.namespace.as_deref(), &child.name);
        if let Some(other) = shared.children[kind].cache.get(&key) {
            return Err(conflict(shared, parent, &metadata.name, &child, &*other).await);
        }
        plan.push(Step {
            child,
            kind,
            unchanged: false,
            observed: None,
            held_by_create: false,
        });
    }
    Ok(plan)
}

/// Refuse a response that names an object someone else controls: a `ChildConflict`
/// Warning, `capstan_child_conflicts_total`, and the error that backs the parent off.
async fn conflict(
    shared: &Shared,
    parent: &DynamicObject,
    plugin: &str,
    child: &validate::Child,
    existing: &impl apply::Labelled,
) -> Error {
    let message = format!(
        "{} already exists and is not controlled by this {} (its controller: {}); nothing applied",
        describe(child),
        shared.parent.kind,
        apply::controller_of(existing)
    );
    if let Some(preview) = shared.preview() {
        let finding = Finding::new(
            &ObjectKey::of(parent),
            Change::Refuse,
            &child.kind.kind,
            key_of(child),
        );
        preview.found(&ObjectKey::of(parent), finding.because(message.clone()));
        return Error::Conflict(message);
    }
    let label = PluginLabel {
        plugin: plugin.into(),
    };
    crate::ops::metrics::get()
        .child_conflicts
        .get_or_create(&label)
        .inc();
    warn(shared, parent, "ChildConflict", &message);
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

/// `namespace/name` of a child.
fn key_of(child: &validate::Child) -> String {
    ObjectKey::new(child.namespace.as_deref(), &child.name).to_string()
}

/// Same kind's cache, same namespace and name.
fn same(object: &Compact, child: &validate::Child) -> bool {
    object.name_any() == child.name && object.namespace() == child.namespace
}

/// Write every child that would change (unless that is ping-pong). Creations go first:
/// a creation is the one write that can meet an object someone else holds, and a
/// response refused for that writes nothing — the children made before it are taken
/// back and no update is sent. Creations are rate-limited per plugin: one that multiplies
/// its children (or, granted its own kind, itself) is slowed, not stopped — a creation
/// over the rate is left for later, and the answer says when to come back for it.
/// Nothing waits in line, so shutdown never waits for a plugin's budget.
pub(super) async fn apply(
    shared: &Shared,
    parent: &DynamicObject,
    plugin: &str,
    plan: &[Step],
) -> Result<Writes, Error> {
    let (creations, updates): (Vec<&Step>, Vec<&Step>) = plan
        .iter()
        .filter(|s| !s.unchanged)
        .partition(|s| s.observed.is_none() && shared.preview().is_none());
    let mut writes = create::all(shared, parent, plugin, &creations).await?;
    for step in updates {
        writes = writes.and(apply_one(shared, parent, plugin, step).await?);
    }
    Ok(writes)
}

/// The write-loop guard for one child's write: `false` when the server was found to hold
/// this content at the observed version already.
async fn churn(shared: &Shared, parent: &DynamicObject, plugin: &str, step: &Step) -> Result<bool, Error> {
    let (_, seen) = step.observed.clone().unwrap_or_default();
    super::churn::guard(
        shared,
        parent,
        plugin,
        &describe(&step.child),
        (digest(step), &seen),
    )
    .await
}

/// The digest of a child's desired content, as its applied annotation carries it.
fn digest(step: &Step) -> &str {
    step.child.object["metadata"]["annotations"][apply::APPLIED_ANNOTATION]
        .as_str()
        .unwrap_or_default()
}

/// Update one observed child (or, in a preview, say what writing it would do).
async fn apply_one(
    shared: &Shared,
    parent: &DynamicObject,
    plugin: &str,
    step: &Step,
) -> Result<Writes, Error> {
    if let Some(preview) = shared.preview() {
        return preview_one(shared, parent, plugin, step, preview).await;
    }
    if !churn(shared, parent, plugin, step).await? {
        return Ok(Writes::default());
    }
    let (client, resource) = (&shared.client, &shared.children[step.kind].resource);
    let (uid, seen) = step.observed.clone().unwrap_or_default();
    if step.held_by_create {
        apply::ownership::hand_over(client, resource, &step.child, &uid, plugin).await?;
    }
    let version = apply::update(client, resource, &step.child, &uid, plugin).await?;
    if version == seen {
        // Answered at the version it was made over: the child held this already (a list
        // a webhook extends looks unapplied here). Nothing was written.
        let target = describe(&step.child);
        let churn = &shared.per_object.churn;
        churn.unchanged(&ObjectKey::of(parent), &target, digest(step), &version);
        return Ok(Writes::default());
    }
    expect(shared, parent, step, Seen::AtLeast(version));
    Ok(Writes::wrote(plugin))
}

/// What creating or updating one child would store, asked of the API server with a dry
/// run (or, without permission for one, laid over the live object here); nothing is
/// written, no budget is spent.
async fn preview_one(
    shared: &Shared,
    parent: &DynamicObject,
    plugin: &str,
    step: &Step,
    preview: &Preview,
) -> Result<Writes, Error> {
    let (client, child) = (&shared.client, &shared.children[step.kind]);
    let uid = step.observed.as_ref().map(|(uid, _)| uid.as_str());
    let live = step.observed.as_ref().and_then(|_| {
        let key = ObjectKey::new(step.child.namespace.as_deref(), &step.child.name);
        child.cache.get(&key).and_then(|o| o.value().ok())
    });
    let stored = if preview.is_local() {
        apply::dry::Dry::Forbidden
    } else {
        apply::dry::child(client, &child.resource, &step.child, uid, plugin).await?
    };
    let stored = match stored {
        apply::dry::Dry::Stored(object) => object,
        apply::dry::Dry::Forbidden => {
            preview.compare_locally();
            live.as_ref().map_or_else(
                || step.child.object.clone(),
                |l| preview::fields::overlay(l, &step.child.object),
            )
        }
        apply::dry::Dry::Held(object) => {
            return Err(conflict(shared, parent, plugin, &step.child, &*object).await);
        }
        apply::dry::Dry::Conflict(m) => return Err(Error::Conflict(m)),
    };
    let (change, fields) = match &live {
        Some(live) => (Change::Change, preview::fields::changes(live, &stored)),
        None => (
            Change::Create,
            preview::fields::changes(&serde_json::json!({}), &stored),
        ),
    };
    if change == Change::Change && fields.is_empty() {
        return Ok(Writes::default());
    }
    let parent_key = ObjectKey::of(parent);
    let finding = Finding::new(&parent_key, change, &step.child.kind.kind, key_of(&step.child));
    preview.found(&parent_key, finding.with_fields(fields));
    Ok(Writes::would())
}

/// Keep a write of `step`'s child for the parent's next reconcile to see first.
fn expect(shared: &Shared, parent: &DynamicObject, step: &Step, seen: Seen) {
    let key = ObjectKey::new(step.child.namespace.as_deref(), &step.child.name);
    let cache = Cache::Child { kind: step.kind, key };
    shared
        .per_object
        .written
        .expect(&ObjectKey::of(parent), Expected { cache, seen });
}

/// Delete every observed child the response no longer holds.
pub(super) async fn prune(
    shared: &Shared,
    parent: &DynamicObject,
    plugin: &str,
    plan: &[Step],
    observed: &[Observed],
) -> Result<Writes, Error> {
    let mut writes = Writes::default();
    for o in observed {
        if !plan.iter().any(|s| s.kind == o.kind && same(&o.object, &s.child)) {
            if let Some(preview) = shared.preview() {
                let kind = &shared.children[o.kind].kind.kind;
                let key = ObjectKey::of(&*o.object);
                let finding = Finding::new(&ObjectKey::of(parent), Change::Delete, kind, key.to_string());
                preview.found(&ObjectKey::of(parent), finding);
                writes = writes.and(Writes::would());
                continue;
            }
            apply::prune(&shared.client, &shared.children[o.kind].resource, &*o.object).await?;
            let cache = Cache::Child {
                kind: o.kind,
                key: ObjectKey::of(&*o.object),
            };
            let seen = Seen::Past(o.object.resource_version().unwrap_or_default());
            shared
                .per_object
                .written
                .expect(&ObjectKey::of(parent), Expected { cache, seen });
            writes = writes.and(Writes::wrote(plugin));
        }
    }
    Ok(writes)
}

/// Count and report a response (or related queries) that broke the rules; `what`
/// says what was not done.
async fn refused(parent: &DynamicObject, metadata: &crate::engine::Metadata, shared: &Shared, what: &str) {
    if let Some(preview) = shared.preview() {
        let key = ObjectKey::of(parent);
        let finding = Finding::new(&key, Change::Refuse, &shared.parent.kind, key.to_string());
        preview.found(&key, finding.because(what));
        return;
    }
    let label = PluginLabel {
        plugin: metadata.name.clone(),
    };
    crate::ops::metrics::get().refused.get_or_create(&label).inc();
    warn(shared, parent, "InvalidResponse", what);
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
    let home = super::scope::home(metadata, &parent.metadata, &shared.options);
    let reasons = events.iter().map(|e| e.reason.as_str());
    match validate::response(metadata, home, children, reasons, &shared.options.allow) {
        Ok(desired) => Ok(desired),
        Err(r) => {
            refused(parent, metadata, shared, &format!("nothing applied: {r}")).await;
            Err(Error::Refused(r))
        }
    }
}
