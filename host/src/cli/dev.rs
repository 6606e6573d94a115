//! `capstan dev`: a real local control plane (etcd, kube-apiserver, controller-manager,
//! scheduler, kwok fake node) built from pinned upstream Go modules, on loopback.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::dev::{Binaries, Plane, PlaneConfig, default_dev_dir, image};
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
        /// Also start a real node (containerd, runc, CNI bridge, kubelet, kube-proxy) where
        /// pods' containers really run; needs root and `apt-get install containerd runc
        /// containernetworking-plugins iptables busybox-static`. kwok's node is tainted.
        #[arg(long)]
        real_node: bool,
    },
    /// Build Capstan's container image offline (the Dockerfile's image, from the binary it
    /// would build) and load it into the running real node, if there is one.
    Image {
        #[command(flatten)]
        dir: DirArg,
        /// Use this binary instead of building one (it must be built `--no-default-features`).
        #[arg(long)]
        binary: Option<PathBuf>,
        /// Cargo profile to build the binary with (run from the workspace).
        #[arg(long, default_value = "release")]
        profile: String,
        /// Where to write the OCI archive (`docker load` and `ctr images import` read it).
        #[arg(long, short)]
        out: Option<PathBuf>,
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
        DevCommand::Up {
            dir,
            no_kcm,
            real_node,
        } => {
            let dir = dir.path()?;
            let config = PlaneConfig {
                controller_manager: !no_kcm,
                real_node,
                ..PlaneConfig::default()
            };
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let kubeconfig = runtime.block_on(Plane::start_detached(&dir, config))?;
            let node = if real_node {
                format!(" with a real node ({})", crate::dev::node::REAL_NODE)
            } else {
                String::new()
            };
            eprintln!("local control plane is up{node}; logs in {}", dir.display());
            println!("export KUBECONFIG={}", kubeconfig.display());
        }
        DevCommand::Image {
            dir,
            binary,
            profile,
            out,
        } => image(&dir.path()?, binary, &profile, out)?,
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

/// `capstan dev image`: build the binary (unless given), the archive, and load it.
fn image(dir: &Path, binary: Option<PathBuf>, profile: &str, out: Option<PathBuf>) -> anyhow::Result<()> {
    let work = dir.join("images");
    let binary = match binary {
        Some(b) => b,
        None => {
            let workspace = workspace_root()?;
            eprintln!(
                "building the image's binary (cargo --profile {profile}, --no-default-features) in {}",
                workspace.display()
            );
            image::build_binary(&workspace, profile, &work)?
        }
    };
    let out = out.unwrap_or_else(|| work.join("capstan.tar"));
    let archive = image::capstan_image(&binary, &out)?;
    println!(
        "{} {} {}",
        archive.names.join(","),
        archive.digest,
        archive.path.display()
    );
    let running = Plane::detached_state(dir)?
        .is_some_and(|s| s.components.iter().any(|p| p.name == "kubelet" && p.running()));
    if running {
        crate::dev::node::load_image(dir, &archive.path)?;
        eprintln!("loaded into the real node of the plane in {}", dir.display());
    } else {
        eprintln!(
            "no real node runs from {}; load the archive with `ctr images import` or `docker load`",
            dir.display()
        );
    }
    Ok(())
}

/// The cargo workspace around the current directory.
fn workspace_root() -> anyhow::Result<PathBuf> {
    let out = std::process::Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .args(["locate-project", "--workspace", "--message-format", "plain"])
        .output()
        .context("running cargo locate-project")?;
    if !out.status.success() {
        anyhow::bail!("not in Capstan's source tree: run from the workspace, or pass --binary");
    }
    let manifest = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    Ok(manifest
        .parent()
        .context("a manifest path without a parent")?
        .to_path_buf())
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
            DevCommand::Up { dir, .. }
            | DevCommand::Down { dir }
            | DevCommand::Status { dir }
            | DevCommand::Image { dir, .. } => dir.path().expect("an absolute path"),
            DevCommand::Build => panic!("build has no --dir"),
        }
    }

    #[test]
    fn relative_dirs_are_made_absolute_against_the_current_directory() {
        let cwd = std::env::current_dir().unwrap();
        for command in ["up", "down", "status", "image"] {
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
