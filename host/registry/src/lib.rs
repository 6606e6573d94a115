//! Plugins shipped like images: pushed to and pulled from OCI registries, in the Wasm
//! artifact layout of CNCF TAG Runtime (config `application/vnd.wasm.config.v0+json`, one
//! `application/wasm` layer), through `oci-client`.
//!
//! A pull is checked before anything is kept: the manifest against a pinned digest, the
//! layer's media type, its size against a maximum, its bytes against its digest and the
//! Wasm magic. Pulled plugins are kept on disk by digest ([`Store`]), so a pinned
//! reference is read from the registry once.
//!
//! ```no_run
//! # fn main() -> anyhow::Result<()> {
//! use capstan_registry::{PluginRef, Registry, Settings};
//! let registry = Registry::new(Settings::default(), std::path::Path::new("/var/cache/capstan/oci"))?;
//! let pulled = registry.pull_blocking(&PluginRef::parse("oci://registry.example/plugins/echo:1.0")?)?;
//! println!("{} is {}", pulled.reference, pulled.path.display());
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use oci_client::client::ClientConfig;
use oci_client::secrets::RegistryAuth;
use serde::Deserialize;

pub use reference::{PluginRef, SCHEME, is_reference};
pub use signature::{Policy, Verifier, generate_key_pair};
pub use store::{Store, sha256};

mod artifact;
mod reference;
mod signature;
mod store;

/// How registries are reached: the `registry` section of `capstan run --config`, and the
/// flags of `capstan push/pull`.
#[derive(Clone, Debug, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Settings {
    /// Registries (`host:port`) spoken to over plain HTTP; every other one over TLS.
    #[serde(default)]
    pub plain_http: Vec<String>,
    /// PEM files of CA certificates trusted for registries, beside the system's.
    #[serde(default)]
    pub ca_files: Vec<PathBuf>,
    /// Credentials: a Docker config file (`config.json`, or a `kubernetes.io/dockerconfigjson`
    /// Secret's `.dockerconfigjson`) [default: `$DOCKER_CONFIG/config.json` or
    /// `~/.docker/config.json`].
    #[serde(default)]
    pub auth_file: Option<PathBuf>,
    /// Refuse a reference without a digest (`…@sha256:…`).
    #[serde(default)]
    pub require_digest: bool,
    /// The largest plugin layer pulled, in bytes.
    #[serde(default = "default_max_bytes")]
    pub max_bytes: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            plain_http: Vec::new(),
            ca_files: Vec::new(),
            auth_file: None,
            require_digest: false,
            max_bytes: default_max_bytes(),
        }
    }
}

/// 64 MiB: a Python plugin is ~19 MB, a Rust one under 1 MB.
fn default_max_bytes() -> u64 {
    64 << 20
}

/// A registry request that has not answered by then has failed.
const TIMEOUT: Duration = Duration::from_secs(30);

/// A plugin pulled into the store.
#[derive(Clone, Debug)]
pub struct Pulled {
    /// The reference, pinned to the digest pulled.
    pub reference: PluginRef,
    /// The manifest's digest.
    pub digest: String,
    /// The plugin's file in the store.
    pub path: PathBuf,
    /// Whether the registry was asked (a pinned digest already in the store is not).
    pub fetched: bool,
}

/// A client for plugin artifacts with its settings and its store.
pub struct Registry {
    client: oci_client::Client,
    /// How sigstore's client reaches registries: the same protocols and CAs.
    cosign: sigstore::registry::ClientConfig,
    settings: Settings,
    store: Store,
}

impl Registry {
    /// A client with `settings`, keeping what it pulls in `store`.
    pub fn new(settings: Settings, store: &Path) -> anyhow::Result<Registry> {
        // reqwest takes the process's rustls provider: aws-lc, as kube's. Installed already is fine.
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        // One reading of the CA files for both clients: sigstore's config converts to oci-client's.
        let cosign = signature::client_config(&settings)?;
        let config = ClientConfig {
            read_timeout: Some(TIMEOUT),
            connect_timeout: Some(TIMEOUT),
            ..cosign.clone().into()
        };
        let client = oci_client::Client::try_from(config)
            .map_err(|e| anyhow::anyhow!("registry client: {}", one_line(&e)))?;
        Ok(Registry {
            client,
            cosign,
            store: Store::open(store)?,
            settings,
        })
    }

    /// The store pulls go into.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Pull `reference` into the store (a pinned digest already there is not fetched again),
    /// checking everything before keeping anything.
    pub async fn pull(&self, reference: &PluginRef) -> anyhow::Result<Pulled> {
        let pinned = reference.digest();
        anyhow::ensure!(
            pinned.is_some() || !self.settings.require_digest,
            "{reference}: no digest, and requireDigest is set (pin it: …@sha256:…)"
        );
        if let Some(digest) = pinned
            && let Some(path) = self.store.get(digest)
        {
            return Ok(Pulled {
                reference: reference.clone(),
                digest: digest.to_string(),
                path,
                fetched: false,
            });
        }
        self.fetch(reference)
            .await
            .map_err(|e| anyhow::anyhow!("{reference}: {}", one_line(&e)))
    }

    async fn fetch(&self, reference: &PluginRef) -> anyhow::Result<Pulled> {
        let auth = self.auth(reference.registry())?;
        let (manifest, digest) = self.client.pull_image_manifest(reference.oci(), &auth).await?;
        artifact::check(&manifest)?;
        if let Some(pinned) = reference.digest() {
            anyhow::ensure!(
                digest == pinned,
                "the registry served manifest {digest}, not the pinned {pinned}"
            );
        }
        let layer = &manifest.layers[0];
        anyhow::ensure!(
            layer.media_type == artifact::LAYER_MEDIA_TYPE,
            "its layer is {}, not {}",
            layer.media_type,
            artifact::LAYER_MEDIA_TYPE
        );
        let max = self.settings.max_bytes;
        anyhow::ensure!(
            u64::try_from(layer.size).is_ok_and(|size| size <= max),
            "its layer is {} bytes, over the maximum of {max}",
            layer.size
        );
        let bytes = self.layer(reference, layer, max).await?;
        anyhow::ensure!(bytes.starts_with(b"\0asm"), "its layer is not WebAssembly");
        let path = self.store.put(&digest, &layer.digest, &bytes)?;
        Ok(Pulled {
            reference: reference.pinned(&digest),
            digest,
            path,
            fetched: true,
        })
    }

    /// The layer's bytes, never more than `max` of them whatever the registry sends.
    async fn layer(
        &self,
        reference: &PluginRef,
        layer: &oci_client::manifest::OciDescriptor,
        max: u64,
    ) -> anyhow::Result<Vec<u8>> {
        let mut stream = self.client.pull_blob_stream(reference.oci(), layer).await?;
        let mut bytes = Vec::new();
        while let Some(chunk) = stream.next().await {
            bytes.extend_from_slice(&chunk?);
            anyhow::ensure!(
                bytes.len() as u64 <= max,
                "its layer is over the maximum of {max} bytes"
            );
        }
        anyhow::ensure!(
            sha256(&bytes) == layer.digest,
            "its layer does not match its digest {}",
            layer.digest
        );
        Ok(bytes)
    }

    /// Push the component `wasm` as `reference`; the reference pinned to the digest the
    /// registry stored.
    pub async fn push(&self, wasm: Vec<u8>, reference: &PluginRef) -> anyhow::Result<PluginRef> {
        let pushed = async {
            let (config, layer) = artifact::pack(wasm)?;
            let auth = self.auth(reference.registry())?;
            let layers = [layer];
            let manifest = artifact::manifest(&layers, &config);
            self.client
                .push(reference.oci(), &layers, config, &auth, Some(manifest))
                .await?;
            let digest = self.client.fetch_manifest_digest(reference.oci(), &auth).await?;
            anyhow::Ok(reference.pinned(&digest))
        };
        pushed
            .await
            .map_err(|e| anyhow::anyhow!("{reference}: {}", one_line(&e)))
    }

    /// [`Self::pull`] from synchronous code, inside or outside a Tokio runtime.
    pub fn pull_blocking(&self, reference: &PluginRef) -> anyhow::Result<Pulled> {
        block_on(self.pull(reference))
    }

    /// The credentials the auth file (or the user's Docker config) holds for `registry`.
    fn auth(&self, registry: &str) -> anyhow::Result<RegistryAuth> {
        use docker_credential::{CredentialRetrievalError as E, DockerCredential};
        let found = match &self.settings.auth_file {
            Some(file) => {
                let reader = std::fs::File::open(file)
                    .map_err(|e| anyhow::anyhow!("cannot read auth file {}: {e}", file.display()))?;
                docker_credential::get_credential_from_reader(reader, registry)
            }
            None => docker_credential::get_credential(registry),
        };
        match found {
            Ok(DockerCredential::UsernamePassword(user, password)) => Ok(RegistryAuth::Basic(user, password)),
            Ok(DockerCredential::IdentityToken(token)) => Ok(RegistryAuth::Bearer(token)),
            Err(E::ConfigNotFound | E::NoCredentialConfigured) => Ok(RegistryAuth::Anonymous),
            // The user's own Docker config may be anything; a file named for this is not.
            Err(E::ConfigReadError) if self.settings.auth_file.is_none() => Ok(RegistryAuth::Anonymous),
            Err(e) => anyhow::bail!("credentials for {registry}: {e}"),
        }
    }
}

/// Run `future` to its end from synchronous code: on a thread of its own when called
/// from inside a Tokio runtime, which may not block on another.
pub fn block_on<T: Send>(
    future: impl std::future::Future<Output = anyhow::Result<T>> + Send,
) -> anyhow::Result<T> {
    let run = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(future)
    };
    if tokio::runtime::Handle::try_current().is_err() {
        return run();
    }
    std::thread::scope(|s| s.spawn(run).join())
        .unwrap_or_else(|_| anyhow::bail!("the registry client panicked"))
}

/// An error and its causes as one short line: registries answer with whole HTML pages.
fn one_line(e: &dyn std::fmt::Display) -> String {
    let text = format!("{e:#}");
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(200) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line,
    }
}
