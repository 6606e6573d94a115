//! Related objects: what a plugin reads but never writes. It declares the kinds in its
//! metadata and, per parent, which objects of them it needs; the host answers from its
//! watch caches and reconciles the parent again when one of them changes.

use capstan_contract::{RelatedQuery, Selector};
use k8s_openapi::api::core::v1::Namespace;
use kube_core::Resource;

use crate::metadata::Scope;

/// Which objects of one related kind a parent needs, returned from
/// [`Reconciler::related`](crate::Reconciler::related).
///
/// The kind must be declared with [`Metadata::related`](crate::Metadata::related). A
/// namespaced kind is read from the parent's namespace unless [`Related::in_namespace`]
/// says otherwise (which only a cluster-scoped parent may).
///
/// ```
/// use capstan_sdk::Related;
/// use k8s_openapi::api::core::v1::{ConfigMap, Secret};
///
/// let config = Related::named::<ConfigMap>(["app-config"]);
/// let web = Related::labelled::<Secret>("app=web,tier in (frontend)");
/// # assert_eq!(config.query().kind, "ConfigMap");
/// # assert_eq!(web.query().group, "");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Related(RelatedQuery);

impl Related {
    /// The objects of kind `K` with these names (those that exist).
    pub fn named<K>(names: impl IntoIterator<Item = impl Into<String>>) -> Self
    where
        K: Resource<DynamicType = ()>,
        K::Scope: Scope,
    {
        Related::of::<K>(Selector::Names(names.into_iter().map(Into::into).collect()))
    }

    /// The objects of kind `K` whose labels match `selector`, in Kubernetes label-selector
    /// syntax (`app=web,tier in (a,b),!legacy`; the empty selector matches all).
    pub fn labelled<K>(selector: impl Into<String>) -> Self
    where
        K: Resource<DynamicType = ()>,
        K::Scope: Scope,
    {
        Related::of::<K>(Selector::Labels(selector.into()))
    }

    /// The core `Namespace` the parent lives in, e.g. to read its labels; needs
    /// `Namespace` declared related. Selects nothing for a parent without a namespace.
    pub fn parent_namespace<P: Resource>(parent: &P) -> Self {
        let name = parent.meta().namespace.clone();
        Related::named::<Namespace>(name)
    }

    /// Read from this namespace instead of the parent's. The host allows it only for a
    /// cluster-scoped parent, which must name the namespace of every namespaced kind it
    /// reads; it is ignored for cluster-scoped kinds.
    pub fn in_namespace(mut self, namespace: impl Into<String>) -> Self {
        self.0.namespace = Some(namespace.into());
        self
    }

    /// The query as the host receives it.
    pub fn query(&self) -> &RelatedQuery {
        &self.0
    }

    fn of<K>(selector: Selector) -> Self
    where
        K: Resource<DynamicType = ()>,
        K::Scope: Scope,
    {
        Related(RelatedQuery {
            group: K::group(&()).into_owned(),
            kind: K::kind(&()).into_owned(),
            namespace: None,
            selector,
        })
    }
}

impl From<Related> for RelatedQuery {
    fn from(related: Related) -> Self {
        related.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::api::networking::v1::NetworkPolicy;

    #[test]
    fn queries_name_the_kind_by_group_and_kind() {
        let q: RelatedQuery = Related::named::<ConfigMap>(["a", "b"])
            .in_namespace("team-a")
            .into();
        assert_eq!(
            q,
            RelatedQuery {
                group: "".into(),
                kind: "ConfigMap".into(),
                namespace: Some("team-a".into()),
                selector: Selector::Names(vec!["a".into(), "b".into()]),
            }
        );
        let q = Related::labelled::<NetworkPolicy>("app=web");
        assert_eq!(q.query().group, "networking.k8s.io");
        assert_eq!(q.query().selector, Selector::Labels("app=web".into()));
    }

    #[test]
    fn the_parent_namespace_is_a_namespace_named_like_it() {
        let mut cm = ConfigMap::default();
        cm.metadata.namespace = Some("demo".into());
        let q = Related::parent_namespace(&cm);
        assert_eq!(q.query().kind, "Namespace");
        assert_eq!(q.query().selector, Selector::Names(vec!["demo".into()]));
        let nowhere = Related::parent_namespace(&Namespace::default());
        assert_eq!(nowhere.query().selector, Selector::Names(vec![]));
    }
}
