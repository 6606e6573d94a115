//! The Python and JavaScript toolchains the polyglot tests build with, installed by the
//! repository's scripts from PyPI and npm into `~/.cache/capstan`, keyed by version.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use crate::workspace;

fn script(name: &str) -> PathBuf {
    let out = Command::new(workspace().join("scripts").join(name))
        .output()
        .unwrap_or_else(|e| panic!("{name} runs: {e}"));
    assert!(
        out.status.success(),
        "{name} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// The componentize-py executable (its venv also holds pytest and PyYAML).
pub fn componentize_py() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| script("toolchain-python.sh"))
}

/// The mdbook executable that builds `docs/`.
pub fn mdbook() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| script("toolchain-mdbook.sh"))
}

/// The Python of componentize-py's venv, which runs the plugins' native tests.
pub fn python() -> PathBuf {
    componentize_py().with_file_name("python")
}

/// The `node_modules/.bin` holding componentize-js and rolldown.
pub fn js_toolchain() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| script("toolchain-js.sh"))
}

/// `program args` in `dir` with both toolchains in the environment, as a user who
/// installed them would have them.
pub fn run_in(dir: &Path, program: &str, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .current_dir(dir)
        .env("COMPONENTIZE_PY", componentize_py())
        .env("CAPSTAN_JS_TOOLCHAIN", js_toolchain())
        .env("CAPSTAN_CACHE_DIR", crate::compile_cache())
        .env_remove("RUST_LOG")
        .output()
        .unwrap_or_else(|e| panic!("{program} runs: {e}"))
}

/// Assert `out` succeeded, showing what it printed if not; returns its stdout.
pub fn succeeded(what: &str, out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{what}: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The component `capstan build` makes of the project in `dir` (relative to the
/// workspace), once per test binary.
pub fn built(dir: &str) -> PathBuf {
    static BUILT: std::sync::Mutex<Vec<(String, PathBuf)>> = std::sync::Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, path)) = built.iter().find(|(d, _)| d == dir) {
        return path.clone();
    }
    let out = run_in(
        &workspace().join(dir),
        crate::arg(&crate::capstan_bin()),
        &["build"],
    );
    let stdout = succeeded(&format!("capstan build in {dir}"), &out);
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("built "))
        .unwrap_or_else(|| panic!("capstan build printed no `built` line: {stdout}"));
    let path = PathBuf::from(line.rsplit_once(" (").map_or(line, |(p, _)| p));
    built.push((dir.to_string(), path.clone()));
    path
}
