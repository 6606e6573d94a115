//! Container images built offline, without an engine or a registry: Capstan's own image
//! (the same image the Dockerfile describes), and the two a node needs to run Echo's Jobs
//! and pods at all — busybox (under Echo's default reference) and pause.

pub mod capstan;
mod oci;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::image::oci::{Config, Layer, archive};
use crate::node::runtime::PAUSE_IMAGE;

/// An image archive written to disk.
#[derive(Debug, Clone)]
pub struct ImageArchive {
    /// The references it is tagged with.
    pub names: Vec<String>,
    /// The OCI image-layout archive (`ctr images import`, `docker load`).
    pub path: PathBuf,
    /// The manifest's digest (`sha256:…`).
    pub digest: String,
}

/// The references busybox is tagged with: Echo's default image, so its Jobs never pull.
const BUSYBOX_NAMES: [&str; 2] = [
    "docker.io/library/busybox:1.37.0",
    "docker.io/library/busybox:latest",
];

fn write(names: Vec<String>, layer: Layer, config: &Config, path: &Path) -> Result<ImageArchive> {
    let built = archive(layer, config, &names)?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(path, &built.bytes).with_context(|| format!("writing {}", path.display()))?;
    Ok(ImageArchive {
        names,
        path: path.to_path_buf(),
        digest: built.digest,
    })
}

/// Capstan's image from `binary` (built `--no-default-features`, as the Dockerfile does).
pub fn capstan_image(binary: &Path, out: &Path) -> Result<ImageArchive> {
    write(
        vec![capstan::reference()],
        capstan::layer(binary)?,
        &capstan::config(),
        out,
    )
}

/// busybox from a static binary, with a link per applet, as the upstream image has.
pub(crate) fn busybox_image(busybox: &Path, out: &Path) -> Result<ImageArchive> {
    let list = Command::new(busybox)
        .arg("--list")
        .output()
        .context("running busybox --list")?;
    if !list.status.success() {
        bail!("{} --list failed", busybox.display());
    }
    let mut layer = Layer::default();
    layer
        .dir("bin", 0o755, 0)?
        .dir("etc", 0o755, 0)?
        .dir("root", 0o700, 0)?
        .dir("tmp", 0o1777, 0)?;
    layer.copy("bin/busybox", 0o755, busybox)?;
    for applet in String::from_utf8_lossy(&list.stdout).lines().map(str::trim) {
        if !applet.is_empty() && applet != "busybox" && !applet.contains('/') {
            layer.symlink(&format!("bin/{applet}"), "busybox")?;
        }
    }
    layer.file(
        "etc/passwd",
        0o644,
        b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n",
    )?;
    layer.file("etc/group", 0o644, b"root:x:0:\nnobody:x:65534:\n")?;
    let config = Config {
        cmd: vec!["sh".into()],
        env: vec!["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into()],
        ..Config::default()
    };
    write(
        BUSYBOX_NAMES.iter().map(|s| s.to_string()).collect(),
        layer,
        &config,
        out,
    )
}

/// The pod sandbox image from the static `pause` built from the Kubernetes module.
pub(crate) fn pause_image(pause: &Path, out: &Path) -> Result<ImageArchive> {
    let mut layer = Layer::default();
    layer.copy("pause", 0o755, pause)?;
    let config = Config {
        user: "65535:65535".into(),
        entrypoint: vec!["/pause".into()],
        ..Config::default()
    };
    write(vec![PAUSE_IMAGE.into()], layer, &config, out)
}

/// Builds the host binary the Dockerfile builds (`-p capstan --no-default-features`,
/// locked) with cargo `profile` in the workspace at `workspace`, and returns a stripped
/// copy (the Dockerfile strips too) under `out_dir`. The workspace's own
/// `target/<profile>/capstan` (with `capstan dev`) is put back afterwards: both builds
/// share that path, and a user's next `capstan dev down` must still find its command.
pub fn build_binary(workspace: &Path, profile: &str, out_dir: &Path) -> Result<PathBuf> {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace.join("target"));
    let dir = if profile == "dev" { "debug" } else { profile };
    let built = target.join(dir).join("capstan");
    let saved = target.join(dir).join(".capstan-before-image");
    let _ = std::fs::remove_file(&saved);
    let had = std::fs::hard_link(&built, &saved).is_ok();
    let result = build_and_strip(workspace, profile, &built, out_dir);
    if had {
        std::fs::rename(&saved, &built).with_context(|| format!("putting {} back", built.display()))?;
    }
    result
}

fn build_and_strip(workspace: &Path, profile: &str, built: &Path, out_dir: &Path) -> Result<PathBuf> {
    let status = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .current_dir(workspace)
        .args([
            "build",
            "--locked",
            "-p",
            "capstan",
            "--bin",
            "capstan",
            "--no-default-features",
            "--profile",
            profile,
        ])
        .status()
        .context("running cargo")?;
    if !status.success() {
        bail!("cargo build of the image's binary failed ({status})");
    }
    std::fs::create_dir_all(out_dir)?;
    let stripped = out_dir.join("capstan");
    let strip = Command::new("strip")
        .arg("--strip-all")
        .arg(built)
        .arg("-o")
        .arg(&stripped)
        .status();
    if !strip.is_ok_and(|s| s.success()) {
        // No binutils: the image is larger, nothing else changes.
        std::fs::copy(built, &stripped).with_context(|| format!("copying {}", built.display()))?;
    }
    Ok(stripped)
}
