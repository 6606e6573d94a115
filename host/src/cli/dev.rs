//! `capstan dev`: a real local control plane (etcd, kube-apiserver, controller-manager,
//! scheduler, kwok fake node) built from pinned upstream Go modules, on loopback.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::dev::{Binaries, Plane, PlaneConfig, default_dev_dir};
use anyhow::Context;
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
    /// The state directory as an absolute path, resolved once against the current directory.
    /// The plane writes paths under it into kubeconfigs inside it, and a kubeconfig's relative
    /// paths are resolved against the kubeconfig's own directory: a relative `--dir` would
    /// be resolved twice (`./plane/plane/ca.crt`).
    fn path(&self) -> anyhow::Result<PathBuf> {
        let dir = self.dir.clone().unwrap_or_else(default_dev_dir);
        std::path::absolute(&dir).with_context(|| format!("cannot make {} absolute", dir.display()))
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
            let dir = dir.path()?;
            let config = PlaneConfig {
                controller_manager: !no_kcm,
                ..PlaneConfig::default()
            };
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let kubeconfig = runtime.block_on(Plane::start_detached(&dir, config))?;
            eprintln!("local control plane is up; logs in {}", dir.display());
            println!("export KUBECONFIG={}", kubeconfig.display());
        }
        DevCommand::Down { dir } => {
            let stopped = Plane::stop_detached(&dir.path()?)?;
            println!("{}", if stopped { "stopped" } else { "not running" });
        }
        DevCommand::Status { dir } => match Plane::detached_state(&dir.path()?)? {
            Some(state) => print!("{}", serde_saphyr::to_string(&state)?),
            None => {
                println!("not running");
                return Ok(ExitCode::from(1));
            }
        },
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    /// The `--dir` of `capstan dev ARGS`, as the command will use it.
    fn dir(args: &[&str]) -> PathBuf {
        let cli = Cli::try_parse_from(["capstan", "dev"].iter().chain(args)).expect("valid arguments");
        let Command::Dev(DevArgs { command }) = cli.command else {
            panic!("not a dev command");
        };
        match command {
            DevCommand::Up { dir, .. } | DevCommand::Down { dir } | DevCommand::Status { dir } => {
                dir.path().expect("an absolute path")
            }
            DevCommand::Build => panic!("build has no --dir"),
        }
    }

    #[test]
    fn relative_dirs_are_made_absolute_against_the_current_directory() {
        let cwd = std::env::current_dir().unwrap();
        for command in ["up", "down", "status"] {
            assert_eq!(
                dir(&[command, "--dir", "./plane"]),
                cwd.join("plane"),
                "{command}"
            );
            assert_eq!(dir(&[command, "--dir", "a/b"]), cwd.join("a/b"), "{command}");
        }
        assert_eq!(dir(&["up", "--dir", "/tmp/plane"]), Path::new("/tmp/plane"));
        assert!(dir(&["status"]).is_absolute());
    }
}
