//! The contract's data as the host uses it: parsed JSON, durations, serializable for
//! `capstan test` output.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::bindings::capstan::reconciler::types as wit;
use super::bindings::v0_1::capstan::reconciler::types as wit_v0_1;
use super::bindings::v0_2::capstan::reconciler::types as wit_v0_2;
use super::load::LoadError;

/// The kinds a plugin names and what it declares: defined with the rules that check its
/// responses (`capstan_contract`).
pub use capstan_contract::{Kind, Metadata, ParentMetadata};
/// What a plugin reads for one parent: defined with the rules that check it.
pub use capstan_contract::{RelatedQuery, Selector};

/// Largest settings schema a plugin may declare.
const MAX_SETTINGS_SCHEMA: usize = 64 << 10;

/// One reconcile's input.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Request {
    /// The parent object.
    pub parent: Json,
    /// Observed children controlled by the parent.
    pub children: Vec<Json>,
    /// The related objects the plugin's queries selected for this parent.
    pub related: Vec<Json>,
    /// The time the plugin is told it is; `None` is the host's clock at dispatch.
    pub now: Option<jiff::Timestamp>,
    /// The parent is being deleted and carries the plugin's finalizer.
    pub finalizing: bool,
}

/// One object as JSON text, which is how the contract hands objects to a plugin. The
/// controller writes it straight from its caches' text: a `serde_json::Value` tree built
/// for each request, serialized and dropped again, was about 6 % of the host's CPU.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Json(Box<serde_json::value::RawValue>);

impl Json {
    /// `text` if it is one JSON value.
    pub fn from_text(text: String) -> Result<Json, serde_json::Error> {
        serde_json::value::RawValue::from_string(text).map(Json)
    }

    /// The JSON text.
    pub fn text(&self) -> &str {
        self.0.get()
    }

    /// The object as a tree, parsed again.
    pub fn value(&self) -> serde_json::Value {
        // It was valid JSON when made, so it parses.
        serde_json::from_str(self.text()).unwrap_or_default()
    }
}

impl From<&serde_json::Value> for Json {
    fn from(value: &serde_json::Value) -> Json {
        // A Value has string keys, so it always serializes.
        Json(serde_json::value::to_raw_value(value).unwrap_or_default())
    }
}

impl From<serde_json::Value> for Json {
    fn from(value: serde_json::Value) -> Json {
        Json::from(&value)
    }
}

/// `null`, as a `serde_json::Value` defaults to.
impl Default for Json {
    fn default() -> Json {
        Json::from(serde_json::Value::Null)
    }
}

/// The same text (not the same object written another way).
impl PartialEq for Json {
    fn eq(&self, other: &Json) -> bool {
        self.text() == other.text()
    }
}

/// A parent as a plugin's `related` call is shown it ([`capstan_contract::related::shown`]:
/// no `status`, no `resourceVersion`), and a digest of that: two parents with the same
/// digest get the same answer, so the host asks once per change the call can see.
pub struct RelatedParent {
    json: Json,
    digest: u64,
}

impl RelatedParent {
    /// What `related` is shown of `parent`.
    pub fn of(parent: &Json) -> RelatedParent {
        let text = capstan_contract::related::shown(parent.text());
        let digest = {
            use std::hash::{Hash, Hasher};
            // Fixed keys: the same text has the same digest for the life of the process.
            let mut hasher = std::hash::DefaultHasher::new();
            text.hash(&mut hasher);
            hasher.finish()
        };
        // Fields cut out of a JSON object leave a JSON object; text that was not one is
        // passed on as it came.
        let json = Json::from_text(text).unwrap_or_else(|_| parent.clone());
        RelatedParent { json, digest }
    }

    /// The JSON the call is shown.
    pub fn json(&self) -> &Json {
        &self.json
    }

    /// Equal for equal [`RelatedParent::json`]s.
    pub fn digest(&self) -> u64 {
        self.digest
    }
}

/// Severity of an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventType {
    /// Informational.
    Normal,
    /// Needs attention.
    Warning,
}

/// An event to record on the parent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    /// Normal or Warning.
    #[serde(rename = "type")]
    pub event_type: EventType,
    /// Machine-readable reason.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
}

/// A successful reconcile's answer, validated to be well-formed JSON objects.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Response {
    /// Desired children.
    pub children: Vec<serde_json::Value>,
    /// New status of the parent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<serde_json::Value>,
    /// Requeue hint.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "millis")]
    pub requeue_after: Option<Duration>,
    /// Events to record.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<Event>,
    /// Finalization complete.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub finalized: bool,
    /// Labels and annotations to set on (or remove from) the parent itself.
    #[serde(
        default,
        rename = "parentMetadata",
        skip_serializing_if = "ParentMetadata::is_empty"
    )]
    pub parent: ParentMetadata,
    /// Host memory the parsed children and status hold, from the plugin's memory total,
    /// until the last copy of the response is dropped.
    #[serde(skip)]
    pub held: super::Held,
}

/// Requeue-after as a human-readable duration string in YAML/JSON output (`"1500ms"`).
mod millis {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_str(&format!("{}ms", d.as_millis())),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let Some(text) = Option::<String>::deserialize(d)? else {
            return Ok(None);
        };
        let ms = text.strip_suffix("ms").unwrap_or(&text).trim();
        ms.parse::<u64>()
            .map(|ms| Some(Duration::from_millis(ms)))
            .map_err(|_| D::Error::custom(format!("requeueAfter must look like \"1500ms\", got {text:?}")))
    }
}

/// The records 0.2 and today's contract share, read the same from either version's
/// bindings (and a 0.1 plugin's kinds, which are the same record too).
macro_rules! shared_records {
    ($($wit:ident),*) => {$(
        impl From<$wit::KindRef> for Kind {
            fn from(k: $wit::KindRef) -> Self {
                Kind {
                    group: k.group,
                    version: k.version,
                    kind: k.kind,
                    plural: k.plural,
                    namespaced: k.namespaced,
                }
            }
        }
    )*};
}

shared_records!(wit, wit_v0_2, wit_v0_1);

/// Metadata and related queries, which 0.2 and today's contract share.
macro_rules! metadata_and_queries {
    ($($wit:ident),*) => {$(
        impl From<$wit::RelatedQuery> for RelatedQuery {
            fn from(q: $wit::RelatedQuery) -> Self {
                RelatedQuery {
                    group: q.group,
                    kind: q.kind,
                    namespace: q.namespace,
                    selector: match q.selector {
                        $wit::Selector::Names(names) => Selector::Names(names),
                        $wit::Selector::Labels(text) => Selector::Labels(text),
                    },
                }
            }
        }

        impl TryFrom<$wit::PluginMetadata> for Metadata {
            type Error = LoadError;

            /// The settings schema must be a small JSON object.
            fn try_from(m: $wit::PluginMetadata) -> Result<Self, LoadError> {
                Ok(Metadata {
                    name: m.name,
                    version: m.version,
                    parent: m.parent.into(),
                    children: m.children.into_iter().map(Kind::from).collect(),
                    related: m.related.into_iter().map(Kind::from).collect(),
                    settings_schema: settings_schema(m.settings_schema)?,
                    finalizer: m.finalizer,
                })
            }
        }
    )*};
}

metadata_and_queries!(wit, wit_v0_2);

/// A plugin's settings schema, which must be a small JSON object.
fn settings_schema(text: Option<String>) -> Result<Option<serde_json::Value>, LoadError> {
    match text {
        None => Ok(None),
        Some(text) if text.len() > MAX_SETTINGS_SCHEMA => Err(LoadError::InvalidMetadata(format!(
            "settings schema of {} bytes; at most {MAX_SETTINGS_SCHEMA}",
            text.len()
        ))),
        Some(text) => match serde_json::from_str(&text) {
            Ok(v @ serde_json::Value::Object(_)) => Ok(Some(v)),
            _ => Err(LoadError::InvalidMetadata(
                "settings schema is not a JSON object".into(),
            )),
        },
    }
}

impl From<wit_v0_1::PluginMetadata> for Metadata {
    fn from(m: wit_v0_1::PluginMetadata) -> Self {
        Metadata {
            name: m.name,
            version: m.version,
            parent: m.parent.into(),
            children: m.children.into_iter().map(Kind::from).collect(),
            related: Vec::new(),
            settings_schema: None,
            finalizer: m.finalizer,
        }
    }
}

impl From<wit::Event> for Event {
    fn from(e: wit::Event) -> Self {
        Event {
            event_type: match e.event_type {
                wit::EventType::Normal => EventType::Normal,
                wit::EventType::Warning => EventType::Warning,
            },
            reason: e.reason,
            message: e.message,
        }
    }
}
