//! Signatures, cosign's way: a simple-signing payload naming the artifact's manifest
//! digest, signed with a key and pushed beside the artifact as the tag `sha256-HEX.sig`.
//! `cosign sign --key` / `cosign verify --key` read and write the same thing. Signing and
//! verifying are sigstore's own code; what is ours is which keys a plugin must be signed by.
//!
//! Keyless signing (Fulcio certificates, Rekor transparency log) needs those services,
//! which cannot be reached here; a [`Policy`] names keys, and is where identities would go.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use sigstore::cosign::verification_constraint::{PublicKeyVerifier, VerificationConstraint};
use sigstore::cosign::{ClientBuilder, Constraint, CosignCapabilities, SignatureLayer};
use sigstore::crypto::SigningScheme;
use sigstore::crypto::signing_key::SigStoreKeyPair;
use sigstore::registry::{
    Auth, Certificate, CertificateEncoding, ClientConfig, ClientProtocol, OciReference,
};
use zeroize::Zeroizing;

use super::{PluginRef, Registry, TIMEOUT, one_line};

/// Which keys a plugin must be signed by (`verify:` in `capstan run --config`).
#[derive(Clone, Debug, Default, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Policy {
    /// Public keys (PEM files, cosign's `cosign.pub`); a signature by any one of them is enough.
    pub keys: Vec<PathBuf>,
}

/// A [`Policy`] with its keys read.
pub struct Verifier {
    keys: Vec<(String, PublicKeyVerifier)>,
}

impl Verifier {
    /// Read the policy's keys; a key that cannot be read or parsed is an error.
    pub fn load(policy: &Policy) -> anyhow::Result<Verifier> {
        anyhow::ensure!(!policy.keys.is_empty(), "a verify policy names no key");
        let keys = policy
            .keys
            .iter()
            .map(|path| Ok((path.display().to_string(), public_key(path)?)))
            .collect::<anyhow::Result<_>>()?;
        Ok(Verifier { keys })
    }

    /// The first key that signed one of `layers`.
    fn signer(&self, layers: &[SignatureLayer]) -> Option<&str> {
        self.keys.iter().find_map(|(name, key)| {
            layers
                .iter()
                .any(|layer| key.verify(layer).unwrap_or(false))
                .then_some(name.as_str())
        })
    }
}

fn public_key(path: &Path) -> anyhow::Result<PublicKeyVerifier> {
    let pem =
        std::fs::read(path).map_err(|e| anyhow::anyhow!("cannot read public key {}: {e}", path.display()))?;
    PublicKeyVerifier::try_from(&pem)
        .map_err(|e| anyhow::anyhow!("{}: not a public key: {}", path.display(), one_line(&e)))
}

/// A new ECDSA P-256 key pair as cosign writes it: the private key encrypted with
/// `password` (cosign's format, empty allowed), and the public key; both PEM.
pub fn generate_key_pair(password: &[u8]) -> anyhow::Result<(Zeroizing<String>, String)> {
    let pair = SigningScheme::ECDSA_P256_SHA256_ASN1
        .create_signer()
        .and_then(|signer| signer.to_sigstore_keypair())
        .map_err(|e| anyhow::anyhow!("cannot create a key pair: {}", one_line(&e)))?;
    let private = pair
        .private_key_to_encrypted_pem(password)
        .map_err(|e| anyhow::anyhow!("cannot encrypt the private key: {}", one_line(&e)))?;
    let public = pair
        .public_key_to_pem()
        .map_err(|e| anyhow::anyhow!("cannot write the public key: {}", one_line(&e)))?;
    Ok((private, public))
}

impl Registry {
    /// Sign the artifact `reference` names with `key` (a cosign private key, encrypted with
    /// `password`, or an unencrypted PKCS#8 PEM) and push the
    /// signature beside it; the reference pinned to the digest signed.
    pub async fn sign(
        &self,
        reference: &PluginRef,
        key: &[u8],
        password: &[u8],
    ) -> anyhow::Result<PluginRef> {
        let signer = signer(key, password)?;
        let signed = async {
            let auth = self.cosign_auth(reference)?;
            let mut client = self.cosign()?;
            let image = oci_reference(reference, reference.digest());
            let (signatures, digest) = client.triangulate(&image, &auth).await?;
            let pinned = reference.pinned(&digest);
            let mut layer = SignatureLayer::new_unsigned(&oci_reference(&pinned, Some(&digest)), &digest)?;
            signer.add_constraint(&mut layer)?;
            client
                .push_signature(None, &auth, &signatures, vec![layer])
                .await?;
            anyhow::Ok(pinned)
        };
        tokio::time::timeout(TIMEOUT * 2, signed)
            .await
            .unwrap_or_else(|_| anyhow::bail!("the registry did not answer in {:?}", TIMEOUT * 2))
            .map_err(|e| anyhow::anyhow!("{reference}: {}", one_line(&e)))
    }

    /// Check that the artifact with manifest `digest` in `reference`'s repository carries
    /// a signature by one of `verifier`'s keys; that key's name.
    pub async fn verify(
        &self,
        reference: &PluginRef,
        digest: &str,
        verifier: &Verifier,
    ) -> anyhow::Result<String> {
        let checked = async {
            let auth = self.cosign_auth(reference)?;
            let mut client = self.cosign()?;
            let layers = client
                .trusted_signature_layers(&auth, &oci_reference(reference, Some(digest)))
                .await?;
            anyhow::ensure!(!layers.is_empty(), "not signed (no signature for {digest})");
            match verifier.signer(&layers) {
                Some(key) => Ok(key.to_string()),
                None => anyhow::bail!(
                    "not signed by a trusted key ({} signature(s) for {digest}, none by {})",
                    layers.len(),
                    verifier
                        .keys
                        .iter()
                        .map(|k| k.0.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }
        };
        tokio::time::timeout(TIMEOUT * 2, checked)
            .await
            .unwrap_or_else(|_| anyhow::bail!("the registry did not answer in {:?}", TIMEOUT * 2))
            .map_err(|e| anyhow::anyhow!("{reference}: signature refused: {}", one_line(&e)))
    }

    /// A cosign client reaching registries as this one does.
    fn cosign(&self) -> anyhow::Result<sigstore::cosign::Client> {
        ClientBuilder::default()
            .with_oci_client_config(self.cosign.clone())
            .build()
            .map_err(|e| anyhow::anyhow!("cosign client: {}", one_line(&e)))
    }

    fn cosign_auth(&self, reference: &PluginRef) -> anyhow::Result<Auth> {
        use oci_client::secrets::RegistryAuth;
        Ok(match self.auth(reference.registry())? {
            RegistryAuth::Anonymous => Auth::Anonymous,
            RegistryAuth::Basic(user, password) => Auth::Basic(user, password),
            RegistryAuth::Bearer(token) => Auth::Bearer(token),
        })
    }
}

/// How registries are reached under `settings` (plain HTTP where listed, extra CAs), as
/// sigstore's client takes it; the pull client's config is made from it.
pub(super) fn client_config(settings: &super::Settings) -> anyhow::Result<ClientConfig> {
    let roots = settings
        .ca_files
        .iter()
        .map(|file| {
            let data = std::fs::read(file)
                .map_err(|e| anyhow::anyhow!("cannot read CA file {}: {e}", file.display()))?;
            Ok(Certificate {
                encoding: CertificateEncoding::Pem,
                data,
            })
        })
        .collect::<anyhow::Result<_>>()?;
    Ok(ClientConfig {
        protocol: ClientProtocol::HttpsExcept(settings.plain_http.clone()),
        extra_root_certificates: roots,
        ..ClientConfig::default()
    })
}

/// sigstore's reference to `reference`'s repository, by `digest` when there is one.
fn oci_reference(reference: &PluginRef, digest: Option<&str>) -> OciReference {
    let oci = reference.oci();
    let (registry, repository) = (oci.registry().to_string(), oci.repository().to_string());
    match (digest, oci.tag()) {
        (Some(digest), _) => OciReference::with_digest(registry, repository, digest.to_string()),
        (None, Some(tag)) => OciReference::with_tag(registry, repository, tag.to_string()),
        (None, None) => OciReference::with_tag(registry, repository, "latest".to_string()),
    }
}

fn signer(key: &[u8], password: &[u8]) -> anyhow::Result<sigstore::cosign::constraint::PrivateKeySigner> {
    // cosign's keys are always encrypted, if only with an empty password.
    let encrypted = String::from_utf8_lossy(key).contains("ENCRYPTED");
    let pair = if encrypted {
        SigStoreKeyPair::from_encrypted_pem(key, password)
    } else {
        SigStoreKeyPair::from_pem(key)
    };
    let pair = pair.map_err(|e| anyhow::anyhow!("cannot read the private key: {}", one_line(&e)))?;
    let signer = pair
        .to_sigstore_signer(&SigningScheme::ECDSA_P256_SHA256_ASN1)
        .map_err(|e| anyhow::anyhow!("cannot sign with this key: {}", one_line(&e)))?;
    Ok(sigstore::cosign::constraint::PrivateKeySigner::new_with_signer(
        signer,
    ))
}
