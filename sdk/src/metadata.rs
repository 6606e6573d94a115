//! What a plugin declares about itself: its name, the kinds it touches, its settings, its
//! finalizer.

use kube_core::Resource;

/// Whether a resource type is namespaced; implemented for k8s-openapi's scope markers.
pub trait Scope {
    /// True for namespaced kinds.
    const NAMESPACED: bool;
}

impl Scope for k8s_openapi::NamespaceResourceScope {
    const NAMESPACED: bool = true;
}

impl Scope for k8s_openapi::ClusterResourceScope {
    const NAMESPACED: bool = false;
}

/// A Kubernetes kind: group, version, kind, plural and scope.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KindRef {
    /// API group, empty for the core group.
    pub group: String,
    /// API version within the group.
    pub version: String,
    /// CamelCase kind.
    pub kind: String,
    /// Lower-case plural resource name.
    pub plural: String,
    /// True when namespaced.
    pub namespaced: bool,
}

impl KindRef {
    /// The kind of a static Rust type (kube `CustomResource` or k8s-openapi).
    pub fn of<K>() -> Self
    where
        K: Resource<DynamicType = ()>,
        K::Scope: Scope,
    {
        KindRef {
            group: K::group(&()).into_owned(),
            version: K::version(&()).into_owned(),
            kind: K::kind(&()).into_owned(),
            plural: K::plural(&()).into_owned(),
            namespaced: <K::Scope as Scope>::NAMESPACED,
        }
    }

    /// `group/version`, or just `version` for the core group, as in `apiVersion`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// True when a JSON object's `apiVersion` and `kind` name this kind.
    pub fn matches(&self, object: &serde_json::Value) -> bool {
        let text = |key| object.get(key).and_then(|v| v.as_str()).unwrap_or_default();
        self.is(text("apiVersion"), text("kind"))
    }

    /// True when a JSON text's `apiVersion` and `kind` name this kind; reads only those two.
    pub(crate) fn describes(
        &self,
        object: &serde_json::value::RawValue,
    ) -> Result<bool, crate::ReconcileError> {
        /// Just enough of an object to tell its kind without building the rest.
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct TypeMeta<'a> {
            #[serde(default, borrow)]
            api_version: std::borrow::Cow<'a, str>,
            #[serde(default, borrow)]
            kind: std::borrow::Cow<'a, str>,
        }
        let meta: TypeMeta = serde_json::from_str(object.get())
            .map_err(|e| crate::ReconcileError::fatal(format!("child is not an object: {e}")))?;
        Ok(self.is(&meta.api_version, &meta.kind))
    }

    /// Those of `objects` that are of this kind, each parsed as `V`; a parse error goes
    /// through `unparsable`.
    pub(crate) fn parse_all<V: serde::de::DeserializeOwned>(
        &self,
        objects: &[Box<serde_json::value::RawValue>],
        unparsable: impl Fn(serde_json::Error) -> crate::ReconcileError,
    ) -> Result<Vec<V>, crate::ReconcileError> {
        let mut typed = Vec::new();
        for object in objects {
            if self.describes(object)? {
                typed.push(serde_json::from_str(object.get()).map_err(&unparsable)?);
            }
        }
        Ok(typed)
    }

    /// True for this `apiVersion` and `kind`.
    pub(crate) fn is(&self, api_version: &str, kind: &str) -> bool {
        kind == self.kind
            && match api_version.split_once('/') {
                Some((group, version)) => group == self.group && version == self.version,
                None => self.group.is_empty() && api_version == self.version,
            }
    }
}

/// A plugin's self-description, built in [`crate::Reconciler::metadata`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Metadata {
    pub(crate) name: String,
    pub(crate) version: String,
    pub(crate) children: Vec<KindRef>,
    pub(crate) related: Vec<KindRef>,
    pub(crate) settings: Option<crate::settings::Declared>,
    pub(crate) finalizer: Option<String>,
}

impl Metadata {
    /// A plugin called `name` at `version` (e.g. `env!("CARGO_PKG_VERSION")`).
    pub fn new(name: impl Into<String>, version: impl Into<String>) -> Self {
        Metadata {
            name: name.into(),
            version: version.into(),
            children: Vec::new(),
            related: Vec::new(),
            settings: None,
            finalizer: None,
        }
    }

    /// Declare that the plugin may create children of type `K`.
    pub fn child<K>(mut self) -> Self
    where
        K: Resource<DynamicType = ()>,
        K::Scope: Scope,
    {
        self.children.push(KindRef::of::<K>());
        self
    }

    /// Declare a child kind that has no Rust type.
    pub fn child_kind(mut self, kind: KindRef) -> Self {
        self.children.push(kind);
        self
    }

    /// Declare that the plugin reads objects of type `K` (never writes them): the host
    /// watches them and passes each parent those its [`Related`](crate::Related) queries
    /// select. `Secret` needs the operator's grant.
    pub fn related<K>(mut self) -> Self
    where
        K: Resource<DynamicType = ()>,
        K::Scope: Scope,
    {
        self.related.push(KindRef::of::<K>());
        self
    }

    /// Declare a related kind that has no Rust type.
    pub fn related_kind(mut self, kind: KindRef) -> Self {
        self.related.push(kind);
        self
    }

    /// Declare the plugin's settings type: its JSON Schema goes to the host (`capstan
    /// inspect` shows it) and the operator's settings must parse as `T` and pass
    /// [`Settings::validate`](crate::Settings::validate) before the host loads the plugin.
    /// A plugin that declares none takes only `{}`.
    pub fn settings<T: crate::Settings>(mut self) -> Self {
        self.settings = Some(crate::settings::Declared::of::<T>());
        self
    }

    /// Ask the host to hold deletion of each parent with this finalizer until the plugin
    /// reports `finalized`.
    pub fn finalizer(mut self, name: impl Into<String>) -> Self {
        self.finalizer = Some(name.into());
        self
    }

    /// Plugin name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Plugin version.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// Declared child kinds.
    pub fn children(&self) -> &[KindRef] {
        &self.children
    }

    /// Declared related kinds.
    pub fn related_kinds(&self) -> &[KindRef] {
        &self.related
    }

    /// JSON Schema of the declared settings type, if any.
    pub fn settings_schema(&self) -> Option<&serde_json::Value> {
        self.settings.as_ref().map(|s| &s.schema)
    }

    /// Check settings JSON as the `validate-settings` export does: the error is the
    /// one-line message the host refuses the plugin with.
    pub fn validate_settings(&self, settings: &str) -> Result<(), String> {
        crate::settings::check(&self.name, self.settings.as_ref(), settings)
    }

    /// Declared finalizer, if any.
    pub fn finalizer_name(&self) -> Option<&str> {
        self.finalizer.as_deref()
    }
}
