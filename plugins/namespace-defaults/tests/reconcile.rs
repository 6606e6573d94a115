//! namespace-defaults' reconcile logic, run natively through the SDK's testing harness,
//! which checks every response with the host's own rules (children of a Namespace parent
//! go into that Namespace).

use capstan_sdk::testing::{Failure, Fixture, validate_settings};
use capstan_sdk::{EventType, Response};
use k8s_openapi::api::core::v1::{LimitRange, ResourceQuota};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use namespace_defaults::{DEFAULTS, DENY_INGRESS, NamespaceDefaults};
use serde_json::json;

fn fixture(name: &str) -> String {
    format!("{}/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn load(parent: &str) -> Fixture {
    Fixture::load(fixture(parent)).unwrap()
}

/// Reconciled as the operator runs it: with the grant to write into the Namespace itself.
fn run(f: Fixture) -> Response {
    f.allow_own_namespace().reconcile::<NamespaceDefaults>().unwrap()
}

fn quantities(
    map: Option<&std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
) -> serde_json::Value {
    serde_json::to_value(map).unwrap()
}

#[test]
fn an_opted_in_namespace_gets_a_quota_a_limit_range_and_a_deny_ingress_policy_inside_itself() {
    let r = run(load("team-a.yaml"));
    assert_eq!(r.children.len(), 3);
    assert_eq!(r.status, None, "a Namespace's status is the API server's");

    let quota = r.children_of::<ResourceQuota>().unwrap().remove(0);
    assert_eq!(quota.metadata.name.as_deref(), Some(DEFAULTS));
    assert_eq!(quota.metadata.namespace.as_deref(), Some("team-a"));
    assert_eq!(
        quantities(quota.spec.as_ref().unwrap().hard.as_ref()),
        json!({"requests.cpu": "4", "requests.memory": "8Gi", "limits.cpu": "8", "limits.memory": "16Gi", "pods": "50"})
    );

    let limits = r.children_of::<LimitRange>().unwrap().remove(0);
    assert_eq!(limits.metadata.namespace.as_deref(), Some("team-a"));
    let item = &limits.spec.as_ref().unwrap().limits[0];
    assert_eq!(item.type_, "Container");
    assert_eq!(
        quantities(item.default.as_ref()),
        json!({"cpu": "500m", "memory": "512Mi"})
    );
    assert_eq!(
        quantities(item.default_request.as_ref()),
        json!({"cpu": "100m", "memory": "128Mi"})
    );
    assert_eq!(item.max, None);

    let policy = r.children_of::<NetworkPolicy>().unwrap().remove(0);
    assert_eq!(policy.metadata.name.as_deref(), Some(DENY_INGRESS));
    let json = serde_json::to_value(&policy).unwrap();
    assert_eq!(
        json["spec"],
        json!({"podSelector": {}, "policyTypes": ["Ingress"]}),
        "no rule admits anything"
    );

    assert_eq!(r.events.len(), 1);
    assert_eq!(r.events[0].event_type, EventType::Normal);
    assert_eq!(r.events[0].reason, "DefaultsApplied");
    assert_eq!(
        r.events[0].message,
        "creating ResourceQuota capstan-defaults, LimitRange capstan-defaults, \
         NetworkPolicy capstan-default-deny-ingress in namespace team-a"
    );
}

#[test]
fn once_applied_the_same_children_are_wanted_without_an_event() {
    let first = run(load("team-a.yaml"));
    let again = run(load("team-a.yaml")
        .children_file(fixture("children.yaml"))
        .unwrap());
    assert_eq!(again.children_json().unwrap(), first.children_json().unwrap());
    assert!(again.events.is_empty(), "{:?}", again.events);
}

#[test]
fn a_namespace_without_the_label_gets_nothing_and_loses_what_it_had() {
    let r = run(load("kube-system.yaml"));
    assert!(r.children.is_empty() && r.events.is_empty() && r.status.is_none());
    // Label removed, or set to anything but "true": no children, so the host prunes them.
    for value in [None, Some("false"), Some("yes")] {
        let mut parent = capstan_sdk::testing::load_documents(fixture("team-a.yaml"))
            .unwrap()
            .remove(0);
        match value {
            Some(v) => parent["metadata"]["labels"]["capstan.dev/defaults"] = v.into(),
            None => {
                parent["metadata"]["labels"]
                    .as_object_mut()
                    .unwrap()
                    .remove("capstan.dev/defaults");
            }
        }
        let f = Fixture::new(parent)
            .children_file(fixture("children.yaml"))
            .unwrap();
        assert!(run(f).children.is_empty(), "{value:?}");
    }
}

#[test]
fn a_terminating_namespace_gets_nothing() {
    let r = run(load("team-a-terminating.yaml")
        .children_file(fixture("children.yaml"))
        .unwrap());
    assert!(r.children.is_empty() && r.events.is_empty());
}

#[test]
fn settings_choose_the_label_the_quota_the_limits_and_the_policy() {
    let custom = || {
        load("team-a.yaml")
            .settings_file(fixture("settings.yaml"))
            .unwrap()
    };
    // team-a carries the default label, not the platform team's own.
    assert!(run(custom()).children.is_empty());
    let mut parent = capstan_sdk::testing::load_documents(fixture("team-a.yaml"))
        .unwrap()
        .remove(0);
    parent["metadata"]["labels"]["platform.example.com/guard-rails"] = "true".into();
    let r = run(Fixture::new(parent)
        .settings_file(fixture("settings.yaml"))
        .unwrap());
    assert!(
        r.children_of::<NetworkPolicy>().unwrap().is_empty(),
        "networkPolicy: false"
    );
    let quota = r.children_of::<ResourceQuota>().unwrap().remove(0);
    assert_eq!(
        quantities(quota.spec.as_ref().unwrap().hard.as_ref()),
        json!({"requests.cpu": "2", "requests.memory": "4Gi", "count/deployments.apps": "20"}),
        "the given list replaces the default one"
    );
    let item = r
        .children_of::<LimitRange>()
        .unwrap()
        .remove(0)
        .spec
        .unwrap()
        .limits
        .remove(0);
    assert_eq!(
        quantities(item.default.as_ref()),
        json!({"cpu": "1", "memory": "1Gi"})
    );
    assert_eq!(
        quantities(item.default_request.as_ref()),
        json!({"cpu": "100m", "memory": "128Mi"})
    );
    assert_eq!(
        quantities(item.max.as_ref()),
        json!({"cpu": "2", "memory": "2Gi"})
    );

    let only_policy = load("team-a.yaml")
        .settings("{quota: {enabled: false}, limitRange: {enabled: false}}")
        .unwrap();
    let r = run(only_policy);
    assert_eq!(r.children.len(), 1);
    assert_eq!(r.children_of::<NetworkPolicy>().unwrap().len(), 1);
}

#[test]
fn invalid_settings_are_refused_at_load_naming_the_setting() {
    let refused =
        |settings: serde_json::Value| validate_settings::<NamespaceDefaults>(&settings).unwrap_err();
    assert_eq!(
        refused(json!({"limitRange": {"defaultMemory": "128Mi", "defaultRequestMemory": "1Gi"}})),
        "limitRange.defaultRequestMemory 1Gi is more than limitRange.defaultMemory 128Mi"
    );
    assert_eq!(
        refused(json!({"limitRange": {"maxCpu": "250m"}})),
        "limitRange.defaultCpu 500m is more than limitRange.maxCpu 250m"
    );
    assert!(
        refused(json!({"limitRange": {"defaultCpu": "half"}}))
            .starts_with("limitRange.defaultCpu: \"half\" is not a quantity")
    );
    assert!(
        refused(json!({"quota": {"hard": {"pods": "lots"}}}))
            .starts_with("quota.hard.pods: \"lots\" is not a quantity")
    );
    assert!(refused(json!({"quota": {"hard": {"Pods!": "1"}}})).contains("is not a resource name"));
    assert!(refused(json!({"quota": {"hard": {}}})).contains("quota.hard is empty"));
    assert!(refused(json!({"label": "no spaces allowed"})).contains("is not a label key"));
    assert!(refused(json!({"label": ""})).contains("is not a label key"));
    assert!(refused(json!({"networkPolicy": "yes"})).starts_with("networkPolicy: invalid type"));
    assert!(refused(json!({"quotas": {}})).starts_with("unknown field `quotas`"));
    // A disabled object's settings are not checked: they are not used.
    assert_eq!(
        validate_settings::<NamespaceDefaults>(&json!({"quota": {"enabled": false, "hard": {}}})),
        Ok(())
    );
    assert_eq!(validate_settings::<NamespaceDefaults>(&json!({})), Ok(()));

    let e = load("team-a.yaml")
        .settings_file(fixture("settings-invalid.yaml"))
        .unwrap()
        .check::<NamespaceDefaults>()
        .unwrap_err();
    assert!(
        matches!(&e, Failure::Settings(m) if m.contains("defaultRequestMemory")),
        "{e}"
    );
}

#[test]
fn without_the_operators_grant_its_children_are_refused() {
    let e = load("team-a.yaml").check::<NamespaceDefaults>().unwrap_err();
    assert!(
        matches!(&e, Failure::Refused(r) if r.reason.contains("not allowed")),
        "{e}"
    );
}

#[test]
fn the_metadata_declares_three_child_kinds_and_the_settings_schema() {
    let (parent, metadata) = capstan_sdk::testing::metadata::<NamespaceDefaults>();
    assert_eq!((parent.kind.as_str(), parent.namespaced), ("Namespace", false));
    let kinds: Vec<&str> = metadata.children().iter().map(|k| k.kind.as_str()).collect();
    assert_eq!(kinds, ["ResourceQuota", "LimitRange", "NetworkPolicy"]);
    assert!(metadata.related_kinds().is_empty());
    let schema = metadata.settings_schema().unwrap();
    for setting in ["label", "quota", "limitRange", "networkPolicy"] {
        assert!(schema["properties"].get(setting).is_some(), "{setting}: {schema}");
    }
}

#[test]
fn the_documented_defaults_are_the_defaults() {
    // The YAML block in src/settings.rs's docs, which operators copy from.
    let source = std::fs::read_to_string(format!("{}/src/settings.rs", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let yaml: String = source
        .lines()
        .map(|l| {
            l.strip_prefix("//!")
                .unwrap_or_default()
                .strip_prefix(' ')
                .unwrap_or_default()
        })
        .skip_while(|l| *l != "```yaml")
        .skip(1)
        .take_while(|l| *l != "```")
        .map(|l| format!("{l}\n"))
        .collect();
    let documented = capstan_sdk::testing::parse_documents(&yaml).unwrap().remove(0);
    let documented: namespace_defaults::DefaultsSettings = serde_json::from_value(documented).unwrap();
    assert_eq!(documented, namespace_defaults::DefaultsSettings::default());
}
