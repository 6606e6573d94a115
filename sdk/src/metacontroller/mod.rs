//! Metacontroller's hook contract on Capstan's, for hooks run from Rust (Jsonnet hooks,
//! evaluated in the component, are what `capstan import metacontroller` makes of
//! jsonnetd's): a CompositeController's or a DecoratorController's `sync`, `finalize` and
//! `customize` hooks run as a plugin's `reconcile` and `related` — the same mapping as
//! the Python SDK's `capstan_sdk.metacontroller` and the JavaScript SDK's.
//!
//! A [`Hook`] maps a request's JSON to its response's JSON. A [`Controller`] builds each
//! request as Metacontroller would — the `controller` object, the parent (`object` for a
//! decorator), the children (`attachments`) and `related` object maps keyed by
//! `Kind.apiVersion` and then by name (hook version v1) or `namespace/name` (v2),
//! `finalizing` — and turns the answer into a [`Response`]: the children applied
//! (namespaced ones without a namespace in the parent's), the status as the hook returns
//! it with `observedGeneration`, `resyncAfterSeconds` as a requeue, `finalized` as the
//! finalizer's release, and a decorator's `labels` and `annotations` for its target.
//! [`export_metacontroller!`](crate::export_metacontroller) exports one as the plugin.

mod guest;
mod maps;
mod rules;
mod schema;
mod selector;

use serde_json::{Value, json};

pub use guest::{metadata, reconcile, related, validate_settings};
pub use maps::{kind_key, object_key, object_map};
pub use schema::prune;
pub use selector::{label_selector, selects};

use crate::{Context, KindRef, Metadata, ReconcileError, Response};

/// A hook: a request's JSON in, its response's JSON out.
pub type Hook = Box<dyn Fn(Value) -> Result<Value, ReconcileError> + Send + Sync>;

/// The hook versions Metacontroller defines: how the object maps are keyed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Version {
    /// By name (by `namespace/name` for a cluster-scoped parent's namespaced objects).
    #[default]
    V1,
    /// By `namespace/name` for every namespaced object.
    V2,
}

impl std::str::FromStr for Version {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "v1" => Ok(Version::V1),
            "v2" => Ok(Version::V2),
            other => Err(format!("hook version {other:?}: Metacontroller has v1, v2")),
        }
    }
}

/// Which of Metacontroller's controllers: what the hooks call the parent and children.
pub enum Shape {
    /// A CompositeController: `parent` and `children`.
    Composite,
    /// A DecoratorController: `object` and `attachments`; a target its resource rule's
    /// selectors (each a `metav1.LabelSelector` as JSON, null for none) do not pick is
    /// finalized, as Metacontroller finalizes one that stops matching.
    Decorator {
        /// The rule's `labelSelector`.
        labels: Value,
        /// The rule's `annotationSelector`.
        annotations: Value,
    },
}

/// A Metacontroller controller's hooks as a plugin.
pub struct Controller {
    /// The controller object, as Metacontroller sends it in each request.
    pub controller: Value,
    /// The plugin's declaration: name, child and related kinds, the finalizer.
    pub metadata: Metadata,
    /// The parent kind.
    pub parent: KindRef,
    /// Composite or decorator.
    pub shape: Shape,
    /// The sync hook.
    pub sync: Hook,
    /// The finalize hook, if any.
    pub finalize: Option<Hook>,
    /// The customize hook, if any.
    pub customize: Option<Hook>,
    /// The hooks' version.
    pub version: Version,
    /// The parent's status schema (its CRD's): the status written is pruned to it, as the
    /// API server prunes Metacontroller's status update. None writes it unpruned.
    pub status_schema: Option<Value>,
}

impl Controller {
    /// The hooks' name for the parent.
    fn parent_field(&self) -> &'static str {
        match self.shape {
            Shape::Composite => "parent",
            Shape::Decorator { .. } => "object",
        }
    }

    /// The hooks' name for the children.
    fn children_field(&self) -> &'static str {
        match self.shape {
            Shape::Composite => "children",
            Shape::Decorator { .. } => "attachments",
        }
    }

    /// Whether the resource rule picks `parent` (a composite's always does: the host
    /// applies its parent rule's selector).
    fn selected(&self, parent: &Value) -> Result<bool, ReconcileError> {
        match &self.shape {
            Shape::Composite => Ok(true),
            Shape::Decorator { labels, annotations } => Ok(selects(labels, &parent["metadata"]["labels"])?
                && selects(annotations, &parent["metadata"]["annotations"])?),
        }
    }

    /// The hook request for `parent`, as Metacontroller sends it.
    pub fn request(&self, parent: &Value, ctx: &Context) -> Result<Value, ReconcileError> {
        let parse = |raw: &[Box<serde_json::value::RawValue>]| -> Result<Vec<Value>, ReconcileError> {
            Ok(raw
                .iter()
                .map(|r| serde_json::from_str(r.get()))
                .collect::<Result<_, _>>()?)
        };
        let (children, related) = (parse(ctx.raw_children())?, parse(ctx.raw_related())?);
        Ok(json!({
            "controller": self.controller,
            self.parent_field(): parent,
            self.children_field(): object_map(self.metadata.children(), &children, parent, self.version),
            "related": object_map(self.metadata.related_kinds(), &self.shown(parent, related)?, parent, self.version),
            "finalizing": ctx.finalizing(),
        }))
    }

    /// One reconcile: the sync hook, or the finalize hook while the parent is deleted (or,
    /// for a decorator, no longer selected: without a finalize hook, nothing is held).
    pub fn reconcile(&self, parent: Value, ctx: &Context) -> Result<Response, ReconcileError> {
        let selected = self.selected(&parent)?;
        if !selected && self.finalize.is_none() {
            return Ok(Response::new().finalized());
        }
        let finalizing = ctx.finalizing() || !selected;
        let hook = match (&self.finalize, finalizing) {
            (Some(finalize), true) => finalize,
            _ => &self.sync,
        };
        let mut request = self.request(&parent, ctx)?;
        request["finalizing"] = finalizing.into();
        self.response(&hook(request)?, &parent, finalizing)
    }

    /// Capstan's response for a hook's `answer`.
    pub fn response(
        &self,
        answer: &Value,
        parent: &Value,
        finalizing: bool,
    ) -> Result<Response, ReconcileError> {
        let mut out = Response::new();
        for child in answer[self.children_field()].as_array().into_iter().flatten() {
            out = out.child(&self.placed(child, parent))?;
        }
        if let Some(status) = answer.get("status").filter(|s| s.is_object()) {
            let status = self.status(status, parent);
            match &self.status_schema {
                // Nothing the parent's schema holds: no status to write.
                Some(schema) => match prune(&status, schema) {
                    Value::Object(m) if m.is_empty() => {}
                    pruned => out = out.status(&pruned)?,
                },
                None => out = out.status(&status)?,
            }
        }
        // The controller's resyncPeriodSeconds is the host's `resync`, set where it runs.
        if let Some(seconds) = answer["resyncAfterSeconds"].as_f64().filter(|s| *s > 0.0) {
            out = out.requeue_after(std::time::Duration::from_secs_f64(seconds));
        }
        if finalizing && answer["finalized"] == true {
            out = out.finalized();
        }
        if let Shape::Decorator { .. } = self.shape {
            out = parent_metadata(out, answer);
        }
        Ok(out)
    }

    /// The status to write: the hook's, with a composite parent's `observedGeneration`
    /// (a decorator's target keeps its own controller's).
    fn status(&self, status: &Value, parent: &Value) -> Value {
        let mut status = status.clone();
        if let (Shape::Composite, Some(generation)) = (&self.shape, parent["metadata"]["generation"].as_i64())
        {
            status["observedGeneration"] = generation.into();
        }
        status
    }

    /// `child` with the parent's namespace when it is of a namespaced kind and names none.
    fn placed(&self, child: &Value, parent: &Value) -> Value {
        let mut child = child.clone();
        let namespaced = !(self.metadata.children().iter()).any(|k| k.matches(&child) && !k.namespaced);
        if let Some(ns) = parent["metadata"]["namespace"].as_str()
            && namespaced
            && child["metadata"]["namespace"].as_str().is_none_or(str::is_empty)
        {
            child["metadata"]["namespace"] = ns.into();
        }
        child
    }
}

/// A decorator hook's `labels` and `annotations` for its target: each key set, or removed
/// when its value is null.
fn parent_metadata(mut out: Response, answer: &Value) -> Response {
    let value = |v: &Value| match v {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    };
    for (key, v) in answer["labels"].as_object().into_iter().flatten() {
        out.parent.labels.insert(key.clone(), value(v));
    }
    for (key, v) in answer["annotations"].as_object().into_iter().flatten() {
        out.parent.annotations.insert(key.clone(), value(v));
    }
    out
}

#[cfg(test)]
mod tests;
