//! What the host observed besides the parent: the children it controls.

use kube_core::Resource;
use serde::de::DeserializeOwned;

use crate::{KindRef, ReconcileError, metadata::Scope};

/// Inputs of one reconcile other than the parent itself.
#[derive(Clone, Debug, Default)]
pub struct Context {
    children: Vec<serde_json::Value>,
    finalizing: bool,
}

impl Context {
    /// A context holding these observed children (JSON objects with apiVersion and kind).
    pub fn new(children: Vec<serde_json::Value>, finalizing: bool) -> Self {
        Context { children, finalizing }
    }

    /// True when the parent is being deleted and the plugin's finalizer is still on it.
    pub fn finalizing(&self) -> bool {
        self.finalizing
    }

    /// Every observed child, untyped.
    pub fn raw_children(&self) -> &[serde_json::Value] {
        &self.children
    }

    /// The observed children of type `K`, e.g. `ctx.children::<Job>()`.
    pub fn children<K>(&self) -> Result<Vec<K>, ReconcileError>
    where
        K: Resource<DynamicType = ()> + DeserializeOwned,
        K::Scope: Scope,
    {
        let kind = KindRef::of::<K>();
        self.children
            .iter()
            .filter(|c| kind.matches(c))
            .map(|c| {
                K::deserialize(c)
                    .map_err(|e| ReconcileError::fatal(format!("observed {} does not parse: {e}", kind.kind)))
            })
            .collect()
    }
}
