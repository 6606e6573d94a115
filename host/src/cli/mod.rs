//! The `capstan` command line: thin clap wrappers over the library.

mod bench;
mod build;
mod bundle;
#[cfg(feature = "dev")]
mod dev;
mod diff;
mod import;
mod input;
mod inspect;
mod new;
mod registry;
mod replay;
mod run;
mod sign;
mod test;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::engine::{Engine, EngineConfig, Limits, Plugin};

/// Kubernetes reconcilers as sandboxed WebAssembly plugins.
#[derive(Parser, Debug)]
#[command(name = "capstan", version, about)]
pub struct Cli {
    /// Log output format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

/// The whole command line as clap describes it: every subcommand, flag and help text
/// (the CLI reference is generated from it).
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

/// Log line format.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Show a plugin's metadata and contract version.
    Inspect(inspect::InspectArgs),
    /// Push a plugin to an OCI registry; prints the reference pinned to its digest.
    Push(registry::PushArgs),
    /// Pull a plugin from an OCI registry into a file; prints the reference pinned to its digest.
    Pull(registry::PullArgs),
    /// Sign a plugin in its registry, as cosign does; prints the reference pinned to the digest signed.
    Sign(sign::SignArgs),
    /// Check that a plugin in a registry is signed by one of the keys
    /// (exit 0: it is, 1: it is not, 2: error).
    Verify(sign::VerifyArgs),
    /// Write a new signing key pair (cosign's format).
    GenerateKeyPair(sign::KeyPairArgs),
    /// Run a plugin offline on fixture files and print (or check) its response; in a
    /// plugin project without arguments, run its golden cases.
    Test(test::TestArgs),
    /// Build the plugin project here, as its capstan.toml says.
    Build(build::BuildArgs),
    /// Make a new plugin project (Rust, Python or JavaScript) that builds and passes its tests.
    New(new::NewArgs),
    /// Make a plugin project of a controller written for another tool (Metacontroller),
    /// its hooks' sources unchanged inside.
    Import(import::ImportArgs),
    /// Measure dispatch latency and throughput of a plugin.
    Bench(bench::BenchArgs),
    /// Reconcile objects in a cluster with the plugins in a directory.
    Run(run::RunArgs),
    /// Show what a plugin version would change in a live cluster, writing nothing
    /// (exit 0: nothing, 1: something would change, 2: error).
    Diff(diff::DiffArgs),
    /// Run a local Kubernetes control plane built from pinned upstream sources.
    #[cfg(feature = "dev")]
    Dev(dev::DevArgs),
}

/// Where compiled plugins are cached; shared by every command that loads plugins.
#[derive(Args, Debug)]
struct CacheArgs {
    /// Keep compiled plugins here between runs [default: $XDG_CACHE_HOME/capstan/wasm or
    /// ~/.cache/capstan/wasm]. Must be writable only by the host: its files run as code.
    #[arg(long, env = "CAPSTAN_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
    /// Compile every plugin on every start instead (overrides `CAPSTAN_CACHE_DIR`).
    #[arg(long)]
    no_cache: bool,
}

impl CacheArgs {
    /// An engine using the chosen cache; an unusable default cache only costs speed.
    fn engine(&self) -> anyhow::Result<Engine> {
        self.engine_with(EngineConfig::default())
    }

    /// [`Self::engine`] with `config`'s pool and memory budget.
    fn engine_with(&self, config: EngineConfig) -> anyhow::Result<Engine> {
        let config = |cache_dir| EngineConfig {
            cache_dir,
            ..config.clone()
        };
        if self.no_cache {
            return Engine::new(config(None));
        }
        if let Some(dir) = &self.cache_dir {
            return Engine::new(config(Some(dir.clone())));
        }
        if let Some(dir) = user_cache("wasm") {
            match Engine::new(config(Some(dir))) {
                Ok(engine) => return Ok(engine),
                Err(e) => tracing::warn!("compiling without a cache: {e:#}"),
            }
        }
        Engine::new(config(None))
    }
}

/// `$XDG_CACHE_HOME/capstan/SUB` or `~/.cache/capstan/SUB`: where compiled and pulled
/// plugins are kept unless a flag says otherwise.
fn user_cache(sub: &str) -> Option<PathBuf> {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .map(|base| base.join("capstan").join(sub))
}

/// Options shared by commands that load one plugin.
#[derive(Args, Debug)]
struct PluginArgs {
    /// The plugin component: a `.wasm` file, or a registry reference
    /// `oci://REGISTRY/REPOSITORY[:TAG][@sha256:DIGEST]` [default: what the plugin project
    /// here builds, as its capstan.toml says].
    plugin: Option<PathBuf>,
    /// Wall-clock deadline per call, e.g. `1s`, `250ms`.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "1s")]
    deadline: Duration,
    /// Linear memory cap per call, in MiB [default: the project's `memory-mib`, or 64].
    #[arg(long)]
    memory_mib: Option<usize>,
    /// The plugin's settings (a YAML or JSON mapping), checked by the plugin as at load.
    #[arg(long, value_name = "FILE")]
    settings: Option<PathBuf>,
    #[command(flatten)]
    cache: CacheArgs,
    #[command(flatten)]
    registry: registry::RegistryArgs,
}

/// Linear memory per call when neither the command line nor the project says.
const MEMORY_MIB: usize = 64;

impl PluginArgs {
    /// The component to load and its memory cap: the one given, or the project's output.
    fn component(&self) -> anyhow::Result<(PathBuf, usize)> {
        match &self.plugin {
            Some(source) => Ok((
                self.registry.local(source)?,
                self.memory_mib.unwrap_or(MEMORY_MIB),
            )),
            None => {
                let project = crate::project::Project::find(Path::new("."))?;
                let memory = self
                    .memory_mib
                    .or(project.plugin.memory_mib)
                    .unwrap_or(MEMORY_MIB);
                Ok((project.output(), memory))
            }
        }
    }

    /// The plugin loaded, and the file it came from (found once: a project is a lookup).
    fn load(&self) -> anyhow::Result<(PathBuf, Plugin)> {
        let (path, memory) = self.component()?;
        let plugin = self.load_from(&path, memory, self.settings.as_deref())?;
        Ok((path, plugin))
    }

    /// Load `path` with these limits and the settings in `settings`.
    fn load_from(&self, path: &Path, memory_mib: usize, settings: Option<&Path>) -> anyhow::Result<Plugin> {
        let settings = settings_or_none(settings)?;
        self.load_bare(path, memory_mib)?
            .with_settings(&settings)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
    }

    /// The plugin and each of `others`, with these limits and settings, loaded into one
    /// engine: side by side as one host runs them.
    fn load_with(&self, others: &[PathBuf]) -> anyhow::Result<Vec<(PathBuf, Plugin)>> {
        let (first, memory) = self.component()?;
        let settings = settings_or_none(self.settings.as_deref())?;
        let engine = self.cache.engine()?;
        let others = others
            .iter()
            .map(|source| self.registry.local(source))
            .collect::<anyhow::Result<Vec<_>>>()?;
        std::iter::once(first)
            .chain(others)
            .map(|path| {
                let plugin = self
                    .load_in(&engine, &path, memory)?
                    .with_settings(&settings)
                    .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
                Ok((path, plugin))
            })
            .collect()
    }

    /// Load `path` with these limits and no settings yet.
    fn load_bare(&self, path: &Path, memory_mib: usize) -> anyhow::Result<Plugin> {
        self.load_in(&self.cache.engine()?, path, memory_mib)
    }

    /// Load `path` into `engine` with these limits and no settings yet.
    fn load_in(&self, engine: &Engine, path: &Path, memory_mib: usize) -> anyhow::Result<Plugin> {
        let limits = Limits {
            deadline: self.deadline,
            memory: memory_mib << 20,
            ..Limits::default()
        };
        engine
            .load_file(path, limits)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
    }
}

/// The settings in `path`, or none (`null`) without one.
fn settings_or_none(path: Option<&Path>) -> anyhow::Result<serde_json::Value> {
    path.map_or(Ok(serde_json::Value::Null), settings_file)
}

/// One mapping from a YAML or JSON file.
fn settings_file(path: &std::path::Path) -> anyhow::Result<serde_json::Value> {
    match input::documents(path)?.as_slice() {
        [one] => Ok(one.clone()),
        [] => Ok(serde_json::Value::Null),
        _ => anyhow::bail!(
            "{}: settings are one mapping, not several documents",
            path.display()
        ),
    }
}

/// Parse arguments, run, and turn errors into one line on stderr with exit code 2.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format, cli.command.default_log_filter());
    let result = match cli.command {
        Command::Inspect(args) => inspect::run(args),
        Command::Push(args) => registry::push(args),
        Command::Pull(args) => registry::pull(args),
        Command::Sign(args) => sign::sign(args),
        Command::Verify(args) => sign::verify(args),
        Command::GenerateKeyPair(args) => sign::generate_key_pair(args),
        Command::Test(args) => test::run(args),
        Command::Build(args) => build::run(args),
        Command::New(args) => new::run(args),
        Command::Import(args) => import::run(args),
        Command::Bench(args) => bench::run(args),
        #[cfg(feature = "dev")]
        Command::Dev(args) => dev::run(args),
        Command::Run(args) => run::run(args),
        Command::Diff(args) => diff::run(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            let line = format!("{e:#}").split_whitespace().collect::<Vec<_>>().join(" ");
            eprintln!("error: {line}");
            ExitCode::from(2)
        }
    }
}

/// Log filter of the commands whose output is on stdout: warnings, and plugins' own logs.
/// kube_client logs every failed readiness probe of `dev up` as an error; they are expected.
/// rustls' verifier logs each refused certificate, and sigstore each signature it cannot
/// fetch, which the registry client reports itself.
const QUIET_LOG_FILTER: &str =
    "warn,kube_client=off,rustls_platform_verifier=off,sigstore=off,capstan::plugin=info";

/// Log filter of `run`, a service: what it bound, runs and decides (capstan's own `info`),
/// dependencies at `warn`. kube_client is off: it logs each failed request as an error,
/// which the controller reports itself; rustls' verifier and sigstore too, for the registry client.
const RUN_LOG_FILTER: &str = "warn,capstan=info,kube_client=off,rustls_platform_verifier=off,sigstore=off";

impl Command {
    /// The log filter when `RUST_LOG` is not set.
    fn default_log_filter(&self) -> &'static str {
        match self {
            Command::Run(_) => RUN_LOG_FILTER,
            #[cfg(feature = "dev")]
            Command::Dev(_) => QUIET_LOG_FILTER,
            Command::Inspect(_)
            | Command::Push(_)
            | Command::Pull(_)
            | Command::Sign(_)
            | Command::Verify(_)
            | Command::GenerateKeyPair(_)
            | Command::Diff(_)
            | Command::Test(_)
            | Command::Bench(_)
            | Command::Build(_)
            | Command::New(_)
            | Command::Import(_) => QUIET_LOG_FILTER,
        }
    }
}

/// Log to stderr, filtered by `RUST_LOG` or else `default_filter`.
fn init_logging(format: LogFormat, default_filter: &str) {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let ansi = use_ansi(format, std::io::stderr().is_terminal(), no_color);
    subscriber(format, filter, ansi, std::io::stderr).init();
}

/// Colours only for text on a terminal, unless `NO_COLOR` is set (no escape codes in files).
fn use_ansi(format: LogFormat, stderr_is_terminal: bool, no_color: bool) -> bool {
    matches!(format, LogFormat::Text) && stderr_is_terminal && !no_color
}

fn subscriber<W>(
    format: LogFormat,
    filter: tracing_subscriber::EnvFilter,
    ansi: bool,
    writer: W,
) -> Box<dyn tracing::Subscriber + Send + Sync>
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer);
    match format {
        LogFormat::Text => Box::new(builder.with_ansi(ansi).finish()),
        LogFormat::Json => Box::new(
            builder
                .with_ansi(false)
                .json()
                .flatten_event(true)
                .with_current_span(false)
                .finish(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::EnvFilter;

    use super::*;

    /// Log output captured in memory.
    #[derive(Clone, Default)]
    struct Capture(Arc<Mutex<Vec<u8>>>);

    impl Write for Capture {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// What `args`' default filter lets through of a few typical events.
    fn logged(args: &[&str], format: LogFormat, ansi: bool) -> String {
        let cli = Cli::try_parse_from(["capstan"].iter().chain(args)).expect("valid arguments");
        let filter = EnvFilter::new(cli.command.default_log_filter());
        let capture = Capture::default();
        let output = capture.clone();
        let subscriber = subscriber(format, filter, ansi, move || output.clone());
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(target: "capstan::cli::run", "metrics on 127.0.0.1:8080");
            tracing::info!(target: "capstan::plugin", "said hello");
            tracing::warn!(target: "capstan::controller", "reconcile failed");
            tracing::error!(target: "kube_client::client", "request failed");
            tracing::info!(target: "kube_runtime::watcher", "watching");
            tracing::info!(target: "hyper_util::client", "connected");
            tracing::warn!(target: "kube_runtime::watcher", "watch failed");
        });
        let bytes = capture.0.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    #[test]
    fn run_logs_capstan_info_and_dependency_warnings_by_default() {
        let out = logged(&["run", "--plugins", "plugins"], LogFormat::Text, false);
        for shown in [
            "metrics on 127.0.0.1:8080",
            "said hello",
            "reconcile failed",
            "watch failed",
        ] {
            assert!(out.contains(shown), "{shown} missing from:\n{out}");
        }
        for hidden in ["request failed", "watching", "connected"] {
            assert!(!out.contains(hidden), "{hidden} in:\n{out}");
        }
    }

    #[test]
    fn commands_with_output_on_stdout_log_warnings_only_by_default() {
        let commands: [&[&str]; 4] = [
            &["test", "p.wasm", "--parent", "p.yaml"],
            &["inspect", "p.wasm"],
            &["bench", "p.wasm", "--parent", "p.yaml"],
            &["dev", "status"],
        ];
        for args in commands {
            let out = logged(args, LogFormat::Text, false);
            assert!(out.contains("reconcile failed"), "{args:?}:\n{out}");
            assert!(
                out.contains("said hello"),
                "{args:?}: plugin logs are shown:\n{out}"
            );
            for hidden in ["metrics on", "request failed", "watching", "connected"] {
                assert!(!out.contains(hidden), "{args:?}: {hidden} in:\n{out}");
            }
        }
    }

    #[test]
    fn colours_only_for_text_on_a_terminal_without_no_color() {
        assert!(use_ansi(LogFormat::Text, true, false));
        assert!(!use_ansi(LogFormat::Text, false, false), "redirected");
        assert!(!use_ansi(LogFormat::Text, true, true), "NO_COLOR");
        assert!(!use_ansi(LogFormat::Json, true, false));
        let run = ["run", "--plugins", "plugins"];
        assert!(!logged(&run, LogFormat::Text, false).contains('\x1b'));
        assert!(
            logged(&run, LogFormat::Text, true).contains('\x1b'),
            "ansi is wired"
        );
        let json = logged(&run, LogFormat::Json, true);
        assert!(
            json.contains(r#""message":"metrics on 127.0.0.1:8080""#),
            "{json}"
        );
        assert!(!json.contains('\x1b'), "{json}");
    }
}
