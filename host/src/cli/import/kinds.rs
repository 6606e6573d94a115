//! Which kind a Metacontroller resource rule (`apiVersion` and plural `resource`) names:
//! a CRD of the example's, or one of the API server's built-in kinds.

use serde_json::Value;

/// One served kind, as a plugin declares it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Kind {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub plural: String,
    pub namespaced: bool,
}

/// The built-in kinds a controller names most: (apiVersion, kind, plural, namespaced).
const BUILT_IN: &[(&str, &str, &str, bool)] = &[
    ("v1", "ConfigMap", "configmaps", true),
    ("v1", "Secret", "secrets", true),
    ("v1", "Pod", "pods", true),
    ("v1", "Service", "services", true),
    ("v1", "ServiceAccount", "serviceaccounts", true),
    ("v1", "PersistentVolumeClaim", "persistentvolumeclaims", true),
    ("v1", "Endpoints", "endpoints", true),
    ("v1", "Namespace", "namespaces", false),
    ("v1", "Node", "nodes", false),
    ("v1", "PersistentVolume", "persistentvolumes", false),
    ("apps/v1", "Deployment", "deployments", true),
    ("apps/v1", "StatefulSet", "statefulsets", true),
    ("apps/v1", "DaemonSet", "daemonsets", true),
    ("apps/v1", "ReplicaSet", "replicasets", true),
    ("batch/v1", "Job", "jobs", true),
    ("batch/v1", "CronJob", "cronjobs", true),
    ("networking.k8s.io/v1", "Ingress", "ingresses", true),
    ("networking.k8s.io/v1", "NetworkPolicy", "networkpolicies", true),
    ("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets", true),
    ("rbac.authorization.k8s.io/v1", "Role", "roles", true),
    (
        "rbac.authorization.k8s.io/v1",
        "RoleBinding",
        "rolebindings",
        true,
    ),
    (
        "rbac.authorization.k8s.io/v1",
        "ClusterRole",
        "clusterroles",
        false,
    ),
    (
        "rbac.authorization.k8s.io/v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
        false,
    ),
    (
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        false,
    ),
];

/// The kind `resource` (a plural) names in `api_version`: a CRD among `crds` first.
pub(super) fn resolve(api_version: &str, resource: &str, crds: &[Value]) -> Option<Kind> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    crds.iter()
        .find_map(|crd| from_crd(crd, group, version, resource))
        .or_else(|| built_in(api_version, resource))
}

/// Every kind the CRDs and the built-in table know, for finding plurals in a hook's text.
pub(super) fn known(crds: &[Value]) -> Vec<Kind> {
    let mut all: Vec<Kind> = BUILT_IN
        .iter()
        .filter_map(|(api_version, _, plural, _)| built_in(api_version, plural))
        .collect();
    for crd in crds {
        let spec = &crd["spec"];
        let (group, plural) = (
            spec["group"].as_str().unwrap_or(""),
            spec["names"]["plural"].as_str(),
        );
        for version in spec["versions"].as_array().into_iter().flatten() {
            if let (Some(plural), Some(v)) = (plural, version["name"].as_str()) {
                all.extend(from_crd(crd, group, v, plural));
            }
        }
    }
    all
}

fn built_in(api_version: &str, resource: &str) -> Option<Kind> {
    let (av, kind, plural, namespaced) = BUILT_IN
        .iter()
        .find(|(av, _, p, _)| *av == api_version && *p == resource)?;
    let (group, version) = av.rsplit_once('/').unwrap_or(("", av));
    Some(Kind {
        group: group.into(),
        version: version.into(),
        kind: (*kind).into(),
        plural: (*plural).into(),
        namespaced: *namespaced,
    })
}

fn from_crd(crd: &Value, group: &str, version: &str, resource: &str) -> Option<Kind> {
    let spec = &crd["spec"];
    let names = &spec["names"];
    let serves = spec["versions"]
        .as_array()?
        .iter()
        .any(|v| v["name"] == version && v["served"] != false);
    (spec["group"] == group && names["plural"] == resource && serves).then(|| Kind {
        group: group.into(),
        version: version.into(),
        kind: names["kind"].as_str().unwrap_or_default().into(),
        plural: resource.into(),
        namespaced: spec["scope"] != "Cluster",
    })
}

/// `kind`'s status schema, as its CRD among `crds` declares it: what the status written is
/// pruned to. Metacontroller writes status with an update, whose undeclared fields the API
/// server drops; Capstan applies it, where they are an error. A kind no CRD declares (a
/// built-in, whose status is its own controller's) holds none of it: `{"type": "object"}`.
pub(super) fn status_schema(kind: &Kind, crds: &[Value]) -> Value {
    let schema = crds.iter().find_map(|crd| {
        let spec = &crd["spec"];
        let ours = spec["group"] == kind.group.as_str() && spec["names"]["plural"] == kind.plural.as_str();
        let version = (spec["versions"].as_array()?.iter()).find(|v| v["name"] == kind.version.as_str())?;
        ours.then(|| &version["schema"]["openAPIV3Schema"])
    });
    let keep_all = serde_json::json!({"x-kubernetes-preserve-unknown-fields": true});
    match schema {
        None => serde_json::json!({"type": "object"}),
        Some(s) if s["x-kubernetes-preserve-unknown-fields"] == true || s["properties"].is_null() => keep_all,
        Some(s) => match &s["properties"]["status"] {
            Value::Null => serde_json::json!({"type": "object"}),
            status => status.clone(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_schema_is_the_crds_or_holds_nothing_for_a_built_in() {
        let crd = |root: Value| {
            serde_json::json!({"spec": {"group": "g.io", "names": {"kind": "T", "plural": "ts"},
                "versions": [{"name": "v1", "served": true, "schema": {"openAPIV3Schema": root}}]}})
        };
        let t = resolve("g.io/v1", "ts", &[crd(Value::Null)]).unwrap();
        let status = serde_json::json!({"type": "object", "properties": {"count": {"type": "integer"}}});
        let root = serde_json::json!({"type": "object", "properties": {"status": status}});
        assert_eq!(status_schema(&t, &[crd(root)]), status);
        let open = serde_json::json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
        assert_eq!(
            status_schema(&t, &[crd(open.clone())])["x-kubernetes-preserve-unknown-fields"],
            true
        );
        let cm = resolve("v1", "configmaps", &[]).unwrap();
        assert_eq!(status_schema(&cm, &[]), serde_json::json!({"type": "object"}));
    }

    #[test]
    fn a_crd_of_the_example_comes_first_and_built_ins_follow() {
        let crd = serde_json::json!({
            "kind": "CustomResourceDefinition",
            "spec": {"group": "ctl.example.com", "scope": "Cluster",
                     "names": {"kind": "DaemonJob", "plural": "daemonjobs"},
                     "versions": [{"name": "v1", "served": true}]}
        });
        let crds = [crd];
        let job = resolve("ctl.example.com/v1", "daemonjobs", &crds).unwrap();
        assert_eq!(
            (
                job.group.as_str(),
                job.version.as_str(),
                job.kind.as_str(),
                job.namespaced
            ),
            ("ctl.example.com", "v1", "DaemonJob", false)
        );
        assert!(resolve("ctl.example.com/v2", "daemonjobs", &crds).is_none());
        let ds = resolve("apps/v1", "daemonsets", &crds).unwrap();
        assert_eq!(
            (ds.group.as_str(), ds.kind.as_str(), ds.namespaced),
            ("apps", "DaemonSet", true)
        );
        let cm = resolve("v1", "configmaps", &[]).unwrap();
        assert_eq!((cm.group.as_str(), cm.version.as_str()), ("", "v1"));
        assert!(known(&crds).iter().any(|k| k.kind == "DaemonJob"));
    }
}
