//! The operator's settings for a plugin: one JSON object per plugin, checked once when the
//! host loads it (`validate-settings`) and handed to every `related` and `reconcile` call.

use schemars::JsonSchema;
use serde::de::DeserializeOwned;

/// A plugin's settings type, declared with [`Metadata::settings`](crate::Metadata::settings)
/// and read with [`Context::settings`](crate::Context::settings).
///
/// Deserialization checks the shape (give fields serde defaults so `{}` works, and
/// `#[serde(deny_unknown_fields)]` so a misspelt setting is refused rather than ignored);
/// [`Settings::validate`] checks the values.
///
/// ```
/// use capstan_sdk::Settings;
/// use schemars::JsonSchema;
/// use serde::Deserialize;
///
/// #[derive(Deserialize, JsonSchema)]
/// #[serde(rename_all = "camelCase", deny_unknown_fields)]
/// struct GreeterSettings {
///     /// Prefix of every greeting.
///     #[serde(default = "hello")]
///     salutation: String,
/// }
///
/// fn hello() -> String {
///     "hello".into()
/// }
///
/// impl Settings for GreeterSettings {
///     fn validate(&self) -> Result<(), String> {
///         if self.salutation.trim().is_empty() {
///             return Err("salutation must not be empty".into());
///         }
///         Ok(())
///     }
/// }
/// ```
pub trait Settings: DeserializeOwned + JsonSchema {
    /// Check values the type alone cannot; the error is shown to the operator on one line
    /// and should name the setting (e.g. "backoffLimit must be at least 0, got -1").
    fn validate(&self) -> Result<(), String> {
        Ok(())
    }
}

/// What [`Metadata::settings`](crate::Metadata::settings) records: the schema for the
/// host and a type-erased check for the `validate-settings` export.
#[derive(Clone, Debug)]
pub(crate) struct Declared {
    /// JSON Schema of the settings type.
    pub schema: serde_json::Value,
    /// Parse as the settings type, then [`Settings::validate`].
    pub check: fn(&str) -> Result<(), String>,
}

impl Declared {
    /// The declaration for `T`.
    pub fn of<T: Settings>() -> Self {
        Declared {
            schema: schemars::schema_for!(T).to_value(),
            check: |text| parse::<T>(text)?.validate(),
        }
    }
}

impl PartialEq for Declared {
    fn eq(&self, other: &Self) -> bool {
        self.schema == other.schema && std::ptr::fn_addr_eq(self.check, other.check)
    }
}

impl Eq for Declared {}

/// Check settings text for a plugin called `plugin` that declared `declared` (none: it
/// takes no settings, so only an empty object passes).
pub(crate) fn check(plugin: &str, declared: Option<&Declared>, text: &str) -> Result<(), String> {
    match declared {
        Some(d) => (d.check)(text),
        None => match serde_json::from_str::<serde_json::Value>(effective(text)) {
            Ok(serde_json::Value::Object(map)) if map.is_empty() => Ok(()),
            Ok(serde_json::Value::Object(map)) => Err(format!(
                "plugin {plugin} takes no settings (got {})",
                map.keys().map(String::as_str).collect::<Vec<_>>().join(", ")
            )),
            Ok(other) => Err(format!("plugin {plugin} takes no settings (got {other})")),
            Err(e) => Err(format!("settings are not JSON: {}", without_position(&e))),
        },
    }
}

/// Settings text as `T`; the error names the setting at fault, e.g.
/// `backoffLimit: invalid type: string "x", expected i32`.
pub(crate) fn parse<T: DeserializeOwned>(text: &str) -> Result<T, String> {
    let mut de = serde_json::Deserializer::from_str(effective(text));
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let inner = without_position(e.inner());
        let mut path = e.path().to_string();
        // The path of an unknown field ends in that field, which the message names already.
        if inner.starts_with("unknown field") {
            path = path
                .rsplit_once('.')
                .map_or(".", |(parent, _)| parent)
                .to_string();
        }
        match path.as_str() {
            "." | "" => inner,
            path => format!("{path}: {inner}"),
        }
    })?;
    de.end()
        .map_err(|e| format!("settings are not one JSON value: {}", without_position(&e)))?;
    Ok(value)
}

/// No settings at all (empty text or `null`) reads as the empty object the host sends.
fn effective(text: &str) -> &str {
    match text.trim() {
        "" | "null" => "{}",
        _ => text,
    }
}

/// serde_json's message without its ` at line 1 column 42`: settings arrive as one
/// compact line the operator never saw, so a position means nothing to them.
fn without_position(e: &serde_json::Error) -> String {
    let text = e.to_string();
    match text.rfind(" at line ") {
        Some(i) if e.line() > 0 => text[..i].to_string(),
        _ => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize, JsonSchema)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    struct Knobs {
        #[serde(default)]
        limit: Option<i32>,
        #[serde(default)]
        nested: Nested,
    }

    #[derive(Debug, Default, Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    struct Nested {
        #[serde(default)]
        names: Vec<String>,
    }

    impl Settings for Knobs {
        fn validate(&self) -> Result<(), String> {
            match self.limit {
                Some(l) if l < 0 => Err(format!("limit must be at least 0, got {l}")),
                _ => Ok(()),
            }
        }
    }

    fn knobs(text: &str) -> Result<(), String> {
        check("knobs", Some(&Declared::of::<Knobs>()), text)
    }

    #[test]
    fn errors_name_the_setting_on_one_line_without_a_position() {
        assert_eq!(knobs("{}"), Ok(()));
        let parsed = parse::<Knobs>(r#"{"limit": 1, "nested": {"names": ["a"]}}"#).unwrap();
        assert_eq!(
            (parsed.limit, parsed.nested.names),
            (Some(1), vec!["a".to_string()])
        );
        assert_eq!(knobs(""), Ok(()), "no settings at all are the empty object");
        assert_eq!(knobs("null"), Ok(()));
        assert_eq!(
            knobs(r#"{"limit": "x"}"#).unwrap_err(),
            r#"limit: invalid type: string "x", expected i32"#
        );
        assert_eq!(
            knobs(r#"{"nested": {"names": [1]}}"#).unwrap_err(),
            "nested.names[0]: invalid type: integer `1`, expected a string"
        );
        let unknown = knobs(r#"{"limt": 1}"#).unwrap_err();
        assert!(unknown.starts_with("unknown field `limt`, expected"), "{unknown}");
        let nested = knobs(r#"{"nested": {"nams": []}}"#).unwrap_err();
        assert!(nested.starts_with("nested: unknown field `nams`"), "{nested}");
        assert_eq!(
            knobs(r#"{"limit": -1}"#).unwrap_err(),
            "limit must be at least 0, got -1"
        );
        assert!(knobs("{").unwrap_err().contains("EOF"));
        assert!(!knobs("{} {}").unwrap_err().contains("line"));
    }

    #[test]
    fn a_plugin_without_settings_takes_only_the_empty_object() {
        for empty in ["", "null", "{}", " { } "] {
            assert_eq!(check("quiet", None, empty), Ok(()), "{empty:?}");
        }
        assert_eq!(
            check("quiet", None, r#"{"a": 1, "b": 2}"#).unwrap_err(),
            "plugin quiet takes no settings (got a, b)"
        );
        assert_eq!(
            check("quiet", None, "[1]").unwrap_err(),
            "plugin quiet takes no settings (got [1])"
        );
    }

    #[test]
    fn the_schema_is_the_types_json_schema() {
        let d = Declared::of::<Knobs>();
        assert_eq!(d.schema["type"], "object");
        assert!(d.schema["properties"]["limit"].is_object());
        assert_eq!(d, Declared::of::<Knobs>());
    }
}
