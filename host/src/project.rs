//! A plugin project: its `capstan.toml` names the plugin, its language, how to build it,
//! where the build puts the component and which golden cases it must pass, so `capstan
//! build` and `capstan test` work the same for a plugin in any language (as `spin build`
//! does for Spin apps).
//!
//! ```toml
//! [plugin]
//! name = "echo"
//! language = "python"            # rust | python | js
//! build = "sh build.sh"          # run with `sh -c` in the project's directory
//! output = "build/echo.wasm"     # what the build writes
//! memory-mib = 128               # linear memory per call for `capstan test` and `bench`
//! cases = "golden/cases.toml"    # more [[case]] entries, paths relative to that file
//!
//! [[case]]
//! name = "new"
//! parent = "fixtures/echo.yaml"
//! children = []                  # observed children, as `capstan test --children`
//! related = []                   # objects the plugin may read, as `--related`
//! settings = "fixtures/settings.yaml"
//! now = "2026-11-24T09:30:00Z"
//! expect = "golden/new.yaml"
//! ```
//!
//! A directory of several plugins (what `capstan import` makes of a directory holding
//! several controllers) is a workspace: its `capstan.toml` lists the members' directories,
//! each a project of its own, and `capstan build` and `capstan test` there do each one.
//!
//! ```toml
//! [workspace]
//! members = ["on-delete-demo", "recreate-demo"]
//! ```

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Deserialize;

/// The project file's name, looked for in the working directory and its parents.
pub const FILE: &str = "capstan.toml";

/// A plugin's language: what `capstan new` scaffolds and how a project builds by default.
#[derive(Deserialize, Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Language {
    /// Rust with `capstan-sdk`, built by cargo for `wasm32-wasip2`.
    Rust,
    /// Python with the `capstan_sdk` package, built by componentize-py.
    Python,
    /// JavaScript with `@capstan/sdk`, built by componentize-js.
    Js,
}

/// The `[plugin]` table.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Plugin {
    /// The plugin's name, as its metadata gives it: required in the file, read by no
    /// command yet (the built component's metadata is what the host goes by).
    #[allow(dead_code)]
    pub name: String,
    /// The language it is written in.
    pub language: Language,
    /// The build command; Rust projects default to cargo's plugin build.
    pub build: Option<String>,
    /// The component the build writes, relative to the project.
    pub output: PathBuf,
    /// Linear memory per call when testing or benchmarking, in MiB.
    pub memory_mib: Option<usize>,
    /// A file of more `[[case]]` entries.
    pub cases: Option<PathBuf>,
}

/// One golden case: `capstan test` of these fixtures must answer `expect`.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct Case {
    /// What the case is called in `capstan test`'s output.
    pub name: String,
    /// The parent object(s).
    pub parent: PathBuf,
    /// Observed children.
    #[serde(default)]
    pub children: Vec<PathBuf>,
    /// Objects the plugin may read.
    #[serde(default)]
    pub related: Vec<PathBuf>,
    /// The plugin's settings.
    pub settings: Option<PathBuf>,
    /// The time the plugin is told it is (RFC 3339).
    pub now: Option<String>,
    /// Reconcile as if the parent were being deleted.
    #[serde(default)]
    pub finalizing: bool,
    /// The expected output.
    pub expect: PathBuf,
}

impl Case {
    /// The case with its paths made relative to `dir` (the file that holds it).
    fn under(mut self, dir: &Path) -> Case {
        let join = |p: &PathBuf| dir.join(p);
        self.parent = join(&self.parent);
        self.children = self.children.iter().map(join).collect();
        self.related = self.related.iter().map(join).collect();
        self.settings = self.settings.as_ref().map(join);
        self.expect = join(&self.expect);
        self
    }
}

/// The `[workspace]` table.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct Workspace {
    /// The members' directories, relative to the workspace's.
    members: Vec<PathBuf>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProjectFile {
    plugin: Option<Plugin>,
    workspace: Option<Workspace>,
    #[serde(default)]
    case: Vec<Case>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CasesFile {
    #[serde(default)]
    case: Vec<Case>,
}

/// A loaded `capstan.toml`, its paths resolved.
#[derive(Debug)]
pub struct Project {
    /// The directory holding `capstan.toml`.
    pub dir: PathBuf,
    /// The `[plugin]` table.
    pub plugin: Plugin,
    /// Every case, inline and from `cases`.
    pub cases: Vec<Case>,
}

impl Project {
    /// The project whose `capstan.toml` is in `start` or the nearest of its parents.
    pub fn find(start: &Path) -> anyhow::Result<Project> {
        Project::load(&nearest(start)?)
    }

    /// The projects of the nearest `capstan.toml`: the project, or a workspace's members.
    pub fn find_all(start: &Path) -> anyhow::Result<Vec<Project>> {
        let path = nearest(start)?;
        let file: ProjectFile = read(&path)?;
        let Some(workspace) = file.workspace.filter(|_| file.plugin.is_none()) else {
            return Ok(vec![Project::load(&path)?]);
        };
        anyhow::ensure!(
            !workspace.members.is_empty() && file.case.is_empty(),
            "{}: a [workspace] lists its members and holds no [[case]]",
            path.display()
        );
        let dir = path.parent().unwrap_or(Path::new("."));
        (workspace.members.iter())
            .map(|m| Project::load(&dir.join(m).join(FILE)))
            .collect()
    }

    /// The project described by the file at `path`.
    pub fn load(path: &Path) -> anyhow::Result<Project> {
        let dir = path.parent().unwrap_or(Path::new(".")).to_path_buf();
        let file: ProjectFile = read(path)?;
        let plugin = match (file.plugin, file.workspace) {
            (Some(plugin), None) => plugin,
            (None, Some(w)) => {
                let members: Vec<String> = w.members.iter().map(|m| m.display().to_string()).collect();
                anyhow::bail!(
                    "{} is a workspace ({}): run this in one of its members; `capstan build` and `capstan test` run in all",
                    path.display(),
                    members.join(", ")
                )
            }
            (Some(_), Some(_)) => anyhow::bail!("{}: [plugin] or [workspace], not both", path.display()),
            (None, None) => anyhow::bail!("{}: no [plugin] table", path.display()),
        };
        let mut cases: Vec<Case> = file.case.into_iter().map(|c| c.under(&dir)).collect();
        if let Some(more) = &plugin.cases {
            let more = dir.join(more);
            let listed: CasesFile = read(&more)?;
            let base = more.parent().unwrap_or(Path::new("."));
            cases.extend(listed.case.into_iter().map(|c| c.under(base)));
        }
        if let Some(name) = first_duplicate(&cases) {
            anyhow::bail!("{}: two cases are named {name:?}", path.display());
        }
        Ok(Project { dir, plugin, cases })
    }

    /// The component the build writes.
    pub fn output(&self) -> PathBuf {
        self.dir.join(&self.plugin.output)
    }

    /// The command that builds the plugin.
    pub fn build_command(&self) -> anyhow::Result<String> {
        match (&self.plugin.build, self.plugin.language) {
            (Some(command), _) => Ok(command.clone()),
            (None, Language::Rust) => Ok(RUST_BUILD.to_string()),
            (None, language) => anyhow::bail!(
                "{}: a {language:?} plugin needs `build` in [plugin]",
                self.dir.join(FILE).display()
            ),
        }
    }

    /// Run the build in the project's directory; the component it wrote.
    pub fn build(&self) -> anyhow::Result<PathBuf> {
        let command = self.build_command()?;
        let output = self.output();
        // A stale component must not pass for a fresh one when the build writes nothing.
        let before = std::fs::metadata(&output).and_then(|m| m.modified()).ok();
        let status = std::process::Command::new("sh")
            .arg("-c")
            .arg(&command)
            .current_dir(&self.dir)
            .status()
            .with_context(|| format!("cannot run `sh -c {command:?}`"))?;
        anyhow::ensure!(status.success(), "`{command}` failed ({status})");
        let after = std::fs::metadata(&output)
            .and_then(|m| m.modified())
            .map_err(|_| anyhow::anyhow!("`{command}` wrote no {}", output.display()))?;
        anyhow::ensure!(
            before.is_none_or(|b| after > b),
            "`{command}` left {} as it was",
            output.display()
        );
        Ok(output)
    }
}

/// The nearest `capstan.toml`: in `start` or one of its parents.
fn nearest(start: &Path) -> anyhow::Result<PathBuf> {
    let start = std::path::absolute(start).with_context(|| format!("cannot resolve {}", start.display()))?;
    (start.ancestors())
        .map(|dir| dir.join(FILE))
        .find(|file| file.is_file())
        .with_context(|| {
            format!(
                "no {FILE} in {} or its parents: give the plugin's .wasm, or run in a plugin project (`capstan new`)",
                start.display()
            )
        })
}

/// Cargo's build of a Rust plugin: the profile `capstan new` writes, for WASI 0.2.
const RUST_BUILD: &str = "cargo build --profile plugin --target wasm32-wasip2";

fn read<T: serde::de::DeserializeOwned>(path: &Path) -> anyhow::Result<T> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    toml::from_str(&text).map_err(|e| {
        let line = e.message().lines().next().unwrap_or_default().to_string();
        let at = e.span().map(|s| text[..s.start].lines().count().max(1));
        match at {
            Some(n) => anyhow::anyhow!("{}:{n}: {line}", path.display()),
            None => anyhow::anyhow!("{}: {line}", path.display()),
        }
    })
}

fn first_duplicate(cases: &[Case]) -> Option<&str> {
    let mut seen = std::collections::HashSet::new();
    cases
        .iter()
        .map(|c| c.name.as_str())
        .find(|name| !seen.insert(*name))
}

#[cfg(test)]
mod tests;
