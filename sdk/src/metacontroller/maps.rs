//! The object maps of Metacontroller's hook requests: each declared kind's objects keyed
//! `Kind.apiVersion` (`Pod.v1`, `StatefulSet.apps/v1`), then by name or `namespace/name`.

use serde_json::{Map, Value};

use super::Version;
use crate::KindRef;

/// `Kind.apiVersion`, the key of a kind's map.
pub fn kind_key(kind: &KindRef) -> String {
    format!("{}.{}", kind.kind, kind.api_version())
}

/// An object's key in its kind's map. v2: `namespace/name` for a namespaced object, its
/// name otherwise. v1: the name when the object and the parent have one scope,
/// `namespace/name` for a namespaced object of a cluster-scoped parent.
pub fn object_key(object: &Value, parent_namespaced: bool, version: Version) -> String {
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let by_name = version == Version::V1 && parent_namespaced;
    match object["metadata"]["namespace"].as_str() {
        Some(ns) if !ns.is_empty() && !by_name => format!("{ns}/{name}"),
        _ => name.to_string(),
    }
}

/// Every kind's map (an empty one for a kind with no objects), as Metacontroller sends them.
pub fn object_map(kinds: &[KindRef], objects: &[Value], parent: &Value, version: Version) -> Value {
    let parent_namespaced = parent["metadata"]["namespace"]
        .as_str()
        .is_some_and(|ns| !ns.is_empty());
    let maps = kinds.iter().map(|kind| {
        let map: Map<String, Value> = (objects.iter())
            .filter(|o| kind.matches(o))
            .map(|o| (object_key(o, parent_namespaced, version), o.clone()))
            .collect();
        (kind_key(kind), Value::Object(map))
    });
    Value::Object(maps.collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn kind(group: &str, kind: &str, plural: &str, namespaced: bool) -> KindRef {
        KindRef {
            group: group.into(),
            version: "v1".into(),
            kind: kind.into(),
            plural: plural.into(),
            namespaced,
        }
    }

    #[test]
    fn maps_are_keyed_as_metacontroller_keys_them() {
        let pods = kind("", "Pod", "pods", true);
        let sets = kind("apps", "StatefulSet", "statefulsets", true);
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}});
        let own = json!({"metadata": {"name": "parent", "namespace": "ns"}});
        let cluster = json!({"metadata": {"name": "parent"}});
        let objects = [pod.clone()];
        let v1 = object_map(&[pods.clone(), sets.clone()], &objects, &own, Version::V1);
        assert_eq!(v1, json!({"Pod.v1": {"p": pod}, "StatefulSet.apps/v1": {}}));
        let v2 = object_map(std::slice::from_ref(&pods), &objects, &own, Version::V2);
        assert_eq!(v2["Pod.v1"]["ns/p"], pod);
        let of_cluster = object_map(&[pods], &objects, &cluster, Version::V1);
        assert_eq!(of_cluster["Pod.v1"]["ns/p"], pod);
    }
}
