//! Objects read straight from the API server's JSON into their compact form: type and
//! metadata typed, every other field copied as its text, and of `managedFields` only the
//! entries the host reads, whose fields alone are parsed. No tree of the object is built
//! and dropped per watch event (that tree, and the `fieldsV1` trees of every manager, were
//! most of what a watch cost the host).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
use kube::api::{ObjectMeta, TypeMeta};
use serde::de::{self, DeserializeSeed, IntoDeserializer, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use serde_json::value::RawValue;

use super::{Compact, Marks, Pairs};
use crate::field_name::FieldName;

/// Read from the object's JSON, as the API server sends it in lists and watch events.
impl<'de> Deserialize<'de> for Compact {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(Fields)
    }
}

/// The fields of one object.
struct Fields;

impl<'de> Visitor<'de> for Fields {
    type Value = Compact;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a Kubernetes object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Compact, A::Error> {
        let (mut api_version, mut kind, mut metadata) = (None, None, None);
        let mut rest = vec![b'{'];
        while let Some(FieldName(key)) = map.next_key()? {
            match &*key {
                "apiVersion" => api_version = Some(map.next_value()?),
                "kind" => kind = Some(map.next_value()?),
                "metadata" => metadata = Some(map.next_value::<Metadata>()?),
                _ => {
                    let value: Box<RawValue> = map.next_value()?;
                    if rest.len() > 1 {
                        rest.push(b',');
                    }
                    // A string always serializes.
                    let _ = serde_json::to_writer(&mut rest, &*key);
                    rest.push(b':');
                    rest.extend_from_slice(value.get().as_bytes());
                }
            }
        }
        rest.push(b'}');
        // Only whole, as `DynamicObject` takes it.
        let types = api_version
            .zip(kind)
            .map(|(api_version, kind)| TypeMeta { api_version, kind });
        let rest = String::from_utf8(rest).map_err(de::Error::custom)?;
        let Metadata(metadata, marks) = metadata.unwrap_or_default();
        Ok(Compact::from_parts(types, metadata, marks, rest))
    }
}

/// `metadata`, read by `ObjectMeta`'s own code but for `managedFields`, which is read
/// here and filtered on the way ([`kept`]), and labels and annotations, read straight
/// into their compact form.
#[derive(Default)]
struct Metadata(ObjectMeta, Marks);

impl<'de> Deserialize<'de> for Metadata {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(MetadataFields)
    }
}

/// The fields of `metadata`.
struct MetadataFields;

impl<'de> Visitor<'de> for MetadataFields {
    type Value = Metadata;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an object's metadata")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Metadata, A::Error> {
        let mut managed = Vec::new();
        let mut marks = Marks::default();
        let others = TakenOut {
            map,
            managed: &mut managed,
            marks: &mut marks,
        };
        let mut metadata = ObjectMeta::deserialize(de::value::MapAccessDeserializer::new(others))?;
        metadata.managed_fields = (!managed.is_empty()).then_some(managed);
        Ok(Metadata(metadata, marks))
    }
}

/// The metadata's fields as `ObjectMeta` reads them, with `managedFields`, `labels` and
/// `annotations` taken out.
struct TakenOut<'m, A> {
    map: A,
    managed: &'m mut Vec<ManagedFieldsEntry>,
    marks: &'m mut Marks,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for TakenOut<'_, A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, A::Error> {
        while let Some(FieldName(key)) = self.map.next_key()? {
            match &*key {
                "managedFields" => {
                    let entries = self.map.next_value::<Option<Vec<Entry>>>()?.unwrap_or_default();
                    for entry in entries {
                        self.managed.extend(kept(entry).map_err(de::Error::custom)?);
                    }
                    self.managed.shrink_to_fit();
                }
                "labels" => self.marks.labels = self.map.next_value::<Option<Compacted>>()?.map(|c| c.0),
                "annotations" => {
                    self.marks.annotations = self.map.next_value::<Option<Compacted>>()?.map(|c| c.0);
                }
                _ => {
                    let key: de::value::CowStrDeserializer<'_, A::Error> = key.into_deserializer();
                    return seed.deserialize(key).map(Some);
                }
            }
        }
        Ok(None)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        self.map.next_value_seed(seed)
    }
}

/// A string-to-string map read straight into [`Pairs`], its strings borrowed from the
/// input where they can be: no map nor string of it is built on the way.
struct Compacted(Pairs);

impl<'de> Deserialize<'de> for Compacted {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Entries;
        impl<'de> Visitor<'de> for Entries {
            type Value = Compacted;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a map of strings")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Compacted, A::Error> {
                let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(0));
                while let Some((FieldName(key), FieldName(value))) = map.next_entry()? {
                    entries.push((key, value));
                }
                Ok(Compacted(Pairs::from_entries(entries)))
            }
        }
        d.deserialize_map(Entries)
    }
}

/// One `managedFields` entry, its fields kept as text until the entry is known to be kept.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Entry {
    manager: Option<String>,
    operation: Option<String>,
    subresource: Option<String>,
    fields_v1: Option<Box<RawValue>>,
}

/// What the host keeps of a `managedFields` entry: of Capstan plugins' status applies the
/// manager and its fields' paths (see [`field_paths`]), of their creates only the manager
/// (whether the create's fields are still to be handed over, see
/// [`crate::apply::ownership`]), of any other nothing.
fn kept(entry: Entry) -> Result<Option<ManagedFieldsEntry>, serde_json::Error> {
    let Entry {
        manager,
        operation,
        subresource,
        fields_v1,
    } = entry;
    let mut kept = ManagedFieldsEntry {
        manager,
        operation,
        subresource,
        ..ManagedFieldsEntry::default()
    };
    if crate::apply::is_status_apply(&kept) {
        kept.fields_v1 = fields_v1
            .map(|f| serde_json::from_str(f.get()).map(|f| FieldsV1(field_paths(f))))
            .transpose()?;
    } else if !crate::apply::ownership::is_create(&kept) {
        return Ok(None);
    }
    Ok(Some(kept))
}

/// A field set as the caches keep it: only its fields (`f:` keys), which is all the
/// status check reads, as JSON text in a string ([`crate::apply::status_unchanged`] reads
/// both forms). List entries (`k:`, `v:`, `i:`) and `.` go, and as text the set is one
/// allocation of a few dozen bytes, where even its paths as a tree took two B-tree nodes
/// (about 1.2 KiB per parent).
fn field_paths(fields: Value) -> Value {
    Value::String(paths(fields).to_string())
}

/// `fields` with only its `f:` keys, at every depth.
fn paths(fields: Value) -> Value {
    match fields {
        Value::Object(map) => map
            .into_iter()
            .filter(|(key, _)| key.starts_with("f:"))
            .map(|(key, sub)| (key, paths(sub)))
            .collect(),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use kube::core::{ObjectList, WatchEvent};

    use super::*;

    /// A watch event's object as the API server writes it: three managers, of which the
    /// host keeps a plugin's status apply (with its fields) and its create (without).
    const EVENT: &str = r#"{"type":"MODIFIED","object":{"kind":"Job","apiVersion":"batch/v1",
        "metadata":{"name":"j","namespace":"ns","uid":"u","resourceVersion":"9",
          "labels":{"a\"b":"ü"},"futureField":{"x":1},
          "managedFields":[
            {"manager":"kube-controller-manager","operation":"Update","apiVersion":"batch/v1",
             "time":"2026-01-01T00:00:00Z","fieldsType":"FieldsV1",
             "fieldsV1":{"f:status":{"f:active":{}}},"subresource":"status"},
            {"manager":"capstan/echo","operation":"Apply","fieldsType":"FieldsV1",
             "fieldsV1":{"f:status":{".":{},"f:conditions":{".":{},"k:{\"type\":\"Ready\"}":{".":{},"f:reason":{}}},
               "f:jobName":{}}},"subresource":"status"},
            {"manager":"capstan/echo","operation":"Update","fieldsType":"FieldsV1",
             "fieldsV1":{"f:spec":{"f:x":{}}}},
            {"manager":"capstan/echo","operation":"Apply","fieldsV1":{"f:spec":{}}}]},
        "spec":{"n":1.50e3, "s":"\u00fc\"" },"status":{"a\"b":[]}}}"#;

    #[test]
    fn a_watch_event_keeps_the_text_of_its_fields_and_the_managers_the_host_reads() {
        let Ok(WatchEvent::Modified(job)) = serde_json::from_str::<WatchEvent<Compact>>(EVENT) else {
            panic!("a modified Job");
        };
        assert_eq!(job.types.as_deref().map(|t| t.kind.as_str()), Some("Job"));
        assert_eq!(job.metadata.name.as_deref(), Some("j"));
        assert_eq!(job.labels().get("a\"b"), Some("ü"));
        // Field by field as sent: not a number rewritten, not a string re-escaped.
        assert_eq!(
            &*job.rest,
            r#"{"spec":{"n":1.50e3, "s":"\u00fc\"" },"status":{"a\"b":[]}}"#
        );
        let entries = job.metadata.managed_fields.as_deref().unwrap_or_default();
        let kept: Vec<_> = entries
            .iter()
            .map(|e| {
                (
                    e.operation.as_deref(),
                    e.subresource.as_deref(),
                    e.fields_v1.is_some(),
                )
            })
            .collect();
        assert_eq!(
            kept,
            [
                (Some("Apply"), Some("status"), true),
                (Some("Update"), None, false)
            ]
        );
        assert!(
            entries
                .iter()
                .all(|e| e.manager.as_deref() == Some("capstan/echo") && e.time.is_none())
        );
        // Of the status apply's fields, their paths as text: no list entries.
        let paths = entries[0].fields_v1.as_ref().map(|f| f.0.clone());
        assert_eq!(
            paths,
            Some(Value::from(r#"{"f:status":{"f:conditions":{},"f:jobName":{}}}"#))
        );
    }

    /// The status check reads the cached paths as it reads the API server's field sets.
    #[test]
    fn the_status_check_reads_the_cached_paths() {
        let echo: Compact = serde_json::from_str(
            r#"{"apiVersion":"capstan.dev/v1alpha1","kind":"Echo","metadata":{"name":"e",
              "managedFields":[{"manager":"capstan/echo","operation":"Apply","subresource":"status",
                "fieldsV1":{"f:status":{".":{},"f:jobName":{},"f:conditions":{".":{},
                  "k:{\"type\":\"Ready\"}":{".":{},"f:type":{},"f:reason":{}}}}}}]},
              "status":{"jobName":"j","conditions":[{"type":"Ready","reason":"R"}]}}"#,
        )
        .expect("an Echo");
        let parent = echo.object().expect("whole");
        let unchanged = |status| crate::apply::status_unchanged(&status, &parent, "echo");
        let conditions = serde_json::json!([{"type": "Ready", "reason": "R"}]);
        assert!(unchanged(
            serde_json::json!({"jobName": "j", "conditions": conditions})
        ));
        assert!(!unchanged(
            serde_json::json!({"jobName": "k", "conditions": conditions})
        ));
        // The apply would remove the conditions the plugin applied before.
        assert!(!unchanged(serde_json::json!({"jobName": "j"})));
    }

    #[test]
    fn a_list_reads_its_items_and_null_managed_fields() {
        let list: ObjectList<Compact> = serde_json::from_str(
            r#"{"kind":"JobList","apiVersion":"batch/v1","metadata":{"resourceVersion":"5"},
               "items":[{"metadata":{"name":"a","managedFields":null}},{"metadata":{"name":"b"},"spec":{}}]}"#,
        )
        .expect("a list");
        let names: Vec<_> = list
            .items
            .iter()
            .map(|o| (o.metadata.name.as_deref(), o.types.is_none(), &*o.rest))
            .collect();
        assert_eq!(
            names,
            [(Some("a"), true, "{}"), (Some("b"), true, r#"{"spec":{}}"#)]
        );
        assert!(list.items[0].metadata.managed_fields.is_none());
    }

    #[test]
    fn what_is_not_an_object_is_refused() {
        for bad in [
            r#"[]"#,
            r#"{"metadata":[]}"#,
            r#"{"metadata":{"managedFields":{}}}"#,
            r#"{"spec":}"#,
        ] {
            assert!(serde_json::from_str::<Compact>(bad).is_err(), "{bad}");
        }
    }
}
