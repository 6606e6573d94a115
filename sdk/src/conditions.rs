//! Kubernetes-style status conditions, as `kubectl wait --for=condition=Ready`, kstatus
//! (Flux, `kubectl apply --wait`-style tools) and humans read them: a list of
//! [`Condition`]s keyed by `type`, each with `status` "True", "False" or "Unknown", an
//! UpperCamelCase `reason`, a `message`, the `observedGeneration` it describes and
//! `lastTransitionTime` — when `status` last changed, not when it was last written, so a
//! condition rewritten unchanged keeps its time.
//!
//! ```
//! use capstan_sdk::conditions::{Conditions, Status};
//! use capstan_sdk::k8s_openapi::jiff::Timestamp;
//!
//! let earlier: Timestamp = "2026-11-24T09:00:00Z".parse().unwrap();
//! let now: Timestamp = "2026-11-24T09:30:00Z".parse().unwrap();
//!
//! // First reconcile: not ready yet.
//! let mut conditions = Conditions::new(Vec::new(), Some(1), earlier);
//! conditions.ready(false, "JobPending", "Job hello-1 has not started");
//! let previous = conditions.into_vec();
//!
//! // Later, still not ready: the reason and message change, the transition time does not.
//! let mut conditions = Conditions::new(previous.clone(), Some(1), now);
//! conditions.ready(false, "JobRunning", "Job hello-1 is running");
//! let ready = conditions.get("Ready").unwrap();
//! assert_eq!(ready.reason, "JobRunning");
//! assert_eq!(ready.last_transition_time.0, earlier);
//!
//! // Ready at last: the status flips, so the time is now.
//! let mut conditions = Conditions::new(previous, Some(1), now);
//! conditions.set("Ready", Status::True, "JobSucceeded", "Job hello-1 completed");
//! let ready = conditions.get("Ready").unwrap();
//! assert_eq!((ready.status.as_str(), ready.last_transition_time.0), ("True", now));
//! assert_eq!(ready.observed_generation, Some(1));
//! ```
//!
//! In a status type, give the list the schema Kubernetes uses for conditions, since
//! k8s-openapi's types carry none: `#[schemars(schema_with = "capstan_sdk::conditions::schema")]`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

/// The type of the condition that says the object is fully reconciled and working.
pub const READY: &str = "Ready";

/// Whether a condition holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// It holds.
    True,
    /// It does not hold.
    False,
    /// The plugin cannot tell (yet).
    Unknown,
}

impl Status {
    /// "True", "False" or "Unknown", as the API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::True => "True",
            Status::False => "False",
            Status::Unknown => "Unknown",
        }
    }
}

impl From<bool> for Status {
    fn from(holds: bool) -> Self {
        if holds { Status::True } else { Status::False }
    }
}

/// The conditions of one status being written: the previous ones, updated in place.
#[derive(Clone, Debug)]
pub struct Conditions {
    list: Vec<Condition>,
    generation: Option<i64>,
    now: Timestamp,
}

impl Conditions {
    /// Start from the conditions the parent's status holds now, for a parent at
    /// `generation` (its `metadata.generation`), at `now` (usually
    /// [`Context::now`](crate::Context::now)).
    pub fn new(previous: Vec<Condition>, generation: Option<i64>, now: Timestamp) -> Self {
        Conditions {
            list: previous,
            generation,
            now,
        }
    }

    /// Set the condition of `type_`: its reason, message and observed generation always,
    /// its transition time only when its status changes (or it is new).
    pub fn set(
        &mut self,
        type_: &str,
        status: impl Into<Status>,
        reason: &str,
        message: impl Into<String>,
    ) -> &mut Self {
        let status = status.into().as_str();
        let condition = Condition {
            type_: type_.to_string(),
            status: status.to_string(),
            reason: reason.to_string(),
            message: message.into(),
            observed_generation: self.generation,
            last_transition_time: Time(self.now),
        };
        match self.list.iter_mut().find(|c| c.type_ == type_) {
            Some(old) if old.status == status => {
                *old = Condition {
                    last_transition_time: old.last_transition_time.clone(),
                    ..condition
                }
            }
            Some(old) => *old = condition,
            None => self.list.push(condition),
        }
        self
    }

    /// Set the `Ready` condition.
    pub fn ready(
        &mut self,
        status: impl Into<Status>,
        reason: &str,
        message: impl Into<String>,
    ) -> &mut Self {
        self.set(READY, status, reason, message)
    }

    /// The condition of `type_`, if set.
    pub fn get(&self, type_: &str) -> Option<&Condition> {
        find(&self.list, type_)
    }

    /// The conditions, to put into the status.
    pub fn into_vec(self) -> Vec<Condition> {
        self.list
    }
}

/// The condition of `type_` in `conditions`, if any.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// JSON Schema of a list of conditions as Kubernetes' own types declare it (a list map
/// keyed by `type`), for `#[schemars(schema_with = "capstan_sdk::conditions::schema")]`.
pub fn schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "description": "The object's state as Kubernetes-style conditions, keyed by type.",
        "type": "array",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
        "items": {
            "type": "object",
            "required": ["type", "status", "lastTransitionTime", "reason", "message"],
            "properties": {
                "type": {"description": "Condition type in CamelCase, e.g. Ready.", "type": "string", "maxLength": 316},
                "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
                "observedGeneration": {"description": "The metadata.generation the condition describes.", "type": "integer", "format": "int64", "minimum": 0},
                "lastTransitionTime": {"description": "When status last changed.", "type": "string", "format": "date-time"},
                "reason": {"description": "Why, in UpperCamelCase.", "type": "string", "maxLength": 1024, "minLength": 1},
                "message": {"description": "Why, for humans.", "type": "string", "maxLength": 32768}
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    #[test]
    fn other_conditions_are_kept_and_new_ones_appended() {
        let mut c = Conditions::new(Vec::new(), Some(3), at("2026-01-01T00:00:00Z"));
        c.set("Stalled", Status::False, "Fine", "")
            .ready(Status::Unknown, "Waiting", "w");
        let list = c.into_vec();
        assert_eq!(
            list.iter().map(|c| c.type_.as_str()).collect::<Vec<_>>(),
            ["Stalled", "Ready"]
        );
        let mut c = Conditions::new(list, Some(4), at("2026-01-02T00:00:00Z"));
        c.ready(true, "Done", "d");
        let list = c.into_vec();
        assert_eq!(list.len(), 2);
        assert_eq!(list[0].observed_generation, Some(3), "untouched");
        assert_eq!(list[1].observed_generation, Some(4));
        assert_eq!(list[1].last_transition_time.0, at("2026-01-02T00:00:00Z"));
        assert_eq!(find(&list, "Ready").unwrap().status, "True");
        assert!(find(&list, "Missing").is_none());
    }

    #[test]
    fn conditions_serialize_as_the_api_spells_them() {
        let mut c = Conditions::new(Vec::new(), None, at("2026-11-24T09:30:00.123Z"));
        c.ready(false, "Pending", "p");
        let json = serde_json::to_value(c.into_vec()).unwrap();
        assert_eq!(
            json,
            serde_json::json!([{"type": "Ready", "status": "False", "reason": "Pending", "message": "p",
                "lastTransitionTime": "2026-11-24T09:30:00Z"}])
        );
        let schema = schema(&mut schemars::SchemaGenerator::default());
        assert_eq!(
            schema.as_value()["x-kubernetes-list-map-keys"],
            serde_json::json!(["type"])
        );
    }
}
