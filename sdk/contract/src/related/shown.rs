//! The parent as a plugin's `related` call is shown it.
//!
//! Which objects a parent reads follows from what the parent asks for, not from what the
//! plugin last wrote to it or when: `related` is shown the parent without `status` and
//! without `metadata.resourceVersion`. A status write then leaves the answer as it was,
//! and the host asks again only when something `related` can see has changed — once per
//! change of the parent, not once per reconcile. The SDKs' test fixtures show their
//! plugins the same.

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

/// `parent` (an object's JSON text) as `related` is shown it: the same fields in the same
/// order, less `status` and `metadata.resourceVersion`. Text that is not a JSON object is
/// shown as it is.
pub fn shown(parent: &str) -> String {
    let Ok(Fields(fields)) = serde_json::from_str::<Fields>(parent) else {
        return parent.to_owned();
    };
    let mut out = String::with_capacity(parent.len());
    out.push('{');
    for (key, value) in fields {
        let value = match key.as_str() {
            "status" => continue,
            "metadata" => without(value.get(), "resourceVersion"),
            _ => value.get().to_owned(),
        };
        push_field(&mut out, &key, &value);
    }
    out.push('}');
    out
}

/// `object`'s text without its field `key`; text that is not an object, as it is.
fn without(object: &str, key: &str) -> String {
    let Ok(Fields(fields)) = serde_json::from_str::<Fields>(object) else {
        return object.to_owned();
    };
    let mut out = String::with_capacity(object.len());
    out.push('{');
    for (k, value) in fields.iter().filter(|(k, _)| k != key) {
        push_field(&mut out, k, value.get());
    }
    out.push('}');
    out
}

/// `"key":value` after a comma unless first; the key escaped as JSON needs.
fn push_field(out: &mut String, key: &str, value: &str) {
    if !out.ends_with('{') {
        out.push(',');
    }
    // A string always serializes.
    out.push_str(&serde_json::to_string(key).unwrap_or_default());
    out.push(':');
    out.push_str(value);
}

/// An object's fields in their order, each value as its text.
struct Fields<'a>(Vec<(String, &'a RawValue)>);

impl<'de> Deserialize<'de> for Fields<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct InOrder;
        impl<'de> Visitor<'de> for InOrder {
            type Value = Fields<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Fields<'de>, A::Error> {
                let mut fields = Vec::with_capacity(map.size_hint().unwrap_or(4));
                while let Some(entry) = map.next_entry::<String, &'de RawValue>()? {
                    fields.push(entry);
                }
                Ok(Fields(fields))
            }
        }
        deserializer.deserialize_map(InOrder)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    #[test]
    fn related_is_shown_the_parent_without_status_or_resource_version() {
        let parent = r#"{"apiVersion":"example.com/v1","kind":"Echo","metadata":{"name":"a","resourceVersion":"7","labels":{"x":"y"}},"spec":{"message":"hi \"there\""},"status":{"phase":"Done"}}"#;
        let shown = shown(parent);
        assert_eq!(
            shown,
            r#"{"apiVersion":"example.com/v1","kind":"Echo","metadata":{"name":"a","labels":{"x":"y"}},"spec":{"message":"hi \"there\""}}"#,
            "every other field, in its order and as written"
        );
        let after_a_status_write = parent.replace(r#""7""#, r#""8""#).replace("Done", "Failed");
        assert_eq!(
            super::shown(&after_a_status_write),
            shown,
            "a status write changes nothing shown"
        );
        let relabelled = parent.replace(r#""y""#, r#""z""#);
        assert_ne!(super::shown(&relabelled), shown, "labels are shown");
    }

    #[test]
    fn odd_keys_and_non_objects_come_through() {
        let parent = json!({"metadata": "not an object", "we\"ird": [1, {"status": 2}]});
        let back: Value = serde_json::from_str(&shown(&parent.to_string())).unwrap();
        assert_eq!(back, parent, "only the top level's status goes");
        assert_eq!(shown("[1,2]"), "[1,2]");
        assert_eq!(shown("not json"), "not json");
    }
}
