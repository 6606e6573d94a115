//! The host's modules form no import circle: no two modules of a host crate (`host/src`,
//! `host/engine/src`, `host/registry/src`, `host/dev/src`) use each other, directly or through others. A module and the modules it declares (its parent, its
//! children) are one unit and not counted: a child uses its parent's shared types by
//! design. Read from the source, as `use` and `crate::`/`super::` paths.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use capstan_tests::workspace;

/// A module's path from the crate root (`["controller", "reconcile"]`).
type Module = Vec<String>;

#[test]
fn no_two_modules_of_the_host_import_each_other() {
    // The registry's four modules use only the crate root (not counted): none to read yet.
    for (root, least) in [
        ("host/src", 21),
        ("host/engine/src", 9),
        ("host/registry/src", 0),
        ("host/dev/src", 5),
    ] {
        no_circle_in(&workspace().join(root), least);
    }
}

/// The crate at `root` has no import circle, and at least `least` modules import others
/// (so a reader that finds nothing fails).
fn no_circle_in(root: &Path, least: usize) {
    let modules = modules(root);
    let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (module, file) in &modules {
        let text = std::fs::read_to_string(file).unwrap();
        for path in paths(&code(&text)) {
            let Some(target) = resolve(module, &path, &modules) else {
                continue;
            };
            if !related(module, &target) {
                edges.entry(module.clone()).or_default().insert(target);
            }
        }
    }
    assert!(
        edges.len() >= least,
        "too few imports read in {}: {}",
        root.display(),
        edges.len()
    );
    let circles = circles(&edges);
    assert!(
        circles.is_empty(),
        "modules importing each other:\n{}",
        circles
            .iter()
            .map(|c| c.iter().map(|m| m.join("::")).collect::<Vec<_>>().join(" -> "))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// Every module file under `root`, by module path.
fn modules(root: &Path) -> BTreeMap<Module, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let relative = path.strip_prefix(root).unwrap().with_extension("");
            let mut module: Module = relative
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(module.last().map(String::as_str), Some("mod" | "lib" | "main")) {
                module.pop();
            }
            out.insert(module, path);
        }
    }
    out
}

/// The source without comments (a doc comment's `crate::x` is not an import).
fn code(text: &str) -> String {
    text.lines()
        .map(|l| l.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every path starting at `crate`, `super` or `self`, with `use` groups expanded.
fn paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        let rest: String = bytes[i..bytes.len().min(i + 6)].iter().collect();
        let starts = ["crate", "super", "self"]
            .iter()
            .any(|s| rest.starts_with(s) && !ident(bytes.get(i.wrapping_sub(1)).copied()));
        if starts {
            let (expanded, end) = expand(&bytes, i);
            out.extend(expanded);
            i = end.max(i + 1);
        } else {
            i += 1;
        }
    }
    out
}

fn ident(c: Option<char>) -> bool {
    c.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
}

/// The paths a `a::b::{c, d::e}` at `at` stands for, and where it ends.
fn expand(chars: &[char], at: usize) -> (Vec<Vec<String>>, usize) {
    let mut segments = Vec::new();
    let mut i = at;
    loop {
        let start = i;
        while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
            i += 1;
        }
        if i > start {
            segments.push(chars[start..i].iter().collect::<String>());
        }
        if chars.get(i) == Some(&':') && chars.get(i + 1) == Some(&':') {
            i += 2;
            while chars.get(i).is_some_and(|c| c.is_whitespace()) {
                i += 1;
            }
            if chars.get(i) == Some(&'{') {
                let mut out = Vec::new();
                i += 1;
                loop {
                    while chars.get(i).is_some_and(|c| c.is_whitespace() || *c == ',') {
                        i += 1;
                    }
                    if i >= chars.len() || chars[i] == '}' {
                        return (out, i + 1);
                    }
                    let (inner, end) = expand(chars, i);
                    for tail in inner {
                        out.push(segments.iter().cloned().chain(tail).collect());
                    }
                    i = end.max(i + 1);
                }
            }
            continue;
        }
        return (vec![segments], i);
    }
}

/// The module file a path names: its longest prefix that is a module.
fn resolve(from: &Module, path: &[String], modules: &BTreeMap<Module, PathBuf>) -> Option<Module> {
    let mut base: Module = match path.first()?.as_str() {
        "crate" => Vec::new(),
        "super" | "self" => from.clone(),
        _ => return None,
    };
    let mut rest = &path[1..];
    if path[0] == "super" {
        base.pop();
    }
    while rest.first().is_some_and(|s| s == "super") {
        base.pop();
        rest = &rest[1..];
    }
    let mut best = None;
    let mut module = base;
    if modules.contains_key(&module) {
        best = Some(module.clone());
    }
    for segment in rest {
        module.push(segment.clone());
        if modules.contains_key(&module) {
            best = Some(module.clone());
        }
    }
    best.filter(|m| m != from)
}

/// A module and one of its ancestors are one unit.
fn related(a: &Module, b: &Module) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// The circles of the import graph (its strongly connected parts of two or more).
fn circles(edges: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<Module>> {
    let nodes: BTreeSet<&Module> = edges.keys().chain(edges.values().flatten()).collect();
    let reach = |from: &Module| -> BTreeSet<Module> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.clone()];
        while let Some(m) = stack.pop() {
            for next in edges.get(&m).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    stack.push(next.clone());
                }
            }
        }
        seen
    };
    let reachable: BTreeMap<&Module, BTreeSet<Module>> = nodes.iter().map(|m| (*m, reach(m))).collect();
    let mut out: Vec<Vec<Module>> = Vec::new();
    for m in &nodes {
        let part: Vec<Module> = nodes
            .iter()
            .filter(|n| reachable[*m].contains(**n) && reachable[**n].contains(*m))
            .map(|n| (*n).clone())
            .collect();
        if part.len() > 1 && !out.contains(&part) {
            out.push(part);
        }
    }
    out
}
