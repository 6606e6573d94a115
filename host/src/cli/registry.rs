//! `capstan push` and `capstan pull`, and the registry flags of every command that takes a
//! plugin reference (`oci://…`) where it takes a file.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;

use crate::registry::{PluginRef, Registry, Settings};

/// How registries are reached from the command line.
#[derive(Args, Debug, Clone)]
pub(super) struct RegistryArgs {
    /// Speak plain HTTP (no TLS) to this registry (`host:port`); repeatable.
    #[arg(long, value_name = "REGISTRY")]
    plain_http: Vec<String>,
    /// Trust this CA certificate (PEM) for registries; repeatable.
    #[arg(long, value_name = "FILE")]
    registry_ca: Vec<PathBuf>,
    /// Registry credentials: a Docker config file [default: $DOCKER_CONFIG/config.json or
    /// ~/.docker/config.json].
    #[arg(long, value_name = "FILE")]
    registry_auth: Option<PathBuf>,
    /// Refuse a reference without a digest.
    #[arg(long)]
    require_digest: bool,
    /// The largest plugin layer pulled, in bytes [default: 64 MiB].
    #[arg(long, value_name = "BYTES")]
    max_bytes: Option<u64>,
    /// Keep pulled plugins here, by digest [default: $XDG_CACHE_HOME/capstan/oci or
    /// ~/.cache/capstan/oci]. Must be writable only by the host: its files run as code.
    #[arg(long, env = "CAPSTAN_PULL_DIR", value_name = "DIR")]
    pull_dir: Option<PathBuf>,
}

impl RegistryArgs {
    /// The registry settings these flags give.
    pub(super) fn settings(&self) -> Settings {
        let defaults = Settings::default();
        Settings {
            plain_http: self.plain_http.clone(),
            ca_files: self.registry_ca.clone(),
            auth_file: self.registry_auth.clone(),
            require_digest: self.require_digest,
            max_bytes: self.max_bytes.unwrap_or(defaults.max_bytes),
        }
    }

    /// Where pulled plugins are kept.
    pub(super) fn pull_dir(&self) -> anyhow::Result<PathBuf> {
        match &self.pull_dir {
            Some(dir) => Ok(dir.clone()),
            None => default_pull_dir().ok_or_else(|| {
                anyhow::anyhow!("no place to keep pulled plugins: set --pull-dir or CAPSTAN_PULL_DIR")
            }),
        }
    }

    pub(super) fn registry(&self) -> anyhow::Result<Registry> {
        Registry::new(self.settings(), &self.pull_dir()?)
    }

    /// `source` itself when it is a file; pulled into the store first when it is a reference.
    pub(super) fn local(&self, source: &Path) -> anyhow::Result<PathBuf> {
        match source.to_str().filter(|s| crate::registry::is_reference(s)) {
            Some(text) => Ok(self.registry()?.pull_blocking(&PluginRef::parse(text)?)?.path),
            None => Ok(source.to_path_buf()),
        }
    }
}

/// `$XDG_CACHE_HOME/capstan/oci` or `~/.cache/capstan/oci`.
pub fn default_pull_dir() -> Option<PathBuf> {
    super::user_cache("oci")
}

/// Arguments of `capstan push`.
#[derive(Args, Debug)]
pub struct PushArgs {
    /// The plugin component (`.wasm`).
    plugin: PathBuf,
    /// Where to push it: `oci://REGISTRY/REPOSITORY:TAG`.
    reference: String,
    #[command(flatten)]
    registry: RegistryArgs,
}

/// Arguments of `capstan pull`.
#[derive(Args, Debug)]
pub struct PullArgs {
    /// What to pull: `oci://REGISTRY/REPOSITORY[:TAG][@sha256:DIGEST]`.
    reference: String,
    /// Write the plugin here.
    #[arg(short, long, value_name = "FILE")]
    output: PathBuf,
    #[command(flatten)]
    registry: RegistryArgs,
}

/// Push a plugin; prints the reference pinned to the digest the registry stored.
pub fn push(args: PushArgs) -> anyhow::Result<ExitCode> {
    let reference = PluginRef::parse(&args.reference)?;
    let wasm = std::fs::read(&args.plugin)
        .map_err(|e| anyhow::anyhow!("{}: cannot read: {e}", args.plugin.display()))?;
    anyhow::ensure!(
        wasm.starts_with(b"\0asm"),
        "{}: not a WebAssembly file",
        args.plugin.display()
    );
    let registry = args.registry.registry()?;
    let pinned = crate::registry::block_on(registry.push(wasm, &reference))?;
    println!("{pinned}");
    Ok(ExitCode::SUCCESS)
}

/// Pull a plugin into a file; prints the reference pinned to its digest.
pub fn pull(args: PullArgs) -> anyhow::Result<ExitCode> {
    let reference = PluginRef::parse(&args.reference)?;
    let pulled = args.registry.registry()?.pull_blocking(&reference)?;
    std::fs::copy(&pulled.path, &args.output)
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", args.output.display()))?;
    println!("{}", pulled.reference);
    Ok(ExitCode::SUCCESS)
}
