//! A JSON field name read without copying it where the input allows: what the host's
//! visitors over JSON text (watch events, the subset check of children) read keys as.

use std::borrow::Cow;

use serde::de::{self, Deserialize, Deserializer, Visitor};

/// A JSON string — a field name, or a label's value — borrowed from the input when it can
/// be (most are).
pub(crate) struct FieldName<'de>(pub Cow<'de, str>);

impl<'de> Deserialize<'de> for FieldName<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Name;
        impl<'de> Visitor<'de> for Name {
            type Value = FieldName<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a field name")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<FieldName<'de>, E> {
                Ok(FieldName(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<FieldName<'de>, E> {
                Ok(FieldName(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<FieldName<'de>, E> {
                Ok(FieldName(Cow::Owned(v)))
            }
        }
        d.deserialize_str(Name)
    }
}
