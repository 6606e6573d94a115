//! How the host writes an object's parts as the JSON a plugin is shown.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kube::api::ObjectMeta;

use super::Pairs;

/// `"key":value`, after a comma unless first.
pub(super) fn push_field(text: &mut Vec<u8>, key: &str, value: &impl serde::Serialize) {
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
#[serde_with::skip_serializing_none]
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Shown<'a> {
    annotations: Option<&'a Pairs>,
    creation_timestamp: Option<&'a Time>,
    deletion_grace_period_seconds: Option<i64>,
    deletion_timestamp: Option<&'a Time>,
    finalizers: Option<&'a Vec<String>>,
    generate_name: Option<&'a String>,
    generation: Option<i64>,
    labels: Option<&'a Pairs>,
    name: Option<&'a String>,
    namespace: Option<&'a String>,
    owner_references: Option<&'a Vec<OwnerReference>>,
    resource_version: Option<&'a String>,
    self_link: Option<&'a String>,
    uid: Option<&'a String>,
}

impl<'a> Shown<'a> {
    /// A cached object's metadata, with its labels and annotations (kept apart from it).
    pub(super) fn of(
        meta: &'a ObjectMeta,
        labels: Option<&'a Pairs>,
        annotations: Option<&'a Pairs>,
    ) -> Shown<'a> {
        let ObjectMeta {
            annotations: _,
            creation_timestamp,
            deletion_grace_period_seconds,
            deletion_timestamp,
            finalizers,
            generate_name,
            generation,
            labels: _,
            managed_fields: _,
            name,
            namespace,
            owner_references,
            resource_version,
            self_link,
            uid,
        } = meta;
        Shown {
            annotations,
            creation_timestamp: creation_timestamp.as_ref(),
            deletion_grace_period_seconds: *deletion_grace_period_seconds,
            deletion_timestamp: deletion_timestamp.as_ref(),
            finalizers: finalizers.as_ref(),
            generate_name: generate_name.as_ref(),
            generation: *generation,
            labels,
            name: name.as_ref(),
            namespace: namespace.as_ref(),
            owner_references: owner_references.as_ref(),
            resource_version: resource_version.as_ref(),
            self_link: self_link.as_ref(),
            uid: uid.as_ref(),
        }
    }
}
