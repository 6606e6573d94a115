//! Echo in Rust, Python and JavaScript is one plugin: each is built by `capstan build`
//! from its capstan.toml and passes the same golden cases with `capstan test`; the
//! Python and JavaScript SDKs and Echos pass their own native unit tests (pytest and
//! node's test runner, no Wasm).

use std::sync::OnceLock;

use capstan_tests::toolchains::{python, run_in, succeeded};
use capstan_tests::{arg, capstan_bin, plugin, workspace};

/// `npm ci` in the JS SDK and Echo, once: two at a time in one tree would collide.
fn npm_installed() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        for dir in ["sdk/js", "plugins/echo-js"] {
            let out = run_in(&workspace().join(dir), "npm", &["ci", "--no-audit", "--no-fund"]);
            succeeded(&format!("npm ci in {dir}"), &out);
        }
    });
}

/// `capstan build` then `capstan test` in `dir`: every case of tests/golden/echo passes.
/// The build is the one the other tests of this binary load (`built`), not a second one.
fn builds_and_passes_the_echo_goldens(project: &str) {
    capstan_tests::toolchains::built(project);
    let dir = workspace().join(project);
    let capstan = capstan_bin();
    let out = succeeded("capstan test", &run_in(&dir, arg(&capstan), &["test"]));
    let cases = std::fs::read_to_string(workspace().join("tests/golden/echo/cases.toml")).unwrap();
    let n = cases.matches("[[case]]").count();
    assert!(out.contains(&format!("{n} cases: {n} passed, 0 failed")), "{out}");
}

#[test]
fn echo_in_python_passes_the_echo_goldens() {
    builds_and_passes_the_echo_goldens("plugins/echo-py");
}

#[test]
fn echo_in_javascript_passes_the_echo_goldens() {
    npm_installed();
    builds_and_passes_the_echo_goldens("plugins/echo-js");
}

#[test]
fn echo_in_rust_passes_the_same_goldens() {
    plugin("echo");
    builds_and_passes_the_echo_goldens("plugins/echo");
}

#[test]
fn the_python_sdk_and_echo_pass_their_native_tests() {
    let python = python();
    for dir in ["sdk/python", "plugins/echo-py"] {
        let out = run_in(
            &workspace().join(dir),
            arg(&python),
            &["-m", "pytest", "-q", "-p", "no:cacheprovider"],
        );
        let stdout = succeeded(&format!("pytest in {dir}"), &out);
        assert!(stdout.contains(" passed"), "{dir}: {stdout}");
    }
}

#[test]
fn the_javascript_sdk_and_echo_pass_their_native_tests() {
    npm_installed();
    for dir in ["sdk/js", "plugins/echo-js"] {
        let dir = workspace().join(dir);
        let out = run_in(&dir, "node", &["--test", "test/"]);
        let stdout = succeeded(&format!("node --test in {}", dir.display()), &out);
        assert!(stdout.contains("# fail 0"), "{stdout}");
    }
}

/// Memory waits as CPU does. Echo in Python at default limits holds ~17 MiB an instance
/// (an interpreter inside), so sixteen calls at once would pass its 128 MiB
/// `memoryTotal`; at the default concurrency of 16 they wait in line for it instead, and a
/// thousand parents are reconciled with no fault.
#[test]
fn echo_in_python_at_default_limits_reconciles_a_thousand_parents_sixteen_at_a_time_without_a_fault() {
    use capstan::engine::{Engine, EngineConfig, Limits, Request};
    use std::sync::atomic::{AtomicUsize, Ordering};
    let wasm = capstan_tests::toolchains::built("plugins/echo-py");
    let config = EngineConfig {
        cache_dir: Some(capstan_tests::compile_cache().to_path_buf()),
        ..EngineConfig::default()
    };
    let engine = Engine::new(config).expect("an engine");
    let echo = engine
        .load_file(&wasm, Limits::default())
        .expect("Echo in Python loads");
    const PARENTS: usize = 1000;
    const CONCURRENCY: usize = 16;
    let (next, faults) = (AtomicUsize::new(0), AtomicUsize::new(0));
    std::thread::scope(|s| {
        for _ in 0..CONCURRENCY {
            s.spawn(|| {
                while next.fetch_add(1, Ordering::Relaxed) < PARENTS {
                    let i = next.load(Ordering::Relaxed);
                    let parent = serde_json::json!({
                        "apiVersion": "capstan.dev/v1alpha1", "kind": "Echo",
                        "metadata": {"name": format!("e{i}"), "namespace": "polyglot", "uid": format!("u{i}")},
                        "spec": {"message": format!("hello {i}")},
                    });
                    let request = Request {
                        parent: parent.into(),
                        ..Request::default()
                    };
                    if let Err(e) = echo.reconcile(&request) {
                        eprintln!("e{i}: {e}");
                        faults.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    assert_eq!(
        faults.into_inner(),
        0,
        "calls faulted instead of waiting for memory"
    );
}
