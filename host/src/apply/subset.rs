//! The one rule for whether an apply would change a value: every field of the desired
//! object is present with the same value in the observed one (server defaults and fields
//! others set may be added). Checked against a tree, or against the JSON text the caches
//! keep without building a tree of it: a reconcile that finds its child as it left it
//! reads the child's text once and allocates nothing for it.

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use crate::field_name::FieldName;

/// True when every field of `desired` is present with the same value in `observed`; a
/// null in `desired` also matches a field `observed` does not have.
pub(crate) fn is_subset(desired: &Value, observed: &Value) -> bool {
    Subset::of(desired).deserialize(observed).unwrap_or(false)
}

/// [`is_subset`] against an object's JSON text, leaving out `desired`'s top-level fields
/// named in `except` (checked by the caller, where the text does not hold them).
pub(crate) fn is_subset_of_text(desired: &Value, observed: &str, except: &[&str]) -> bool {
    let mut text = serde_json::Deserializer::from_str(observed);
    let subset = Subset { desired, except };
    subset.deserialize(&mut text).unwrap_or(false)
}

/// Compares the value it is deserialized from with `desired`.
struct Subset<'a> {
    desired: &'a Value,
    /// Top-level fields of `desired` not to look for.
    except: &'a [&'a str],
}

impl<'a> Subset<'a> {
    fn of(desired: &'a Value) -> Subset<'a> {
        Subset { desired, except: &[] }
    }

    /// The fields of `desired` that must be found: all but the excepted and the nulls.
    fn required(&self, desired: &serde_json::Map<String, Value>) -> usize {
        desired
            .iter()
            .filter(|(k, v)| !v.is_null() && !self.except.contains(&k.as_str()))
            .count()
    }
}

impl<'de> DeserializeSeed<'de> for Subset<'_> {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<bool, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Subset<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<bool, E> {
        Ok(self.desired == &Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<bool, E> {
        Ok(self.desired == &Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<bool, E> {
        Ok(self.desired == &Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<bool, E> {
        Ok(self.desired == &Value::from(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<bool, E> {
        Ok(self.desired.as_str() == Some(v))
    }

    fn visit_unit<E>(self) -> Result<bool, E> {
        Ok(self.desired.is_null())
    }

    fn visit_none<E>(self) -> Result<bool, E> {
        Ok(self.desired.is_null())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
        let Value::Array(desired) = self.desired else {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            return Ok(false);
        };
        // Lists are compared whole: same length, each item a subset of its observed one.
        let (mut holds, mut seen) = (true, 0);
        loop {
            let more = match desired.get(seen).filter(|_| holds) {
                Some(d) => seq.next_element_seed(Subset::of(d))?.map(|ok| holds = ok),
                None => seq.next_element::<IgnoredAny>()?.map(|_| ()),
            };
            if more.is_none() {
                break;
            }
            seen += 1;
        }
        Ok(holds && seen == desired.len())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        let Value::Object(desired) = self.desired else {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            return Ok(false);
        };
        let (mut holds, mut found) = (true, 0);
        while let Some(FieldName(key)) = map.next_key::<FieldName>()? {
            let wanted = desired
                .get(key.as_ref())
                .filter(|_| holds && !self.except.contains(&key.as_ref()));
            match wanted {
                Some(d) => {
                    holds = map.next_value_seed(Subset::of(d))?;
                    found += usize::from(!d.is_null());
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        // A JSON object from the API server names each field once.
        Ok(holds && found == self.required(desired))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Both forms of the check, which must agree.
    fn both(desired: &Value, observed: &Value) -> bool {
        let tree = is_subset(desired, observed);
        let text = is_subset_of_text(desired, &observed.to_string(), &[]);
        assert_eq!(tree, text, "{desired} in {observed}");
        tree
    }

    #[test]
    fn fields_added_by_others_are_fine_changed_or_missing_ones_are_not() {
        let observed = json!({"spec": {"n": 2, "list": [{"a": 1, "b": 2}, {"a": 3}], "s": "x\"y", "f": 1.5, "neg": -3, "t": true, "z": null}, "extra": {"k": [1]}});
        assert!(both(&json!({"spec": {"n": 2}}), &observed));
        assert!(both(
            &json!({"spec": {"list": [{"a": 1}, {}], "s": "x\"y", "f": 1.5, "neg": -3, "t": true}}),
            &observed
        ));
        assert!(
            both(&json!({"spec": {"z": null, "absent": null}}), &observed),
            "null matches null or nothing"
        );
        assert!(!both(&json!({"spec": {"n": null}}), &observed), "but not a value");
        assert!(!both(&json!({"spec": {"n": 3}}), &observed));
        assert!(
            !both(&json!({"spec": {"n": 2.0}}), &observed),
            "numbers compare as written, as Value's =="
        );
        assert!(!both(&json!({"spec": {"absent": 1}}), &observed));
        assert!(
            !both(&json!({"spec": {"list": [{"a": 1}]}}), &observed),
            "a shorter list"
        );
        assert!(
            !both(&json!({"spec": {"list": [{"a": 1}, {"a": 3}, {}]}}), &observed),
            "a longer list"
        );
        assert!(
            !both(&json!({"spec": {"list": [{"a": 3}, {"a": 1}]}}), &observed),
            "in order"
        );
        assert!(
            !both(&json!({"spec": {"s": {"x": 1}}}), &observed),
            "another type"
        );
        assert!(!both(&json!({"extra": "k"}), &observed), "another type");
        assert!(!both(&json!({"spec": {"t": "true"}}), &observed));
    }

    #[test]
    fn excepted_fields_are_left_to_the_caller() {
        let desired = json!({"metadata": {"name": "a"}, "data": {"k": "v"}});
        assert!(is_subset_of_text(
            &desired,
            r#"{"data":{"k":"v","o":"w"}}"#,
            &["metadata"]
        ));
        assert!(!is_subset_of_text(&desired, r#"{"data":{"k":"v"}}"#, &[]));
        assert!(!is_subset_of_text(
            &desired,
            r#"{"data":{"k":"w"},"metadata":{"name":"a"}}"#,
            &["metadata"]
        ));
        assert!(!is_subset_of_text(&desired, "not json", &["metadata"]));
    }
}
