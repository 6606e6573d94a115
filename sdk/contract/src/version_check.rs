//! The contract's version is named once in code; the WIT package and the README agree.

use std::path::Path;

fn read(relative: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn the_wit_package_line_is_the_version_in_code() {
    let wit = read("../../wit/reconciler.wit");
    let package = wit
        .lines()
        .find_map(|l| l.trim().strip_prefix("package "))
        .expect("wit/reconciler.wit has a package line");
    assert_eq!(package.trim_end_matches(';'), crate::WIT_PACKAGE);
    assert!(crate::PLUGIN_EXPORT.ends_with(crate::WIT_VERSION));
}

#[test]
fn every_older_version_served_has_its_frozen_wit() {
    for version in crate::OLDER_VERSIONS {
        let wit = read(&format!("../../wit/{version}/reconciler.wit"));
        assert!(
            wit.contains(&format!("package capstan:reconciler@{version};")),
            "wit/{version}/reconciler.wit is that version"
        );
    }
}

#[test]
fn the_readme_names_the_version_in_code() {
    let readme = read("../../README.md");
    let named: Vec<&str> = readme
        .match_indices("capstan:reconciler@")
        .map(|(i, _)| {
            let rest = &readme[i..];
            let end = rest
                .find(|c: char| c == '`' || c.is_whitespace())
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .collect();
    assert!(!named.is_empty(), "the README names the contract");
    assert!(
        named.contains(&crate::WIT_PACKAGE),
        "the README names the current contract"
    );
    let served = |n: &str| {
        n == crate::WIT_PACKAGE
            || crate::OLDER_VERSIONS
                .iter()
                .any(|v| n == format!("capstan:reconciler@{v}"))
    };
    for n in named {
        assert!(served(n), "README names {n}, which this host does not serve");
    }
}
