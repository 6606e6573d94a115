//! The book (`docs/`) and the README as a reader relies on them: `mdbook build docs`
//! succeeds without a warning, SUMMARY.md lists every page, every link resolves (files and
//! headings), every `capstan` command line in their shell blocks parses with the binary's
//! own clap definitions and those that need no cluster (`test`, `inspect` on the
//! repository's files) run and succeed, every config file shown is one the host reads,
//! every page with a Rust example is compiled by a doc test, and every message the errors
//! page explains is one the host still writes. Commands of other tools: every `helm
//! install`/`upgrade` and values file renders with `helm template` against the chart's
//! schema (with the files the page makes), and every `cargo` command names packages and targets that exist.
//! (The tutorial's commands, kubectl's among them, run in `tutorial.rs`.)

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use capstan_tests::{book, helm, workspace};

/// Every Markdown file of the book, and the README.
fn pages() -> Vec<PathBuf> {
    let mut found = vec![workspace().join("README.md")];
    let mut dirs = vec![workspace().join("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// A heading's id, as mdBook and GitHub make it: lowercase, letters, digits, `-` and `_`
/// kept, spaces to `-`, everything else dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            c if c.is_whitespace() => Some('-'),
            _ => None,
        })
        .collect()
}

/// The lines of a page outside its code blocks.
fn unfenced(text: &str) -> Vec<&str> {
    let mut fenced = false;
    text.lines()
        .filter(|line| {
            let fence = line.trim_start().starts_with("```");
            fenced ^= fence;
            !fence && !fenced
        })
        .collect()
}

/// The text of a page outside its code blocks and inline code (which hold no links).
fn prose(text: &str) -> String {
    unfenced(text)
        .iter()
        .map(|line| line.split('`').step_by(2).collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The ids of a page's headings (inline code counts: mdBook keeps its text).
fn anchors(text: &str) -> BTreeSet<String> {
    unfenced(text)
        .into_iter()
        .filter_map(|l| l.strip_prefix('#'))
        .map(|l| slug(l.trim_start_matches('#')))
        .collect()
}

/// Every link target of a page: `[text](target)`.
fn links(text: &str) -> Vec<String> {
    let prose = prose(text);
    let mut found = Vec::new();
    let mut rest = prose.as_str();
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        if let Some(end) = rest.find(')') {
            found.push(rest[..end].to_string());
            rest = &rest[end..];
        }
    }
    found
}

/// Where the book links to the repository's files (files, then directories).
const REPOSITORY: [&str; 2] = [
    "https://github.com/capstan-dev/capstan/blob/main/",
    "https://github.com/capstan-dev/capstan/tree/main/",
];

#[test]
fn every_link_of_the_book_and_the_readme_resolves() -> Result<()> {
    let mut broken = Vec::new();
    let book = workspace().join("docs").canonicalize()?;
    let pages = pages();
    assert!(pages.len() > 20, "too few pages: {}", pages.len());
    for page in &pages {
        let text = std::fs::read_to_string(page)?;
        let dir = page.parent().context("a directory")?;
        let shown = page
            .strip_prefix(workspace())
            .unwrap_or(page)
            .display()
            .to_string();
        let in_book = page.starts_with(&book);
        for target in links(&text) {
            let (path, fragment) = target.split_once('#').unwrap_or((&target, ""));
            // The repository's own files, as the published book links them.
            let file = if let Some(file) = REPOSITORY.iter().find_map(|r| path.strip_prefix(r)) {
                workspace().join(file)
            } else if target.contains("://") || target.starts_with("mailto:") {
                continue;
            } else if path.is_empty() {
                page.clone()
            } else {
                dir.join(path)
            };
            if !file.exists() {
                broken.push(format!("{shown}: {target} (no such file)"));
                continue;
            }
            // A relative link out of docs/ has nothing to point at in the HTML book.
            let outside = !file.canonicalize()?.starts_with(&book);
            if in_book && outside && !target.contains("://") {
                let at = file
                    .strip_prefix(workspace())
                    .unwrap_or(&file)
                    .display()
                    .to_string();
                broken.push(format!(
                    "{shown}: {target} (outside the book: link to {}{at})",
                    REPOSITORY[0]
                ));
            }
            let markdown = file.extension().is_some_and(|e| e == "md");
            if !fragment.is_empty()
                && markdown
                && !anchors(&std::fs::read_to_string(&file)?).contains(fragment)
            {
                broken.push(format!("{shown}: {target} (no such heading)"));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    Ok(())
}

#[test]
fn the_book_builds_and_lists_every_page() -> Result<()> {
    let docs = workspace().join("docs");
    let summary = std::fs::read_to_string(docs.join("SUMMARY.md"))?;
    for page in pages() {
        let Ok(inside) = page.strip_prefix(&docs) else {
            continue;
        };
        let inside = inside.display().to_string();
        if inside != "SUMMARY.md" {
            assert!(
                summary.contains(&format!("]({inside})")),
                "SUMMARY.md does not list {inside}"
            );
        }
    }
    let out_dir = std::env::temp_dir().join(format!("capstan-book-{}", std::process::id()));
    let out = std::process::Command::new(capstan_tests::toolchains::mdbook())
        .arg("build")
        .arg(&docs)
        .arg("--dest-dir")
        .arg(&out_dir)
        .output()?;
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "mdbook build failed:\n{said}");
    assert!(
        !said.contains("WARN") && !said.contains("ERROR"),
        "mdbook build warned:\n{said}"
    );
    assert!(out_dir.join("guides/sharding.html").is_file(), "{said}");
    std::fs::remove_dir_all(out_dir).ok();
    Ok(())
}

#[test]
fn every_rust_example_of_the_book_is_compiled_as_a_doc_test() -> Result<()> {
    let doctests = std::fs::read_to_string(workspace().join("sdk/src/lib.rs"))?;
    for page in pages() {
        let text = std::fs::read_to_string(&page)?;
        if !text.lines().any(|l| l.trim() == "```rust") {
            continue;
        }
        let inside = page
            .strip_prefix(workspace())
            .unwrap_or(&page)
            .display()
            .to_string();
        assert!(
            doctests.contains(&format!("include_str!(\"../../{inside}\")")),
            "{inside} has a Rust example that no doc test compiles: include it in sdk/src/lib.rs"
        );
    }
    Ok(())
}

/// A `capstan` command line of the book: the page, the line as written, and its words
/// from `capstan` on (without a redirect).
struct CapstanLine {
    page: String,
    line: String,
    args: Vec<String>,
}

/// Every `capstan` command line in the shell blocks of the book and the README (synopses
/// like `capstan run [--plugins DIR]` left out).
fn capstan_lines() -> Result<Vec<CapstanLine>> {
    let mut found = Vec::new();
    for page in pages() {
        let shown = page
            .strip_prefix(workspace())
            .unwrap_or(&page)
            .display()
            .to_string();
        for line in book::shell_lines(&std::fs::read_to_string(&page)?) {
            for command in line
                .split(" && ")
                .flat_map(|c| c.split(" | "))
                .flat_map(|c| c.split("; "))
            {
                // A command put in the background (`capstan run … &`) is the same command.
                let command = command.trim().trim_end_matches('&').trim_end();
                let Some(words) = shlex::split(command) else {
                    continue;
                };
                // The program: the first word after any `NAME=value` assignments.
                let at = words.iter().take_while(|w| w.contains('=')).count();
                if !words
                    .get(at)
                    .is_some_and(|w| w == "capstan" || w.ends_with("/capstan"))
                    || words.iter().any(|w| w.starts_with("[-") || w == "...")
                {
                    continue;
                }
                found.push(CapstanLine {
                    page: shown.clone(),
                    line: line.clone(),
                    args: words[at..]
                        .iter()
                        .take_while(|w| !w.starts_with('>'))
                        .cloned()
                        .collect(),
                });
            }
        }
    }
    Ok(found)
}

#[test]
fn every_capstan_command_in_the_book_parses() -> Result<()> {
    let lines = capstan_lines()?;
    let mut wrong = Vec::new();
    for CapstanLine { page, line, args } in &lines {
        if let Err(e) = capstan::cli::command().try_get_matches_from(args) {
            use clap::error::ErrorKind;
            if !matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let first = e.to_string().lines().next().unwrap_or_default().to_string();
                wrong.push(format!("{page}: {line}\n    {first}"));
            }
        }
    }
    assert!(
        lines.len() > 15,
        "too few capstan commands found: {}",
        lines.len()
    );
    assert!(
        wrong.is_empty(),
        "commands the CLI does not take:\n{}",
        wrong.join("\n")
    );
    Ok(())
}

#[test]
fn every_offline_capstan_command_of_the_book_runs() -> Result<()> {
    // The plugins the commands name, built as the test script builds them.
    capstan_tests::plugin("echo");
    let mut ran = 0;
    let mut failed = Vec::new();
    for CapstanLine { page, line, args } in capstan_lines()? {
        // `test` and `inspect` need no cluster; a line whose files are the reader's own
        // (`build/greeter.wasm`, `echo.wasm`) rather than the repository's cannot run here.
        let offline = matches!(args.get(1).map(String::as_str), Some("test" | "inspect"));
        let files_here = args[1..]
            .iter()
            .filter(|a| !a.starts_with('-') && !a.contains("://"))
            .filter(|a| a.contains('/') || a.ends_with(".wasm") || a.ends_with(".yaml"))
            .all(|a| workspace().join(a).exists());
        let has_files = args.iter().any(|a| a.ends_with(".wasm"));
        if !offline || !files_here || !has_files {
            continue;
        }
        ran += 1;
        let out = std::process::Command::new(capstan_tests::capstan_bin())
            .args(&args[1..])
            .current_dir(workspace())
            .env_remove("RUST_LOG")
            .output()?;
        if !out.status.success() {
            failed.push(format!(
                "{page}: {line}\n    {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    anyhow::ensure!(ran >= 2, "too few offline capstan commands ran: {ran}");
    anyhow::ensure!(
        failed.is_empty(),
        "commands of the book that fail:\n{}",
        failed.join("\n")
    );
    Ok(())
}

/// Every `.rs` file's text under `dirs` (relative to the workspace), joined.
fn sources(dirs: &[&str]) -> Result<String> {
    let mut text = String::new();
    let mut todo: Vec<PathBuf> = dirs.iter().map(|d| workspace().join(d)).collect();
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                text.push_str(&std::fs::read_to_string(&path)?);
            }
        }
    }
    Ok(text)
}

/// The message a row of the errors page explains: its first cell's code.
fn message(row: &str) -> Option<&str> {
    let cell = row.strip_prefix("| `")?;
    Some(&cell[..cell.find("` |")?])
}

#[test]
fn every_message_the_errors_page_explains_is_one_the_host_writes() -> Result<()> {
    let page = std::fs::read_to_string(workspace().join("docs/reference/errors.md"))?;
    let source = sources(&[
        "host/src",
        "host/engine/src",
        "host/registry/src",
        "host/dev/src",
        "sdk/contract/src",
    ])?;
    let mut checked = 0;
    let mut missing = Vec::new();
    for message in page.lines().filter_map(message) {
        checked += 1;
        // What varies is `…` on the page and a `{…}` placeholder in the source, and a
        // message may be built from two (`…: signature refused: …`): every fixed part of
        // it, between those, must be in the source.
        for part in message.split('…').flat_map(|p| p.split(": ")) {
            let part = part.trim_matches(|c: char| c == ' ' || c == '(' || c == ')');
            if part.len() >= 4 && !source.contains(part) {
                missing.push(format!("{message}\n    not in the source: {part:?}"));
            }
        }
    }
    anyhow::ensure!(checked >= 30, "too few messages found: {checked}");
    anyhow::ensure!(
        missing.is_empty(),
        "the errors page explains messages the host no longer writes:\n{}",
        missing.join("\n")
    );
    Ok(())
}

#[test]
fn every_config_file_of_the_book_is_one_the_host_reads() -> Result<()> {
    let mut checked = 0;
    let mut wrong = Vec::new();
    for page in pages() {
        for block in book::blocks(&std::fs::read_to_string(&page)?, &["yaml"]) {
            // A `capstan run --config` file lists its plugins; the chart's values map them
            // by name. `<digest>` stands for a digest on the page.
            let block = block.replace("<digest>", &"0".repeat(64));
            let yaml: serde_json::Value = serde_saphyr::from_str(&block).unwrap_or_default();
            if !yaml["plugins"].is_array() {
                continue;
            }
            checked += 1;
            if let Err(e) = capstan::config::parse(&block) {
                wrong.push(format!("{}: {e:#}\n{block}", page.display()));
            }
        }
    }
    anyhow::ensure!(checked >= 2, "too few config files found: {checked}");
    anyhow::ensure!(
        wrong.is_empty(),
        "config files the host refuses:\n{}",
        wrong.join("\n")
    );
    Ok(())
}

/// `helm template` for a `helm install|upgrade` line of a page, in `dir`, where the
/// reader's files are made as the page makes them: a plugin is Echo, a values file is what
/// the page's own `capstan inspect --helm-values PLUGIN > FILE` (`made`) prints. `None` for
/// a line that is not one, or names a values file of the reader's own the page does not show.
fn template_args(words: &[String], made: &[(String, String)], dir: &Path) -> Result<Option<Vec<String>>> {
    if words.first().map(String::as_str) != Some("helm")
        || !matches!(words.get(1).map(String::as_str), Some("install" | "upgrade"))
    {
        return Ok(None);
    }
    let echo = capstan_tests::plugin("echo");
    for pair in words[2..].windows(2) {
        let (flag, value) = (pair[0].as_str(), &pair[1]);
        if flag == "--set-file" {
            if let Some((_, file)) = value.split_once('=').filter(|(_, f)| f.ends_with(".wasm")) {
                std::fs::copy(&echo, dir.join(file))?;
            }
        } else if flag == "-f" || flag == "--values" {
            let Some((plugin, _)) = made.iter().find(|(_, f)| f == value) else {
                return Ok(None);
            };
            std::fs::copy(&echo, dir.join(plugin))?;
            let out = std::process::Command::new(capstan_tests::capstan_bin())
                .args(["inspect", "--helm-values", plugin])
                .current_dir(dir)
                .output()?;
            anyhow::ensure!(out.status.success(), "capstan inspect --helm-values {plugin}");
            std::fs::write(dir.join(value), out.stdout)?;
        }
    }
    let args = std::iter::once("template".to_string()).chain(words[2..].iter().cloned());
    Ok(Some(args.collect()))
}

#[test]
fn every_helm_install_and_values_file_of_the_book_renders() -> Result<()> {
    let mut rendered = 0;
    let mut failed = Vec::new();
    let mut render = |dir: &Path, args: &[String], what: String| {
        rendered += 1;
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        match helm::helm_in(dir, &args, None) {
            Ok(out) if !out.is_empty() => {}
            Ok(_) => failed.push(format!("{what}\n    rendered nothing")),
            Err(e) => failed.push(format!("{what}\n    {}", e.trim())),
        }
    };
    for page in pages() {
        let text = std::fs::read_to_string(&page)?;
        let lines = book::shell_lines(&text);
        let dir = tempfile::tempdir()?;
        std::os::unix::fs::symlink(workspace().join("charts"), dir.path().join("charts"))?;
        let made: Vec<(String, String)> = lines
            .iter()
            .filter_map(|l| l.strip_prefix("capstan inspect --helm-values "))
            .filter_map(|l| l.split_once(" > "))
            .map(|(plugin, file)| (plugin.trim().to_string(), file.trim().to_string()))
            .collect();
        for line in &lines {
            let words = shlex::split(line).unwrap_or_default();
            if let Some(args) = template_args(&words, &made, dir.path())? {
                render(dir.path(), &args, format!("{}: {line}", page.display()));
            }
        }
        // Values files the page shows (the chart maps plugins by name; a config file lists them).
        for block in book::blocks(&text, &["yaml"]) {
            let yaml: serde_json::Value = serde_saphyr::from_str(&block).unwrap_or_default();
            if yaml["plugins"].is_object() {
                std::fs::write(dir.path().join("shown-values.yaml"), &block)?;
                let args =
                    ["template", "capstan", "charts/capstan", "-f", "shown-values.yaml"].map(String::from);
                render(
                    dir.path(),
                    &args,
                    format!("{}: values file\n{block}", page.display()),
                );
            }
        }
    }
    anyhow::ensure!(
        rendered >= 3,
        "too few helm commands and values files rendered: {rendered}"
    );
    anyhow::ensure!(
        failed.is_empty(),
        "helm commands of the book the chart refuses (as `helm template`):\n{}",
        failed.join("\n")
    );
    Ok(())
}

/// Every `cargo …` the book shows, in shell blocks and inline code.
fn cargo_lines(text: &str) -> Vec<String> {
    let inline = text
        .lines()
        .flat_map(|l| l.split('`').skip(1).step_by(2))
        .filter(|code| code.starts_with("cargo ") || code.contains(" cargo "))
        .map(str::to_string);
    book::shell_lines(text)
        .into_iter()
        .filter(|l| l.starts_with("cargo ") || l.contains(" cargo "))
        .chain(inline)
        .collect()
}

#[test]
fn every_cargo_command_of_the_book_names_packages_and_targets_that_exist() -> Result<()> {
    let out = std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["metadata", "--no-deps", "--format-version", "1", "--offline"])
        .current_dir(workspace())
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let metadata: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    // Each package's targets by kind ("test", "bench", ...), by package name.
    let packages: std::collections::BTreeMap<String, Vec<(String, String)>> = metadata["packages"]
        .as_array()
        .context("packages")?
        .iter()
        .map(|p| {
            let targets = p["targets"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|t| {
                    let name = t["name"].as_str().unwrap_or_default().to_string();
                    t["kind"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(move |k| (k.as_str().unwrap_or_default().to_string(), name.clone()))
                })
                .collect();
            (p["name"].as_str().unwrap_or_default().to_string(), targets)
        })
        .collect();
    let mut checked = 0;
    let mut wrong = Vec::new();
    for page in pages() {
        for line in cargo_lines(&std::fs::read_to_string(&page)?) {
            let Some(words) = shlex::split(&line) else {
                continue;
            };
            let mut package = None;
            for pair in words.windows(2) {
                match pair[0].as_str() {
                    "-p" | "--package" => {
                        package = Some(pair[1].clone());
                        if !packages.contains_key(&pair[1]) {
                            wrong.push(format!("{}: {line}: no package {}", page.display(), pair[1]));
                        }
                    }
                    flag @ ("--test" | "--bench") => {
                        let kind = &flag[2..];
                        let found = package
                            .as_ref()
                            .and_then(|p| packages.get(p))
                            .is_none_or(|targets| targets.iter().any(|(k, n)| k == kind && *n == pair[1]));
                        if !found {
                            wrong.push(format!(
                                "{}: {line}: no {kind} target {}",
                                page.display(),
                                pair[1]
                            ));
                        }
                    }
                    _ => continue,
                }
                checked += 1;
            }
        }
    }
    anyhow::ensure!(
        checked >= 5,
        "too few cargo packages and targets named: {checked}"
    );
    anyhow::ensure!(
        wrong.is_empty(),
        "cargo commands of the book that name nothing:\n{}",
        wrong.join("\n")
    );
    Ok(())
}
