//! `capstan sign`, `capstan verify` and `capstan generate-key-pair`: cosign-compatible
//! signatures on plugins in registries (a key pair from either tool works with both).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use zeroize::Zeroizing;

use super::registry::RegistryArgs;
use crate::registry::{PluginRef, Policy, Verifier};

/// The private key's password, as cosign takes it.
const PASSWORD_ENV: &str = "COSIGN_PASSWORD";

/// Arguments of `capstan sign`.
#[derive(Args, Debug)]
pub struct SignArgs {
    /// The plugin to sign: `oci://REGISTRY/REPOSITORY[:TAG][@sha256:DIGEST]`.
    reference: String,
    /// The private key (cosign's `cosign.key`, its password in $COSIGN_PASSWORD; or an
    /// unencrypted PKCS#8 PEM).
    #[arg(long, value_name = "FILE")]
    key: PathBuf,
    #[command(flatten)]
    registry: RegistryArgs,
}

/// Arguments of `capstan verify`.
#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// The plugin to check: `oci://REGISTRY/REPOSITORY[:TAG][@sha256:DIGEST]`.
    reference: String,
    /// A public key it must be signed by (PEM); repeatable, any one is enough.
    #[arg(long, value_name = "FILE", required = true)]
    key: Vec<PathBuf>,
    #[command(flatten)]
    registry: RegistryArgs,
}

/// Arguments of `capstan generate-key-pair`.
#[derive(Args, Debug)]
pub struct KeyPairArgs {
    /// Write PREFIX.key (encrypted with $COSIGN_PASSWORD, empty allowed) and PREFIX.pub.
    #[arg(long, default_value = "capstan", value_name = "PREFIX")]
    output_prefix: PathBuf,
}

fn password() -> Zeroizing<Vec<u8>> {
    Zeroizing::new(std::env::var(PASSWORD_ENV).unwrap_or_default().into_bytes())
}

/// Sign a plugin in its registry; prints the reference pinned to the digest signed.
pub fn sign(args: SignArgs) -> anyhow::Result<ExitCode> {
    let reference = PluginRef::parse(&args.reference)?;
    let key = Zeroizing::new(
        std::fs::read(&args.key)
            .map_err(|e| anyhow::anyhow!("cannot read key {}: {e}", args.key.display()))?,
    );
    let registry = args.registry.registry()?;
    let signed = crate::registry::block_on(registry.sign(&reference, &key, &password()))?;
    println!("{signed}");
    Ok(ExitCode::SUCCESS)
}

/// Check a plugin's signature: pulls it (every check of a pull) and exits 0 when one of the
/// keys signed it, 1 with the reason when none did.
pub fn verify(args: VerifyArgs) -> anyhow::Result<ExitCode> {
    let reference = PluginRef::parse(&args.reference)?;
    let verifier = Verifier::load(&Policy { keys: args.key })?;
    let registry = args.registry.registry()?;
    let checked = crate::registry::block_on(async {
        let pulled = registry.pull(&reference).await?;
        let key = registry
            .verify(&pulled.reference, &pulled.digest, &verifier)
            .await?;
        anyhow::Ok((pulled.reference, key))
    });
    match checked {
        Ok((pinned, key)) => {
            println!("{pinned}: signed by {key}");
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            let line = format!("{e:#}").split_whitespace().collect::<Vec<_>>().join(" ");
            eprintln!("refused: {line}");
            Ok(ExitCode::from(1))
        }
    }
}

/// Write a new key pair, cosign's format.
pub fn generate_key_pair(args: KeyPairArgs) -> anyhow::Result<ExitCode> {
    let (private, public) = crate::registry::generate_key_pair(&password())?;
    let prefix = args.output_prefix.display();
    let (key, pubkey) = (
        PathBuf::from(format!("{prefix}.key")),
        PathBuf::from(format!("{prefix}.pub")),
    );
    for path in [&key, &pubkey] {
        anyhow::ensure!(!path.exists(), "{} exists; not overwritten", path.display());
    }
    write_private(&key, private.as_bytes())?;
    std::fs::write(&pubkey, public).map_err(|e| anyhow::anyhow!("cannot write {}: {e}", pubkey.display()))?;
    println!("{}\n{}", key.display(), pubkey.display());
    Ok(ExitCode::SUCCESS)
}

/// A private key readable by its owner only.
fn write_private(path: &std::path::Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| f.write_all(bytes))
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))
}
