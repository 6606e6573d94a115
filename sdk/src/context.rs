//! What the host passes besides the parent: the children it controls, the related
//! objects it asked for, the operator's settings and the time.

use k8s_openapi::jiff::Timestamp;
use kube_core::Resource;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;

use crate::{KindRef, ReconcileError, metadata::Scope};

/// Inputs of one reconcile other than the parent itself.
#[derive(Clone, Debug, Default)]
pub struct Context {
    children: Vec<Box<RawValue>>,
    related: Vec<Box<RawValue>>,
    settings: String,
    now: Timestamp,
    finalizing: bool,
}

impl Context {
    /// A context holding these observed children (JSON objects with apiVersion and kind),
    /// with no related objects, empty settings and the clock at the Unix epoch.
    pub fn new(children: Vec<Box<RawValue>>, finalizing: bool) -> Self {
        Context {
            children,
            finalizing,
            ..Context::default()
        }
    }

    /// This context with these related objects (JSON objects with apiVersion and kind).
    pub fn with_related(mut self, related: Vec<Box<RawValue>>) -> Self {
        self.related = related;
        self
    }

    /// This context with these settings (JSON text; empty is `{}`).
    pub fn with_settings(mut self, settings: impl Into<String>) -> Self {
        self.settings = settings.into();
        self
    }

    /// This context with the clock at `now`.
    pub fn with_now(mut self, now: Timestamp) -> Self {
        self.now = now;
        self
    }

    /// True when the parent is being deleted and the plugin's finalizer is still on it.
    pub fn finalizing(&self) -> bool {
        self.finalizing
    }

    /// The host's clock when it dispatched this reconcile: plugins have no clock of their
    /// own, so a recorded request replays to the same response. An answer that depends on
    /// it must ask to be called again ([`Response::requeue_after`](crate::Response::requeue_after)):
    /// the host does not call a plugin again for inputs that only differ in time from
    /// those of a reconcile that changed nothing. In
    /// [`Reconciler::related`](crate::Reconciler::related) it is the Unix epoch: queries
    /// are asked when the parent changes, not as time passes, so they must not depend on it.
    pub fn now(&self) -> Timestamp {
        self.now
    }

    /// The operator's settings as `T`, usually the type declared with
    /// [`Metadata::settings`](crate::Metadata::settings) (`{}` when none are configured).
    /// The host has already validated them, so an error here is a plugin bug: fatal.
    pub fn settings<T: DeserializeOwned>(&self) -> Result<T, ReconcileError> {
        crate::settings::parse(&self.settings).map_err(|e| ReconcileError::fatal(format!("settings: {e}")))
    }

    /// The settings as JSON text, as the host sent them.
    pub fn raw_settings(&self) -> &str {
        &self.settings
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
        parse_kind::<K, V>("observed", &self.children)
    }

    /// Every related object as JSON text, in the order of the queries that selected them.
    pub fn raw_related(&self) -> &[Box<RawValue>] {
        &self.related
    }

    /// The related objects of type `K`, e.g. `ctx.related::<ConfigMap>()`: those the
    /// parent's [`Related`](crate::Related) queries selected that exist.
    pub fn related<K>(&self) -> Result<Vec<K>, ReconcileError>
    where
        K: Resource<DynamicType = ()> + DeserializeOwned,
        K::Scope: Scope,
    {
        self.related_as::<K, K>()
    }

    /// The related objects of kind `K`, each parsed as `V` (a partial view).
    pub fn related_as<K, V>(&self) -> Result<Vec<V>, ReconcileError>
    where
        K: Resource<DynamicType = ()>,
        K::Scope: Scope,
        V: DeserializeOwned,
    {
        parse_kind::<K, V>("related", &self.related)
    }
}

/// The objects of kind `K` among `objects`, each parsed as `V`; `what` names the list in
/// errors.
fn parse_kind<K, V>(what: &str, objects: &[Box<RawValue>]) -> Result<Vec<V>, ReconcileError>
where
    K: Resource<DynamicType = ()>,
    K::Scope: Scope,
    V: DeserializeOwned,
{
    let kind = KindRef::of::<K>();
    let unparsable =
        |e: serde_json::Error| ReconcileError::fatal(format!("{what} {} does not parse: {e}", kind.kind));
    kind.parse_all(objects, unparsable)
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
    fn related_objects_are_read_like_children_from_their_own_list() {
        let ctx = Context::new(raw(vec![json!({"apiVersion": "v1", "kind": "ConfigMap"})]), false)
            .with_related(raw(vec![
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"k": "v"}}),
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}),
            ]));
        let maps = ctx.related::<ConfigMap>().unwrap();
        assert_eq!(maps.len(), 1);
        assert_eq!(maps[0].data.as_ref().unwrap()["k"], "v");
        assert_eq!(ctx.raw_related().len(), 2);
        let bad = Context::default().with_related(raw(vec![
            json!({"apiVersion": "v1", "kind": "ConfigMap", "data": 1}),
        ]));
        let e = bad.related::<ConfigMap>().unwrap_err();
        assert!(e.message().starts_with("related ConfigMap does not parse"), "{e}");
    }

    #[test]
    fn settings_and_now_are_what_the_host_sent() {
        #[derive(Debug, serde::Deserialize)]
        struct S {
            #[serde(default)]
            n: u8,
        }
        let ctx = Context::default();
        assert_eq!(ctx.settings::<S>().unwrap().n, 0, "no settings read as {{}}");
        assert_eq!(ctx.now(), Timestamp::UNIX_EPOCH);
        let now: Timestamp = "2026-11-24T09:30:00.123Z".parse().unwrap();
        let ctx = ctx.with_settings(r#"{"n": 7}"#).with_now(now);
        assert_eq!(ctx.settings::<S>().unwrap().n, 7);
        assert_eq!(ctx.now(), now);
        let e = ctx.with_settings(r#"{"n": "x"}"#).settings::<S>().unwrap_err();
        assert_eq!(
            e,
            ReconcileError::fatal(r#"settings: n: invalid type: string "x", expected u8"#)
        );
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
