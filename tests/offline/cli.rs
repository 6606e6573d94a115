//! The `capstan` binary as a user runs it: golden `capstan test` runs of the built
//! echo.wasm, responses `capstan test` refuses just as `capstan run` would (the hostile
//! and tenant test plugins), `inspect`, and one-line errors with exit code 2 on bad input.

use std::path::PathBuf;
use std::process::{Command, Output};

use capstan_tests::{arg, capstan, capstan_bin, echo_fixture, plugin, workspace};

fn golden(name: &str) -> PathBuf {
    workspace().join("tests/golden/echo").join(format!("{name}.yaml"))
}

fn run_golden(case: &str, parent: &str, children: &[&str]) {
    let echo = plugin("echo");
    let (parent, expect) = (echo_fixture(parent), golden(case));
    let children: Vec<PathBuf> = children.iter().map(|c| echo_fixture(c)).collect();
    let mut args = vec![
        "test",
        arg(&echo),
        "--parent",
        arg(&parent),
        "--expect",
        arg(&expect),
    ];
    if !children.is_empty() {
        args.push("--children");
        args.extend(children.iter().map(|c| arg(c)));
    }
    let out = capstan(&args);
    assert!(
        out.status.success(),
        "{case}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn golden_new_echo() {
    run_golden("new", "echo.yaml", &[]);
}

#[test]
fn golden_job_running() {
    run_golden("running", "echo.yaml", &["job-running.yaml"]);
}

#[test]
fn golden_job_succeeded() {
    run_golden("succeeded", "echo-running.yaml", &["job-succeeded.yaml"]);
}

#[test]
fn golden_job_failed() {
    run_golden("failed", "echo-running.yaml", &["job-failed.yaml"]);
}

#[test]
fn golden_message_changed() {
    run_golden("changed", "echo-changed.yaml", &["job-succeeded.yaml"]);
}

#[test]
fn golden_empty_message() {
    run_golden("empty", "echo-empty.yaml", &[]);
}

/// A parent fixture of the test plugins, in `tests/fixtures/`.
fn fixture(name: &str) -> PathBuf {
    workspace().join("tests/fixtures").join(format!("{name}.yaml"))
}

/// A golden output of a test plugin, in `tests/golden/<plugin>/`.
fn golden_of(plugin: &str, case: &str) -> PathBuf {
    workspace()
        .join("tests/golden")
        .join(plugin)
        .join(format!("{case}.yaml"))
}

/// `capstan test` of test plugin `name` on `parent` (a fixture name), with `extra` flags.
fn test_plugin(name: &str, parent: &str, extra: &[&str]) -> Output {
    let (wasm, parent) = (plugin(name), fixture(parent));
    capstan(&[&["test", arg(&wasm), "--parent", arg(&parent)][..], extra].concat())
}

/// `test_plugin` with `--expect` of its golden `case`; asserts the match.
fn plugin_golden(name: &str, parent: &str, case: &str, extra: &[&str]) {
    let expect = golden_of(name, case);
    let out = test_plugin(name, parent, &[&["--expect", arg(&expect)][..], extra].concat());
    assert_eq!(
        out.status.code(),
        Some(0),
        "{case}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The single output document of a `capstan test` run.
fn output(out: &Output) -> serde_json::Value {
    serde_saphyr::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&out.stdout));
    })
}

#[test]
fn an_undeclared_kind_is_refused_exit_1_alone_and_0_when_expected() {
    let out = test_plugin("hostile", "hostile-undeclared", &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "a refused response is a plugin bug: {stderr}"
    );
    assert_eq!(
        output(&out)["error"]["refused"],
        "child 0 (Secret/stolen): v1 Secret is not a declared child kind"
    );
    assert!(stderr.contains("refused"), "{stderr}");
    plugin_golden("hostile", "hostile-undeclared", "undeclared", &[]);
    // Expecting something else is the usual mismatch.
    let ok = golden_of("hostile", "ok");
    let out = test_plugin("hostile", "hostile-undeclared", &["--expect", arg(&ok)]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("mismatch") && stderr.contains("+  refused:"),
        "{stderr}"
    );
}

#[test]
fn what_capstan_run_refuses_capstan_test_refuses() {
    for (parent, case) in [
        ("hostile-other-namespace", "other-namespace"),
        ("hostile-owner-ref", "owner-ref"),
        ("hostile-bad-name-query", "bad-name-query"),
        ("hostile-bad-name-subresource", "bad-name-subresource"),
        ("hostile-cluster", "cluster"),
    ] {
        let out = test_plugin("hostile", parent, &[]);
        assert_eq!(out.status.code(), Some(1), "{case}");
        assert!(output(&out)["error"]["refused"].is_string(), "{case}");
        plugin_golden("hostile", parent, case, &[]);
    }
    let out = test_plugin("hostile", "hostile-ok", &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    plugin_golden("hostile", "hostile-ok", "ok", &[]);
}

#[test]
fn operator_grants_are_flags_as_in_capstan_run() {
    // A cluster-scoped parent (a Namespace) makes a cluster-scoped ClusterRole only where
    // the operator allows the kind.
    let into = ["--allow-namespace", "team-a"];
    let out = test_plugin("tenant", "tenant-role", &into);
    assert_eq!(out.status.code(), Some(1));
    let refused = output(&out)["error"]["refused"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        refused.contains("ClusterRole is cluster-scoped and not allowed"),
        "{refused}"
    );
    let grant = [&into[..], &["--allow-cluster-kind", "ClusterRole"]].concat();
    let out = test_plugin("tenant", "tenant-role", &grant);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(output(&out)["children"][1]["kind"], "ClusterRole");
    plugin_golden("tenant", "tenant-role", "role-allowed", &grant);
    // `plural.group` names the kind too, as in `capstan run`.
    let qualified = [
        &into[..],
        &["--allow-cluster-kind", "clusterroles.rbac.authorization.k8s.io"],
    ]
    .concat();
    let out = test_plugin("tenant", "tenant-role", &qualified);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    // A cluster-scoped parent (a Namespace) writes only where the operator allows.
    plugin_golden("tenant", "tenant-team-a", "refused", &[]);
    let out = test_plugin("tenant", "tenant-team-a", &[]);
    assert_eq!(out.status.code(), Some(1));
    let grant = ["--allow-namespace", "other", "--allow-namespace", "team-a"];
    plugin_golden("tenant", "tenant-team-a", "allowed", &grant);
    let out = test_plugin("tenant", "tenant-team-a", &grant);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn mismatch_prints_a_diff_and_exits_1() {
    let echo = plugin("echo");
    let out = capstan(&[
        "test",
        arg(&echo),
        "--parent",
        arg(&echo_fixture("echo.yaml")),
        "--expect",
        arg(&golden("succeeded")),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("-  phase: Succeeded") && stderr.contains("+  phase: Pending"),
        "{stderr}"
    );
}

#[test]
fn json_and_multi_document_inputs_are_accepted() {
    let dir = std::env::temp_dir().join(format!("capstan-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let parents = dir.join("parents.yaml");
    let one = std::fs::read_to_string(echo_fixture("echo.yaml")).unwrap();
    let json: serde_json::Value = serde_saphyr::from_str(&one).unwrap();
    std::fs::write(
        &parents,
        format!("{one}---\n{}\n", serde_json::to_string(&json).unwrap()),
    )
    .unwrap();
    let out = capstan(&["test", arg(&plugin("echo")), "--parent", arg(&parents)]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let docs: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .split("---\n")
        .filter(|d| !d.trim().is_empty())
        .map(|d| serde_saphyr::from_str(d).unwrap())
        .collect();
    assert_eq!(docs.len(), 2);
    assert_eq!(docs[0], docs[1], "YAML and JSON of the same Echo reconcile alike");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn inspect_shows_metadata_and_contract() {
    let out = capstan(&["inspect", arg(&plugin("echo"))]);
    assert!(out.status.success());
    let report: serde_json::Value = serde_saphyr::from_slice(&out.stdout).unwrap();
    assert_eq!(report["wit"], capstan::engine::WIT_PACKAGE);
    assert_eq!(report["name"], "echo");
    assert_eq!(report["parent"]["kind"], "Echo");
    assert_eq!(report["children"][0]["kind"], "Job");
}

#[test]
fn compiled_plugins_are_cached_and_an_unusable_default_cache_only_costs_speed() {
    let dir = std::env::temp_dir().join(format!("capstan-cli-cache-{}", std::process::id()));
    std::fs::remove_dir_all(&dir).ok();
    let echo = plugin("echo");
    let entries = || -> Vec<PathBuf> {
        std::fs::read_dir(&dir)
            .map(|d| d.map(|e| e.unwrap().path()).collect())
            .unwrap_or_default()
    };
    let cache = ["--cache-dir", arg(&dir)];
    let first = capstan(&[&["inspect", arg(&echo)][..], &cache].concat());
    assert!(first.status.success());
    let written = entries();
    assert_eq!(written.len(), 1, "{written:?}");
    assert!(written[0].extension().is_some_and(|e| e == "cwasm"));
    // A cache hit answers the same, and `test` shares the entry with `inspect`.
    let again = capstan(&[&["inspect", arg(&echo)][..], &cache].concat());
    assert_eq!(again.stdout, first.stdout);
    let fixture = echo_fixture("echo.yaml");
    let expect = golden("new");
    let test = [
        "test",
        arg(&echo),
        "--parent",
        arg(&fixture),
        "--expect",
        arg(&expect),
    ];
    let out = capstan(&[&test[..], &cache].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(entries(), written);
    let out = capstan(&[&test[..], &["--no-cache"]].concat());
    assert!(out.status.success());

    // A read-only home (as in a locked-down container) falls back to compiling.
    let out = Command::new(capstan_bin())
        .args(test)
        .env("HOME", "/proc/capstan-no-home")
        .env_remove("XDG_CACHE_HOME")
        .env_remove("CAPSTAN_CACHE_DIR")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("compiling without a cache"));
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    let dir = std::env::temp_dir().join(format!("capstan-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let core = dir.join("core.wasm");
    std::fs::write(&core, b"\0asm\x01\0\0\0").unwrap();
    let text = dir.join("not.wasm");
    std::fs::write(&text, "hello").unwrap();
    let broken = dir.join("broken.yaml");
    std::fs::write(&broken, "apiVersion: [unclosed").unwrap();
    let shared = dir.join("shared-cache");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::set_permissions(&shared, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let echo = plugin("echo");
    let fixture = echo_fixture("echo.yaml");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["inspect", "/no/such/plugin.wasm"], "cannot read"),
        (vec!["inspect", arg(&text)], "not a WebAssembly file"),
        (vec!["inspect", arg(&core)], "not a component"),
        (
            vec!["test", arg(&echo), "--parent", "/no/such.yaml"],
            "cannot read",
        ),
        (
            vec!["test", arg(&echo), "--parent", arg(&broken)],
            "not valid YAML",
        ),
        (
            vec![
                "test",
                arg(&echo),
                "--parent",
                arg(&fixture),
                "--deadline",
                "soon",
            ],
            "soon",
        ),
        (
            vec![
                "test",
                arg(&echo),
                "--parent",
                arg(&fixture),
                "--allow-namespace",
                "Bad_NS",
            ],
            "--allow-namespace \"Bad_NS\" is not a valid RFC 1123 label",
        ),
        (
            vec!["bench", arg(&echo), "--parent", arg(&fixture), "-n", "0"],
            "at least 1",
        ),
        (
            vec!["inspect", arg(&echo), "--cache-dir", arg(&text)],
            "compile cache",
        ),
        (
            vec!["inspect", arg(&echo), "--cache-dir", arg(&shared)],
            "not private to this user",
        ),
    ];
    for (args, needle) in cases {
        let out = capstan(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert!(
            !stderr.contains("panicked") && !stderr.contains("RUST_BACKTRACE"),
            "{args:?}: {stderr}"
        );
        if needle != "soon" {
            assert_eq!(
                stderr.trim().lines().count(),
                1,
                "{args:?}: one line, got {stderr}"
            );
        }
    }
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn related_queries_the_host_would_refuse_are_refused_and_faults_in_related_are_faults() {
    let objects = fixture("hostile-related-objects");
    let extra = ["--related", arg(&objects), "--deadline", "200ms"];
    let out = test_plugin("hostile", "hostile-related", &extra);
    assert_eq!(out.status.code(), Some(1), "refused queries are plugin bugs");
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(&String::from_utf8_lossy(&out.stdout)).unwrap();
    let refused = |i: usize| {
        docs[i]["error"]["refused"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    assert!(
        refused(0).contains("not the parent's namespace"),
        "{}",
        refused(0)
    );
    assert!(
        refused(1).contains("not a declared related kind"),
        "{}",
        refused(1)
    );
    assert!(refused(2).contains("at most"), "{}", refused(2));
    assert_eq!(docs[3]["error"]["fault"], "panic", "{}", docs[3]);
    assert_eq!(docs[4]["error"]["fault"], "deadline", "{}", docs[4]);
    assert_eq!(
        docs[5]["status"]["related"], 2,
        "web-1 and web-2, not db nor another namespace's"
    );
}

#[test]
fn run_without_a_cluster_says_so_at_once_in_one_line() {
    let home = std::env::temp_dir().join(format!("capstan-no-kubeconfig-{}", std::process::id()));
    std::fs::create_dir_all(&home).unwrap();
    // A plugin directory to load: the message must come before any compiling.
    let echo = plugin("echo");
    let out = Command::new(capstan_bin())
        .args([
            "run",
            "--plugins",
            arg(echo.parent().unwrap()),
            "--namespace",
            "x",
        ])
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env("HOME", &home)
        .env("RUST_LOG", "off")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no Kubernetes configuration"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    assert_eq!(
        stderr.matches("incluster").count(),
        1,
        "each place looked in said once: {stderr}"
    );
    std::fs::remove_dir_all(home).ok();
}
