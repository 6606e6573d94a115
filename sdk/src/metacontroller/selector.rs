//! A `metav1.LabelSelector` of a Metacontroller rule (`matchLabels`, `matchExpressions`):
//! as selector text for a related query, and matched against labels.

use serde_json::Value;

use crate::ReconcileError;

/// The selector's requirements as (key, operator, values), `matchLabels` first.
fn requirements(selector: &Value) -> Result<Vec<(String, String, Vec<String>)>, ReconcileError> {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let mut out: Vec<_> = (selector["matchLabels"].as_object().into_iter().flatten())
        .map(|(k, v)| (k.clone(), "In".to_string(), vec![text(v)]))
        .collect();
    out.sort();
    for e in selector["matchExpressions"].as_array().into_iter().flatten() {
        let (key, op) = (text(&e["key"]), text(&e["operator"]));
        if !matches!(op.as_str(), "In" | "NotIn" | "Exists" | "DoesNotExist") {
            return Err(ReconcileError::fatal(format!(
                "label selector: unknown operator {op:?} for key {key:?}"
            )));
        }
        let values = e["values"].as_array().into_iter().flatten().map(text).collect();
        out.push((key, op, values));
    }
    Ok(out)
}

/// The selector as selector text: `app=web,tier in (a,b),!legacy` (none or empty: "").
pub fn label_selector(selector: &Value) -> Result<String, ReconcileError> {
    let parts: Vec<String> = requirements(selector)?
        .into_iter()
        .map(|(k, op, v)| match op.as_str() {
            "In" if v.len() == 1 => format!("{k}={}", v[0]),
            "In" => format!("{k} in ({})", v.join(",")),
            "NotIn" => format!("{k} notin ({})", v.join(",")),
            "Exists" => k,
            _ => format!("!{k}"),
        })
        .collect();
    Ok(parts.join(","))
}

/// Whether `labels` (a JSON object, or null) match the selector; none or empty matches all.
pub fn selects(selector: &Value, labels: &Value) -> Result<bool, ReconcileError> {
    let has = |k: &str| labels.get(k).and_then(Value::as_str);
    Ok(requirements(selector)?.iter().all(|(k, op, v)| {
        let value = has(k);
        match op.as_str() {
            "In" => value.is_some_and(|x| v.iter().any(|w| w == x)),
            "NotIn" => value.is_none_or(|x| !v.iter().any(|w| w == x)),
            "Exists" => value.is_some(),
            _ => value.is_none(),
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn selectors_become_text_and_match_as_kubernetes_matches() {
        let selector = json!({
            "matchLabels": {"tier": "web", "app": "shop"},
            "matchExpressions": [
                {"key": "env", "operator": "In", "values": ["a", "b"]},
                {"key": "zone", "operator": "NotIn", "values": ["x"]},
                {"key": "owner", "operator": "Exists"},
                {"key": "legacy", "operator": "DoesNotExist"},
            ],
        });
        assert_eq!(
            label_selector(&selector).unwrap(),
            "app=shop,tier=web,env in (a,b),zone notin (x),owner,!legacy"
        );
        let labels = json!({"tier": "web", "app": "shop", "env": "a", "owner": "me"});
        assert!(selects(&selector, &labels).unwrap());
        let mut legacy = labels.clone();
        legacy["legacy"] = "yes".into();
        assert!(!selects(&selector, &legacy).unwrap());
        assert!(selects(&Value::Null, &Value::Null).unwrap());
        assert_eq!(label_selector(&Value::Null).unwrap(), "");
        let bad = json!({"matchExpressions": [{"key": "k", "operator": "Near"}]});
        assert!(
            selects(&bad, &labels)
                .unwrap_err()
                .message()
                .contains("unknown operator \"Near\"")
        );
    }
}
