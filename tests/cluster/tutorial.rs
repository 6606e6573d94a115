//! The tutorial (`docs/tutorial/first-plugin.md`) as a reader follows it: its code (and
//! the testing guide's example) is the code `capstan new` writes, which `new.rs` builds and
//! tests, and its shell lines, run as written, make a plugin that reconciles on the local
//! plane.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};
use capstan_tests::toolchains::succeeded;
use capstan_tests::{arg, book, capstan_bin, compile_cache, workspace};

fn tutorial() -> String {
    page("docs/tutorial/first-plugin.md")
}

fn page(path: &str) -> String {
    std::fs::read_to_string(workspace().join(path)).unwrap()
}

/// Where the tutorial shows the SDK a reader's `capstan` extracted (`/home/you`'s cache).
const SHOWN_SDK: &str = "/home/you/.cache/capstan/sdk/0.1.0-1a2b3c4d5e6f";

/// Every file of a new `greeter` project in `lang`, as `capstan new` writes it for a
/// reader (the SDK the binary carries, no `--sdk`), with the extracted SDK's directory
/// written as the tutorial shows it.
fn scaffold(lang: &str) -> BTreeMap<String, String> {
    let dir = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(capstan_bin())
        .args(["new", "greeter", "--lang", lang])
        .current_dir(dir.path())
        .env("XDG_CACHE_HOME", cache.path())
        .env_remove("CAPSTAN_SDK")
        .output()
        .unwrap();
    succeeded("capstan new", &out);
    let sdk = std::fs::read_dir(cache.path().join("capstan/sdk"))
        .unwrap()
        .flatten()
        .next()
        .expect("the SDK extracted")
        .path();
    let mut files = BTreeMap::new();
    let mut todo = vec![dir.path().join("greeter")];
    while let Some(at) = todo.pop() {
        for entry in std::fs::read_dir(&at).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else if let Ok(text) = std::fs::read_to_string(&path) {
                files.insert(path.display().to_string(), text.replace(arg(&sdk), SHOWN_SDK));
            }
        }
    }
    files
}

/// Lines with their trailing blanks dropped, so a block matches the file it shows.
fn normalized(text: &str) -> String {
    text.lines().map(str::trim_end).collect::<Vec<_>>().join("\n")
}

#[test]
fn the_tutorials_code_is_what_capstan_new_writes() {
    // The testing guide shows the Rust project's own test.
    let page = tutorial() + &page("docs/guides/testing.md");
    let mut checked = 0;
    // Which project's files a block of each language must be part of.
    for (langs, project) in [
        (&["rust", "rust,ignore", "toml"][..], "rust"),
        (&["python"][..], "python"),
        (&["js"][..], "js"),
    ] {
        let files = scaffold(project);
        for block in book::blocks(&page, langs) {
            let shown = normalized(&block);
            assert!(
                files.values().any(|f| normalized(f).contains(&shown)),
                "this block of the tutorial is not in the {project} project `capstan new` writes:\n{block}"
            );
            checked += 1;
        }
    }
    assert!(checked >= 5, "too few code blocks found: {checked}");
}

/// The tutorial's shell blocks from the one that makes the project to the end, as one
/// script: what the reader types, with `capstan dev up` standing for the plane the test
/// gives (`KUBECONFIG`) and the workspace's lock copied in after `cd`, so the project
/// builds the crates the workspace already built.
fn script(page: &str) -> Result<String> {
    let blocks = book::blocks(page, book::SHELL);
    let first = blocks
        .iter()
        .position(|b| b.trim_start().starts_with("capstan new "))
        .context("no block starts with `capstan new`")?;
    let mut out = String::from("set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n");
    for block in &blocks[first..] {
        for line in book::command_lines(block) {
            if line == "capstan dev up" {
                out.push_str(": the plane of the test\n");
                continue;
            }
            out.push_str(&line);
            out.push('\n');
            if line.starts_with("cd ") {
                let lock = workspace().join("Cargo.lock");
                out.push_str(&format!("cp '{}' .\n", lock.display()));
            }
        }
    }
    Ok(out)
}

/// `PATH` with the `capstan` under test and the pinned `kubectl` first.
fn path() -> Result<String> {
    let kubectl = capstan::dev::Binaries::locate()?.kubectl;
    let dirs = [capstan_bin(), kubectl]
        .iter()
        .map(|b| b.parent().unwrap().display().to_string())
        .chain(std::env::var("PATH"))
        .collect::<Vec<_>>();
    Ok(dirs.join(":"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tutorial_runs_as_written_on_the_local_plane() -> Result<()> {
    let plane = capstan::dev::Plane::shared().await?;
    let script = script(&tutorial())?;
    assert!(
        script.contains("kubectl -n demo wait greeter/hello"),
        "the tutorial no longer waits for its Greeter:\n{script}"
    );
    let dir = tempfile::tempdir()?;
    // The workspace's dev profile, so `cargo test` reuses what the workspace built; cargo
    // reads it from a parent directory of the project, out of the reader's sight.
    std::fs::create_dir(dir.path().join(".cargo"))?;
    std::fs::write(
        dir.path().join(".cargo/config.toml"),
        "[profile.dev]\ndebug = \"line-tables-only\"\n[profile.dev.package.\"*\"]\ndebug = false\n",
    )?;
    let target =
        std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| arg(&workspace().join("target")).into());
    let out = run(
        dir.path(),
        &script,
        &[
            ("PATH", path()?),
            ("KUBECONFIG", plane.kubeconfig().display().to_string()),
            // The override the tutorial names: the checkout's SDK, whose crates the
            // workspace built already (the bundled copy would be built again).
            ("CAPSTAN_SDK", workspace().display().to_string()),
            ("CARGO_TARGET_DIR", target),
            ("CAPSTAN_CACHE_DIR", compile_cache().display().to_string()),
        ],
    )
    .await?;
    let stdout = succeeded("the tutorial's commands", &out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stdout.contains("greeter.example.com/hello condition met"),
        "{stdout}"
    );
    assert!(
        stdout.trim_end().ends_with("hello"),
        "the ConfigMap's greeting: {stdout}"
    );
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("plugin running") && l.contains("greeter")),
        "the host's log names the plugin it runs:\n{stderr}"
    );
    let client = plane.client().await?;
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client);
    namespaces.delete("demo", &Default::default()).await?;
    Ok(())
}

/// `script` in `dir` under bash, with `env` set and nothing of this process's `RUST_LOG`.
async fn run(dir: &Path, script: &str, env: &[(&str, String)]) -> Result<std::process::Output> {
    let mut command = std::process::Command::new("bash");
    command
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .env_remove("RUST_LOG")
        .env_remove("CAPSTAN_TEST_KUBECONFIG");
    for (key, value) in env {
        command.env(key, value);
    }
    Ok(tokio::task::spawn_blocking(move || command.output()).await??)
}
