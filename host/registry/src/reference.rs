//! `oci://REGISTRY/REPOSITORY[:TAG][@sha256:DIGEST]`: where a plugin is pulled from.

use std::fmt;

/// The scheme that marks a plugin source as a registry reference instead of a file.
pub const SCHEME: &str = "oci://";

/// A plugin's reference in an OCI registry; the registry is always named (no implicit
/// Docker Hub: a plugin runs as code, so where it comes from is spelt out).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginRef {
    inner: oci_client::Reference,
}

/// Whether `source` (a config entry's path, a command's argument) names a registry
/// reference rather than a file.
pub fn is_reference(source: &str) -> bool {
    source.starts_with(SCHEME)
}

impl PluginRef {
    /// Parse `oci://…`; a bad reference is one line saying why.
    pub fn parse(text: &str) -> anyhow::Result<PluginRef> {
        let Some(rest) = text.strip_prefix(SCHEME) else {
            anyhow::bail!("{text}: not a registry reference (they start with {SCHEME})");
        };
        let registry = rest.split('/').next().unwrap_or_default();
        anyhow::ensure!(
            rest.contains('/') && (registry.contains(['.', ':']) || registry == "localhost"),
            "{text}: name the registry, as in {SCHEME}registry.example/plugins/echo:1.0"
        );
        let inner: oci_client::Reference = rest
            .parse()
            .map_err(|e| anyhow::anyhow!("{text}: malformed reference: {e}"))?;
        if let Some(digest) = inner.digest() {
            let hex = digest.strip_prefix("sha256:").unwrap_or_default();
            anyhow::ensure!(
                hex.len() == 64
                    && hex
                        .bytes()
                        .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()),
                "{text}: malformed digest {digest} (sha256: and 64 lowercase hex digits)"
            );
        }
        Ok(PluginRef { inner })
    }

    /// The pinned digest (`sha256:…`), if the reference has one.
    pub fn digest(&self) -> Option<&str> {
        self.inner.digest()
    }

    /// The registry's host (and port).
    pub fn registry(&self) -> &str {
        self.inner.resolve_registry()
    }

    /// `registry/repository`, without tag or digest: what stays the same across versions.
    pub fn repository(&self) -> String {
        format!("{}/{}", self.inner.registry(), self.inner.repository())
    }

    /// The same reference pinned to `digest` (its tag kept, for the reader).
    pub fn pinned(&self, digest: &str) -> PluginRef {
        let inner = match self.inner.tag() {
            Some(tag) => oci_client::Reference::with_tag_and_digest(
                self.inner.registry().to_string(),
                self.inner.repository().to_string(),
                tag.to_string(),
                digest.to_string(),
            ),
            None => oci_client::Reference::with_digest(
                self.inner.registry().to_string(),
                self.inner.repository().to_string(),
                digest.to_string(),
            ),
        };
        PluginRef { inner }
    }

    /// The reference as oci-client takes it.
    pub(super) fn oci(&self) -> &oci_client::Reference {
        &self.inner
    }
}

impl fmt::Display for PluginRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{SCHEME}{}", self.inner.whole())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn tag_digest_and_both_parse() {
        let r = PluginRef::parse("oci://localhost:5000/plugins/echo:1.0").unwrap();
        assert_eq!((r.registry(), r.digest()), ("localhost:5000", None));
        assert_eq!(r.repository(), "localhost:5000/plugins/echo");
        let text = format!("oci://reg.example/echo:1.0@{DIGEST}");
        let r = PluginRef::parse(&text).unwrap();
        assert_eq!(r.digest(), Some(DIGEST));
        assert_eq!(r.to_string(), text);
        let bare = PluginRef::parse(&format!("oci://reg.example/echo@{DIGEST}")).unwrap();
        assert_eq!(bare.digest(), Some(DIGEST));
        assert_eq!(
            PluginRef::parse("oci://reg.example/echo:1.0")
                .unwrap()
                .pinned(DIGEST)
                .to_string(),
            text
        );
    }

    #[test]
    fn malformed_references_are_one_line_errors() {
        for bad in [
            "echo.wasm",
            "oci://echo:1.0",
            "oci://plugins/echo:1.0",
            "oci://reg.example/Echo:1.0",
            "oci://reg.example/echo:1.0@sha256:abc",
            "oci://reg.example/echo@md5:0123",
            "oci://reg.example/echo:bad tag",
        ] {
            let e = PluginRef::parse(bad).expect_err(bad).to_string();
            assert!(
                e.starts_with(bad.split(' ').next().unwrap()) && !e.contains('\n'),
                "{bad}: {e}"
            );
        }
        assert!(is_reference("oci://x/y") && !is_reference("/plugins/oci.wasm"));
    }
}
