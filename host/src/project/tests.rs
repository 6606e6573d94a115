use super::*;

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn cases_from_a_shared_file_resolve_against_that_file() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "shared/cases.toml",
        "[[case]]\nname = \"new\"\nparent = \"p.yaml\"\nexpect = \"g/new.yaml\"\n",
    );
    let file = write(
        dir.path(),
        "proj/capstan.toml",
        "[plugin]\nname = \"echo\"\nlanguage = \"js\"\nbuild = \"true\"\noutput = \"b/e.wasm\"\ncases = \"../shared/cases.toml\"\n\n[[case]]\nname = \"own\"\nparent = \"f/p.yaml\"\nchildren = [\"f/c.yaml\"]\nexpect = \"f/g.yaml\"\n",
    );
    let project = Project::find(&dir.path().join("proj/sub")).unwrap();
    assert_eq!(project.plugin.language, Language::Js);
    assert_eq!(project.output(), dir.path().join("proj/b/e.wasm"));
    let names: Vec<_> = project.cases.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["own", "new"]);
    assert_eq!(project.cases[0].children, [dir.path().join("proj/f/c.yaml")]);
    assert_eq!(
        project.cases[1].expect,
        dir.path().join("proj/../shared/g/new.yaml")
    );
    assert_eq!(Project::load(&file).unwrap().cases.len(), 2);
}

#[test]
fn mistakes_are_one_line_with_the_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "capstan.toml",
        "[plugin]\nname = \"x\"\nlanguage = \"cobol\"\noutput = \"x.wasm\"\n",
    );
    let e = Project::load(&file).unwrap_err().to_string();
    assert!(e.contains("capstan.toml:3: unknown variant `cobol`"), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
    let file = write(
        dir.path(),
        "capstan.toml",
        "[plugin]\nname = \"x\"\nlanguage = \"python\"\noutput = \"x.wasm\"\n",
    );
    let e = Project::load(&file)
        .unwrap()
        .build_command()
        .unwrap_err()
        .to_string();
    assert!(e.contains("a Python plugin needs `build`"), "{e}");
    let elsewhere = tempfile::tempdir().unwrap();
    let e = Project::find(elsewhere.path())
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(e.contains("no capstan.toml in"), "{e}");
}

#[test]
fn a_workspace_is_its_members_and_names_them_to_a_command_of_one() {
    let dir = tempfile::tempdir().unwrap();
    let member = |name: &str| {
        let text = format!(
            "[plugin]\nname = \"{name}\"\nlanguage = \"js\"\nbuild = \"true\"\noutput = \"{name}.wasm\"\n"
        );
        write(dir.path(), &format!("{name}/capstan.toml"), &text);
    };
    member("a");
    member("b");
    write(
        dir.path(),
        "capstan.toml",
        "[workspace]\nmembers = [\"a\", \"b\"]\n",
    );
    let all = Project::find_all(dir.path()).unwrap();
    let outputs: Vec<_> = all.iter().map(Project::output).collect();
    assert_eq!(
        outputs,
        [dir.path().join("a/a.wasm"), dir.path().join("b/b.wasm")]
    );
    // In a member, the member alone.
    assert_eq!(Project::find_all(&dir.path().join("b")).unwrap().len(), 1);
    let e = Project::find(dir.path()).map(|_| ()).unwrap_err().to_string();
    assert!(
        e.contains("is a workspace (a, b): run this in one of its members"),
        "{e}"
    );
    write(
        dir.path(),
        "capstan.toml",
        "[workspace]\nmembers = [\"a\", \"c\"]\n",
    );
    let e = Project::find_all(dir.path()).map(|_| ()).unwrap_err().to_string();
    assert!(e.contains("c/capstan.toml"), "{e}");
}

#[test]
fn a_build_that_writes_nothing_fails() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "capstan.toml",
        "[plugin]\nname = \"x\"\nlanguage = \"js\"\nbuild = \"true\"\noutput = \"x.wasm\"\n",
    );
    let e = Project::load(&file).unwrap().build().unwrap_err().to_string();
    assert!(e.contains("wrote no"), "{e}");
    let file = write(
        dir.path(),
        "capstan.toml",
        "[plugin]\nname = \"x\"\nlanguage = \"js\"\nbuild = \"echo c > x.wasm\"\noutput = \"x.wasm\"\n",
    );
    let built = Project::load(&file).unwrap().build().unwrap();
    assert_eq!(std::fs::read_to_string(built).unwrap(), "c\n");
}
