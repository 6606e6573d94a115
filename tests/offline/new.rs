//! `capstan new` as a plugin author outside this repository uses it: one project per
//! language in a temporary directory, under a fresh `HOME` with an empty cache and no
//! `--sdk`, so the project takes the SDK the `capstan` binary carries; built with
//! `capstan build`, passing its own unit tests and its golden case with `capstan test`.
//! Only the toolchains come from outside (the registries, through the tests' caches).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use capstan_tests::toolchains::{componentize_py, js_toolchain, python, run_in, succeeded};
use capstan_tests::{arg, capstan_bin, compile_cache, workspace};

/// A plugin author's machine: an empty home (so an empty `~/.cache/capstan`) and a
/// working directory outside the repository.
pub(crate) struct Author {
    pub(crate) home: tempfile::TempDir,
    pub(crate) dir: tempfile::TempDir,
}

impl Author {
    pub(crate) fn new() -> Author {
        Author {
            home: tempfile::tempdir().unwrap(),
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// `program args` in `dir` as this author: the fresh home, no SDK override, the
    /// toolchains as a user who installed them would have them. Cargo and rustup keep
    /// their own homes: the toolchain and the crates.io download cache, not Capstan's.
    fn run(&self, dir: &Path, program: &str, args: &[&str]) -> Output {
        self.command(dir, program, args)
            .output()
            .unwrap_or_else(|e| panic!("{program} runs: {e}"))
    }

    /// [`Author::run`]'s command, to add to.
    fn command(&self, dir: &Path, program: &str, args: &[&str]) -> Command {
        let real_home = PathBuf::from(std::env::var_os("HOME").expect("HOME is set"));
        let cargo_home =
            std::env::var_os("CARGO_HOME").map_or_else(|| real_home.join(".cargo"), PathBuf::from);
        let rustup_home =
            std::env::var_os("RUSTUP_HOME").map_or_else(|| real_home.join(".rustup"), PathBuf::from);
        let mut command = Command::new(program);
        command
            .args(args)
            .current_dir(dir)
            .env("HOME", self.home.path())
            .env_remove("XDG_CACHE_HOME")
            .env_remove("CAPSTAN_SDK")
            .env("CARGO_HOME", cargo_home)
            .env("RUSTUP_HOME", rustup_home)
            .env("COMPONENTIZE_PY", componentize_py())
            .env("CAPSTAN_JS_TOOLCHAIN", js_toolchain())
            .env("CAPSTAN_CACHE_DIR", compile_cache())
            .env("CARGO_TARGET_DIR", capstan_tests::authors_target())
            .env_remove("RUST_LOG");
        command
    }

    /// `capstan args` in `dir`.
    pub(crate) fn capstan(&self, dir: &Path, args: &[&str]) -> Output {
        self.run(dir, arg(&capstan_bin()), args)
    }

    /// A new project of `lang` named `ping-pong` (a name with a dash, so its crate, kind
    /// and plural all differ from it); its directory.
    fn scaffold(&self, lang: &str) -> PathBuf {
        let out = self.capstan(self.dir.path(), &["new", "ping-pong", "--lang", lang]);
        succeeded("capstan new", &out);
        let project = self.dir.path().join("ping-pong");
        assert!(project.join("capstan.toml").is_file());
        assert!(project.join("README.md").is_file());
        // The SDK it names is the one extracted into the empty cache, not the checkout's.
        let sdk = self.home.path().join(".cache/capstan/sdk");
        let named = std::fs::read_dir(&project)
            .unwrap()
            .flatten()
            .filter(|e| e.path().is_file())
            .any(|e| std::fs::read_to_string(e.path()).is_ok_and(|t| t.contains(arg(&sdk))));
        assert!(named, "{lang}: the project names no SDK under {}", sdk.display());
        assert!(
            !std::fs::read_dir(&project)
                .unwrap()
                .flatten()
                .any(|e| std::fs::read_to_string(e.path()).is_ok_and(|t| t.contains(arg(workspace())))),
            "{lang}: the project names the checkout"
        );
        project
    }

    /// `capstan build` and `capstan test` in `project`: its one golden case passes.
    fn builds_and_passes_its_golden(&self, project: &Path) {
        let built = succeeded("capstan build", &self.capstan(project, &["build"]));
        assert!(built.lines().any(|l| l.starts_with("built ")), "{built}");
        let out = succeeded("capstan test", &self.capstan(project, &["test"]));
        assert!(out.contains("1 cases: 1 passed, 0 failed"), "{out}");
    }
}

#[test]
fn a_new_rust_plugin_builds_and_passes_its_tests() {
    let author = Author::new();
    let project = author.scaffold("rust");
    // The workspace's lock and target directory: the same registry crates, built once
    // (the SDK's two crates are built again, from the extracted copy).
    std::fs::copy(workspace().join("Cargo.lock"), project.join("Cargo.lock")).unwrap();
    let target =
        std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| arg(&workspace().join("target")).into());
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let profile = [
        "--config",
        "profile.dev.debug=\"line-tables-only\"",
        "--config",
        "profile.dev.package.\"*\".debug=false",
        "test",
        "--quiet",
    ];
    let out = author
        .command(&project, &cargo, &profile)
        .env("CARGO_TARGET_DIR", &target)
        .output()
        .unwrap();
    let tests = succeeded("cargo test", &out);
    assert!(!tests.contains("FAILED"), "{tests}");
    let out = author
        .command(&project, arg(&capstan_bin()), &["build"])
        .env("CARGO_TARGET_DIR", &target)
        .output()
        .unwrap();
    succeeded("capstan build", &out);
    let out = succeeded("capstan test", &author.capstan(&project, &["test"]));
    assert!(out.contains("1 cases: 1 passed, 0 failed"), "{out}");
}

#[test]
fn a_new_python_plugin_builds_and_passes_its_tests() {
    let author = Author::new();
    let project = author.scaffold("python");
    author.builds_and_passes_its_golden(&project);
    let out = author.run(
        &project,
        arg(&python()),
        &["-m", "pytest", "-q", "-p", "no:cacheprovider"],
    );
    let tests = succeeded("pytest", &out);
    assert!(tests.contains(" passed"), "{tests}");
    // What `pip install .` installs resolves, with the SDK from the extracted copy (pip
    // builds the metadata with setuptools from PyPI, as on a user's machine).
    let out = author.run(
        &project,
        arg(&python()),
        &[
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--quiet",
            "--report",
            "-",
            ".",
        ],
    );
    let report: serde_json::Value = serde_json::from_str(&succeeded("pip install --dry-run", &out)).unwrap();
    let sdk = report["install"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["metadata"]["name"] == "capstan-sdk")
        .unwrap_or_else(|| panic!("no capstan-sdk in {report}"));
    let from = sdk["download_info"]["url"].as_str().unwrap();
    let cache = author.home.path().join(".cache/capstan/sdk");
    assert!(from.starts_with(&format!("file://{}", arg(&cache))), "{from}");
}

#[test]
fn a_new_javascript_plugin_builds_and_passes_its_tests() {
    let author = Author::new();
    let project = author.scaffold("js");
    succeeded(
        "npm install",
        &author.run(&project, "npm", &["install", "--no-audit", "--no-fund"]),
    );
    author.builds_and_passes_its_golden(&project);
    let tests = succeeded("npm test", &author.run(&project, "npm", &["test"]));
    assert!(tests.contains("# fail 0"), "{tests}");
}

#[test]
fn a_bad_name_or_a_full_directory_is_one_line_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let capstan = capstan_bin();
    let out = run_in(dir.path(), arg(&capstan), &["new", "Bad_Name", "--lang", "rust"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("error: plugin name"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    std::fs::write(dir.path().join("taken"), "").unwrap();
    let out = run_in(
        dir.path(),
        arg(&capstan),
        &["new", "ok", "--lang", "js", "--dir", "."],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not empty"));
}

#[test]
fn the_sdks_package_for_use_outside_the_repository() {
    let dir = tempfile::tempdir().unwrap();
    // Cargo builds the packed crates from the .crate files alone: the WIT must be inside.
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = run_in(
        workspace(),
        &cargo,
        &[
            "package",
            "-p",
            "capstan-contract",
            "-p",
            "capstan-sdk",
            "--allow-dirty",
            "--quiet",
        ],
    );
    succeeded("cargo package", &out);
    let listed = run_in(
        workspace(),
        &cargo,
        &[
            "package",
            "-p",
            "capstan-sdk",
            "--allow-dirty",
            "--list",
            "--quiet",
        ],
    );
    let files = succeeded("cargo package --list", &listed);
    assert!(files.lines().any(|f| f == "wit/reconciler.wit"), "{files}");

    let out = run_in(
        workspace(),
        arg(&python()),
        &[
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--quiet",
            "-w",
            arg(dir.path()),
            "sdk/python",
        ],
    );
    succeeded("pip wheel", &out);
    let wheel = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().ends_with(".whl"))
        .expect("a wheel");
    let name = wheel.file_name().to_string_lossy().to_string();
    assert!(
        name.starts_with(&format!("capstan_sdk-{}-", env!("CARGO_PKG_VERSION"))),
        "{name}"
    );

    let out = run_in(
        &workspace().join("sdk/js"),
        "npm",
        &["pack", "--dry-run", "--json"],
    );
    let packed: serde_json::Value = serde_json::from_str(&succeeded("npm pack", &out)).unwrap();
    let files: Vec<&str> = packed[0]["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["path"].as_str())
        .collect();
    assert!(files.iter().any(|f| f.ends_with("reconciler.wit")), "{files:?}");
    assert_eq!(packed[0]["version"], env!("CARGO_PKG_VERSION"));
}
