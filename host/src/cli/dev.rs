//! `capstan dev`: a real local control plane (etcd, kube-apiserver, controller-manager,
//! scheduler, kwok fake node) built from pinned upstream Go modules, on loopback.

use std::path::PathBuf;
use std::process::ExitCode;

use capstan_testenv::{Binaries, Plane, PlaneConfig, default_dev_dir};
use clap::{Args, Subcommand};

/// Arguments of `capstan dev`.
#[derive(Args, Debug)]
pub struct DevArgs {
    #[command(subcommand)]
    command: DevCommand,
}

#[derive(Subcommand, Debug)]
enum DevCommand {
    /// Build (first use only) and start the plane in the background; prints `export KUBECONFIG=…` last.
    Up {
        #[command(flatten)]
        dir: DirArg,
        /// Skip kube-controller-manager (no Job controller, no garbage collection).
        #[arg(long)]
        no_kcm: bool,
    },
    /// Stop the plane started by `up`.
    Down {
        #[command(flatten)]
        dir: DirArg,
    },
    /// Show the running plane's processes, ports and kubeconfig.
    Status {
        #[command(flatten)]
        dir: DirArg,
    },
    /// Only build the pinned binaries into the cache.
    Build,
}

#[derive(Args, Debug)]
struct DirArg {
    /// State directory of the plane (default: ~/.cache/capstan/dev).
    #[arg(long)]
    dir: Option<PathBuf>,
}

impl DirArg {
    fn path(&self) -> PathBuf {
        self.dir.clone().unwrap_or_else(default_dev_dir)
    }
}

pub fn run(args: DevArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        DevCommand::Build => {
            let bins = Binaries::ensure()?;
            println!(
                "{}",
                bins.kube_apiserver
                    .parent()
                    .unwrap_or(&bins.kube_apiserver)
                    .display()
            );
        }
        DevCommand::Up { dir, no_kcm } => {
            let config = PlaneConfig {
                controller_manager: !no_kcm,
                ..PlaneConfig::default()
            };
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let kubeconfig = runtime.block_on(Plane::start_detached(&dir.path(), config))?;
            eprintln!("local control plane is up; logs in {}", dir.path().display());
            println!("export KUBECONFIG={}", kubeconfig.display());
        }
        DevCommand::Down { dir } => {
            let stopped = Plane::stop_detached(&dir.path())?;
            println!("{}", if stopped { "stopped" } else { "not running" });
        }
        DevCommand::Status { dir } => match Plane::detached_state(&dir.path())? {
            Some(state) => print!("{}", serde_yaml::to_string(&state)?),
            None => {
                println!("not running");
                return Ok(ExitCode::from(1));
            }
        },
    }
    Ok(ExitCode::SUCCESS)
}
