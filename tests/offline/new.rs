//! `capstan new` as a plugin author outside this repository uses it: one project per
//! language in a temporary directory, built with `capstan build`, passing its own unit
//! tests and its golden case with `capstan test`. The projects take the SDK from this
//! checkout (`--sdk`), the one override, since nothing is published yet.

use std::path::Path;

use capstan_tests::toolchains::{python, run_in, succeeded};
use capstan_tests::{arg, capstan_bin, workspace};

/// A new project of `lang` named `ping-pong` (a name with a dash, so its crate, kind and
/// plural all differ from it) in a fresh temporary directory.
fn scaffold(lang: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("ping-pong");
    let out = run_in(
        dir.path(),
        arg(&capstan_bin()),
        &["new", "ping-pong", "--lang", lang, "--sdk", arg(workspace())],
    );
    succeeded("capstan new", &out);
    assert!(project.join("capstan.toml").is_file());
    assert!(project.join("README.md").is_file());
    dir
}

/// `capstan build` and `capstan test` in `project`: its one golden case passes.
fn builds_and_passes_its_golden(project: &Path) {
    let capstan = capstan_bin();
    let built = succeeded("capstan build", &run_in(project, arg(&capstan), &["build"]));
    assert!(built.lines().any(|l| l.starts_with("built ")), "{built}");
    let out = succeeded("capstan test", &run_in(project, arg(&capstan), &["test"]));
    assert!(out.contains("1 cases: 1 passed, 0 failed"), "{out}");
}

#[test]
fn a_new_rust_plugin_builds_and_passes_its_tests() {
    let dir = scaffold("rust");
    let project = dir.path().join("ping-pong");
    // The workspace's lock, target directory and dev profile: the same crates, built once.
    std::fs::copy(workspace().join("Cargo.lock"), project.join("Cargo.lock")).unwrap();
    let target =
        std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| arg(&workspace().join("target")).into());
    let profile = [
        "--config",
        "profile.dev.debug=\"line-tables-only\"",
        "--config",
        "profile.dev.package.\"*\".debug=false",
    ];
    let cargo = |args: &[&str]| {
        std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args(profile)
            .args(args)
            .current_dir(&project)
            .env("CARGO_TARGET_DIR", &target)
            .output()
            .unwrap()
    };
    let tests = succeeded("cargo test", &cargo(&["test", "--quiet"]));
    assert!(!tests.contains("FAILED"), "{tests}");
    let build = std::process::Command::new(capstan_bin())
        .arg("build")
        .current_dir(&project)
        .env("CARGO_TARGET_DIR", &target)
        .output()
        .unwrap();
    succeeded("capstan build", &build);
    let out = succeeded("capstan test", &run_in(&project, arg(&capstan_bin()), &["test"]));
    assert!(out.contains("1 cases: 1 passed, 0 failed"), "{out}");
}

#[test]
fn a_new_python_plugin_builds_and_passes_its_tests() {
    let dir = scaffold("python");
    let project = dir.path().join("ping-pong");
    builds_and_passes_its_golden(&project);
    let out = run_in(
        &project,
        arg(&python()),
        &["-m", "pytest", "-q", "-p", "no:cacheprovider"],
    );
    let tests = succeeded("pytest", &out);
    assert!(tests.contains(" passed"), "{tests}");
}

#[test]
fn a_new_javascript_plugin_builds_and_passes_its_tests() {
    let dir = scaffold("js");
    let project = dir.path().join("ping-pong");
    succeeded(
        "npm install",
        &run_in(&project, "npm", &["install", "--no-audit", "--no-fund"]),
    );
    builds_and_passes_its_golden(&project);
    let tests = succeeded("npm test", &run_in(&project, "npm", &["test"]));
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
