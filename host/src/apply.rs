//! Desired state → API writes: server-side apply of children with Capstan's owner
//! reference and labels, pruning with a UID precondition, status through the status
//! subresource. A write whose result would equal what is observed is skipped.

use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions, PropagationPolicy};
use kube::discovery::ApiResource;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::validate::Child;

/// Label every managed child carries.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "capstan");
/// Label naming the plugin that owns a child.
pub const PLUGIN_LABEL: &str = "capstan.dev/plugin";

/// Label selector for the children of one plugin.
pub fn selector(plugin: &str) -> String {
    format!("{}={},{PLUGIN_LABEL}={plugin}", MANAGED_BY.0, MANAGED_BY.1)
}

/// Field manager of one plugin's writes.
pub fn field_manager(plugin: &str) -> String {
    format!("capstan/{plugin}")
}

/// Make the child what will be applied: the plugin's object plus the owner reference and
/// Capstan's labels.
pub fn own(child: &mut Child, parent: &DynamicObject, parent_ar: &ApiResource, plugin: &str) {
    let meta = &mut child.object["metadata"];
    meta["ownerReferences"] = json!([{
        "apiVersion": parent_ar.api_version,
        "kind": parent_ar.kind,
        "name": parent.name_any(),
        "uid": parent.uid().unwrap_or_default(),
        "controller": true,
        "blockOwnerDeletion": true,
    }]);
    if !meta["labels"].is_object() {
        meta["labels"] = json!({});
    }
    meta["labels"][MANAGED_BY.0] = MANAGED_BY.1.into();
    meta["labels"][PLUGIN_LABEL] = plugin.into();
}

/// True when every field of `desired` is present with the same value in `observed`:
/// applying it would change nothing the plugin cares about.
pub fn is_subset(desired: &Value, observed: &Value) -> bool {
    match (desired, observed) {
        (Value::Object(d), Value::Object(o)) => d
            .iter()
            .all(|(k, v)| o.get(k).is_some_and(|ov| is_subset(v, ov)) || (v.is_null() && !o.contains_key(k))),
        (Value::Array(d), Value::Array(o)) => {
            d.len() == o.len() && d.iter().zip(o).all(|(d, o)| is_subset(d, o))
        }
        _ => desired == observed,
    }
}

fn api(client: &Client, ar: &ApiResource, namespace: Option<&str>) -> Api<DynamicObject> {
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
        None => Api::all_with(client.clone(), ar),
    }
}

/// Server-side apply one child, as made by [`own`].
pub async fn apply(client: &Client, ar: &ApiResource, child: &Child, plugin: &str) -> kube::Result<()> {
    let params = PatchParams::apply(&field_manager(plugin)).force();
    api(client, ar, child.namespace.as_deref())
        .patch(&child.name, &params, &Patch::Apply(&child.object))
        .await?;
    Ok(())
}

/// Delete an observed child that is no longer desired, only if it is still the same object.
pub async fn prune(client: &Client, ar: &ApiResource, observed: &DynamicObject) -> kube::Result<()> {
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: observed.uid(),
            resource_version: None,
        }),
        propagation_policy: Some(PropagationPolicy::Background),
        ..DeleteParams::default()
    };
    match api(client, ar, observed.namespace().as_deref())
        .delete(&observed.name_any(), &params)
        .await
    {
        Ok(_) => Ok(()),
        // Already gone, or replaced by a new object of the same name: nothing to prune.
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Apply the parent's status through the status subresource.
pub async fn status(
    client: &Client,
    ar: &ApiResource,
    parent: &DynamicObject,
    status: &Value,
    plugin: &str,
) -> kube::Result<()> {
    let body = json!({
        "apiVersion": ar.api_version,
        "kind": ar.kind,
        "metadata": { "name": parent.name_any() },
        "status": status,
    });
    let params = PatchParams::apply(&field_manager(plugin)).force();
    api(client, ar, parent.namespace().as_deref())
        .patch_status(&parent.name_any(), &params, &Patch::Apply(&body))
        .await?;
    Ok(())
}

/// Set the parent's finalizers to `finalizers`, guarded by its resourceVersion.
pub async fn finalizers(
    client: &Client,
    ar: &ApiResource,
    parent: &DynamicObject,
    finalizers: Vec<String>,
) -> kube::Result<()> {
    let patch = json!({
        "metadata": { "finalizers": finalizers, "resourceVersion": parent.resource_version() },
    });
    api(client, ar, parent.namespace().as_deref())
        .patch(&parent.name_any(), &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subset_ignores_server_defaults_but_not_changes() {
        let desired =
            json!({"spec": {"backoffLimit": 2, "template": {"spec": {"containers": [{"name": "a"}]}}}});
        let observed = json!({"spec": {"backoffLimit": 2, "completions": 1,
            "template": {"spec": {"containers": [{"name": "a", "imagePullPolicy": "IfNotPresent"}]}}}});
        assert!(is_subset(&desired, &observed));
        let changed = json!({"spec": {"backoffLimit": 3}});
        assert!(!is_subset(&changed, &observed));
        let extra_container =
            json!({"spec": {"template": {"spec": {"containers": [{"name": "a"}, {"name": "b"}]}}}});
        assert!(!is_subset(&extra_container, &observed));
    }
}
