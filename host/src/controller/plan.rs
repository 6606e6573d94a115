//! What an answer asks of the cluster, decided before anything is written: each desired
//! child's step (create it, update it, or keep it as it is), the observed children to
//! prune, the parent's labels and annotations to change, and the status to apply — or the child whose name another owner holds, which
//! refuses the whole answer. No I/O: a plan is tested without an API server and carried
//! out by a [`super::sink::Sink`].

use std::sync::Arc;

use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::discovery::ApiResource;
use serde_json::Value;

use super::compact::Compact;
use super::outcome::Observed;
use super::update::{Method, Rule};
use crate::apply::{self, Existing};
use crate::engine::{Kind, ParentMetadata};
use crate::key::ObjectKey;
use crate::validate::Child;

/// Everything one answer writes, decided.
pub(super) struct Plan {
    /// Each desired child and its step, in the answer's order.
    pub children: Vec<Step>,
    /// The observed children the answer no longer holds: each is deleted only as it was
    /// observed (its UID and resourceVersion).
    pub prune: Vec<Observed>,
    /// The parent's labels and annotations the answer changes: only those it sets to
    /// something else or removes while present ([`ParentMetadata::changes`]).
    pub metadata: ParentMetadata,
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
    pub kinds: &'a [(&'a Kind, Rule)],
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
    (status, metadata): (Option<&Value>, &ParentMetadata),
    cached: impl Fn(usize, &ObjectKey) -> Option<Arc<Compact>>,
) -> Result<Plan, Box<Foreign>> {
    let mut decided = Vec::with_capacity(desired.len());
    for mut child in desired {
        let Some(kind) = inputs.kinds.iter().position(|(k, _)| **k == child.kind) else {
            continue;
        };
        apply::own(&mut child, inputs.parent, inputs.parent_kind, inputs.writer);
        let observed = (inputs.observed.iter())
            .find(|o| o.kind == kind && same(&o.object, &child))
            .map(|o| o.object.clone());
        let action = match &observed {
            Some(o) => step_over(&child, o, inputs.writer),
            None => {
                let key = ObjectKey::new(child.namespace.as_deref(), &child.name);
                match cached(kind, &key) {
                    // This parent's own, cached since its children were observed: a
                    // creation of a reconcile before that landed meanwhile. Not observed,
                    // so neither deleted nor counted in a rollout yet: in place or kept.
                    Some(held) if controlled_by(&held, inputs.parent) => {
                        match step_over(&child, &held, inputs.writer) {
                            Action::Update { .. } if inputs.kinds[kind].1.method != Method::InPlace => {
                                Action::Keep
                            }
                            action => action,
                        }
                    }
                    Some(holder) => return Err(Box::new(Foreign { child, holder })),
                    None => Action::Create,
                }
            }
        };
        let step = Step { child, kind, action };
        decided.push(Decided { step, observed });
    }
    let children = by_method(decided, inputs.kinds);
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
    let (labels, annotations) = (inputs.parent.labels(), inputs.parent.annotations());
    let metadata = metadata.changes(
        |k| labels.get(k).map(String::as_str),
        |k| annotations.get(k).map(String::as_str),
    );
    Ok(Plan {
        children,
        prune,
        metadata,
        status,
    })
}

/// A desired child's step as an in-place update would have it, and the object observed
/// under its name.
struct Decided {
    step: Step,
    observed: Option<Arc<Compact>>,
}

/// The steps as each kind's update method has them. A child whose answer changed since
/// it was applied (its applied digest) is updated in place, kept (`OnDelete`), or left
/// out of the steps — so pruned as observed, and created by the reconcile its deletion
/// wakes (`Recreate`; one already on its way out is waited for). A rolling kind takes
/// one such child per reconcile, in the answer's order, and only while every other child
/// of the kind is there and each one at the answer passes the kind's status checks; the
/// rest are kept meanwhile. A child at the answer whose fields someone changed (or the
/// server normalized) is applied over in place whatever the method but `OnDelete`: only
/// a new answer deletes anything, so nothing is deleted in a loop.
fn by_method(decided: Vec<Decided>, kinds: &[(&Kind, Rule)]) -> Vec<Step> {
    let answered = |d: &Decided| {
        d.observed
            .as_ref()
            .is_some_and(|o| o.applied() == Some(d.step.digest()))
    };
    // Per rolling kind: whether the rollout may take its next child.
    let mut turn: Vec<bool> = kinds.iter().map(|(_, r)| r.rolling()).collect();
    for d in &decided {
        let rule = &kinds[d.step.kind].1;
        let passes = |o: &Compact| {
            o.object()
                .is_ok_and(|o| rule.passes(o.metadata.generation, &o.data["status"]))
        };
        let done = match (&d.step.action, &d.observed) {
            (Action::Update { .. }, Some(o)) if answered(d) => passes(o),
            (Action::Update { .. }, _) => true,
            (Action::Keep, Some(o)) => passes(o),
            (Action::Create | Action::Keep, _) => false,
        };
        turn[d.step.kind] &= done;
    }
    let mut steps = Vec::with_capacity(decided.len());
    for d in decided {
        let rule = &kinds[d.step.kind].1;
        let changed = !answered(&d);
        let Decided { mut step, observed } = d;
        if matches!(step.action, Action::Update { .. }) {
            let now = !changed || !rule.rolling() || std::mem::replace(&mut turn[step.kind], false);
            let going = observed.is_some_and(|o| o.metadata.deletion_timestamp.is_some());
            match rule.method {
                Method::OnDelete => step.action = Action::Keep,
                _ if !now => step.action = Action::Keep,
                _ if rule.recreates() && changed && !going => continue,
                _ if rule.recreates() && changed => step.action = Action::Keep,
                Method::InPlace | Method::RollingInPlace | Method::Recreate | Method::RollingRecreate => {}
            }
        }
        steps.push(step);
    }
    steps
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
