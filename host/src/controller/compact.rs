//! The form in which the host's caches keep parents and children: typed metadata (which
//! is all the host reads between reconciles) and the rest of the object as JSON text.
//!
//! A `serde_json::Value` tree holds an object in three to four times the bytes of its
//! text (an allocation per key and string, map nodes), and caches hold every parent and
//! child for as long as they exist. A reconcile turns its parent back into a
//! [`DynamicObject`] once, and a child into JSON for the plugin's request, which it needed
//! anyway. `metadata.managedFields` is dropped: no plugin is shown it and the host never
//! reads it (server-side apply tracks ownership on the server; a conflict comes back as
//! an error), and it is often the larger half of an object — all but what Capstan's
//! own plugins applied to a parent's status, which tells whether a status write would
//! remove anything (see [`crate::apply::status_unchanged`]).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, OwnerReference, Time};
use kube::api::{ApiResource, DynamicObject, ObjectMeta, TypeMeta};
use kube::core::DynamicResourceScope;
use kube::runtime::watcher::Event;
use serde::Deserialize;

use crate::engine::Json;

/// An object as the caches keep it. Every part is shared, so the clone kube-runtime's
/// store makes of each object it takes in is three reference counts, not a deep copy of
/// the metadata per watch event.
#[derive(Clone, Debug)]
pub struct Compact {
    /// `apiVersion` and `kind`.
    pub types: Option<Arc<TypeMeta>>,
    /// Its metadata, without `managedFields`.
    pub metadata: Arc<ObjectMeta>,
    /// Every other field (`spec`, `status`, `data`, ...) as one JSON object.
    rest: Arc<str>,
}

impl Compact {
    /// The compact form of `object`, taking its parts rather than copying them.
    pub fn of(object: DynamicObject) -> Compact {
        let DynamicObject {
            types,
            mut metadata,
            data,
        } = object;
        keep_status_managers(&mut metadata);
        // A list as deserialized keeps room for four items, and a cache keeps it for good.
        if let Some(owners) = metadata.owner_references.as_mut() {
            owners.shrink_to_fit();
        }
        if let Some(finalizers) = metadata.finalizers.as_mut() {
            finalizers.shrink_to_fit();
        }
        Compact {
            types: types.map(Arc::new),
            metadata: Arc::new(metadata),
            // A Value always serializes.
            rest: serde_json::to_string(&data).unwrap_or_default().into(),
        }
    }

    /// The whole object again.
    pub fn object(&self) -> DynamicObject {
        DynamicObject {
            types: self.types.as_deref().cloned(),
            metadata: (*self.metadata).clone(),
            data: serde_json::from_str(&self.rest).unwrap_or_default(),
        }
    }

    /// The whole object as JSON, as a plugin is shown it: the kept text with the type
    /// and metadata put in front (what serializing [`Compact::object`] would give, but
    /// `managedFields`), without a tree of the object on the way.
    pub fn json(&self) -> Json {
        let mut text = Vec::with_capacity(self.rest.len() + 512);
        text.push(b'{');
        if let Some(types) = &self.types {
            push_field(&mut text, "apiVersion", &types.api_version);
            push_field(&mut text, "kind", &types.kind);
        }
        push_field(&mut text, "metadata", &Shown::from(&*self.metadata));
        // The rest is one object, `{}` when the object has nothing else.
        match self.rest.strip_prefix('{').map(str::trim_start) {
            Some(rest) if !rest.starts_with('}') => {
                text.push(b',');
                text.extend_from_slice(rest.as_bytes());
            }
            _ => text.push(b'}'),
        }
        // Made of serialized parts, so it is UTF-8 and parses; `{}` if it ever did not.
        String::from_utf8(text)
            .ok()
            .and_then(|text| Json::from_text(text).ok())
            .unwrap_or_else(|| Json::from(serde_json::json!({})))
    }

    /// The whole object as a tree, as [`Compact::json`] shows it.
    pub fn value(&self) -> serde_json::Value {
        self.json().value()
    }
}

/// `"key":value`, after a comma unless first.
fn push_field(text: &mut Vec<u8>, key: &str, value: &impl serde::Serialize) {
    if text.last() != Some(&b'{') {
        text.push(b',');
    }
    // A key of ours needs no escaping; the value is strings, maps, numbers and times,
    // which always serialize.
    text.push(b'"');
    text.extend_from_slice(key.as_bytes());
    text.extend_from_slice(b"\":");
    let _ = serde_json::to_writer(&mut *text, value);
}

/// `ObjectMeta` as it serializes, but for `managedFields`, which no plugin is shown. Every
/// field is named (no `..`), so one k8s-openapi adds fails to compile here instead of
/// going missing from what plugins see.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Shown<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    annotations: Option<&'a BTreeMap<String, String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    creation_timestamp: Option<&'a Time>,
    #[serde(skip_serializing_if = "Option::is_none")]
    deletion_grace_period_seconds: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    deletion_timestamp: Option<&'a Time>,
    #[serde(skip_serializing_if = "Option::is_none")]
    finalizers: Option<&'a Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    generate_name: Option<&'a String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    generation: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    labels: Option<&'a BTreeMap<String, String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    namespace: Option<&'a String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    owner_references: Option<&'a Vec<OwnerReference>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    resource_version: Option<&'a String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    self_link: Option<&'a String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    uid: Option<&'a String>,
}

impl<'a> From<&'a ObjectMeta> for Shown<'a> {
    fn from(meta: &'a ObjectMeta) -> Shown<'a> {
        let ObjectMeta {
            annotations,
            creation_timestamp,
            deletion_grace_period_seconds,
            deletion_timestamp,
            finalizers,
            generate_name,
            generation,
            labels,
            managed_fields: _,
            name,
            namespace,
            owner_references,
            resource_version,
            self_link,
            uid,
        } = meta;
        Shown {
            annotations: annotations.as_ref(),
            creation_timestamp: creation_timestamp.as_ref(),
            deletion_grace_period_seconds: *deletion_grace_period_seconds,
            deletion_timestamp: deletion_timestamp.as_ref(),
            finalizers: finalizers.as_ref(),
            generate_name: generate_name.as_ref(),
            generation: *generation,
            labels: labels.as_ref(),
            name: name.as_ref(),
            namespace: namespace.as_ref(),
            owner_references: owner_references.as_ref(),
            resource_version: resource_version.as_ref(),
            self_link: self_link.as_ref(),
            uid: uid.as_ref(),
        }
    }
}

/// What every cache keeps of an object: all of it but `metadata.managedFields`, which
/// no plugin is shown and the host never reads (server-side apply tracks ownership on
/// the server; a conflict comes back as an error), and which is often the larger half of
/// an object. Objects of a list also come without `apiVersion` and `kind` (list items
/// carry no type); the contract promises both to plugins, and the unchanged-check
/// compares them, so they are filled in.
pub fn cached(resource: &ApiResource) -> impl FnMut(&mut DynamicObject) + Send + use<> {
    let types = kube::api::TypeMeta {
        api_version: resource.api_version.clone(),
        kind: resource.kind.clone(),
    };
    move |o| {
        keep_status_managers(&mut o.metadata);
        if o.types.is_none() {
            o.types = Some(types.clone());
        }
    }
}

/// Drop every `managedFields` entry but those of Capstan plugins' status applies (of
/// those, all but the manager and its fields) and of their creates (only the manager:
/// whether the create's fields are still to be handed over, see
/// [`crate::apply::ownership`]).
fn keep_status_managers(metadata: &mut ObjectMeta) {
    let Some(entries) = metadata.managed_fields.take() else {
        return;
    };
    let mut kept: Vec<_> = entries
        .into_iter()
        .filter_map(|e| {
            let status = e.subresource.as_deref() == Some("status")
                && e.operation.as_deref() == Some("Apply")
                && e.manager
                    .as_deref()
                    .is_some_and(|m| m.starts_with(crate::apply::MANAGER_PREFIX));
            let create = crate::apply::ownership::is_create(&e);
            (status || create).then(|| ManagedFieldsEntry {
                manager: e.manager,
                operation: e.operation,
                subresource: e.subresource,
                fields_v1: e.fields_v1.filter(|_| status),
                ..ManagedFieldsEntry::default()
            })
        })
        .collect();
    // Collected in place: without this, the kept entry holds the room of all of them.
    kept.shrink_to_fit();
    metadata.managed_fields = (!kept.is_empty()).then_some(kept);
}

/// A watcher event of whole objects as one of compact ones, each one shared allocation.
pub fn event(event: Event<DynamicObject>) -> Event<Arc<Compact>> {
    match event {
        Event::Apply(o) => Event::Apply(Arc::new(Compact::of(o))),
        Event::Delete(o) => Event::Delete(Arc::new(Compact::of(o))),
        Event::Init => Event::Init,
        Event::InitApply(o) => Event::InitApply(Arc::new(Compact::of(o))),
        Event::InitDone => Event::InitDone,
    }
}

/// Read as a whole object, then made compact (kube-runtime's controller asks for it).
impl<'de> Deserialize<'de> for Compact {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        DynamicObject::deserialize(d).map(Compact::of)
    }
}

/// The same as `DynamicObject`'s: the kind comes from the `ApiResource`.
impl kube::Resource for Compact {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        Arc::make_mut(&mut self.metadata)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_object_comes_back_whole_without_managed_fields() {
        let object: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": "j", "namespace": "ns", "uid": "u",
                "managedFields": [{"manager": "capstan/echo", "operation": "Apply"}],
            },
            "spec": {"template": {"spec": {"containers": [{"name": "c"}]}}},
            "status": {"active": 1},
        }))
        .expect("a Job");
        let compact = Compact::of(object.clone());
        let value = compact.value();
        assert_eq!(value, serde_json::to_value(compact.object()).expect("serializes"));
        assert_eq!(value["spec"], object.data["spec"]);
        assert_eq!(value["status"]["active"], 1);
        assert_eq!(value["kind"], "Job");
        assert_eq!(value["metadata"]["uid"], "u");
        assert!(value["metadata"].get("managedFields").is_none());
        let again: Compact = serde_json::from_value(value).expect("deserializes");
        assert_eq!(again.object().data, compact.object().data);
    }

    /// The text a plugin gets is what serializing the whole object gives, every metadata
    /// field included, but `managedFields` (kept in the cache for a status manager).
    #[test]
    fn the_request_text_is_the_object_without_managed_fields() {
        let object: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "capstan.dev/v1alpha1",
            "kind": "Echo",
            "metadata": {
                "annotations": {"a": "\"quoted\" ü"},
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "deletionGracePeriodSeconds": 30,
                "deletionTimestamp": "2026-01-02T00:00:00Z",
                "finalizers": ["capstan.dev/echo"],
                "generateName": "e-",
                "generation": 3,
                "labels": {"l": "v"},
                "managedFields": [{
                    "manager": "capstan/echo", "operation": "Apply", "subresource": "status",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {}},
                }],
                "name": "e-1",
                "namespace": "ns",
                "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "uid": "u0"}],
                "resourceVersion": "7",
                "selfLink": "/x",
                "uid": "u1",
            },
            "spec": {"message": "hi", "list": [1, 2.5, null, {"k": true}]},
            "status": {"observedGeneration": 3},
        }))
        .expect("an Echo");
        let compact = Compact::of(object);
        assert!(
            compact.metadata.managed_fields.is_some(),
            "the status manager is kept"
        );
        let mut whole = serde_json::to_value(compact.object()).expect("serializes");
        whole["metadata"]
            .as_object_mut()
            .expect("metadata")
            .remove("managedFields");
        assert_eq!(compact.json().value(), whole);
        assert_eq!(compact.json().text().find("managedFields"), None);

        let bare = Compact::of(DynamicObject {
            types: None,
            metadata: ObjectMeta {
                name: Some("n".into()),
                ..ObjectMeta::default()
            },
            data: serde_json::json!({}),
        });
        assert_eq!(bare.json().text(), r#"{"metadata":{"name":"n"}}"#);
    }
}
