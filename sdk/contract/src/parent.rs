//! What an answer may change on its parent itself: labels and annotations, each set or
//! removed by key and checked as the API server checks them. Nothing else of the parent
//! is the plugin's to write (its status goes through the status subresource).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::names::printable;
use crate::validate::Refusal;

/// Labels and annotations an answer sets on its parent (`Some`) or removes (`None`); the
/// keys it does not name are left as they are.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParentMetadata {
    /// Labels to set or remove.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, Option<String>>,
    /// Annotations to set or remove.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, Option<String>>,
}

/// The most bytes of annotation keys and values one object may hold (the API server's
/// `TotalAnnotationSizeLimitB`).
const ANNOTATION_BYTES: usize = 256 * 1024;

/// The domain whose labels and annotations only the host writes.
const RESERVED_DOMAIN: &str = "capstan.dev";

impl ParentMetadata {
    /// True when it names no key.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.annotations.is_empty()
    }

    /// What of it would change a parent whose labels and annotations are these: the one
    /// "would this write change anything" for a parent's own metadata.
    pub fn changes<'a>(
        &self,
        labels: impl Fn(&str) -> Option<&'a str>,
        annotations: impl Fn(&str) -> Option<&'a str>,
    ) -> ParentMetadata {
        let changed = |wanted: &BTreeMap<String, Option<String>>, have: &dyn Fn(&str) -> Option<&'a str>| {
            wanted
                .iter()
                .filter(|(k, v)| v.as_deref() != have(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        };
        ParentMetadata {
            labels: changed(&self.labels, &labels),
            annotations: changed(&self.annotations, &annotations),
        }
    }

    /// Check every key and value as the API server would, and refuse the host's own keys.
    pub fn check(&self) -> Result<(), Refusal> {
        for (key, value) in &self.labels {
            let refuse = |reason: String| Refusal {
                subject: format!("parent label {:?}", printable(key)),
                reason,
            };
            key_ok(key).map_err(refuse)?;
            if let Some(value) = value {
                label_value(value).map_err(refuse)?;
            }
        }
        let mut bytes = 0usize;
        for (key, value) in &self.annotations {
            let refuse = |reason: String| Refusal {
                subject: format!("parent annotation {:?}", printable(key)),
                reason,
            };
            key_ok(key).map_err(refuse)?;
            bytes += key.len() + value.as_deref().map_or(0, str::len);
        }
        if bytes > ANNOTATION_BYTES {
            return Err(Refusal {
                subject: "parent annotations".into(),
                reason: format!("{bytes} bytes; an object holds at most {ANNOTATION_BYTES}"),
            });
        }
        Ok(())
    }
}

/// A qualified name (`[prefix/]name`) outside the host's own domain.
fn key_ok(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        crate::dns1123_subdomain(prefix).map_err(|e| format!("prefix {e}"))?;
        if prefix == RESERVED_DOMAIN || prefix.ends_with(&format!(".{RESERVED_DOMAIN}")) {
            return Err(format!("is under {RESERVED_DOMAIN}/, which only the host sets"));
        }
    }
    if name.is_empty() || name.len() > 63 || !name_chars(name) {
        return Err(
            "is not a qualified name (at most 63 characters: A-Z, a-z, 0-9, '-', '_', '.', alphanumeric at both ends, after an optional DNS prefix and '/')"
                .into(),
        );
    }
    Ok(())
}

/// A label value: empty, or at most 63 characters of a name.
fn label_value(value: &str) -> Result<(), String> {
    if value.is_empty() || (value.len() <= 63 && name_chars(value)) {
        Ok(())
    } else {
        Err(format!(
            "value {:?} is not a label value (at most 63 characters: A-Z, a-z, 0-9, '-', '_', '.', alphanumeric at both ends)",
            printable(value)
        ))
    }
}

fn name_chars(s: &str) -> bool {
    let b = s.as_bytes();
    b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, Option<&str>)]) -> ParentMetadata {
        ParentMetadata {
            labels: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.map(str::to_string)))
                .collect(),
            annotations: BTreeMap::new(),
        }
    }

    #[test]
    fn keys_and_values_the_api_server_takes_pass() {
        let ok = labels(&[
            ("pod-name", Some("nginx-2")),
            ("example.com/tier", Some("")),
            ("app.kubernetes.io/name", None),
            ("A_b.c", Some("X-y_z.1")),
        ]);
        assert_eq!(ok.check(), Ok(()));
    }

    #[test]
    fn bad_keys_values_and_the_hosts_own_domain_are_refused() {
        let refused = |pairs: &[(&str, Option<&str>)]| labels(pairs).check().unwrap_err().to_string();
        assert!(refused(&[("capstan.dev/plugin", Some("x"))]).contains("only the host sets"));
        assert!(refused(&[("a.capstan.dev/x", None)]).contains("only the host sets"));
        assert!(refused(&[("-x", Some("v"))]).contains("not a qualified name"));
        assert!(refused(&[("", Some("v"))]).contains("not a qualified name"));
        assert!(refused(&[("Bad_Prefix/x", Some("v"))]).contains("prefix"));
        assert!(refused(&[("a/b/c", Some("v"))]).contains("not a qualified name"));
        let long = "v".repeat(64);
        assert!(refused(&[("k", Some(&long))]).contains("not a label value"));
        assert!(refused(&[("k", Some("a b"))]).starts_with("parent label \"k\": value"));
        let big = ParentMetadata {
            annotations: [("k".to_string(), Some("x".repeat(ANNOTATION_BYTES)))].into(),
            ..ParentMetadata::default()
        };
        assert!(big.check().unwrap_err().to_string().contains("at most 262144"));
        let free_text = ParentMetadata {
            annotations: [("note".to_string(), Some("any text at all\n".into()))].into(),
            ..ParentMetadata::default()
        };
        assert_eq!(free_text.check(), Ok(()));
    }

    #[test]
    fn only_what_differs_from_the_parent_is_a_change() {
        let wanted = labels(&[
            ("a", Some("1")),
            ("b", Some("2")),
            ("gone", None),
            ("absent", None),
        ]);
        let have = |k: &str| match k {
            "a" => Some("1"),
            "b" => Some("old"),
            "gone" => Some("x"),
            _ => None,
        };
        let changes = wanted.changes(have, |_| None);
        let keys: Vec<&str> = changes.labels.keys().map(String::as_str).collect();
        assert_eq!(keys, ["b", "gone"]);
        assert!(
            labels(&[("a", Some("1"))])
                .changes(|_| Some("1"), |_| None)
                .is_empty()
        );
    }
}
