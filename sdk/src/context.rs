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

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::batch::v1::Job;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::api::rbac::v1::ClusterRole;
    use serde_json::json;

    #[test]
    fn kinds_come_from_types_with_their_scope() {
        let job = KindRef::of::<Job>();
        assert_eq!(
            (job.group.as_str(), job.version.as_str(), job.plural.as_str()),
            ("batch", "v1", "jobs")
        );
        assert!(job.namespaced);
        assert_eq!(KindRef::of::<ConfigMap>().api_version(), "v1");
        assert!(!KindRef::of::<ClusterRole>().namespaced);
    }

    #[test]
    fn typed_children_are_filtered_by_api_version_and_kind() {
        let ctx = Context::new(
            vec![
                json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "a"}}),
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}}),
                json!({"apiVersion": "batch/v2", "kind": "Job", "metadata": {"name": "other-version"}}),
            ],
            false,
        );
        let jobs = ctx.children::<Job>().unwrap();
        assert_eq!(jobs.len(), 1);
        assert_eq!(jobs[0].metadata.name.as_deref(), Some("a"));
        assert_eq!(ctx.children::<ConfigMap>().unwrap().len(), 1);
        assert_eq!(ctx.raw_children().len(), 3);
    }

    #[test]
    fn a_child_that_does_not_parse_is_fatal() {
        let ctx = Context::new(
            vec![json!({"apiVersion": "batch/v1", "kind": "Job", "spec": "nonsense"})],
            false,
        );
        assert!(matches!(ctx.children::<Job>(), Err(ReconcileError::Fatal(_))));
    }
}
