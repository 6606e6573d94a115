//! Kubernetes label selectors in their text form (`app=web,tier in (a,b),!legacy`):
//! parsed once, matched against an object's labels. The host selects related objects
//! with it and the SDK's fixtures select them the same way.

use std::collections::{BTreeMap, BTreeSet};

/// An object's labels, looked up by key: a map, or however a cache keeps them.
pub trait Labels {
    /// The value of label `key`, if the object has it.
    fn label(&self, key: &str) -> Option<&str>;
}

impl Labels for BTreeMap<String, String> {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

/// A parsed label selector; every requirement must hold. The empty selector matches all.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<Requirement>);

#[derive(Clone, Debug, PartialEq, Eq)]
enum Requirement {
    In(String, BTreeSet<String>),
    NotIn(String, BTreeSet<String>),
    Exists(String),
    DoesNotExist(String),
}

impl LabelSelector {
    /// Parse the text form; the error says which requirement is malformed.
    pub fn parse(text: &str) -> Result<LabelSelector, String> {
        if text.trim().is_empty() {
            return Ok(LabelSelector::default());
        }
        split_top_level(text)
            .into_iter()
            .map(|r| requirement(r.trim()).map_err(|e| format!("label selector {text:?}: {e}")))
            .collect::<Result<Vec<_>, _>>()
            .map(LabelSelector)
    }

    /// True when `labels` satisfy every requirement.
    pub fn matches(&self, labels: &(impl Labels + ?Sized)) -> bool {
        self.0.iter().all(|r| match r {
            Requirement::In(k, values) => labels.label(k).is_some_and(|v| values.contains(v)),
            Requirement::NotIn(k, values) => labels.label(k).is_none_or(|v| !values.contains(v)),
            Requirement::Exists(k) => labels.label(k).is_some(),
            Requirement::DoesNotExist(k) => labels.label(k).is_none(),
        })
    }

    /// True when `object`'s `metadata.labels` satisfy every requirement.
    pub fn matches_object(&self, object: &serde_json::Value) -> bool {
        self.matches(&labels_of(object))
    }
}

/// A JSON object's `metadata.labels` (string values only).
pub(crate) fn labels_of(object: &serde_json::Value) -> BTreeMap<String, String> {
    object["metadata"]["labels"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// Split on commas outside parentheses.
fn split_top_level(text: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

fn requirement(r: &str) -> Result<Requirement, String> {
    if r.is_empty() {
        return Err("empty requirement".into());
    }
    if let Some(key) = r.strip_prefix('!') {
        return Ok(Requirement::DoesNotExist(key_of(key.trim())?));
    }
    if let Some((key, value)) = r.split_once("!=") {
        return Ok(Requirement::NotIn(key_of(key)?, [value_of(value)?].into()));
    }
    if let Some((key, value)) = r.split_once("==").or_else(|| r.split_once('=')) {
        return Ok(Requirement::In(key_of(key)?, [value_of(value)?].into()));
    }
    let words: Vec<&str> = r.splitn(2, char::is_whitespace).collect();
    if let [key, rest] = words[..] {
        let rest = rest.trim();
        let (op, set) = rest.split_once('(').ok_or_else(|| {
            format!("{r:?} is not key=value, key!=value, key in (...), key notin (...), key or !key")
        })?;
        let set = set
            .strip_suffix(')')
            .ok_or_else(|| format!("{r:?} lacks its closing parenthesis"))?;
        let values = set.split(',').map(value_of).collect::<Result<BTreeSet<_>, _>>()?;
        return match op.trim() {
            "in" => Ok(Requirement::In(key_of(key)?, values)),
            "notin" => Ok(Requirement::NotIn(key_of(key)?, values)),
            other => Err(format!("unknown operator {other:?} in {r:?}")),
        };
    }
    Ok(Requirement::Exists(key_of(r)?))
}

/// A label key: an optional DNS-subdomain prefix and a name of at most 63 characters.
fn key_of(key: &str) -> Result<String, String> {
    let key = key.trim();
    let name = key.rsplit_once('/').map_or(key, |(_, n)| n);
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c));
    if ok {
        Ok(key.to_string())
    } else {
        Err(format!("invalid label key {:?}", crate::printable(key)))
    }
}

fn value_of(value: &str) -> Result<String, String> {
    let value = value.trim();
    let ok = value.len() <= 63
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    if ok {
        Ok(value.to_string())
    } else {
        Err(format!("invalid label value {:?}", crate::printable(value)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn every_operator_of_the_text_form_matches_as_kubernetes_does() {
        let s =
            LabelSelector::parse("app=web, tier in (a, b),!legacy,env!=prod,team,zone notin (x)").unwrap();
        let web = labels(&[("app", "web"), ("tier", "a"), ("team", "t")]);
        assert!(s.matches(&web));
        let mut legacy = web.clone();
        legacy.insert("legacy".into(), "".into());
        assert!(!s.matches(&legacy));
        let mut prod = web.clone();
        prod.insert("env".into(), "prod".into());
        assert!(!s.matches(&prod));
        let mut zone = web.clone();
        zone.insert("zone".into(), "x".into());
        assert!(!s.matches(&zone));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "c"), ("team", "t")])));
        assert!(LabelSelector::parse("").unwrap().matches(&BTreeMap::new()));
        assert!(
            LabelSelector::parse("example.com/role==db")
                .unwrap()
                .matches(&labels(&[("example.com/role", "db")]))
        );
    }

    #[test]
    fn malformed_selectors_say_what_is_wrong() {
        for bad in ["app=we b", "tier in (a", "a,,b", "tier within (a)", "bad key=1"] {
            let e = LabelSelector::parse(bad).unwrap_err();
            assert!(e.starts_with("label selector"), "{bad}: {e}");
        }
    }
}
