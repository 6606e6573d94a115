//! How a child that exists but differs from the answer is brought to it, per child kind
//! (the plugin entry's `updates`, Metacontroller's `updateStrategy`): applied over in place
//! (the default), left as it is until someone deletes it, deleted so that the reconcile
//! its deletion wakes creates it afresh — or either of those one child at a time, the
//! next only once every child already at the answer passes the kind's status checks.
//! "Differs" is the host's one rule for a child ([`crate::apply::unchanged`]): only the
//! fields the plugin sets count, so a field someone else added never triggers an update.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use crate::engine::Kind;

/// What happens to an existing child whose fields differ from the answer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, JsonSchema)]
pub enum Method {
    /// Apply the answer over it (server-side apply).
    #[default]
    InPlace,
    /// Leave it as it is; once someone deletes it, it is created from the answer.
    OnDelete,
    /// Delete it (as observed: its UID and resourceVersion); the next reconcile, which
    /// its deletion wakes, creates it from the answer.
    Recreate,
    /// In place, one child at a time, in the answer's order.
    RollingInPlace,
    /// Recreate, one child at a time, in the answer's order.
    RollingRecreate,
}

/// One child kind's entry in `updates`: a method, or a method with the status checks a
/// rolling update waits for (Metacontroller's `updateStrategy`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Update {
    /// The method alone.
    Method(Method),
    /// The method and its status checks.
    Rule(Rule),
}

/// A method and the status checks of a rolling update.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Rule {
    /// How a child that differs is updated.
    pub method: Method,
    /// What a child brought to the answer must show before the next one is updated.
    #[serde(default)]
    pub status_checks: StatusChecks,
}

/// Status checks of a rolling update.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StatusChecks {
    /// Conditions each child's `status.conditions` must hold.
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

/// One condition a child must hold: of this type, with this status and reason if given.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Condition {
    /// The condition's `type`.
    #[serde(rename = "type")]
    pub type_: String,
    /// Its `status` (`"True"`), if it matters.
    #[serde(default)]
    pub status: Option<String>,
    /// Its `reason`, if it matters.
    #[serde(default)]
    pub reason: Option<String>,
}

impl Update {
    fn rule(&self) -> Rule {
        match self {
            Update::Method(method) => Rule {
                method: *method,
                status_checks: StatusChecks::default(),
            },
            Update::Rule(rule) => rule.clone(),
        }
    }
}

impl Rule {
    /// Whether children of this kind are updated one at a time.
    pub(super) fn rolling(&self) -> bool {
        matches!(self.method, Method::RollingInPlace | Method::RollingRecreate)
    }

    /// Whether a child that differs is deleted rather than applied over.
    pub(super) fn recreates(&self) -> bool {
        matches!(self.method, Method::Recreate | Method::RollingRecreate)
    }

    /// Whether a child already at the answer may count as done, so the rollout moves on:
    /// it holds every condition, and (in place) its controller has seen its last change
    /// where it says so (`status.observedGeneration`).
    pub(super) fn passes(&self, generation: Option<i64>, status: &Value) -> bool {
        let conditions = status["conditions"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        let holds = |c: &Condition| {
            conditions.iter().any(|have| {
                have["type"].as_str() == Some(c.type_.as_str())
                    && c.status
                        .as_deref()
                        .is_none_or(|s| have["status"].as_str() == Some(s))
                    && c.reason
                        .as_deref()
                        .is_none_or(|r| have["reason"].as_str() == Some(r))
            })
        };
        let seen = match (self.method, status["observedGeneration"].as_i64(), generation) {
            (Method::RollingInPlace, Some(observed), Some(generation)) => observed >= generation,
            _ => true,
        };
        seen && self.status_checks.conditions.iter().all(holds)
    }
}

/// Checks an entry's `updates` (keyed by `Kind` or `plural.group`, as `allowClusterKinds`
/// is) against the plugin's child kinds: a key that names none of them is an error naming it.
pub(super) fn check(updates: &BTreeMap<String, Update>, kinds: &[Kind]) -> Result<(), String> {
    match updates.keys().find(|key| !kinds.iter().any(|k| k.is_named(key))) {
        Some(unknown) => {
            let declared: Vec<&str> = kinds.iter().map(|k| k.kind.as_str()).collect();
            Err(format!(
                "updates names {unknown}, which is none of the plugin's child kinds ({})",
                declared.join(", ")
            ))
        }
        None => Ok(()),
    }
}

/// The rule for `kind`: its entry by `Kind` or `plural.group`, else in place.
pub(super) fn of(updates: &BTreeMap<String, Update>, kind: &Kind) -> Rule {
    (updates.iter())
        .find(|(key, _)| kind.is_named(key))
        .map_or_else(Rule::default, |(_, u)| u.rule())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn kind(kind: &str, plural: &str, group: &str) -> Kind {
        Kind {
            group: group.into(),
            version: "v1".into(),
            kind: kind.into(),
            plural: plural.into(),
            namespaced: true,
        }
    }

    #[test]
    fn a_kind_is_named_as_allow_cluster_kinds_names_it_and_the_rest_update_in_place() {
        let kinds = [kind("ConfigMap", "configmaps", ""), kind("Job", "jobs", "batch")];
        let methods = |updates: &BTreeMap<String, Update>| {
            check(updates, &kinds).unwrap();
            kinds.iter().map(|k| of(updates, k).method).collect::<Vec<_>>()
        };
        let updates = BTreeMap::from([("jobs.batch".to_string(), Update::Method(Method::Recreate))]);
        assert_eq!(methods(&updates), [Method::InPlace, Method::Recreate]);
        let updates = BTreeMap::from([("ConfigMap".to_string(), Update::Method(Method::OnDelete))]);
        assert_eq!(methods(&updates), [Method::OnDelete, Method::InPlace]);
    }

    #[test]
    fn a_key_naming_no_child_kind_is_refused_with_the_kinds_there_are() {
        let kinds = [kind("ConfigMap", "configmaps", "")];
        let updates = BTreeMap::from([("Pod".to_string(), Update::Method(Method::OnDelete))]);
        assert_eq!(
            check(&updates, &kinds).unwrap_err(),
            "updates names Pod, which is none of the plugin's child kinds (ConfigMap)"
        );
    }

    #[test]
    fn an_entry_is_a_method_or_metacontroller_s_update_strategy() {
        let updates: BTreeMap<String, Update> = serde_json::from_value(json!({
            "ConfigMap": "OnDelete",
            "Pod": {"method": "RollingRecreate", "statusChecks": {"conditions": [{"type": "Ready", "status": "True"}]}},
        }))
        .unwrap();
        let pod = of(&updates, &kind("Pod", "pods", ""));
        assert!(pod.rolling() && pod.recreates());
        assert_eq!(pod.status_checks.conditions[0].type_, "Ready");
        assert_eq!(
            of(&updates, &kind("ConfigMap", "configmaps", "")).method,
            Method::OnDelete
        );
        let wrong = serde_json::from_value::<BTreeMap<String, Update>>(json!({"Pod": "Sometimes"}));
        assert!(wrong.is_err());
    }

    #[test]
    fn a_child_passes_when_it_holds_every_condition_and_in_place_has_seen_its_generation() {
        let updates: BTreeMap<String, Update> = serde_json::from_value(json!({
            "Pod": {"method": "RollingInPlace", "statusChecks": {"conditions": [{"type": "Ready", "status": "True"}]}},
        }))
        .unwrap();
        let rule = of(&updates, &kind("Pod", "pods", ""));
        let ready = json!({"conditions": [{"type": "Ready", "status": "True"}], "observedGeneration": 2});
        assert!(rule.passes(Some(2), &ready));
        assert!(
            !rule.passes(Some(3), &ready),
            "its controller has not seen generation 3"
        );
        let not_ready = json!({"conditions": [{"type": "Ready", "status": "False"}]});
        assert!(!rule.passes(Some(1), &not_ready));
        assert!(!rule.passes(Some(1), &Value::Null));
        // Without checks, a child at the answer passes.
        assert!(of(&BTreeMap::new(), &kind("Pod", "pods", "")).passes(None, &Value::Null));
    }
}
