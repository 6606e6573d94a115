//! What a plugin may declare about itself. `capstan run` checks it when it loads a plugin
//! and asks API discovery for the plural and scope of each kind; `capstan test` and the
//! SDK's fixtures check the same, with the same words, taking built-in kinds' plurals and
//! scopes from k8s-openapi instead of discovery.

use crate::{Allowances, Kind, Metadata, builtin};

/// Refuse a plugin whose declared kinds need a grant it does not have, or could never
/// work, with the reason (one line).
///
/// Secrets (as parent, child or related kind) need [`Allowances::secrets`]: the host
/// would read every Secret of the kind in its scope for the plugin, and the plugin could
/// copy them anywhere it writes. Its own parent kind as a child needs
/// [`Allowances::own_kind`]: a plugin that makes more of its parents replicates itself.
/// A cluster-scoped child kind of a namespaced parent is refused whatever the grants:
/// Kubernetes never garbage-collects a cluster-scoped object whose owner is namespaced
/// (`OwnerRefInvalidNamespace`), and with `--shard-key namespace` only one replica would
/// ever see such children.
pub fn declared(metadata: &Metadata, allow: &Allowances) -> Result<(), String> {
    let name = &metadata.name;
    let mut kinds = std::iter::once(&metadata.parent)
        .chain(&metadata.children)
        .chain(&metadata.related);
    if !allow.secrets && kinds.any(is_secret) {
        return Err(format!(
            "plugin {name} declares Secret (to write or to read); Secrets need the operator's grant (allowSecrets: true for it in --config, or the chart's plugins.{name}.allowSecrets; --allow-secrets for capstan test)"
        ));
    }
    if !allow.own_kind && metadata.children.iter().any(|c| same_kind(c, &metadata.parent)) {
        return Err(format!(
            "plugin {name} declares its own parent kind {} as a child; that needs the operator's grant (allowOwnKind: true for it in --config; --allow-own-kind for capstan test)",
            metadata.parent
        ));
    }
    if metadata.parent.namespaced
        && let Some(child) = metadata.children.iter().find(|c| !c.namespaced)
    {
        return Err(format!(
            "plugin {name} declares cluster-scoped child kind {child} under namespaced parent kind {}; {}",
            metadata.parent, NEVER_COLLECTED
        ));
    }
    Ok(())
}

/// Why a namespaced parent may not have cluster-scoped children, said once for the check
/// at load and the check of each response.
pub(crate) const NEVER_COLLECTED: &str = "Kubernetes never garbage-collects a cluster-scoped object owned by a namespaced one (OwnerRefInvalidNamespace), so no grant allows it";

fn is_secret(kind: &Kind) -> bool {
    kind.group.is_empty() && kind.kind == "Secret"
}

fn same_kind(a: &Kind, b: &Kind) -> bool {
    a.group == b.group && a.kind == b.kind
}

/// A declared kind must be what the API server serves, in plural and scope: a
/// cluster-scoped kind declared as namespaced would slip past the namespace rules.
/// `capstan run` passes what discovery answers; offline, [`builtin_kinds`] passes what
/// k8s-openapi says.
pub fn as_served(kind: &Kind, plural: &str, namespaced: bool) -> Result<(), String> {
    if kind.plural != plural {
        return Err(format!(
            "kind {kind} is declared with plural {:?} but the API server serves it as {plural:?}",
            kind.plural
        ));
    }
    let scope = |n: bool| if n { "namespaced" } else { "cluster-scoped" };
    if kind.namespaced != namespaced {
        return Err(format!(
            "kind {kind} is declared {} but the API server serves it {}",
            scope(kind.namespaced),
            scope(namespaced)
        ));
    }
    Ok(())
}

/// Offline stand-in for discovery: each declared built-in kind (parent, children, related,
/// in that order, as `capstan run` asks) checked with [`as_served`] against the plural and
/// scope every API server serves it with. Custom kinds are taken as declared.
pub fn builtin_kinds(metadata: &Metadata) -> Result<(), String> {
    std::iter::once(&metadata.parent)
        .chain(&metadata.children)
        .chain(&metadata.related)
        .filter_map(|k| builtin::served_as(k).map(|(plural, namespaced)| (k, plural, namespaced)))
        .try_for_each(|(k, plural, namespaced)| as_served(k, plural, namespaced))
}

/// Everything offline runs check about a plugin before calling it: [`declared`], then
/// [`builtin_kinds`] — the order `capstan run` checks them in (at load, then discovery).
pub fn offline(metadata: &Metadata, allow: &Allowances) -> Result<(), String> {
    declared(metadata, allow)?;
    builtin_kinds(metadata)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(group: &str, kind: &str, plural: &str, namespaced: bool) -> Kind {
        Kind {
            group: group.into(),
            version: "v1".into(),
            kind: kind.into(),
            plural: plural.into(),
            namespaced,
        }
    }

    fn metadata(parent: Kind, children: Vec<Kind>) -> Metadata {
        Metadata {
            name: "p".into(),
            version: "1".into(),
            parent,
            children,
            related: vec![],
            settings_schema: None,
            finalizer: None,
        }
    }

    fn echo() -> Kind {
        kind("capstan.dev", "Echo", "echoes", true)
    }

    #[test]
    fn secrets_and_self_replication_need_the_operators_grant() {
        let none = Allowances::default();
        let secret = kind("", "Secret", "secrets", true);
        let reads_secrets = metadata(secret.clone(), vec![kind("", "ConfigMap", "configmaps", true)]);
        let e = declared(&reads_secrets, &none).unwrap_err();
        assert!(e.contains("allowSecrets") && e.contains("--allow-secrets"), "{e}");
        let writes_secrets = metadata(echo(), vec![secret]);
        assert!(declared(&writes_secrets, &none).is_err());
        let granted = Allowances {
            secrets: true,
            ..Allowances::default()
        };
        assert!(declared(&writes_secrets, &granted).is_ok());

        let replicates = metadata(echo(), vec![echo()]);
        let e = declared(&replicates, &none).unwrap_err();
        assert!(
            e.contains("allowOwnKind") && e.contains("--allow-own-kind"),
            "{e}"
        );
        let own = Allowances {
            own_kind: true,
            ..Allowances::default()
        };
        assert!(declared(&replicates, &own).is_ok());
        let other_secret = metadata(echo(), vec![kind("example.com", "Secret", "secrets", true)]);
        assert!(declared(&other_secret, &none).is_ok(), "only the core Secret");
    }

    #[test]
    fn a_namespaced_parent_never_declares_cluster_scoped_children() {
        let role = kind("rbac.authorization.k8s.io", "ClusterRole", "clusterroles", false);
        let all = Allowances {
            cluster_kinds: vec!["ClusterRole".into()],
            secrets: true,
            own_kind: true,
            ..Allowances::default()
        };
        let e = declared(&metadata(echo(), vec![role.clone()]), &all).unwrap_err();
        assert!(e.contains("OwnerRefInvalidNamespace"), "{e}");
        let namespace = kind("", "Namespace", "namespaces", false);
        assert!(declared(&metadata(namespace, vec![role]), &Allowances::default()).is_ok());
    }

    #[test]
    fn built_in_kinds_are_checked_as_discovery_would_check_them() {
        let binding = kind(
            "rbac.authorization.k8s.io",
            "ClusterRoleBinding",
            "clusterrolebindings",
            true,
        );
        let plugin = metadata(kind("", "ConfigMap", "configmaps", true), vec![binding]);
        assert_eq!(
            builtin_kinds(&plugin).unwrap_err(),
            "kind ClusterRoleBinding.rbac.authorization.k8s.io/v1 is declared namespaced but the API server serves it cluster-scoped"
        );
        let wrong_plural = metadata(kind("", "ConfigMap", "configmap", true), vec![]);
        assert!(builtin_kinds(&wrong_plural).unwrap_err().contains("plural"));
        assert!(
            builtin_kinds(&metadata(echo(), vec![])).is_ok(),
            "custom kinds as declared"
        );
    }
}
