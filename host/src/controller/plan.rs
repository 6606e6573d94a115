//! What an answer asks of the cluster, decided before anything is written: each desired
//! child's step (create it, update it, or keep it as it is), the observed children to
//! prune, and the status to apply — or the child whose name another owner holds, which
//! refuses the whole answer. No I/O: a plan is tested without an API server and carried
//! out by a [`super::sink::Sink`].

use std::sync::Arc;

use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::discovery::ApiResource;
use serde_json::Value;

use super::compact::Compact;
use super::outcome::Observed;
use super::update::Update;
use crate::apply;
use crate::engine::Kind;
use crate::key::ObjectKey;
use crate::validate::Child;

/// Everything one answer writes, decided.
pub(super) struct Plan {
    /// Each desired child and its step, in the answer's order.
    pub children: Vec<Step>,
    /// The observed children the answer no longer holds: each is deleted only as it was
    /// observed (its UID and resourceVersion).
    pub prune: Vec<Observed>,
    /// The status to apply; `None` when the answer sets none or applying it would change
    /// nothing ([`apply::status_unchanged`]).
    pub status: Option<Value>,
}

/// One desired child, owned ([`apply::own`]), and what to do with it.
pub(super) struct Step {
    pub child: Child,
    /// Its kind's index among the plugin's child kinds.
    pub kind: usize,
    pub action: Action,
}

/// What a step does.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Action {
    /// No object holds the name in the caches: create it.
    Create,
    /// The parent's own child, to be changed: apply over the object observed.
    Update {
        /// The observed object's UID: the apply never lands on another object.
        uid: String,
        /// The resourceVersion observed: an answer at it wrote nothing.
        seen: String,
        /// Its fields are still held by its create: hand them to the plugin's applies first.
        held_by_create: bool,
    },
    /// The last apply was of this very object and it still holds: nothing to write.
    Keep,
}

/// A desired child whose name is held by an object this parent does not control.
pub(super) struct Foreign {
    pub child: Child,
    pub holder: Arc<Compact>,
}

/// What a plan is made from besides the answer.
pub(super) struct Inputs<'a> {
    pub parent: &'a DynamicObject,
    /// The parent's kind, as its children's owner reference names it.
    pub parent_kind: &'a ApiResource,
    /// Whose writes these are: the field manager and label of [`apply::own`].
    pub writer: &'a str,
    /// The plugin's child kinds, in declared order, and how each one's children are updated.
    pub kinds: &'a [(&'a Kind, Update)],
    /// The children this parent controls, from the caches.
    pub observed: &'a [Observed],
}

/// Plan an answer's writes. `cached` finds an object of a child kind in the caches, which
/// hold this plugin's children of every parent: one found there and not observed is
/// another parent's, and refuses the answer — the host never adopts (client-go's
/// sample-controller: "already exists and is not managed by"). Names held outside the
/// caches are met by the creation itself.
pub(super) fn plan(
    inputs: &Inputs<'_>,
    desired: Vec<Child>,
    status: Option<&Value>,
    cached: impl Fn(usize, &ObjectKey) -> Option<Arc<Compact>>,
) -> Result<Plan, Box<Foreign>> {
    let mut children = Vec::with_capacity(desired.len());
    for mut child in desired {
        let Some(kind) = inputs.kinds.iter().position(|(k, _)| **k == child.kind) else {
            continue;
        };
        apply::own(&mut child, inputs.parent, inputs.parent_kind, inputs.writer);
        let update = inputs.kinds[kind].1;
        let action = match inputs
            .observed
            .iter()
            .find(|o| o.kind == kind && same(&o.object, &child))
        {
            Some(o) => match (step_over(&child, &o.object, inputs.writer), update) {
                (action @ (Action::Keep | Action::Create), _) | (action, Update::InPlace) => action,
                (Action::Update { .. }, Update::OnDelete) => Action::Keep,
                // Left out of the steps, the observed child is pruned: deleted as observed,
                // and created from the answer once its deletion wakes the parent. One
                // already on its way out is waited for.
                (Action::Update { .. }, Update::Recreate)
                    if o.object.metadata.deletion_timestamp.is_none() =>
                {
                    continue;
                }
                (Action::Update { .. }, Update::Recreate) => Action::Keep,
            },
            None => {
                let key = ObjectKey::new(child.namespace.as_deref(), &child.name);
                match cached(kind, &key) {
                    // This parent's own, cached since its children were observed: a
                    // creation of a reconcile before that landed meanwhile.
                    // Not observed, so not to be deleted yet: only an in-place update.
                    Some(held) if controlled_by(&held, inputs.parent) => {
                        match step_over(&child, &held, inputs.writer) {
                            Action::Update { .. } if update != Update::InPlace => Action::Keep,
                            action => action,
                        }
                    }
                    Some(holder) => return Err(Box::new(Foreign { child, holder })),
                    None => Action::Create,
                }
            }
        };
        children.push(Step { child, kind, action });
    }
    let prune = inputs
        .observed
        .iter()
        .filter(|o| {
            !children
                .iter()
                .any(|s| s.kind == o.kind && same(&o.object, &s.child))
        })
        .cloned()
        .collect();
    let status = status
        .filter(|s| !apply::status_unchanged(s, inputs.parent, inputs.writer))
        .cloned();
    Ok(Plan {
        children,
        prune,
        status,
    })
}

/// The step for a desired child over the object observed under its name.
fn step_over(child: &Child, observed: &Compact, writer: &str) -> Action {
    if apply::unchanged(&child.object, observed) {
        return Action::Keep;
    }
    Action::Update {
        uid: observed.uid().unwrap_or_default(),
        seen: observed.resource_version().unwrap_or_default(),
        held_by_create: apply::ownership::held_by_create(&observed.metadata, writer),
    }
}

/// Whether `object`'s controller is `parent` (by uid).
fn controlled_by(object: &Compact, parent: &DynamicObject) -> bool {
    let controller = apply::controller(object.owner_references());
    controller.is_some_and(|r| Some(&r.uid) == parent.metadata.uid.as_ref())
}

/// Same kind's cache, same namespace and name.
fn same(object: &Compact, child: &Child) -> bool {
    object.name_any() == child.name && object.namespace() == child.namespace
}

impl Step {
    /// The digest of the child's desired content, as its applied annotation carries it.
    pub fn digest(&self) -> &str {
        self.child.object["metadata"]["annotations"][apply::APPLIED_ANNOTATION]
            .as_str()
            .unwrap_or_default()
    }
}

/// `Kind namespace/name` of a child, for messages.
pub(super) fn describe(child: &Child) -> String {
    let namespace = child.namespace.as_deref().map(|n| format!("{n}/"));
    format!(
        "{} {}{}",
        child.kind.kind,
        namespace.unwrap_or_default(),
        child.name
    )
}

/// `namespace/name` of a child.
pub(super) fn key_of(child: &Child) -> ObjectKey {
    ObjectKey::new(child.namespace.as_deref(), &child.name)
}

#[cfg(test)]
mod tests;
