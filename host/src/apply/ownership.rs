//! Who holds a child's fields on the server. A child is created with a POST (the API
//! server does a third of the work of a server-side apply creating the same object), and
//! the server records that as an `Update` by the plugin's field manager. Its later
//! changes are server-side applies, and an apply removes only the fields its own `Apply`
//! entry holds: left alone, a field a new plugin version stops returning would stay,
//! held by the create. So before the first apply over a created child, the create's
//! fields are handed to the plugin's `Apply` entry — what client-go's `csaupgrade` does
//! for `kubectl apply --server-side` — in one JSON patch guarded by the resourceVersion.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
use kube::api::{DynamicObject, ObjectMeta, Patch, PatchParams};
use kube::core::Request;
use kube::discovery::ApiResource;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use super::{MANAGER_PREFIX, api, field_manager, written};
use crate::validate::Child;

const CREATED: &str = "Update";
const APPLIED: &str = "Apply";

/// Whether `entry` is a Capstan plugin's record of a create (the object itself, not a
/// subresource): the one `managedFields` entry of a child the caches keep besides status
/// applies — without its fields, only that it is there.
pub(crate) fn is_create(entry: &ManagedFieldsEntry) -> bool {
    entry.operation.as_deref() == Some(CREATED)
        && entry.subresource.as_deref().unwrap_or_default().is_empty()
        && entry
            .manager
            .as_deref()
            .is_some_and(|m| m.starts_with(MANAGER_PREFIX))
}

/// Whether the fields of `plugin`'s create of this object are still held by the create,
/// not yet handed to its applies.
pub fn held_by_create(metadata: &ObjectMeta, plugin: &str) -> bool {
    let manager = field_manager(plugin);
    metadata
        .managed_fields
        .iter()
        .flatten()
        .any(|e| is_entry(e, &manager, CREATED))
}

/// Hand the fields `plugin`'s create holds on the child observed with `uid` to its
/// `Apply` entry. Reads the object once (the caches keep no field sets); a changed or
/// replaced object fails the patch's guard, and the reconcile tries again.
pub async fn hand_over(
    client: &Client,
    ar: &ApiResource,
    child: &Child,
    uid: &str,
    plugin: &str,
) -> kube::Result<()> {
    let api = api(client, ar, child.namespace.as_deref());
    let Some(live) = api.get_opt(&child.name).await? else {
        // Gone: the apply's UID precondition refuses it.
        return Ok(());
    };
    // Replaced by another object: the apply's UID precondition refuses it.
    if live.uid().as_deref() != Some(uid) {
        return Ok(());
    }
    let Some(entries) = handed_over(live.managed_fields(), &field_manager(plugin)) else {
        return Ok(());
    };
    let patch = json!([
        {"op": "test", "path": "/metadata/uid", "value": uid},
        {"op": "test", "path": "/metadata/resourceVersion", "value": live.resource_version()},
        {"op": "replace", "path": "/metadata/managedFields", "value": entries},
    ]);
    let patch: json_patch::Patch = serde_json::from_value(patch).map_err(kube::Error::SerdeError)?;
    let request = Request::new(api.resource_url()).patch(
        &child.name,
        &PatchParams::default(),
        &Patch::<DynamicObject>::Json(patch),
    );
    written(client, request).await.map(drop)
}

/// `entries` with `manager`'s create entry merged into its apply entry (or turned into
/// one, when it has none yet); `None` when there is no create entry to hand over.
fn handed_over(entries: &[ManagedFieldsEntry], manager: &str) -> Option<Vec<ManagedFieldsEntry>> {
    let at = entries.iter().position(|e| is_entry(e, manager, CREATED))?;
    let mut entries = entries.to_vec();
    let mut created = entries.remove(at);
    match entries.iter_mut().find(|e| is_entry(e, manager, APPLIED)) {
        Some(applied) => {
            let mut fields = applied.fields_v1.take().map_or(json!({}), |f| f.0);
            union(&mut fields, created.fields_v1.map_or(Value::Null, |f| f.0));
            applied.fields_v1 = Some(FieldsV1(fields));
        }
        None => {
            created.operation = Some(APPLIED.into());
            entries.push(created);
        }
    }
    Some(entries)
}

/// What the live update stores, from what a dry run of its apply alone would: a dry run
/// cannot hand over the create's fields first, so the fields held only by `manager`'s
/// create — not by its apply, nor by anyone else — are still in `stored`, where the live
/// update removes them. Fields of list entries (`k:`, `v:`, `i:`) are not followed.
pub fn as_after_hand_over(mut stored: Value, manager: &str) -> Value {
    let entries: Vec<ManagedFieldsEntry> =
        serde_json::from_value(stored["metadata"]["managedFields"].clone()).unwrap_or_default();
    let own = |operation: &str| {
        entries
            .iter()
            .filter(|e| is_entry(e, manager, operation))
            .find_map(|e| e.fields_v1.as_ref().map(|f| f.0.clone()))
    };
    let Some(created) = own(CREATED) else {
        return stored;
    };
    let mut kept = own(APPLIED).unwrap_or(json!({}));
    for other in entries.iter().filter(|e| e.manager.as_deref() != Some(manager)) {
        union(&mut kept, other.fields_v1.clone().map_or(Value::Null, |f| f.0));
    }
    drop_unkept(&mut stored, &created, &kept);
    stored
}

/// Remove from `object` the fields `created` holds and `kept` does not.
fn drop_unkept(object: &mut Value, created: &Value, kept: &Value) {
    let (Value::Object(created), Value::Object(fields)) = (created, object) else {
        return;
    };
    for (key, sub) in created {
        let Some(name) = key.strip_prefix("f:") else {
            continue;
        };
        match kept.get(key) {
            None if sub.as_object().is_none_or(|s| s.keys().all(|k| k == ".")) => {
                fields.remove(name);
            }
            None => {
                if let Some(field) = fields.get_mut(name) {
                    drop_unkept(field, sub, &Value::Null);
                }
            }
            Some(kept) => {
                if let Some(field) = fields.get_mut(name) {
                    drop_unkept(field, sub, kept);
                }
            }
        }
    }
}

/// Whether `entry` is `manager`'s record of an `operation` on the object itself (not a
/// subresource).
fn is_entry(entry: &ManagedFieldsEntry, manager: &str, operation: &str) -> bool {
    entry.manager.as_deref() == Some(manager)
        && entry.operation.as_deref() == Some(operation)
        && entry.subresource.as_deref().unwrap_or_default().is_empty()
}

/// Add the field set `more` to `fields` (both in the `FieldsV1` form: a trie of objects).
fn union(fields: &mut Value, more: Value) {
    let (Value::Object(fields), Value::Object(more)) = (fields, more) else {
        return;
    };
    for (key, sub) in more {
        match fields.get_mut(&key) {
            Some(existing) => union(existing, sub),
            None => {
                fields.insert(key, sub);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(manager: &str, operation: &str, subresource: Option<&str>, fields: Value) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some(operation.into()),
            subresource: subresource.map(Into::into),
            api_version: Some("v1".into()),
            fields_type: Some("FieldsV1".into()),
            fields_v1: Some(FieldsV1(fields)),
            time: None,
        }
    }

    #[test]
    fn a_create_alone_becomes_the_plugins_apply() {
        let created = json!({"f:data": {".": {}, "f:a": {}, "f:b": {}}});
        let entries = vec![
            entry("capstan/mirror", "Update", None, created.clone()),
            entry(
                "kube-controller-manager",
                "Update",
                Some("status"),
                json!({"f:status": {}}),
            ),
        ];
        let handed = handed_over(&entries, "capstan/mirror").expect("a create to hand over");
        assert_eq!(handed.len(), 2);
        let applied = handed
            .iter()
            .find(|e| e.manager.as_deref() == Some("capstan/mirror"))
            .unwrap();
        assert_eq!(applied.operation.as_deref(), Some("Apply"));
        assert_eq!(applied.fields_v1.as_ref().unwrap().0, created);
        assert!(
            handed.contains(&entries[1]),
            "another manager's entry is left as it was"
        );
    }

    #[test]
    fn a_create_next_to_an_apply_is_merged_into_it() {
        let entries = vec![
            entry("capstan/mirror", "Apply", None, json!({"f:data": {"f:a": {}}})),
            entry(
                "capstan/mirror",
                "Update",
                None,
                json!({"f:data": {"f:b": {}}, "f:metadata": {}}),
            ),
            entry("capstan/other", "Update", None, json!({"f:data": {"f:c": {}}})),
        ];
        let handed = handed_over(&entries, "capstan/mirror").expect("a create to hand over");
        assert_eq!(
            handed.len(),
            2,
            "the create's entry is gone, the other plugin's stays"
        );
        assert_eq!(
            handed[0].fields_v1.as_ref().unwrap().0,
            json!({"f:data": {"f:a": {}, "f:b": {}}, "f:metadata": {}})
        );
        assert_eq!(handed[1], entries[2]);
    }

    #[test]
    fn a_dry_run_shows_the_fields_only_the_create_held_as_gone() {
        let entry = |manager: &str, operation: &str, fields: Value| {
            serde_json::to_value(super::tests::entry(manager, operation, None, fields)).unwrap()
        };
        let stored = json!({
            "metadata": {"name": "c", "labels": {"keep": "1", "dropped": "1", "users": "1"},
                "managedFields": [
                    entry("capstan/mirror", "Update", json!({"f:data": {".": {}, "f:a": {}, "f:shape": {}},
                        "f:metadata": {"f:labels": {".": {}, "f:keep": {}, "f:dropped": {}}}})),
                    entry("capstan/mirror", "Apply", json!({"f:data": {"f:a": {}},
                        "f:metadata": {"f:labels": {"f:keep": {}}}})),
                    entry("kubectl", "Update", json!({"f:metadata": {"f:labels": {"f:users": {}}}})),
                ]},
            "data": {"a": "1", "shape": "round"},
        });
        let after = as_after_hand_over(stored.clone(), "capstan/mirror");
        assert_eq!(after["data"], json!({"a": "1"}));
        assert_eq!(after["metadata"]["labels"], json!({"keep": "1", "users": "1"}));
        assert_eq!(
            as_after_hand_over(stored.clone(), "capstan/other"),
            stored,
            "another plugin's create changes nothing"
        );
    }

    #[test]
    fn nothing_to_hand_over_without_a_create_of_this_plugin() {
        let entries = vec![
            entry("capstan/mirror", "Apply", None, json!({})),
            entry("capstan/mirror", "Update", Some("status"), json!({})),
            entry("capstan/other", "Update", None, json!({})),
        ];
        assert!(handed_over(&entries, "capstan/mirror").is_none());
        let metadata = ObjectMeta {
            managed_fields: Some(entries),
            ..ObjectMeta::default()
        };
        assert!(!held_by_create(&metadata, "mirror"));
        assert!(held_by_create(&metadata, "other"));
    }
}
