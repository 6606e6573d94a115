//! Capstan's own image, defined once: the Dockerfile's final stage and the offline
//! builder both describe it, and a test holds them to the same user, entrypoint, command,
//! ports, labels and binary path.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::image::oci::{Config, Layer};
use crate::node::preflight::elf_interpreter;

/// Where the binary sits in the image.
pub const BINARY: &str = "/usr/local/bin/capstan";
/// The user the image runs as (distroless' `nonroot`); the chart runs as it too.
pub const USER: &str = "65532:65532";
/// The ports the host serves: metrics, health.
pub const EXPOSED: [u16; 2] = [8080, 8081];
/// The image's default command (the entrypoint is the binary).
pub const CMD: [&str; 2] = ["run", "--help"];
/// OCI labels, also in the Dockerfile's `LABEL`.
pub const LABELS: [(&str, &str); 4] = [
    ("org.opencontainers.image.title", "capstan"),
    (
        "org.opencontainers.image.description",
        "Kubernetes reconcilers as sandboxed WebAssembly plugins",
    ),
    (
        "org.opencontainers.image.source",
        "https://github.com/capstan-dev/capstan",
    ),
    ("org.opencontainers.image.licenses", "Apache-2.0"),
];
/// The reference the chart uses by default for this version.
pub fn reference() -> String {
    format!("ghcr.io/capstan-dev/capstan:{}", env!("CARGO_PKG_VERSION"))
}

/// What `gcr.io/distroless/cc-debian12:nonroot` holds that the host needs: users, a CA
/// bundle, `/tmp`, and the binary's shared libraries (from this machine's Debian 12).
const PASSWD: &str = "root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n";
const GROUP: &str = "root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n";
const CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// The image config both definitions share.
pub(crate) fn config() -> Config {
    Config {
        user: USER.into(),
        entrypoint: vec![BINARY.into()],
        cmd: CMD.iter().map(|s| s.to_string()).collect(),
        env: vec![
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
            format!("SSL_CERT_FILE={CA_BUNDLE}"),
        ],
        exposed_ports: EXPOSED.to_vec(),
        labels: LABELS
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

/// The layer: the binary, the libraries it links, and the distroless base's files.
pub(crate) fn layer(binary: &Path) -> Result<Layer> {
    let mut layer = Layer::default();
    let fixed = [
        "etc",
        "etc/ssl",
        "etc/ssl/certs",
        "usr",
        "usr/local",
        "usr/local/bin",
        "root",
    ];
    for dir in fixed {
        layer.dir(dir, 0o755, 0)?;
    }
    layer
        .dir("tmp", 0o1777, 0)?
        .dir("home", 0o755, 0)?
        .dir("home/nonroot", 0o700, 65532)?;
    layer
        .file("etc/passwd", 0o644, PASSWD.as_bytes())?
        .file("etc/group", 0o644, GROUP.as_bytes())?;
    if !Path::new(CA_BUNDLE).is_file() {
        bail!("{CA_BUNDLE} is missing: apt-get install ca-certificates");
    }
    layer.copy(&CA_BUNDLE[1..], 0o644, Path::new(CA_BUNDLE))?;
    let mut dirs: std::collections::BTreeSet<PathBuf> = fixed.iter().map(PathBuf::from).collect();
    for lib in shared_libraries(binary)? {
        let in_image = lib.display().to_string();
        let in_image = in_image.trim_start_matches('/');
        let mut parent = Path::new(in_image).parent();
        let mut missing = Vec::new();
        while let Some(p) = parent.filter(|p| !p.as_os_str().is_empty()) {
            if dirs.insert(p.to_path_buf()) {
                missing.push(p.display().to_string());
            }
            parent = p.parent();
        }
        for d in missing.iter().rev() {
            layer.dir(d, 0o755, 0)?;
        }
        layer.copy(in_image, 0o755, &lib)?;
    }
    layer.copy(&BINARY[1..], 0o755, binary)?;
    Ok(layer)
}

/// The interpreter and every library `binary` loads, as `ldd` resolves them here.
fn shared_libraries(binary: &Path) -> Result<Vec<PathBuf>> {
    let bytes = std::fs::read(binary).with_context(|| format!("reading {}", binary.display()))?;
    let Some(interpreter) = elf_interpreter(&bytes) else {
        return Ok(Vec::new());
    };
    let out = Command::new("ldd").arg(binary).output().context("running ldd")?;
    if !out.status.success() {
        bail!(
            "ldd {} failed: {}",
            binary.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let mut libs = vec![PathBuf::from(interpreter)];
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if let Some((_, rest)) = line.split_once("=> ")
            && let Some(path) = rest.split_whitespace().next().filter(|p| p.starts_with('/'))
            && !libs.iter().any(|l| l == Path::new(path))
        {
            libs.push(PathBuf::from(path));
        }
    }
    Ok(libs)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOCKERFILE: &str = include_str!("../../../../Dockerfile");

    /// The final stage's instructions, continuation lines joined.
    fn final_stage() -> Vec<String> {
        let joined = DOCKERFILE.replace("\\\n", " ");
        let lines: Vec<&str> = joined
            .lines()
            .map(str::trim)
            .filter(|l| !l.starts_with('#'))
            .collect();
        let last_from = lines
            .iter()
            .rposition(|l| l.starts_with("FROM "))
            .expect("a FROM");
        lines[last_from..]
            .iter()
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect()
    }

    fn instruction<'a>(stage: &'a [String], name: &str) -> Vec<&'a str> {
        stage
            .iter()
            .filter_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .collect()
    }

    fn json_list(s: &str) -> Vec<String> {
        serde_json::from_str(s).expect("an exec-form JSON list")
    }

    #[test]
    fn the_dockerfile_and_the_offline_builder_describe_the_same_image() {
        let stage = final_stage();
        assert_eq!(
            instruction(&stage, "FROM"),
            ["gcr.io/distroless/cc-debian12:nonroot"]
        );
        assert_eq!(instruction(&stage, "USER"), [USER]);
        assert_eq!(
            json_list(instruction(&stage, "ENTRYPOINT")[0]),
            config().entrypoint
        );
        assert_eq!(json_list(instruction(&stage, "CMD")[0]), config().cmd);
        let exposed: Vec<u16> = instruction(&stage, "EXPOSE")
            .iter()
            .flat_map(|l| l.split_whitespace().map(|p| p.parse().expect("a port")))
            .collect();
        assert_eq!(exposed, EXPOSED);
        let copies = instruction(&stage, "COPY");
        assert_eq!(
            copies.len(),
            1,
            "the binary is the only file the Dockerfile adds: {copies:?}"
        );
        assert!(copies[0].ends_with(&format!(" {BINARY}")), "{}", copies[0]);
        let labels: Vec<(String, String)> = instruction(&stage, "LABEL")
            .iter()
            .flat_map(|l| parse_labels(l))
            .collect();
        assert_eq!(labels, config().labels);
    }

    /// `k="v" k2="v 2"` pairs of one `LABEL` line.
    fn parse_labels(line: &str) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let mut rest = line.trim();
        while let Some((key, after)) = rest.split_once("=\"") {
            let (value, tail) = after.split_once('"').expect("a closing quote");
            out.push((key.trim().to_string(), value.to_string()));
            rest = tail.trim();
        }
        out
    }

    #[test]
    fn the_layer_holds_the_binary_its_libraries_and_the_nonroot_user() {
        let me = std::env::current_exe().unwrap();
        let bytes = layer(&me).unwrap().finish().unwrap();
        let mut archive = tar::Archive::new(bytes.as_slice());
        let paths: Vec<String> = archive
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().display().to_string())
            .collect();
        for want in [
            "usr/local/bin/capstan",
            "etc/passwd",
            "etc/ssl/certs/ca-certificates.crt",
            "tmp/",
        ] {
            assert!(paths.iter().any(|p| p == want), "{want} in {paths:?}");
        }
        assert!(paths.iter().any(|p| p.contains("libc.so")), "{paths:?}");
        assert!(paths.iter().any(|p| p.contains("ld-linux")), "{paths:?}");
    }
}
