//! What the host observed besides the parent: the children it controls.

use kube_core::Resource;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;

use crate::{KindRef, ReconcileError, metadata::Scope};

/// Inputs of one reconcile other than the parent itself.
#[derive(Clone, Debug, Default)]
pub struct Context {
    children: Vec<Box<RawValue>>,
    finalizing: bool,
}

impl Context {
    /// A context holding these observed children (JSON objects with apiVersion and kind).
    pub fn new(children: Vec<Box<RawValue>>, finalizing: bool) -> Self {
        Context { children, finalizing }
    }

    /// True when the parent is being deleted and the plugin's finalizer is still on it.
    pub fn finalizing(&self) -> bool {
        self.finalizing
    }

    /// Every observed child as JSON text; each is parsed only when asked for.
    pub fn raw_children(&self) -> &[Box<RawValue>] {
        &self.children
    }

    /// The observed children of type `K`, e.g. `ctx.children::<Job>()`.
    pub fn children<K>(&self) -> Result<Vec<K>, ReconcileError>
    where
        K: Resource<DynamicType = ()> + DeserializeOwned,
        K::Scope: Scope,
    {
        self.children_as::<K, K>()
    }

    /// The observed children of kind `K`, each parsed as `V`: a partial view such as
    /// [`Observed`](crate::Observed), which skips what the plugin does not read.
    ///
    /// ```
    /// # use capstan_sdk::Context;
    /// use capstan_sdk::Observed;
    /// use k8s_openapi::api::batch::v1::{Job, JobStatus};
    ///
    /// # let ctx = Context::default();
    /// let jobs = ctx.children_as::<Job, Observed<JobStatus>>()?;
    /// let succeeded = jobs.iter().filter_map(|j| j.status.as_ref()?.succeeded).sum::<i32>();
    /// # assert_eq!(succeeded, 0);
    /// # Ok::<(), capstan_sdk::ReconcileError>(())
    /// ```
    pub fn children_as<K, V>(&self) -> Result<Vec<V>, ReconcileError>
    where
        K: Resource<DynamicType = ()>,
        K::Scope: Scope,
        V: DeserializeOwned,
    {
        let kind = KindRef::of::<K>();
        let unparsable = |e: serde_json::Error| {
            ReconcileError::fatal(format!("observed {} does not parse: {e}", kind.kind))
        };
        kind.parse_all(&self.children, unparsable)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::batch::v1::Job;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::api::rbac::v1::ClusterRole;
    use serde_json::json;

    fn raw(values: Vec<serde_json::Value>) -> Vec<Box<RawValue>> {
        values
            .iter()
            .map(|v| serde_json::value::to_raw_value(v).unwrap())
            .collect()
    }

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
            raw(vec![
                json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "a"}}),
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}}),
                json!({"apiVersion": "batch/v2", "kind": "Job", "metadata": {"name": "other-version"}}),
                json!({"apiVersion": "v1/Job", "kind": "Job", "metadata": {"name": "not-core"}}),
            ]),
            false,
        );
        let jobs = ctx.children::<Job>().unwrap();
        assert_eq!(jobs.len(), 1);
        assert_eq!(jobs[0].metadata.name.as_deref(), Some("a"));
        assert_eq!(ctx.children::<ConfigMap>().unwrap().len(), 1);
        assert_eq!(ctx.raw_children().len(), 4);
    }

    #[test]
    fn views_read_only_their_fields_of_the_matching_kind() {
        use crate::Observed;
        use k8s_openapi::api::batch::v1::JobStatus;
        let ctx = Context::new(
            raw(vec![
                json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "a", "uid": "u"},
                    "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}},
                    "status": {"succeeded": 1}}),
                json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "fresh"}}),
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}}),
            ]),
            false,
        );
        let jobs = ctx.children_as::<Job, Observed<JobStatus>>().unwrap();
        assert_eq!(jobs.len(), 2);
        assert_eq!(jobs[0].metadata.name.as_deref(), Some("a"));
        assert_eq!(jobs[0].metadata.uid.as_deref(), Some("u"));
        assert_eq!(jobs[0].status.as_ref().and_then(|s| s.succeeded), Some(1));
        assert_eq!(jobs[1].status, None);
        let wrong_shape = Context::new(
            raw(vec![
                json!({"apiVersion": "batch/v1", "kind": "Job", "status": {"succeeded": "x"}}),
            ]),
            false,
        );
        assert!(matches!(
            wrong_shape.children_as::<Job, Observed<JobStatus>>(),
            Err(ReconcileError::Fatal(_))
        ));
    }

    #[test]
    fn a_child_that_does_not_parse_is_fatal() {
        let ctx = Context::new(
            raw(vec![
                json!({"apiVersion": "batch/v1", "kind": "Job", "spec": "nonsense"}),
            ]),
            false,
        );
        assert!(matches!(ctx.children::<Job>(), Err(ReconcileError::Fatal(_))));
    }
}
