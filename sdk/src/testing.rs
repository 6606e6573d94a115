//! Run a [`Reconciler`] natively in `cargo test`, from YAML or JSON fixtures, with no Wasm.
//!
//! ```
//! # use capstan_sdk::{Context, Metadata, ReconcileError, Reconciler, Response};
//! # use k8s_openapi::api::core::v1::ConfigMap;
//! # struct Mirror;
//! # impl Reconciler for Mirror {
//! #     type Parent = ConfigMap;
//! #     fn metadata() -> Metadata { Metadata::new("mirror", "0.1.0") }
//! #     fn reconcile(cm: ConfigMap, _: &Context) -> Result<Response, ReconcileError> {
//! #         Response::new().status(&cm.data)
//! #     }
//! # }
//! use capstan_sdk::testing::Fixture;
//!
//! let response = Fixture::parse(
//!     "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: default}\ndata: {k: v}",
//! )
//! .unwrap()
//! .reconcile::<Mirror>()
//! .unwrap();
//! assert_eq!(response.status.unwrap()["k"], "v");
//! ```
//!
//! # Responses are checked as the host checks them
//!
//! Every response a fixture gets is checked with the rules `capstan run` applies before it
//! writes anything — the same code (`capstan-contract`), so a test cannot pass on a
//! response the host would refuse: children of declared kinds only, with names the API
//! server accepts, in the parent's namespace, cluster-scoped kinds only when granted, no
//! owner references, no Capstan labels or annotation of the plugin's own making, no
//! duplicates. The operator's grants are [`Fixture::allow_cluster_kind`] and
//! [`Fixture::allow_namespace`].
//!
//! A refusal is not a [`ReconcileError`]: the plugin did not fail, it answered something
//! the host will not write, and the object will be retried until the plugin is fixed.
//! So [`Fixture::check`] returns it as [`Failure::Refused`], for tests about what the
//! host refuses, and [`Fixture::reconcile`] — for tests of behaviour, which expect a
//! valid response — panics with the refusal, failing the test like an assertion.
//!
//! ```
//! use capstan_sdk::testing::{Failure, Fixture};
//! use capstan_sdk::{Context, Metadata, ReconcileError, Reconciler, Response};
//! use k8s_openapi::api::core::v1::{ConfigMap, Secret};
//!
//! /// Declares ConfigMaps but also returns a Secret.
//! struct Leaky;
//!
//! impl Reconciler for Leaky {
//!     type Parent = ConfigMap;
//!     fn metadata() -> Metadata {
//!         Metadata::new("leaky", "0.1.0").child::<ConfigMap>()
//!     }
//!     fn reconcile(_: ConfigMap, _: &Context) -> Result<Response, ReconcileError> {
//!         let mut secret = Secret::default();
//!         secret.metadata.name = Some("stolen".into());
//!         Response::new().child(&secret)
//!     }
//! }
//!
//! let fixture = Fixture::parse("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: demo}").unwrap();
//! match fixture.check::<Leaky>() {
//!     Err(Failure::Refused(refusal)) => assert_eq!(
//!         refusal.to_string(),
//!         "child 0 (Secret/stolen): v1 Secret is not a declared child kind"
//!     ),
//!     other => panic!("expected a refusal, got {other:?}"),
//! }
//! ```

use std::{fmt, path::Path};

pub use capstan_contract::{Allowances, Refusal};

use crate::{KindRef, Metadata, ReconcileError, Reconciler, Response};

/// A fixture file or text that could not be read.
#[derive(Debug)]
pub struct FixtureError(String);

impl fmt::Display for FixtureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FixtureError {}

/// Parse YAML or JSON text holding one or more documents (`---` separated).
pub fn parse_documents(text: &str) -> Result<Vec<serde_json::Value>, FixtureError> {
    // Errors as one line, without a drawn snippet of the input.
    let mut options = serde_saphyr::Options::default();
    options.with_snippet = false;
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple_with_options(text, options).map_err(|e| FixtureError(e.to_string()))?;
    Ok(docs.into_iter().filter(|doc| !doc.is_null()).collect())
}

/// Read a YAML or JSON file holding one or more documents.
pub fn load_documents(path: impl AsRef<Path>) -> Result<Vec<serde_json::Value>, FixtureError> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).map_err(|e| FixtureError(format!("{}: {e}", path.display())))?;
    parse_documents(&text).map_err(|e| FixtureError(format!("{}: {e}", path.display())))
}

/// Why [`Fixture::check`] has no response to give.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The plugin returned an error, as the host would receive it.
    Plugin(ReconcileError),
    /// The plugin answered, but the host would refuse the response and write nothing of it.
    Refused(Refusal),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Plugin(e) => e.fmt(f),
            Failure::Refused(r) => write!(f, "refused: {r}"),
        }
    }
}

impl std::error::Error for Failure {}

/// One reconcile's input: a parent, observed children and the finalizing flag, plus the
/// operator's grants the response is checked against.
#[derive(Clone, Debug)]
pub struct Fixture {
    parent: serde_json::Value,
    children: Vec<serde_json::Value>,
    finalizing: bool,
    allow: Allowances,
}

impl Fixture {
    /// A fixture whose parent is this object.
    pub fn new(parent: serde_json::Value) -> Self {
        Fixture {
            parent,
            children: Vec::new(),
            finalizing: false,
            allow: Allowances::default(),
        }
    }

    /// A fixture whose parent is the single document in `text`.
    pub fn parse(text: &str) -> Result<Self, FixtureError> {
        match <[_; 1]>::try_from(parse_documents(text)?) {
            Ok([parent]) => Ok(Fixture::new(parent)),
            Err(docs) => Err(FixtureError(format!(
                "expected one parent document, found {}",
                docs.len()
            ))),
        }
    }

    /// A fixture whose parent is the single document in the file at `path`.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, FixtureError> {
        let path = path.as_ref();
        let text =
            std::fs::read_to_string(path).map_err(|e| FixtureError(format!("{}: {e}", path.display())))?;
        Fixture::parse(&text).map_err(|e| FixtureError(format!("{}: {e}", path.display())))
    }

    /// Add observed children from YAML/JSON text (one or more documents).
    pub fn children(mut self, text: &str) -> Result<Self, FixtureError> {
        self.children.extend(parse_documents(text)?);
        Ok(self)
    }

    /// Add observed children from a YAML/JSON file (one or more documents).
    pub fn children_file(mut self, path: impl AsRef<Path>) -> Result<Self, FixtureError> {
        self.children.extend(load_documents(path)?);
        Ok(self)
    }

    /// Add one observed child.
    pub fn child(mut self, child: serde_json::Value) -> Self {
        self.children.push(child);
        self
    }

    /// Mark the parent as being finalized.
    pub fn finalizing(mut self) -> Self {
        self.finalizing = true;
        self
    }

    /// Let the plugin create cluster-scoped children of this kind (`Kind` or
    /// `plural.group`), as `capstan run --allow-cluster-kind` does; none by default.
    pub fn allow_cluster_kind(mut self, kind: impl Into<String>) -> Self {
        self.allow.cluster_kinds.push(kind.into());
        self
    }

    /// Let children of a cluster-scoped parent go into this namespace, as `capstan run
    /// --namespace` or a plugin's `allowNamespaces` does; none by default.
    pub fn allow_namespace(mut self, namespace: impl Into<String>) -> Self {
        self.allow.namespaces.push(namespace.into());
        self
    }

    /// Run `R` on this fixture, exactly as the Wasm export would, and check the response
    /// as the host would before writing it (see the [module docs](self)).
    ///
    /// # Panics
    /// When the host would refuse the response, with the refusal: a plugin bug, not a
    /// [`ReconcileError`]. Use [`Fixture::check`] to get the refusal as a value.
    ///
    /// ```should_panic
    /// # use capstan_sdk::{Context, Metadata, ReconcileError, Reconciler, Response};
    /// # use k8s_openapi::api::core::v1::ConfigMap;
    /// # struct Elsewhere;
    /// # impl Reconciler for Elsewhere {
    /// #     type Parent = ConfigMap;
    /// #     fn metadata() -> Metadata { Metadata::new("elsewhere", "0.1.0").child::<ConfigMap>() }
    /// #     fn reconcile(_: ConfigMap, _: &Context) -> Result<Response, ReconcileError> {
    /// #         let mut cm = ConfigMap::default();
    /// #         cm.metadata.name = Some("a".into());
    /// #         cm.metadata.namespace = Some("kube-system".into());
    /// #         Response::new().child(&cm)
    /// #     }
    /// # }
    /// use capstan_sdk::testing::Fixture;
    ///
    /// // A ConfigMap in kube-system for a parent in demo: the host writes nothing of it.
    /// let fixture = Fixture::parse("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: p, namespace: demo}");
    /// let _ = fixture.unwrap().reconcile::<Elsewhere>();
    /// ```
    #[track_caller]
    pub fn reconcile<R: Reconciler>(self) -> Result<Response, ReconcileError> {
        match self.check::<R>() {
            Ok(response) => Ok(response),
            Err(Failure::Plugin(e)) => Err(e),
            Err(Failure::Refused(r)) => panic!(
                "the host would refuse this response and write nothing of it: {r} \
                 (Fixture::check returns the refusal as a value)"
            ),
        }
    }

    /// Run `R` on this fixture, exactly as the Wasm export would, and check the response
    /// with the host's own rules: [`Failure::Plugin`] when the plugin returns an error,
    /// [`Failure::Refused`] when the host would refuse what it returned.
    ///
    /// The parent's namespace is where the API server would have it: none for a
    /// cluster-scoped parent, `default` for a namespaced one whose fixture names none.
    pub fn check<R: Reconciler>(self) -> Result<Response, Failure> {
        let declared = declared::<R>();
        let namespace = capstan_contract::parent_namespace(&declared, &self.parent).map(str::to_owned);
        let response =
            crate::guest::run::<R>(self.parent, self.children, self.finalizing).map_err(Failure::Plugin)?;
        let children = response.children_json().map_err(Failure::Plugin)?;
        capstan_contract::children(&declared, namespace.as_deref(), children, &self.allow)
            .map_err(Failure::Refused)?;
        Ok(response)
    }
}

/// `R`'s metadata as the host reads it from the Wasm export.
fn declared<R: Reconciler>() -> capstan_contract::Metadata {
    let (parent, m) = crate::guest::full_metadata::<R>();
    capstan_contract::Metadata {
        name: m.name,
        version: m.version,
        parent: kind(parent),
        children: m.children.into_iter().map(kind).collect(),
        finalizer: m.finalizer,
    }
}

fn kind(k: KindRef) -> capstan_contract::Kind {
    capstan_contract::Kind {
        group: k.group,
        version: k.version,
        kind: k.kind,
        plural: k.plural,
        namespaced: k.namespaced,
    }
}

/// `R`'s metadata with its parent kind, as the host would read it.
pub fn metadata<R: Reconciler>() -> (KindRef, Metadata) {
    crate::guest::full_metadata::<R>()
}

/// Assert that the committed file at `path` holds exactly `generated` (e.g. a CRD made
/// from the Rust type). With `CAPSTAN_BLESS=1` in the environment it rewrites the file
/// first, which is how such files are regenerated.
///
/// # Panics
/// When the file is missing or stale, with the command that regenerates it.
pub fn assert_generated(path: impl AsRef<Path>, generated: &str) {
    let path = path.as_ref();
    if std::env::var_os("CAPSTAN_BLESS").is_some() {
        std::fs::write(path, generated).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    }
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        committed == generated,
        "{} is stale: regenerate it with CAPSTAN_BLESS=1 cargo test",
        path.display()
    );
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use serde_json::{Value, json};

    use super::*;
    use crate::Context;

    /// Returns the children listed (as JSON) in its parent's annotation `children`, or the
    /// error in `fail`.
    struct Scripted;
    /// [`Scripted`] with a cluster-scoped parent.
    struct ClusterScripted;

    fn script(meta: &ObjectMeta) -> Result<Response, ReconcileError> {
        let annotations = meta.annotations.clone().unwrap_or_default();
        if let Some(m) = annotations.get("fail") {
            return Err(ReconcileError::fatal(m.clone()));
        }
        let children: Vec<Value> = serde_json::from_str(annotations.get("children").map_or("[]", |c| c))?;
        children.iter().try_fold(Response::new(), |r, c| r.child(c))
    }

    fn declared_kinds() -> Metadata {
        Metadata::new("scripted", "0.1.0")
            .child::<ConfigMap>()
            .child::<Namespace>()
    }

    impl Reconciler for Scripted {
        type Parent = ConfigMap;
        fn metadata() -> Metadata {
            declared_kinds()
        }
        fn reconcile(parent: ConfigMap, _: &Context) -> Result<Response, ReconcileError> {
            script(&parent.metadata)
        }
    }

    impl Reconciler for ClusterScripted {
        type Parent = Namespace;
        fn metadata() -> Metadata {
            declared_kinds()
        }
        fn reconcile(parent: Namespace, _: &Context) -> Result<Response, ReconcileError> {
            script(&parent.metadata)
        }
    }

    /// A fixture whose parent (a ConfigMap, or a Namespace when `namespace` is None)
    /// returns `children`.
    fn returning(namespace: Option<&str>, children: Value) -> Fixture {
        let annotations = json!({ "children": children.to_string() });
        Fixture::new(match namespace {
            Some(ns) => json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "p", "namespace": ns, "annotations": annotations},
            }),
            None => json!({
                "apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": "p", "annotations": annotations},
            }),
        })
    }

    fn config_map(name: &str, namespace: Option<&str>) -> Value {
        let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}});
        if let Some(ns) = namespace {
            cm["metadata"]["namespace"] = ns.into();
        }
        cm
    }

    fn refusal(result: Result<Response, Failure>) -> String {
        match result {
            Err(Failure::Refused(r)) => r.to_string(),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn an_undeclared_kind_is_refused_as_the_host_refuses_it() {
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}});
        let children = json!([config_map("a", None), secret]);
        assert_eq!(
            refusal(returning(Some("demo"), children).check::<Scripted>()),
            "child 1 (Secret/s): v1 Secret is not a declared child kind"
        );
    }

    #[test]
    #[should_panic(
        expected = "the host would refuse this response and write nothing of it: child 0 \
                               (ConfigMap/a): namespace kube-system is not the parent's namespace demo"
    )]
    fn reconcile_fails_the_test_on_a_refused_response() {
        let children = json!([config_map("a", Some("kube-system"))]);
        let _ = returning(Some("demo"), children).reconcile::<Scripted>();
    }

    #[test]
    fn a_valid_response_passes_unchanged_and_plugin_errors_stay_errors() {
        let children = json!([config_map("a", None), config_map("b", Some("demo"))]);
        let response = returning(Some("demo"), children).reconcile::<Scripted>().unwrap();
        let json = response.children_json().unwrap();
        assert_eq!(json[0], config_map("a", None), "nothing filled in");
        // A parent of a namespaced kind with no namespace is in `default`, as applied.
        let mut fixture = returning(Some("x"), json!([config_map("a", Some("default"))]));
        fixture.parent["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("namespace");
        assert!(fixture.check::<Scripted>().is_ok());

        let mut failing = returning(Some("demo"), json!([]));
        failing.parent["metadata"]["annotations"]["fail"] = "broken".into();
        assert_eq!(
            failing.clone().check::<Scripted>().unwrap_err(),
            Failure::Plugin(ReconcileError::fatal("broken"))
        );
        assert_eq!(
            failing.reconcile::<Scripted>().unwrap_err(),
            ReconcileError::fatal("broken")
        );
    }

    #[test]
    fn the_operator_grants_are_the_fixture_s_to_give() {
        let namespace = json!([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n"}}]);
        let fixture = returning(Some("demo"), namespace);
        let r = refusal(fixture.clone().check::<Scripted>());
        assert!(r.contains("cluster-scoped and not allowed"), "{r}");
        assert!(
            fixture
                .clone()
                .allow_cluster_kind("Namespace")
                .check::<Scripted>()
                .is_ok()
        );
        assert!(
            fixture
                .allow_cluster_kind("namespaces.")
                .check::<Scripted>()
                .is_ok()
        );

        // A cluster-scoped parent's children go only where the operator allows.
        let fixture = returning(None, json!([config_map("a", Some("team-a"))]));
        let r = refusal(fixture.clone().check::<ClusterScripted>());
        assert!(
            r.contains("not allowed for children of this cluster-scoped parent"),
            "{r}"
        );
        assert!(
            fixture
                .allow_namespace("team-a")
                .check::<ClusterScripted>()
                .is_ok()
        );
    }

    #[test]
    fn names_labels_and_owners_are_checked_too() {
        let mut owned = config_map("a", None);
        owned["metadata"]["ownerReferences"] = json!([{"uid": "x"}]);
        let mut stolen = config_map("b", None);
        stolen["metadata"]["labels"] = json!({"capstan.dev/plugin": "other"});
        for (child, reason) in [
            (config_map("x?dryRun=All", None), "RFC 1123 subdomain"),
            (config_map("victim/status", None), "RFC 1123 subdomain"),
            (owned, "ownerReferences"),
            (stolen, "capstan.dev/plugin"),
        ] {
            let r = refusal(returning(Some("demo"), json!([child])).check::<Scripted>());
            assert!(r.contains(reason), "{r}");
        }
        let twice = json!([config_map("a", None), config_map("a", Some("demo"))]);
        assert!(refusal(returning(Some("demo"), twice).check::<Scripted>()).contains("twice"));
    }
}
