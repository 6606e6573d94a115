//! A status as the API server stores it under its CRD's structural schema: Metacontroller
//! updates the status, and the server drops what the schema does not declare; Capstan
//! applies it, and the server would refuse such a field instead, so it is pruned first.

use serde_json::{Map, Value};

/// `value` with the fields `schema` does not declare dropped, unless it preserves unknown
/// fields.
pub fn prune(value: &Value, schema: &Value) -> Value {
    match value {
        Value::Object(fields) => {
            let (props, extra) = (&schema["properties"], &schema["additionalProperties"]);
            let keep = schema["x-kubernetes-preserve-unknown-fields"] == true || *extra == true;
            let kept = fields.iter().filter_map(|(key, item)| {
                let item = match props.get(key) {
                    Some(sub) => prune(item, sub),
                    None if extra.is_object() => prune(item, extra),
                    None if keep => item.clone(),
                    None => return None,
                };
                Some((key.clone(), item))
            });
            Value::Object(kept.collect::<Map<_, _>>())
        }
        Value::Array(items) if schema["items"].is_object() => {
            Value::Array(items.iter().map(|i| prune(i, &schema["items"])).collect())
        }
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn undeclared_fields_go_unless_the_schema_keeps_them() {
        let schema = json!({"type": "object", "properties": {
            "count": {"type": "integer"},
            "items": {"type": "array", "items": {"type": "object", "properties": {"a": {}}}},
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            "byName": {"type": "object", "additionalProperties": {"type": "object", "properties": {"n": {}}}},
        }});
        let status = json!({
            "count": 2, "extra": 1, "items": [{"a": 1, "b": 2}], "free": {"x": {"y": 1}},
            "byName": {"k": {"n": 1, "m": 2}},
        });
        assert_eq!(
            prune(&status, &schema),
            json!({"count": 2, "items": [{"a": 1}], "free": {"x": {"y": 1}}, "byName": {"k": {"n": 1}}})
        );
    }
}
