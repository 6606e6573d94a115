//! How a child that exists but differs from the answer is brought to it, per child kind
//! (the plugin entry's `updates`, Metacontroller's `updateStrategy.method`): applied over
//! in place (the default), left as it is until someone deletes it, or deleted so that
//! the next reconcile creates it afresh. "Differs" is the host's one rule for a child
//! ([`crate::apply::unchanged`]): only the fields the plugin sets count, so a field
//! someone else added never triggers an update — or a recreation.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;

use crate::engine::Kind;

/// What happens to an existing child whose fields differ from the answer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, JsonSchema)]
pub enum Update {
    /// Apply the answer over it (server-side apply).
    #[default]
    InPlace,
    /// Leave it as it is; once someone deletes it, it is created from the answer.
    OnDelete,
    /// Delete it (as observed: its UID and resourceVersion); the next reconcile, which
    /// its deletion wakes, creates it from the answer.
    Recreate,
}

/// Checks an entry's `updates` (keyed by `Kind` or `plural.group`, as `allowClusterKinds`
/// is) against the plugin's child kinds: a key that names none of them is an error naming it.
pub(super) fn check(updates: &BTreeMap<String, Update>, kinds: &[Kind]) -> Result<(), String> {
    match updates.keys().find(|key| !kinds.iter().any(|k| names(key, k))) {
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

/// The method for `kind`: its entry by `Kind` or `plural.group`, else in place.
pub(super) fn of(updates: &BTreeMap<String, Update>, kind: &Kind) -> Update {
    (updates.iter())
        .find(|(key, _)| names(key, kind))
        .map_or(Update::InPlace, |(_, u)| *u)
}

fn names(key: &str, kind: &Kind) -> bool {
    key == kind.kind || key == format!("{}.{}", kind.plural, kind.group)
}

#[cfg(test)]
mod tests {
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
        let per_kind = |updates: &BTreeMap<String, Update>| {
            check(updates, &kinds).unwrap();
            kinds.iter().map(|k| of(updates, k)).collect::<Vec<_>>()
        };
        let updates = BTreeMap::from([("jobs.batch".to_string(), Update::Recreate)]);
        assert_eq!(per_kind(&updates), [Update::InPlace, Update::Recreate]);
        let updates = BTreeMap::from([("ConfigMap".to_string(), Update::OnDelete)]);
        assert_eq!(per_kind(&updates), [Update::OnDelete, Update::InPlace]);
    }

    #[test]
    fn a_key_naming_no_child_kind_is_refused_with_the_kinds_there_are() {
        let kinds = [kind("ConfigMap", "configmaps", "")];
        let updates = BTreeMap::from([("Pod".to_string(), Update::OnDelete)]);
        assert_eq!(
            check(&updates, &kinds).unwrap_err(),
            "updates names Pod, which is none of the plugin's child kinds (ConfigMap)"
        );
    }
}
