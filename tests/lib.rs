//! Shared helpers for Capstan's integration tests: building the Wasm plugins and
//! locating the `capstan` binary, once per test process, and the compile cache the
//! `capstan` processes they start use.

pub mod book;
pub mod governance;
pub mod helm;
pub mod host;
pub mod oci;
pub mod process;
pub mod requests;
pub mod toolchains;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The workspace root.
pub fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the workspace root")
}

/// Cargo's target directory.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| workspace().join("target"), PathBuf::from)
}

/// A reconcile request for the hostile plugin: a `Hostile` parent in `namespace` whose spec
/// asks for `mode` with `arg`.
pub fn hostile_request(namespace: &str, mode: &str, arg: &str) -> capstan_engine::Request {
    capstan_engine::Request {
        parent: serde_json::json!({
            "apiVersion": "capstan.dev/v1alpha1", "kind": "Hostile",
            "metadata": {"name": mode, "namespace": namespace},
            "spec": {"mode": mode, "arg": arg},
        })
        .into(),
        ..capstan_engine::Request::default()
    }
}

/// Where projects made outside the repository (`capstan new`, `capstan import`) build
/// their Rust: one directory for all of them, so the SDK and its dependencies compile
/// once per run, not once per project.
pub fn authors_target() -> PathBuf {
    workspace().join("target/authors")
}

/// Path of a plugin's `.wasm`, building all test plugins (release `plugin` profile,
/// `wasm32-wasip2`) on first use so a plain `cargo test` works.
pub fn plugin(name: &str) -> PathBuf {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        build_plugins(&[
            "-p",
            "echo",
            "-p",
            "hostile",
            "-p",
            "scheduled-echo",
            "-p",
            "tenant",
            "-p",
            "broken-metadata",
            "-p",
            "greedy",
            "-p",
            "echo-canary",
            "-p",
            "hostile-twin",
            "-p",
            "misdeclared",
            "-p",
            "misdeclared-orphans",
            "-p",
            "echo-rogue",
        ])
    });
    // Cargo names the artifact after the crate, with '-' as '_'.
    let file = format!("{}.wasm", name.replace('-', "_"));
    let path = target_dir().join("wasm32-wasip2/plugin").join(file);
    assert!(path.exists(), "{} was not built", path.display());
    path
}

/// Path of Echo built with its `canary` feature (Jobs labelled `capstan.dev/canary`):
/// `tests/plugins/echo-canary`, built with the other test plugins.
pub fn echo_canary() -> PathBuf {
    plugin("echo-canary")
}

/// Path of the `capstan` binary, built on first use. Features are resolved over the
/// whole workspace with its test targets, as `cargo test --workspace` resolves them, so
/// the build reuses every crate the tests built and links only the binary. Without
/// `--tests` the dev-dependencies' features (tokio's `test-util`, say) drop out, and CI
/// rebuilt tokio, hyper, kube, wasmtime and the rest once more inside the first job that
/// started a host (4 min 23 s of it with optimised dependencies).
pub fn capstan_bin() -> PathBuf {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| cargo(&["build", "--workspace", "--tests", "--bin", "capstan"]));
    target_dir().join("debug/capstan")
}

/// The release `capstan` binary, built now (a bench measures what operators run), or the
/// one `CAPSTAN_BENCH_CAPSTAN` names.
pub fn release_capstan() -> anyhow::Result<PathBuf> {
    // A binary built apart (another machine's, or one built before a bench's own run).
    if let Some(binary) = std::env::var_os("CAPSTAN_BENCH_CAPSTAN") {
        return Ok(PathBuf::from(binary));
    }
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["build", "--release", "-p", "capstan", "--bin", "capstan"])
        .current_dir(workspace())
        .status()?;
    if !status.success() {
        anyhow::bail!("building the release capstan failed");
    }
    Ok(target_dir().join("release/capstan"))
}

/// `capstan ARGS` run to completion, as a user runs it: the default log level, the tests'
/// own compile cache.
pub fn capstan(args: &[&str]) -> std::process::Output {
    capstan_with(args, &[])
}

/// [`capstan`] with these environment variables set too.
pub fn capstan_with(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    Command::new(capstan_bin())
        .args(args)
        .envs(env.iter().copied())
        .env_remove("RUST_LOG")
        .env("CAPSTAN_CACHE_DIR", compile_cache())
        .env("CAPSTAN_PULL_DIR", pull_dir())
        .output()
        .expect("capstan runs")
}

/// A path as a command-line argument.
pub fn arg(p: &Path) -> &str {
    p.to_str().expect("test paths are UTF-8")
}

/// The compile cache of every `capstan` process the tests start (set as
/// `CAPSTAN_CACHE_DIR`), so no test writes into the user's `~/.cache/capstan/wasm`: one
/// directory in the target dir, shared by every test process. Entries are named by the
/// component's digest and the engine's settings and renamed into place whole, so processes
/// that compile the same component at once are safe. Only byte-identical components share
/// an entry: the Rust plugins do, but componentize-py and componentize-js builds of one
/// project differ from process to process, so each process still compiles its own. Tests
/// about the cache itself use their own directories. `capstan` creates the `wasm`
/// directory, private to the user as it insists.
pub fn compile_cache() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| target_dir().join("capstan-tests/wasm"))
}

/// Where the `capstan` processes the tests start keep pulled plugins (`CAPSTAN_PULL_DIR`):
/// a directory of this test process's own under the system temp dir, removed at exit, so
/// every test process pulls afresh.
pub fn pull_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    extern "C" fn remove() {
        if let Some(root) = DIR.get().and_then(|d| d.parent()) {
            let _ = std::fs::remove_dir_all(root);
        }
    }
    DIR.get_or_init(|| {
        use std::os::unix::fs::DirBuilderExt;
        let root = std::env::temp_dir().join(format!("capstan-tests-{}", std::process::id()));
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&root)
            .expect("creating the tests' pull directory");
        // SAFETY: registering a plain extern "C" fn; it only removes files.
        unsafe {
            libc::atexit(remove);
        }
        root.join("oci")
    })
    .clone()
}

/// `cargo build` for Wasm plugins (`plugin` profile, `wasm32-wasip2`) with `args`.
fn build_plugins(args: &[&str]) {
    let mut all = vec!["build", "--profile", "plugin", "--target", "wasm32-wasip2"];
    all.extend_from_slice(args);
    cargo(&all);
}

fn cargo(args: &[&str]) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(args)
        .current_dir(workspace())
        .status()
        .expect("cargo runs");
    assert!(status.success(), "cargo {} failed", args.join(" "));
}

/// A tool pinned in `scripts/versions.env` (`VERSION_KEY=…`) and built by
/// `scripts/k8s-build.sh TARGET` into the cache as `TARGET-VERSION/bin/BIN`, built on first use.
pub fn pinned_tool(target: &str, version_key: &str, bin: &str) -> PathBuf {
    const VERSIONS_ENV: &str = include_str!("../scripts/versions.env");
    let version = VERSIONS_ENV
        .lines()
        .find_map(|l| l.trim().strip_prefix(version_key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("scripts/versions.env pins {version_key}"))
        .trim();
    let path = capstan::dev::cache_root().join(format!("{target}-{version}/bin/{bin}"));
    if !path.exists() {
        let status = Command::new(workspace().join("scripts/k8s-build.sh"))
            .arg(target)
            .stdout(std::process::Stdio::null())
            .status()
            .expect("scripts/k8s-build.sh runs");
        assert!(status.success(), "scripts/k8s-build.sh {target} failed");
    }
    path
}

/// A fixture of the Echo plugin.
pub fn echo_fixture(name: &str) -> PathBuf {
    workspace().join("plugins/echo/fixtures").join(name)
}
