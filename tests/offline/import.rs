//! `capstan import metacontroller` as someone moving a controller uses it: a directory
//! laid out as Metacontroller's examples are (`tests/fixtures/metacontroller/counter`, a
//! controller of ours), imported outside the repository under a fresh `HOME`, built with
//! `capstan build` and answering through its unchanged hooks in `capstan test`; and what
//! cannot be imported, refused in one line naming it.

use std::path::{Path, PathBuf};

use capstan_tests::toolchains::{run_in, succeeded};
use capstan_tests::{arg, capstan_bin, workspace};

use crate::new::Author;

/// The Metacontroller-style controller of `tests/fixtures/metacontroller/counter` (ours,
/// laid out as Metacontroller's examples are).
fn counter_example() -> PathBuf {
    workspace().join("tests/fixtures/metacontroller/counter")
}

/// A directory holding `example/`: the counter fixture with `controller` as its manifest.
fn counter_with(controller: &str) -> tempfile::TempDir {
    let (example, dir) = (counter_example(), tempfile::tempdir().unwrap());
    let copy = dir.path().join("example");
    for file in ["manifest/kustomization.yaml", "manifest/hooks.py", "v1/crd.yaml"] {
        let to = copy.join(file);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(example.join(file), to).unwrap();
    }
    std::fs::write(copy.join("manifest/controller.yaml"), controller).unwrap();
    dir
}

#[test]
fn an_imported_metacontroller_controller_builds_and_answers_through_its_unchanged_hooks() {
    let run = imported_counter_answers("counter", "configmap-counter", &["hooks.py"], "Python");
    assert!(run.contains("resync: 30000ms"), "{run}");
    assert!(run.contains("reuseInstances: true"), "{run}");
}

#[test]
fn an_imported_controller_with_javascript_hooks_answers_through_them_unchanged() {
    let hooks = ["customize.js", "sync.js", "finalize.js"];
    let run = imported_counter_answers("counter-js", "configmap-counter-js", &hooks, "JavaScript");
    assert!(
        run.contains(r#"selector: {"matchLabels":{"counted":"yes"}}"#),
        "the parent rule's labelSelector: {run}"
    );
}

/// Its sync hook imports a library file of its ConfigMap, as jsonnetd reads one from its
/// working directory.
#[test]
fn an_imported_controller_with_jsonnet_hooks_answers_through_them_unchanged() {
    let hooks = [
        "customize.jsonnet",
        "sync.jsonnet",
        "finalize.jsonnet",
        "count.libsonnet",
    ];
    let run = imported_counter_answers("counter-jsonnet", "configmap-counter-jsonnet", &hooks, "Jsonnet");
    assert!(run.contains("reuseInstances: true"), "{run}");
}

/// Imports the counter in `tests/fixtures/metacontroller/EXAMPLE` outside the repository,
/// checks its hooks came unchanged, builds it and checks its answers in `capstan test`;
/// its `run.yaml`.
fn imported_counter_answers(example: &str, controller: &str, hooks: &[&str], language: &str) -> String {
    let author = Author::new();
    let example = workspace().join("tests/fixtures/metacontroller").join(example);
    let project = author.dir.path().join("counter");
    let out = author.capstan(
        author.dir.path(),
        &["import", "metacontroller", arg(&example), "--out", arg(&project)],
    );
    let said = succeeded("capstan import", &out);
    assert!(
        said.contains(&format!("CompositeController {controller} ")),
        "{said}"
    );
    assert!(said.contains(&format!("({language} hooks:")), "{said}");
    let hook = |p: &Path| std::fs::read(p).unwrap();
    for file in hooks {
        assert_eq!(
            hook(&project.join("hooks").join(file)),
            hook(&example.join("manifest").join(file)),
            "the hook's source is copied unchanged"
        );
    }
    let run = std::fs::read_to_string(project.join("run.yaml")).unwrap();
    succeeded("capstan build", &author.capstan(&project, &["build"]));

    let dir = tempfile::tempdir().unwrap();
    let related = dir.path().join("related.yaml");
    let configmap = |name: &str, app: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: default, labels: {{app: {app}}}}}\n"
        )
    };
    let text = [configmap("a", "web"), configmap("b", "web"), configmap("c", "db")].join("---\n");
    std::fs::write(&related, text).unwrap();
    let parent = example.join("my-counter.yaml");
    let test = |extra: &[&str]| {
        let mut args = vec!["test", "--parent", arg(&parent)];
        args.extend_from_slice(extra);
        let out = succeeded("capstan test", &author.capstan(&project, &args));
        serde_saphyr::from_str::<serde_json::Value>(&out).unwrap()
    };
    // customize selected the two ConfigMaps labelled app=web; sync counted them, v2 keys.
    let answer = test(&["--related", arg(&related)]);
    assert_eq!(answer["children"][0]["metadata"]["name"], "web-count");
    assert_eq!(answer["children"][0]["metadata"]["namespace"], "default");
    assert_eq!(answer["children"][0]["data"]["names"], "default/a,default/b");
    assert_eq!(
        answer["status"],
        serde_json::json!({"count": 2, "children": 0, "observedGeneration": 2})
    );
    // finalize: released once the child is gone.
    let child = dir.path().join("child.yaml");
    std::fs::write(
        &child,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web-count, namespace: default}\n",
    )
    .unwrap();
    assert_ne!(
        test(&["--finalizing", "--children", arg(&child)])["finalized"],
        true
    );
    assert_eq!(test(&["--finalizing"])["finalized"], true);
    run
}

#[test]
fn what_the_importer_cannot_import_is_refused_in_one_line_naming_it() {
    let example = counter_example();
    let controller = std::fs::read_to_string(example.join("manifest/controller.yaml")).unwrap();
    let cases = [
        (
            controller.replace(
                "http://configmap-counter.metacontroller/customize",
                "https://hooks.example.com/customize",
            ),
            "spec.hooks.customize.webhook: url https://hooks.example.com/customize is no Service of the example",
        ),
        (
            controller.replace(
                r#"command: ["python", "/hooks/hooks.py"]"#,
                r#"command: ["node", "/hooks/hooks.js"]"#,
            ),
            "Deployment configmap-counter: its runtime (image python:3.12",
        ),
        (
            controller.replace(
                "resource: configmaps\n    updateStrategy",
                "resource: widgets\n    updateStrategy",
            ),
            "spec.childResources[0]: widgets in v1 is neither a CRD of the example nor a built-in kind",
        ),
    ];
    let capstan = capstan_bin();
    for (text, said) in cases {
        let dir = counter_with(&text);
        let out = run_in(
            dir.path(),
            arg(&capstan),
            &["import", "metacontroller", "example", "--out", "project"],
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.starts_with("error: ") && stderr.contains(said), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(
            !dir.path().join("project").exists(),
            "a refused import wrote {stderr}"
        );
    }
}

#[test]
fn a_controller_in_two_files_is_one_controller_unless_they_differ() {
    let example = counter_example();
    let controller = std::fs::read_to_string(example.join("manifest/controller.yaml")).unwrap();
    let capstan = capstan_bin();
    let import = |copy: &str| {
        let dir = tempfile::tempdir().unwrap();
        for file in [
            "manifest/controller.yaml",
            "manifest/kustomization.yaml",
            "manifest/hooks.py",
            "v1/crd.yaml",
        ] {
            let to = dir.path().join("example").join(file);
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            std::fs::copy(example.join(file), to).unwrap();
        }
        // An all-in-one copy beside the kustomized manifest, as some examples ship.
        std::fs::write(dir.path().join("example/all-in-one.yaml"), copy).unwrap();
        let out = run_in(
            dir.path(),
            arg(&capstan),
            &["import", "metacontroller", "example", "--out", "project"],
        );
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    assert_eq!(import(&controller), (Some(0), String::new()));
    let (code, stderr) = import(&controller.replace("resyncPeriodSeconds: 30", "resyncPeriodSeconds: 60"));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("CompositeController configmap-counter is defined twice, differently (again in"),
        "{stderr}"
    );
}

/// The counter fixture's controller as a DecoratorController of ConfigMapCounters (with
/// `more` resource rules after that one), its child ConfigMaps as attachments.
fn decorator(controller: &str, more: &str) -> String {
    let rule = "  resources:\n  - apiVersion: examples.capstan.dev/v1\n    resource: configmapcounters\n    \
                annotationSelector:\n      matchLabels: {count: \"yes\"}\n";
    controller
        .replace("kind: CompositeController", "kind: DecoratorController")
        .replace(
            "  parentResource:\n    apiVersion: examples.capstan.dev/v1\n    resource: configmapcounters\n",
            &format!("{rule}{more}"),
        )
        .replace("  childResources:", "  attachments:")
}

#[test]
fn a_decorator_controller_imports_with_its_selectors_and_attachments() {
    let example = counter_example();
    let controller = std::fs::read_to_string(example.join("manifest/controller.yaml")).unwrap();
    let dir = counter_with(&decorator(&controller, ""));
    let out = run_in(
        dir.path(),
        arg(&capstan_bin()),
        &["import", "metacontroller", "example", "--out", "project"],
    );
    let said = succeeded("capstan import", &out);
    assert!(
        said.contains("imported DecoratorController configmap-counter"),
        "{said}"
    );
    let py = std::fs::read_to_string(dir.path().join("project/controller.py")).unwrap();
    assert!(py.contains("PLUGIN = Decorator("), "{py}");
    assert!(
        py.contains(r#"annotation_selector=json.loads("{\"matchLabels\":{\"count\":\"yes\"}}")"#),
        "{py}"
    );
    assert!(
        py.contains(r#"FINALIZER = "metacontroller.io/decoratorcontroller-configmap-counter""#),
        "{py}"
    );
    assert!(
        py.contains(r#"CHILDREN = (KindRef("", "v1", "ConfigMap", "configmaps", namespaced=True),)"#),
        "{py}"
    );
    let run = std::fs::read_to_string(dir.path().join("project/run.yaml")).unwrap();
    assert!(
        !run.contains("selector:"),
        "a decorator checks its selectors itself, to see a target stop matching: {run}"
    );
}

#[test]
fn a_decorator_with_several_resource_rules_is_one_plugin_per_rule() {
    let example = counter_example();
    let controller = std::fs::read_to_string(example.join("manifest/controller.yaml")).unwrap();
    let more =
        "  - apiVersion: v1\n    resource: secrets\n    labelSelector:\n      matchLabels: {team: a}\n";
    let dir = counter_with(&decorator(&controller, more));
    let out = run_in(
        dir.path(),
        arg(&capstan_bin()),
        &["import", "metacontroller", "example", "--out", "project"],
    );
    let said = succeeded("capstan import", &out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    for (plugin, parent) in [
        (
            "configmap-counter-configmapcounters",
            r#"PARENT = KindRef("examples.capstan.dev", "v1", "ConfigMapCounter""#,
        ),
        (
            "configmap-counter-secrets",
            r#"PARENT = KindRef("", "v1", "Secret", "secrets""#,
        ),
    ] {
        assert!(
            said.contains(&format!("DecoratorController {plugin} into")),
            "{said}"
        );
        assert!(
            stderr.contains(&format!("this one, {plugin}, decorates")),
            "{stderr}"
        );
        let py =
            std::fs::read_to_string(dir.path().join("project").join(plugin).join("controller.py")).unwrap();
        assert!(py.contains(parent), "{py}");
        assert!(
            py.contains(r#"FINALIZER = "metacontroller.io/decoratorcontroller-configmap-counter""#),
            "one finalizer, the controller's: {py}"
        );
    }
    let secrets =
        std::fs::read_to_string(dir.path().join("project/configmap-counter-secrets/controller.py")).unwrap();
    assert!(
        secrets.contains(r#"parent_selector=json.loads("{\"matchLabels\":{\"team\":\"a\"}}")"#),
        "{secrets}"
    );
    let run = std::fs::read_to_string(dir.path().join("project/run.yaml")).unwrap();
    assert!(
        run.contains("- path: configmap-counter-secrets/build/configmap-counter-secrets.wasm"),
        "{run}"
    );
    assert!(run.contains("allowSecrets: true"), "{run}");
}

/// Two controllers in one directory (the counter, and the update-methods controller with
/// its hook held inline in a ConfigMap manifest, as some of Metacontroller's examples
/// write it): a workspace of one project each, with one run.yaml for both; `--controller`
/// still picks one.
#[test]
fn a_directory_of_two_controllers_is_a_workspace_of_one_project_each() {
    let fixtures = workspace().join("tests/fixtures/metacontroller");
    let dir = tempfile::tempdir().unwrap();
    let example = dir.path().join("example");
    for file in [
        "manifest/controller.yaml",
        "manifest/kustomization.yaml",
        "manifest/hooks.py",
        "v1/crd.yaml",
    ] {
        let to = example.join("counter").join(file);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(fixtures.join("counter").join(file), to).unwrap();
    }
    let release = fixtures.join("update-methods");
    let sync = std::fs::read_to_string(release.join("manifest/sync.py")).unwrap();
    let indented: String = sync.lines().map(|l| format!("    {l}\n")).collect();
    let inline = format!(
        "{}---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: config-release\n  namespace: metacontroller\ndata:\n  sync.py: |\n{indented}",
        std::fs::read_to_string(release.join("manifest/controller.yaml")).unwrap()
    );
    std::fs::create_dir_all(example.join("release")).unwrap();
    std::fs::write(example.join("release/controller.yaml"), inline).unwrap();
    std::fs::copy(release.join("v1/crd.yaml"), example.join("release/crd.yaml")).unwrap();

    let capstan = capstan_bin();
    let out = run_in(
        dir.path(),
        arg(&capstan),
        &["import", "metacontroller", "example", "--out", "project"],
    );
    let said = succeeded("capstan import", &out);
    assert!(
        said.contains("imported CompositeController config-release into"),
        "{said}"
    );
    assert!(
        said.contains("imported CompositeController configmap-counter into"),
        "{said}"
    );
    let project = dir.path().join("project");
    let read = |p: &str| std::fs::read_to_string(project.join(p)).unwrap();
    assert!(
        read("capstan.toml").contains("[workspace]\nmembers = [\"configmap-counter\", \"config-release\"]\n"),
        "{}",
        read("capstan.toml")
    );
    let run = read("run.yaml");
    assert!(
        run.contains("- path: config-release/build/config-release.wasm\n"),
        "{run}"
    );
    assert!(
        run.contains("- path: configmap-counter/build/configmap-counter.wasm\n"),
        "{run}"
    );
    assert!(run.contains("    ServiceAccount: Recreate\n"), "{run}");
    assert_eq!(
        read("config-release/hooks/sync.py"),
        sync,
        "the inline hook, unchanged"
    );
    assert!(read("config-release/capstan.toml").contains("name = \"config-release\""));
    let crds = read("crds.yaml");
    assert!(crds.contains("configreleases.examples.capstan.dev") && crds.contains("configmapcounters"));
    // A command of one plugin, in the workspace, names the members.
    let out = run_in(&project, arg(&capstan), &["test", "--parent", "x.yaml"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("is a workspace (configmap-counter, config-release): run this in one of its members"),
        "{stderr}"
    );

    let out = run_in(
        dir.path(),
        arg(&capstan),
        &[
            "import",
            "metacontroller",
            "example",
            "--out",
            "one",
            "--controller",
            "config-release",
        ],
    );
    succeeded("capstan import --controller", &out);
    assert!(dir.path().join("one/capstan.toml").is_file() && dir.path().join("one/hooks/sync.py").is_file());
}
