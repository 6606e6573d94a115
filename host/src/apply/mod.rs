//! Desired state → API writes: server-side apply of children with Capstan's owner
//! reference and labels, pruning with a UID precondition, status through the status
//! subresource.
//!
//! A child apply is skipped only when it would change nothing: the child carries the
//! digest of exactly the object about to be applied (so the plugin has neither added nor
//! dropped a field since the last apply, which server-side apply would act on) and every
//! desired value is still what is observed (nobody else has changed one).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{
    Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions, PropagationPolicy,
};
use kube::core::Request;
use kube::discovery::ApiResource;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::validate::Child;

pub(crate) mod dry;
pub(crate) mod ownership;
mod status;
mod subset;
pub(crate) use status::is_status_apply;
pub(crate) use status::{StatusApply, StatusWrite, status_unchanged};
pub(crate) use subset::{is_subset, is_subset_of_text};

/// Capstan's labels and annotation, defined with the rules that keep them the host's.
pub use capstan_contract::{APPLIED_ANNOTATION, MANAGED_BY, PLUGIN_LABEL};

/// Label selector for the children of every plugin (one shared watch per kind).
pub(crate) fn selector_all() -> String {
    format!("{}={},{PLUGIN_LABEL}", MANAGED_BY.0, MANAGED_BY.1)
}

/// An object whose labels the host reads. Not every `kube::Resource`: the caches' form
/// keeps labels apart from its `ObjectMeta`, where `ResourceExt::labels` would find none.
pub(crate) trait Labelled: kube::Resource {
    /// The value of label `key`.
    fn label(&self, key: &str) -> Option<&str>;
}

impl Labelled for kube::api::DynamicObject {
    fn label(&self, key: &str) -> Option<&str> {
        self.metadata.labels.as_ref()?.get(key).map(String::as_str)
    }
}

/// Whether `object` carries `plugin`'s label: one of its children, or was.
pub(crate) fn made_by(object: &impl Labelled, plugin: &str) -> bool {
    maker(object) == Some(plugin)
}

/// The plugin whose label `object` carries: `None` for what no plugin made.
pub(crate) fn maker(object: &impl Labelled) -> Option<&str> {
    object.label(PLUGIN_LABEL)
}

/// What every plugin's field manager starts with.
pub(crate) const MANAGER_PREFIX: &str = "capstan/";

/// Field manager of one plugin's writes.
pub(crate) fn field_manager(plugin: &str) -> String {
    format!("{MANAGER_PREFIX}{plugin}")
}

/// Make the child what will be applied: the plugin's object plus the owner reference,
/// Capstan's labels, and the digest of all of that in [`APPLIED_ANNOTATION`].
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
    let digest = digest(&child.object);
    let meta = &mut child.object["metadata"];
    if !meta["annotations"].is_object() {
        meta["annotations"] = json!({});
    }
    meta["annotations"][APPLIED_ANNOTATION] = digest.into();
}

/// SHA-256 of an object's JSON, as 32 hex digits. serde_json's maps are sorted (no
/// `preserve_order`), so equal objects always give equal digests.
pub(crate) fn digest(object: &Value) -> String {
    use sha2::Digest;
    struct Hasher(sha2::Sha256);
    impl std::io::Write for Hasher {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.update(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut hasher = Hasher(sha2::Sha256::new());
    serde_json::to_writer(&mut hasher, object).expect("a Value always serializes");
    hasher.0.finalize()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// True when applying `desired` (made by [`own`]) over `observed` would change nothing:
/// the last apply was of this very object and its values still hold.
pub(crate) fn unchanged(desired: &Value, observed: &impl Existing) -> bool {
    let applied = desired["metadata"]["annotations"][APPLIED_ANNOTATION].as_str();
    applied.is_some() && applied == observed.applied() && observed.holds(desired)
}

/// An existing child as [`unchanged`] reads it: a tree, or the caches' compact form, which
/// answers without building one.
pub(crate) trait Existing {
    /// Its [`APPLIED_ANNOTATION`].
    fn applied(&self) -> Option<&str>;
    /// Whether every field of `desired` is present with the same value (the subset rule of `subset.rs`).
    fn holds(&self, desired: &Value) -> bool;
}

impl Existing for Value {
    fn applied(&self) -> Option<&str> {
        self["metadata"]["annotations"][APPLIED_ANNOTATION].as_str()
    }

    fn holds(&self, desired: &Value) -> bool {
        is_subset(desired, self)
    }
}

/// Whether an existing object is a child of `parent_uid` made by `plugin`: its controller
/// owner reference names the parent and its label names the plugin. Anything else belongs
/// to someone else and is never adopted.
pub(crate) fn controlled_by(object: &impl Labelled, parent_uid: &str, plugin: &str) -> bool {
    made_by(object, plugin) && controller(object.owner_references()).is_some_and(|r| r.uid == parent_uid)
}

/// An object's controller: the one owner reference marked `controller: true` (the API
/// server allows one at most). What owns a child, for the host's ownership rule, the
/// owner index of the caches and the shard a child belongs to.
pub(crate) fn controller(references: &[OwnerReference]) -> Option<&OwnerReference> {
    references.iter().find(|r| r.controller == Some(true))
}

/// Who controls an existing object, for a message: its controller and managing plugin.
pub(crate) fn controller_of(object: &impl Labelled) -> String {
    let controller =
        controller(object.owner_references()).map(|r| format!("{} {} (uid {})", r.kind, r.name, r.uid));
    let plugin = object.label(PLUGIN_LABEL);
    match (controller, plugin) {
        (Some(c), Some(p)) => format!("{c}, plugin {p}"),
        (Some(c), None) => c,
        (None, Some(p)) => format!("no controller, labelled for plugin {p}"),
        (None, None) => "no controller".into(),
    }
}

pub(crate) fn api(client: &Client, ar: &ApiResource, namespace: Option<&str>) -> Api<DynamicObject> {
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
        None => Api::all_with(client.clone(), ar),
    }
}

/// Server-side apply a child this plugin controls, as made by [`own`], over the object
/// observed with `uid`: if that object was deleted or replaced since, the server refuses
/// the apply instead of taking over whatever now holds the name. Returns the
/// resourceVersion written.
pub(crate) async fn update(
    client: &Client,
    ar: &ApiResource,
    child: &Child,
    uid: &str,
    plugin: &str,
) -> kube::Result<String> {
    let mut body = child.object.clone();
    body["metadata"]["uid"] = uid.into();
    let params = PatchParams::apply(&field_manager(plugin)).force();
    let api = api(client, ar, child.namespace.as_deref());
    let request = Request::new(api.resource_url()).patch(&child.name, &params, &Patch::Apply(&body));
    written(client, request).await
}

/// What a write answers with when only the written version is wanted: the object's
/// metadata (`as=PartialObjectMetadata`), so neither the server nor the host spends time
/// on the rest of an object the watch brings anyway.
const METADATA_ONLY: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";

/// Send one write and return the resourceVersion it stored.
pub(crate) async fn written(
    client: &Client,
    request: Result<http::Request<Vec<u8>>, kube::core::request::Error>,
) -> kube::Result<String> {
    /// Only the version is read of the answer: its `managedFields` alone would cost
    /// more to parse than the write's JSON to make.
    #[derive(serde::Deserialize)]
    struct Stored {
        metadata: Version,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Version {
        resource_version: Option<String>,
    }
    let mut request = request.map_err(kube::Error::BuildRequest)?;
    request.headers_mut().insert(
        http::header::ACCEPT,
        http::HeaderValue::from_static(METADATA_ONLY),
    );
    let stored: Stored = client.request(request).await?;
    Ok(stored.metadata.resource_version.unwrap_or_default())
}

/// What became of a child's creation.
#[derive(Debug)]
pub(crate) enum Created {
    /// The child was made, at this resourceVersion.
    Made(String),
    /// An object someone else made holds the name; nothing was written to it.
    Held(Box<DynamicObject>),
}

/// Create a child, as made by [`own`], in one call and without touching anything that
/// holds its name: a POST, which the server refuses (409) where an object appeared since
/// the caches were read, leaving it exactly as it was; it is then read once, to name its
/// owner. The server records the create's fields as an `Update` by the plugin's field
/// manager; [`ownership::hand_over`] gives them to its applies before the first update.
pub(crate) async fn create(
    client: &Client,
    ar: &ApiResource,
    child: &Child,
    plugin: &str,
) -> kube::Result<Created> {
    let api = api(client, ar, child.namespace.as_deref());
    let body = serde_json::to_vec(&child.object).map_err(kube::Error::SerdeError)?;
    let params = PostParams {
        field_manager: Some(field_manager(plugin)),
        ..Default::default()
    };
    let request = Request::new(api.resource_url()).create(&params, body);
    match written(client, request).await {
        Ok(version) => Ok(Created::Made(version)),
        Err(kube::Error::Api(e)) if e.code == 409 => match api.get_opt(&child.name).await? {
            Some(held) => Ok(Created::Held(Box::new(held))),
            // Gone again meanwhile: the next reconcile creates it.
            None => Err(kube::Error::Api(e)),
        },
        Err(e) => Err(e),
    }
}

/// The object that holds a child's name now, if any: read once, to decide before writing.
pub(crate) async fn holder(
    client: &Client,
    ar: &ApiResource,
    child: &Child,
) -> kube::Result<Option<DynamicObject>> {
    api(client, ar, child.namespace.as_deref())
        .get_opt(&child.name)
        .await
}

/// Delete a child just made, only at the version made: a response refused after it was
/// created (a later child met another holder) leaves nothing behind. A changed or gone
/// object is left to the next reconcile.
pub(crate) async fn take_back(
    client: &Client,
    ar: &ApiResource,
    child: &Child,
    version: &str,
) -> kube::Result<()> {
    let exactly = Preconditions {
        uid: None,
        resource_version: Some(version.to_string()),
    };
    delete_if(client, ar, (child.namespace.as_deref(), &child.name), exactly).await
}

/// Delete an observed child that is no longer desired, only if it is still the object
/// observed: the same UID and the same resourceVersion, so a stale cache (a child changed,
/// relabelled or handed to another owner since) never deletes what it did not see.
pub(crate) async fn prune(
    client: &Client,
    ar: &ApiResource,
    observed: &impl kube::Resource,
) -> kube::Result<()> {
    let exactly = Preconditions {
        uid: observed.uid(),
        resource_version: observed.resource_version(),
    };
    let name = observed.name_any();
    delete_if(client, ar, (observed.namespace().as_deref(), &name), exactly).await
}

/// Delete `(namespace, name)` in the background if it still meets `preconditions`.
/// Gone, replaced, or changed since (404, 409) is no error: nothing to delete now, and a
/// change comes back through the watch and wakes the parent, whose next reconcile judges
/// the object as it is.
async fn delete_if(
    client: &Client,
    ar: &ApiResource,
    (namespace, name): (Option<&str>, &str),
    preconditions: Preconditions,
) -> kube::Result<()> {
    let params = DeleteParams {
        preconditions: Some(preconditions),
        propagation_policy: Some(PropagationPolicy::Background),
        ..DeleteParams::default()
    };
    match api(client, ar, namespace).delete(name, &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Set the parent's finalizers to `finalizers` (and, when given, one annotation beside
/// them), guarded by its resourceVersion; returns the resourceVersion written.
pub(crate) async fn finalizers(
    client: &Client,
    ar: &ApiResource,
    parent: &DynamicObject,
    finalizers: Vec<String>,
    annotation: Option<(&str, &str)>,
) -> kube::Result<String> {
    let mut patch = json!({
        "metadata": { "finalizers": finalizers, "resourceVersion": parent.resource_version() },
    });
    if let Some((key, value)) = annotation {
        patch["metadata"]["annotations"] = json!({ key: value });
    }
    merge_patch(client, ar, parent, &patch).await
}

/// A JSON merge patch of `parent`; the new resourceVersion.
async fn merge_patch(
    client: &Client,
    ar: &ApiResource,
    parent: &DynamicObject,
    patch: &Value,
) -> kube::Result<String> {
    let api = api(client, ar, parent.namespace().as_deref());
    let request = Request::new(api.resource_url()).patch(
        &parent.name_any(),
        &PatchParams::default(),
        &Patch::Merge(patch),
    );
    written(client, request).await
}

/// Set and remove `parent`'s labels and annotations as `changes` says, by key: a merge
/// patch, so keys it does not name stay as anyone set them, and no precondition — each key
/// is written whole, so none is lost to a write in between. The new resourceVersion.
pub(crate) async fn parent_metadata(
    client: &Client,
    ar: &ApiResource,
    parent: &DynamicObject,
    changes: &crate::engine::ParentMetadata,
) -> kube::Result<String> {
    let patch = json!({
        "metadata": { "labels": changes.labels, "annotations": changes.annotations },
    });
    merge_patch(client, ar, parent, &patch).await
}

#[cfg(test)]
mod tests;
