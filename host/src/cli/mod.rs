//! The `capstan` command line: thin clap wrappers over the library.

mod bench;
mod dev;
mod input;
mod inspect;
mod run;
mod test;

use std::path::PathBuf;
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
    /// Run a plugin offline on fixture files and print (or check) its response.
    Test(test::TestArgs),
    /// Measure dispatch latency and throughput of a plugin.
    Bench(bench::BenchArgs),
    /// Reconcile objects in a cluster with the plugins in a directory.
    Run(run::RunArgs),
    /// Run a local Kubernetes control plane built from pinned upstream sources.
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
        self.engine_with(EngineConfig::default().max_instances)
    }

    /// [`Self::engine`] with a pool of `max_instances` instances.
    fn engine_with(&self, max_instances: u32) -> anyhow::Result<Engine> {
        let config = |cache_dir| EngineConfig {
            cache_dir,
            max_instances,
            ..EngineConfig::default()
        };
        if self.no_cache {
            return Engine::new(config(None));
        }
        if let Some(dir) = &self.cache_dir {
            return Engine::new(config(Some(dir.clone())));
        }
        let default = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
            .map(|base| base.join("capstan/wasm"));
        if let Some(dir) = default {
            match Engine::new(config(Some(dir))) {
                Ok(engine) => return Ok(engine),
                Err(e) => tracing::warn!("compiling without a cache: {e:#}"),
            }
        }
        Engine::new(config(None))
    }
}

/// Options shared by commands that load one plugin.
#[derive(Args, Debug)]
struct PluginArgs {
    /// The plugin component (`.wasm`).
    plugin: PathBuf,
    /// Wall-clock deadline per call, e.g. `1s`, `250ms`.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "1s")]
    deadline: Duration,
    /// Linear memory cap per call, in MiB.
    #[arg(long, default_value_t = 64)]
    memory_mib: usize,
    #[command(flatten)]
    cache: CacheArgs,
}

impl PluginArgs {
    fn load(&self) -> anyhow::Result<Plugin> {
        let engine = self.cache.engine()?;
        let limits = Limits {
            deadline: self.deadline,
            memory: self.memory_mib << 20,
            ..Limits::default()
        };
        engine
            .load_file(&self.plugin, limits)
            .map_err(|e| anyhow::anyhow!("{}: {e}", self.plugin.display()))
    }
}

/// Parse arguments, run, and turn errors into one line on stderr with exit code 2.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    // kube_client logs every failed readiness probe of `dev up` as an error; they are expected.
    init_logging(cli.log_format, "warn,kube_client=off,capstan::plugin=info");
    let result = match cli.command {
        Command::Inspect(args) => inspect::run(args),
        Command::Test(args) => test::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Dev(args) => dev::run(args),
        Command::Run(args) => run::run(args),
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

fn init_logging(format: LogFormat, default_filter: &str) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).with_current_span(false).init(),
    }
}
