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
//! # Settings, related objects and time
//!
//! A fixture carries what the host would send besides the parent and children: the
//! operator's settings ([`Fixture::settings`], `{}` by default), checked with the plugin's
//! `validate-settings` first as the host does at load, so invalid settings fail the test
//! as [`Failure::Settings`]; the objects that exist in the cluster of the plugin's related
//! kinds ([`Fixture::related`]), of which the request gets only those the plugin's
//! [`Reconciler::related`] queries select, by the host's rules
//! (`capstan_contract::related`); and the clock ([`Fixture::now`], [`DEFAULT_NOW`] unless
//! set), so a test's response never depends on when it runs.
//!
//! ```
//! use capstan_sdk::testing::Fixture;
//! use capstan_sdk::{Context, Metadata, ReconcileError, Reconciler, Related, Response};
//! use k8s_openapi::api::core::v1::ConfigMap;
//!
//! /// Copies the ConfigMap its parent's data names under `from` into its status.
//! struct Copier;
//!
//! impl Reconciler for Copier {
//!     type Parent = ConfigMap;
//!     fn metadata() -> Metadata {
//!         Metadata::new("copier", "0.1.0").related::<ConfigMap>()
//!     }
//!     fn related(parent: &ConfigMap, _: &Context) -> Vec<Related> {
//!         let from = parent.data.as_ref().and_then(|d| d.get("from")).cloned();
//!         vec![Related::named::<ConfigMap>(from)]
//!     }
//!     fn reconcile(_: ConfigMap, ctx: &Context) -> Result<Response, ReconcileError> {
//!         let sources = ctx.related::<ConfigMap>()?;
//!         Response::new().status(&serde_json::json!({
//!             "copied": sources.first().and_then(|s| s.data.clone()),
//!             "at": ctx.now().to_string(),
//!         }))
//!     }
//! }
//!
//! let response = Fixture::parse("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: p, namespace: demo}\ndata: {from: src}")
//!     .unwrap()
//!     .related("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: src, namespace: demo}\ndata: {k: v}\n---\n\
//!               apiVersion: v1\nkind: ConfigMap\nmetadata: {name: other, namespace: demo}\ndata: {k: no}")
//!     .unwrap()
//!     .now("2026-11-24T09:30:00Z".parse().unwrap())
//!     .reconcile::<Copier>()
//!     .unwrap();
//! let status = response.status.unwrap();
//! assert_eq!(status["copied"]["k"], "v");
//! assert_eq!(status["at"], "2026-11-24T09:30:00Z");
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
//! use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
//!
//! /// Declares ConfigMaps but also returns a Secret.
//! struct Leaky;
//!
//! impl Reconciler for Leaky {
//!     type Parent = Service;
//!     fn metadata() -> Metadata {
//!         Metadata::new("leaky", "0.1.0").child::<ConfigMap>()
//!     }
//!     fn reconcile(_: Service, _: &Context) -> Result<Response, ReconcileError> {
//!         let mut secret = Secret::default();
//!         secret.metadata.name = Some("stolen".into());
//!         Response::new().child(&secret)
//!     }
//! }
//!
//! let fixture = Fixture::parse("apiVersion: v1\nkind: Service\nmetadata: {name: a, namespace: demo}").unwrap();
//! match fixture.check::<Leaky>() {
//!     Err(Failure::Refused(refusal)) => assert_eq!(
//!         refusal.to_string(),
//!         "child 0 (Secret/stolen): v1 Secret is not a declared child kind"
//!     ),
//!     other => panic!("expected a refusal, got {other:?}"),
//! }
//! ```

use std::{fmt, path::Path};

pub use capstan_contract::{Allowances, Refusal, RelatedQuery, Selector};
use k8s_openapi::jiff::Timestamp;

use crate::bindings::capstan::reconciler::types as wit;
use crate::guest::json;
use crate::{KindRef, Metadata, ReconcileError, Reconciler, Response};

/// The clock of a fixture that sets none: fixed, so responses never depend on the day a
/// test runs.
pub const DEFAULT_NOW: &str = capstan_contract::FIXTURE_NOW;

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

/// Parse YAML or JSON text holding exactly one document.
fn parse_document(text: &str, what: &str) -> Result<serde_json::Value, FixtureError> {
    match <[_; 1]>::try_from(parse_documents(text)?) {
        Ok([doc]) => Ok(doc),
        Err(docs) => Err(FixtureError(format!(
            "expected one {what} document, found {}",
            docs.len()
        ))),
    }
}

/// Read a file and parse it with `parse`, naming the file in any error.
fn read<T>(path: &Path, parse: impl FnOnce(&str) -> Result<T, FixtureError>) -> Result<T, FixtureError> {
    let text = std::fs::read_to_string(path).map_err(|e| FixtureError(format!("{}: {e}", path.display())))?;
    parse(&text).map_err(|e| FixtureError(format!("{}: {e}", path.display())))
}

/// Why [`Fixture::check`] has no response to give.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The plugin's `validate-settings` refused the fixture's settings: the host would
    /// not load the plugin with them.
    Settings(String),
    /// The host would refuse the plugin's related queries for this parent (an undeclared
    /// kind, another namespace, a malformed selector) and not reconcile it.
    Related(String),
    /// The plugin returned an error, as the host would receive it.
    Plugin(ReconcileError),
    /// The plugin answered, but the host would refuse the response and write nothing of it.
    Refused(Refusal),
    /// The host would not load the plugin: what it declares needs a grant the fixture
    /// does not give, or could never work (see `capstan_contract::declared`).
    Declared(String),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Settings(m) => write!(f, "invalid settings: {m}"),
            Failure::Related(m) => write!(f, "refused related queries: {m}"),
            Failure::Plugin(e) => e.fmt(f),
            Failure::Refused(r) => write!(f, "refused: {r}"),
            Failure::Declared(m) => write!(f, "refused plugin: {m}"),
        }
    }
}

impl std::error::Error for Failure {}

/// One reconcile's input: a parent, observed children, the objects of related kinds that
/// exist, settings, the clock and the finalizing flag, plus the operator's grants the
/// response is checked against.
#[derive(Clone, Debug)]
pub struct Fixture {
    parent: serde_json::Value,
    children: Vec<serde_json::Value>,
    related: Vec<serde_json::Value>,
    settings: serde_json::Value,
    now: Timestamp,
    finalizing: bool,
    allow: Allowances,
}

impl Fixture {
    /// A fixture whose parent is this object.
    pub fn new(parent: serde_json::Value) -> Self {
        Fixture {
            parent,
            children: Vec::new(),
            related: Vec::new(),
            settings: serde_json::json!({}),
            now: DEFAULT_NOW.parse().expect("DEFAULT_NOW is RFC 3339"),
            finalizing: false,
            allow: Allowances::default(),
        }
    }

    /// A fixture whose parent is the single document in `text`.
    pub fn parse(text: &str) -> Result<Self, FixtureError> {
        parse_document(text, "parent").map(Fixture::new)
    }

    /// A fixture whose parent is the single document in the file at `path`.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, FixtureError> {
        read(path.as_ref(), Fixture::parse)
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

    /// Add objects of the plugin's related kinds from YAML/JSON text (one or more
    /// documents): what exists in the cluster, of which the request gets those the
    /// plugin's queries select. A namespaced object that names no namespace is in
    /// `default`, where `kubectl apply -f` would create it.
    pub fn related(mut self, text: &str) -> Result<Self, FixtureError> {
        self.related.extend(parse_documents(text)?);
        Ok(self)
    }

    /// Add objects of related kinds from a YAML/JSON file (one or more documents).
    pub fn related_file(mut self, path: impl AsRef<Path>) -> Result<Self, FixtureError> {
        self.related.extend(load_documents(path)?);
        Ok(self)
    }

    /// Add one object of a related kind.
    pub fn related_object(mut self, object: serde_json::Value) -> Self {
        self.related.push(object);
        self
    }

    /// Use these settings, from YAML/JSON text holding one object.
    pub fn settings(self, text: &str) -> Result<Self, FixtureError> {
        Ok(self.settings_value(parse_document(text, "settings")?))
    }

    /// Use these settings, from a YAML/JSON file holding one object.
    pub fn settings_file(self, path: impl AsRef<Path>) -> Result<Self, FixtureError> {
        Ok(self.settings_value(read(path.as_ref(), |t| parse_document(t, "settings"))?))
    }

    /// Use these settings.
    pub fn settings_value(mut self, settings: serde_json::Value) -> Self {
        self.settings = settings;
        self
    }

    /// Set the host's clock for this reconcile ([`DEFAULT_NOW`] otherwise).
    pub fn now(mut self, now: Timestamp) -> Self {
        self.now = now;
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

    /// The operator's grant for a plugin of Namespaces to put children into the Namespace
    /// it reconciles (`allowOwnNamespace`; `capstan test --allow-own-namespace`).
    pub fn allow_own_namespace(mut self) -> Self {
        self.allow.own_namespace = true;
        self
    }

    /// The operator's grant to declare Secret as parent, child or related kind
    /// (`allowSecrets`; `capstan test --allow-secrets`).
    pub fn allow_secrets(mut self) -> Self {
        self.allow.secrets = true;
        self
    }

    /// The operator's grant to declare the parent kind as a child kind (`allowOwnKind`;
    /// `capstan test --allow-own-kind`).
    pub fn allow_own_kind(mut self) -> Self {
        self.allow.own_kind = true;
        self
    }

    /// Run `R` on this fixture, exactly as the Wasm export would, and check the response
    /// as the host would before writing it (see the [module docs](self)).
    ///
    /// # Panics
    /// When the host would refuse the response, with the refusal: a plugin bug, not a
    /// [`ReconcileError`]; likewise when it would refuse the settings or the related
    /// queries. Use [`Fixture::check`] to get these as values.
    ///
    /// ```should_panic
    /// # use capstan_sdk::{Context, Metadata, ReconcileError, Reconciler, Response};
    /// # use k8s_openapi::api::core::v1::{ConfigMap, Service};
    /// # struct Elsewhere;
    /// # impl Reconciler for Elsewhere {
    /// #     type Parent = Service;
    /// #     fn metadata() -> Metadata { Metadata::new("elsewhere", "0.1.0").child::<ConfigMap>() }
    /// #     fn reconcile(_: Service, _: &Context) -> Result<Response, ReconcileError> {
    /// #         let mut cm = ConfigMap::default();
    /// #         cm.metadata.name = Some("a".into());
    /// #         cm.metadata.namespace = Some("kube-system".into());
    /// #         Response::new().child(&cm)
    /// #     }
    /// # }
    /// use capstan_sdk::testing::Fixture;
    ///
    /// // A ConfigMap in kube-system for a parent in demo: the host writes nothing of it.
    /// let fixture = Fixture::parse("apiVersion: v1\nkind: Service\nmetadata: {name: p, namespace: demo}");
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
            Err(Failure::Settings(m)) => panic!(
                "the host would not load the plugin with these settings: {m} \
                 (Fixture::check returns it as a value)"
            ),
            Err(Failure::Related(m)) => panic!(
                "the host would refuse the plugin's related queries: {m} \
                 (Fixture::check returns it as a value)"
            ),
            Err(Failure::Declared(m)) => {
                panic!("the host would not load the plugin: {m} (Fixture::check returns it as a value)")
            }
        }
    }

    /// Run `R` on this fixture, exactly as the Wasm export would, and check it with the
    /// host's own rules: [`Failure::Declared`] when the host would not load the plugin
    /// with the fixture's grants, [`Failure::Settings`] when it would not load it
    /// with these settings, [`Failure::Related`] when it would refuse the plugin's related
    /// queries, [`Failure::Plugin`] when the plugin returns an error, [`Failure::Refused`]
    /// when the host would refuse what it returned.
    ///
    /// The parent's namespace is where the API server would have it: none for a
    /// cluster-scoped parent (a Namespace parent's is itself), `default` for a namespaced
    /// one whose fixture names none.
    pub fn check<R: Reconciler>(self) -> Result<Response, Failure> {
        let (parent_kind, metadata) = crate::guest::full_metadata::<R>();
        let settings = json(&self.settings);
        metadata.validate_settings(&settings).map_err(Failure::Settings)?;
        let declared = declared(parent_kind, metadata);
        capstan_contract::declared::offline(&declared, &self.allow).map_err(Failure::Declared)?;
        let namespace =
            capstan_contract::parent_namespace(&declared, &self.parent, &self.allow).map(str::to_owned);
        let parent = json(&self.parent);
        // As the host: no `related` call for a plugin that declares no related kinds.
        let related = if declared.related.is_empty() {
            Vec::new()
        } else {
            // Shown what the host shows it: the parent without status or version.
            let shown = capstan_contract::related::shown(&parent);
            let queries = crate::guest::queries::<R>(&shown, settings.clone());
            let of = capstan_contract::related::Parent::of(&declared, &self.parent);
            let resolved = capstan_contract::related::resolve(&declared, of, &queries, &self.allow)
                .map_err(Failure::Related)?;
            let existing: Vec<_> = self
                .related
                .into_iter()
                .map(|o| in_namespace(&declared, o))
                .collect();
            capstan_contract::related::select(&declared, &resolved, &existing).map_err(Failure::Related)?
        };
        let request = wit::Request {
            parent,
            children: self.children.iter().map(json).collect(),
            related: related.iter().map(json).collect(),
            settings,
            now: self.now.to_string(),
            finalizing: self.finalizing,
        };
        let response = crate::guest::run::<R>(request).map_err(Failure::Plugin)?;
        let children = response.children_json().map_err(Failure::Plugin)?;
        let rest = capstan_contract::Rest {
            event_reasons: response.events.iter().map(|e| e.reason.as_str()),
            parent: &response.parent,
        };
        capstan_contract::response(&declared, namespace.as_deref(), children, rest, &self.allow)
            .map_err(Failure::Refused)?;
        Ok(response)
    }

    /// The related queries `R` asks for this fixture's parent and settings, unchecked.
    pub fn related_queries<R: Reconciler>(&self) -> Vec<RelatedQuery> {
        let shown = capstan_contract::related::shown(&json(&self.parent));
        crate::guest::queries::<R>(&shown, json(&self.settings))
    }
}

/// A related object of a namespaced kind that names no namespace is in `default`, as
/// `kubectl apply -f` would create it.
fn in_namespace(declared: &capstan_contract::Metadata, mut object: serde_json::Value) -> serde_json::Value {
    let namespaced = declared
        .related
        .iter()
        .any(|k| k.namespaced && k.matches(&object));
    if namespaced && object["metadata"]["namespace"].as_str().is_none_or(str::is_empty) {
        object["metadata"]["namespace"] = "default".into();
    }
    object
}

/// `R`'s metadata as the host reads it from the Wasm export.
fn declared(parent: KindRef, m: Metadata) -> capstan_contract::Metadata {
    capstan_contract::Metadata {
        settings_schema: m.settings_schema().cloned(),
        name: m.name,
        version: m.version,
        parent: kind(parent),
        children: m.children.into_iter().map(kind).collect(),
        related: m.related.into_iter().map(kind).collect(),
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

/// Check settings as the host does when it loads `R`: the error is the one-line message
/// it would refuse the plugin with.
pub fn validate_settings<R: Reconciler>(settings: &serde_json::Value) -> Result<(), String> {
    R::metadata().validate_settings(&json(settings))
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
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Service};
    use k8s_openapi::api::rbac::v1::ClusterRole;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use serde_json::{Value, json};

    use super::*;
    use crate::{Context, Related};

    /// Returns the children listed (as JSON) in its parent's annotation `children`, or the
    /// error in `fail`.
    struct Scripted;
    /// [`Scripted`] with a cluster-scoped parent.
    struct ClusterScripted;
    /// [`Scripted`] with a Namespace parent.
    struct NamespaceScripted;

    fn script(meta: &ObjectMeta) -> Result<Response, ReconcileError> {
        let annotations = meta.annotations.clone().unwrap_or_default();
        if let Some(m) = annotations.get("fail") {
            return Err(ReconcileError::fatal(m.clone()));
        }
        let children: Vec<Value> = serde_json::from_str(annotations.get("children").map_or("[]", |c| c))?;
        let mut response = children.iter().try_fold(Response::new(), |r, c| r.child(c))?;
        if let Some((key, value)) = annotations.get("label").and_then(|l| l.split_once('=')) {
            response = response.parent_label(key, value);
        }
        Ok(match annotations.get("event") {
            Some(reason) => response.event(crate::Event::normal(reason.clone(), "scripted")),
            None => response,
        })
    }

    fn declared_kinds() -> Metadata {
        Metadata::new("scripted", "0.1.0")
            .child::<ConfigMap>()
            .child::<Namespace>()
    }

    impl Reconciler for Scripted {
        type Parent = Service;
        fn metadata() -> Metadata {
            Metadata::new("scripted", "0.1.0").child::<ConfigMap>()
        }
        fn reconcile(parent: Service, _: &Context) -> Result<Response, ReconcileError> {
            script(&parent.metadata)
        }
    }

    impl Reconciler for ClusterScripted {
        type Parent = ClusterRole;
        fn metadata() -> Metadata {
            declared_kinds()
        }
        fn reconcile(parent: ClusterRole, _: &Context) -> Result<Response, ReconcileError> {
            script(&parent.metadata)
        }
    }

    impl Reconciler for NamespaceScripted {
        type Parent = Namespace;
        fn metadata() -> Metadata {
            // Not Namespace itself: that would be its own parent kind.
            Metadata::new("scripted", "0.1.0").child::<ConfigMap>()
        }
        fn reconcile(parent: Namespace, _: &Context) -> Result<Response, ReconcileError> {
            script(&parent.metadata)
        }
    }

    /// A fixture whose parent (a Service, or a ClusterRole when `namespace` is None)
    /// returns `children`.
    fn returning(namespace: Option<&str>, children: Value) -> Fixture {
        let annotations = json!({ "children": children.to_string() });
        Fixture::new(match namespace {
            Some(ns) => json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "p", "namespace": ns, "annotations": annotations},
            }),
            None => json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
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
        let fixture = returning(None, namespace);
        let r = refusal(fixture.clone().check::<ClusterScripted>());
        assert!(r.contains("cluster-scoped and not allowed"), "{r}");
        assert!(
            fixture
                .clone()
                .allow_cluster_kind("Namespace")
                .check::<ClusterScripted>()
                .is_ok()
        );
        assert!(
            fixture
                .allow_cluster_kind("namespaces.")
                .check::<ClusterScripted>()
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
    fn a_namespace_parents_children_live_in_that_namespace_by_the_operators_grant() {
        let annotations =
            json!({ "children": json!([config_map("a", None), config_map("b", Some("p"))]).to_string() });
        let parent = json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "p", "annotations": annotations},
        });
        let ungranted = refusal(Fixture::new(parent.clone()).check::<NamespaceScripted>());
        assert!(ungranted.contains("cluster-scoped parent"), "{ungranted}");
        let fixture = Fixture::new(parent).allow_own_namespace();
        assert!(fixture.check::<NamespaceScripted>().is_ok());
        let annotations = json!({ "children": json!([config_map("a", Some("q"))]).to_string() });
        let elsewhere = Fixture::new(json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "p", "annotations": annotations},
        }))
        .allow_own_namespace();
        let r = refusal(elsewhere.check::<NamespaceScripted>());
        assert!(r.contains("not the parent's namespace p"), "{r}");
    }

    /// Reads the ConfigMaps its parent's data lists under `names`, from the namespace
    /// under `from` if any, or those labelled as the settings' `selector` says; reports
    /// what it got in its status.
    struct Reader;

    #[derive(serde::Deserialize, schemars::JsonSchema)]
    #[serde(deny_unknown_fields)]
    struct ReaderSettings {
        #[serde(default)]
        selector: Option<String>,
    }

    impl crate::Settings for ReaderSettings {
        fn validate(&self) -> Result<(), String> {
            match self.selector.as_deref() {
                Some("") => Err("selector must not be empty".into()),
                _ => Ok(()),
            }
        }
    }

    impl Reconciler for Reader {
        type Parent = ConfigMap;
        fn metadata() -> Metadata {
            Metadata::new("reader", "0.1.0")
                .related::<ConfigMap>()
                .settings::<ReaderSettings>()
        }
        fn related(parent: &ConfigMap, ctx: &Context) -> Vec<Related> {
            let data = parent.data.clone().unwrap_or_default();
            let names = data
                .get("names")
                .map(|n| n.split(',').map(str::to_owned).collect::<Vec<_>>());
            let mut query = Related::named::<ConfigMap>(names.unwrap_or_default());
            if let Some(ns) = data.get("from") {
                query = query.in_namespace(ns);
            }
            let mut queries = vec![query];
            if let Some(s) = ctx.settings::<ReaderSettings>().ok().and_then(|s| s.selector) {
                queries.push(Related::labelled::<ConfigMap>(s));
            }
            queries
        }
        fn reconcile(_: ConfigMap, ctx: &Context) -> Result<Response, ReconcileError> {
            let names: Vec<_> = ctx
                .related::<ConfigMap>()?
                .into_iter()
                .map(|c| c.metadata.name.unwrap_or_default())
                .collect();
            Response::new().status(&json!({"read": names, "now": ctx.now().to_string()}))
        }
    }

    fn reader(data: Value) -> Fixture {
        let existing =
            [("a", "demo", "web"), ("b", "demo", "db"), ("c", "other", "web")].map(|(name, ns, app)| {
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": ns, "labels": {"app": app}}})
            });
        let mut f = Fixture::new(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "p", "namespace": "demo"}, "data": data}));
        for o in existing {
            f = f.related_object(o);
        }
        f.related("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: d, labels: {app: web}}")
            .unwrap()
    }

    fn read(result: Result<Response, Failure>) -> Value {
        result.unwrap().status.unwrap()["read"].clone()
    }

    #[test]
    fn related_objects_are_selected_by_the_plugins_queries_with_the_hosts_rules() {
        assert_eq!(
            read(reader(json!({"names": "b,a,zz"})).check::<Reader>()),
            json!(["a", "b"])
        );
        let by_label = reader(json!({"names": "b"}))
            .settings("selector: app=web")
            .unwrap();
        assert_eq!(
            read(by_label.check::<Reader>()),
            json!(["b", "a"]),
            "in query order, only the parent's namespace"
        );
        // An object that names no namespace is in `default`.
        let mut in_default = reader(json!({"names": "d"}));
        in_default.parent["metadata"]["namespace"] = "default".into();
        assert_eq!(read(in_default.check::<Reader>()), json!(["d"]));
        // Another namespace is the host's to refuse.
        let e = reader(json!({"names": "c", "from": "other"}))
            .check::<Reader>()
            .unwrap_err();
        assert!(
            matches!(&e, Failure::Related(m) if m.contains("not the parent's namespace")),
            "{e}"
        );
        let bad_selector = reader(json!({})).settings("selector: 'app in (web'").unwrap();
        assert!(
            matches!(bad_selector.check::<Reader>(), Err(Failure::Related(m)) if m.contains("label selector"))
        );
        let queries = reader(json!({"names": "a"})).related_queries::<Reader>();
        assert_eq!(queries.len(), 1);
    }

    #[test]
    fn settings_are_validated_as_the_host_validates_them_at_load() {
        let e = reader(json!({}))
            .settings("{selector: ''}")
            .unwrap()
            .check::<Reader>();
        assert_eq!(
            e.unwrap_err(),
            Failure::Settings("selector must not be empty".into())
        );
        let e = reader(json!({}))
            .settings_value(json!({"selectr": "x"}))
            .check::<Reader>();
        assert!(matches!(e, Err(Failure::Settings(m)) if m.contains("unknown field `selectr`")));
        let e = returning(Some("demo"), json!([]))
            .settings("{x: 1}")
            .unwrap()
            .check::<Scripted>();
        assert_eq!(
            e.unwrap_err(),
            Failure::Settings("plugin scripted takes no settings (got x)".into())
        );
        assert_eq!(validate_settings::<Reader>(&json!({"selector": "a=b"})), Ok(()));
        assert!(
            Fixture::parse("a: 1")
                .unwrap()
                .settings("a: 1\n---\nb: 2")
                .is_err()
        );
    }

    #[test]
    #[should_panic(
        expected = "the host would not load the plugin with these settings: plugin scripted takes no settings"
    )]
    fn reconcile_fails_the_test_on_invalid_settings() {
        let _ = returning(Some("demo"), json!([]))
            .settings_value(json!({"x": 1}))
            .reconcile::<Scripted>();
    }

    #[test]
    fn the_clock_is_fixed_unless_the_fixture_sets_it() {
        let status = |f: Fixture| f.check::<Reader>().unwrap().status.unwrap()["now"].clone();
        assert_eq!(status(reader(json!({}))), DEFAULT_NOW);
        let later = reader(json!({})).now("2026-11-24T09:30:00.5Z".parse().unwrap());
        assert_eq!(status(later), "2026-11-24T09:30:00.5Z");
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

    #[test]
    fn the_parents_own_labels_are_checked_as_the_host_checks_them() {
        let labelled = |label: &str| {
            let parent = json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "p", "namespace": "demo", "annotations": {"label": label}},
            });
            Fixture::new(parent).check::<Scripted>()
        };
        let ok = labelled("example.com/tier=web").unwrap();
        assert_eq!(ok.parent.labels["example.com/tier"].as_deref(), Some("web"));
        let own = refusal(labelled("capstan.dev/plugin=other"));
        assert!(own.starts_with("parent label \"capstan.dev/plugin\""), "{own}");
        assert!(refusal(labelled("tier=not valid")).contains("not a label value"));
    }
}
