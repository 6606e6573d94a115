//! Where a parent's children and related objects live, as the host runs the plugin: the
//! contract's home namespace, narrowed to what this host watches. One place, so the
//! children's check and the related queries never disagree on a parent's namespace.

use kube::api::ObjectMeta;

use crate::engine::Metadata;

/// A parent's home: its namespace, or a Namespace parent itself — unless the host watches
/// one namespace and this is another, whose children it could never observe (then the
/// plain cluster-scoped rules apply).
pub(super) fn home<'a>(
    metadata: &Metadata,
    parent: &'a ObjectMeta,
    options: &super::Options,
) -> Option<&'a str> {
    // A cluster-scoped parent has no namespace, whatever its metadata says.
    let own = parent.namespace.as_deref().filter(|_| metadata.parent.namespaced);
    let name = parent.name.as_deref().unwrap_or_default();
    let home = capstan_contract::home_namespace(metadata, own, name, &options.allow);
    match (&options.namespace, metadata.parent.namespaced) {
        (Some(watched), false) if home != Some(watched.as_str()) => None,
        _ => home,
    }
}
