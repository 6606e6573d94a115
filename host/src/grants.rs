//! What a plugin may declare only with the operator's grant, never on its own word:
//! Secrets (as parent or child: the host would read every Secret of the kind in its
//! scope for it, and a plugin could copy them anywhere it writes), and children of its
//! own parent kind (a plugin that makes more of its parents replicates itself).

use crate::engine::{Kind, Metadata};

/// The grants an operator gives one plugin (`--config`: `allowSecrets`, `allowOwnKind`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Grants {
    /// The plugin may declare Secret as its parent or a child kind.
    pub secrets: bool,
    /// The plugin may declare its own parent kind as a child kind.
    pub own_kind: bool,
}

fn is_secret(kind: &Kind) -> bool {
    kind.group.is_empty() && kind.kind == "Secret"
}

fn same_kind(a: &Kind, b: &Kind) -> bool {
    a.group == b.group && a.kind == b.kind
}

/// Refuse a plugin whose declared kinds need a grant it does not have, with the reason.
pub fn check(metadata: &Metadata, grants: &Grants) -> Result<(), String> {
    let kinds = std::iter::once(&metadata.parent)
        .chain(&metadata.children)
        .chain(&metadata.related);
    if !grants.secrets && kinds.clone().any(is_secret) {
        return Err(format!(
            "plugin {} declares Secret (to write or to read); Secrets need the operator's grant (allowSecrets: true for it in --config, or the chart's plugins.{}.allowSecrets)",
            metadata.name, metadata.name
        ));
    }
    if !grants.own_kind && metadata.children.iter().any(|c| same_kind(c, &metadata.parent)) {
        return Err(format!(
            "plugin {} declares its own parent kind {} as a child; that needs the operator's grant (allowOwnKind: true for it in --config)",
            metadata.name, metadata.parent
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(group: &str, kind: &str) -> Kind {
        Kind {
            group: group.into(),
            version: "v1".into(),
            kind: kind.into(),
            plural: format!("{}s", kind.to_lowercase()),
            namespaced: true,
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

    #[test]
    fn secrets_and_self_replication_need_the_operators_grant() {
        let none = Grants::default();
        let reads_secrets = metadata(kind("", "Secret"), vec![kind("", "ConfigMap")]);
        assert!(check(&reads_secrets, &none).unwrap_err().contains("allowSecrets"));
        let writes_secrets = metadata(kind("example.com", "Vault"), vec![kind("", "Secret")]);
        assert!(check(&writes_secrets, &none).is_err());
        let granted = Grants {
            secrets: true,
            ..Grants::default()
        };
        assert!(check(&writes_secrets, &granted).is_ok());

        let replicates = metadata(kind("capstan.dev", "Echo"), vec![kind("capstan.dev", "Echo")]);
        assert!(check(&replicates, &none).unwrap_err().contains("allowOwnKind"));
        let own = Grants {
            own_kind: true,
            ..Grants::default()
        };
        assert!(check(&replicates, &own).is_ok());
        let fine = metadata(kind("capstan.dev", "Echo"), vec![kind("batch", "Job")]);
        assert!(check(&fine, &none).is_ok());
        let other_secret = metadata(kind("example.com", "Echo"), vec![kind("example.com", "Secret")]);
        assert!(check(&other_secret, &none).is_ok(), "only the core Secret");
    }
}
