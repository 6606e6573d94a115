//! `capstan test`: run a compiled plugin offline, in the real sandbox, on fixture files —
//! what `kwctl run` and `crossplane render` are for their ecosystems.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use serde_json::{Value, json};

use super::input;
use crate::engine::{DispatchError, Metadata, Plugin, Response};
use crate::validate::{self, Allowances};

/// Arguments of `capstan test`.
#[derive(Args, Debug)]
pub struct TestArgs {
    #[command(flatten)]
    plugin: super::PluginArgs,
    #[command(flatten)]
    fixtures: input::FixtureArgs,
    /// Reconcile as if the parent were being deleted (finalizer cleanup).
    #[arg(long)]
    finalizing: bool,
    /// Expected output; exit 1 with a diff when the actual output differs semantically.
    #[arg(long)]
    expect: Option<PathBuf>,
    /// Re-run the reconciles `capstan run --record DIR` recorded (those of this plugin's
    /// parent kind) and print each object whose answer changed; exit 1 if any did.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["parent", "children", "related", "expect", "finalizing", "settings"])]
    replay: Option<PathBuf>,
    /// Cluster-scoped child kinds the plugin may create (`Kind` or `plural.group`),
    /// repeatable: the grant `capstan run --allow-cluster-kind` gives.
    #[arg(long = "allow-cluster-kind", value_name = "KIND")]
    allow_cluster_kinds: Vec<String>,
    /// Namespaces where children of a cluster-scoped parent may go, repeatable (`*`: all):
    /// the grant `capstan run --namespace` or a plugin's `allowNamespaces` gives.
    #[arg(long = "allow-namespace", value_name = "NS")]
    allow_namespaces: Vec<String>,
    /// A Namespace parent's children may go into that Namespace: the grant a plugin's
    /// `allowOwnNamespace` gives.
    #[arg(long)]
    allow_own_namespace: bool,
    /// The plugin may declare Secret as parent, child or related kind: the grant a
    /// plugin's `allowSecrets` gives.
    #[arg(long)]
    allow_secrets: bool,
    /// The plugin may declare its own parent kind as a child: the grant a plugin's
    /// `allowOwnKind` gives.
    #[arg(long)]
    allow_own_kind: bool,
}

pub fn run(args: TestArgs) -> anyhow::Result<ExitCode> {
    for ns in &args.allow_namespaces {
        validate::namespace_grant(ns).map_err(|e| anyhow::anyhow!("--allow-namespace {e}"))?;
    }
    if let Some(dir) = &args.replay {
        return super::replay::run(&args.plugin, &args.allowances(), dir);
    }
    if args.plugin.plugin.is_none() && args.fixtures.parent.is_none() {
        return cases(&args);
    }
    let (path, plugin) = args.plugin.load()?;
    let check = Check {
        plugin: &plugin,
        path: &path,
        finalizing: args.finalizing,
        allow: &args.allowances(),
    };
    let actual = check.outcomes(&args.fixtures)?;
    print!("{}", to_yaml(&actual)?);
    let Some(expect) = &args.expect else {
        // A refused response is a plugin bug: `capstan run` would write nothing of it.
        let refused = actual
            .iter()
            .filter(|o| o["error"]["refused"].is_string())
            .count();
        if refused > 0 {
            eprintln!("refused: `capstan run` would write nothing of {refused} response(s)");
            return Ok(ExitCode::from(1));
        }
        return Ok(ExitCode::SUCCESS);
    };
    Ok(match compare(expect, actual)? {
        None => {
            eprintln!("ok: output matches {}", expect.display());
            ExitCode::SUCCESS
        }
        Some(diff) => {
            eprintln!("mismatch: output differs from {}\n{diff}", expect.display());
            ExitCode::from(1)
        }
    })
}

impl TestArgs {
    fn allowances(&self) -> Allowances {
        Allowances {
            cluster_kinds: self.allow_cluster_kinds.clone(),
            namespaces: self.allow_namespaces.clone(),
            own_namespace: self.allow_own_namespace,
            secrets: self.allow_secrets,
            own_kind: self.allow_own_kind,
        }
    }
}

/// `capstan test` in a plugin project (or in each member of a workspace): every case of
/// its capstan.toml against the component its build wrote; one line per case, the diff of
/// each that differs.
fn cases(args: &TestArgs) -> anyhow::Result<ExitCode> {
    let projects = crate::project::Project::find_all(Path::new("."))?;
    let total: usize = projects.iter().map(|p| p.cases.len()).sum();
    if total == 0 {
        let dirs: Vec<String> = (projects.iter())
            .map(|p| p.dir.join(crate::project::FILE).display().to_string())
            .collect();
        anyhow::bail!("{}: no [[case]] to run (or give --parent)", dirs.join(", "));
    }
    let mut failed = 0;
    for project in projects.iter().filter(|p| !p.cases.is_empty()) {
        failed += project_cases(args, project)?;
    }
    println!("{total} cases: {} passed, {failed} failed", total - failed);
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// One project's cases, each reported; how many differ from their golden files.
fn project_cases(args: &TestArgs, project: &crate::project::Project) -> anyhow::Result<usize> {
    let path = project.output();
    anyhow::ensure!(
        path.is_file(),
        "{} is not built yet: run `capstan build`",
        path.display()
    );
    let memory = args
        .plugin
        .memory_mib
        .or(project.plugin.memory_mib)
        .unwrap_or(super::MEMORY_MIB);
    let mut failed = 0;
    for case in &project.cases {
        let plugin = args.plugin.load_from(&path, memory, case.settings.as_deref())?;
        let fixtures = input::FixtureArgs {
            parent: Some(case.parent.clone()),
            children: case.children.clone(),
            related: case.related.clone(),
            now: match &case.now {
                Some(now) => input::parse_now(now).map_err(|e| anyhow::anyhow!("case {}: {e}", case.name))?,
                None => capstan_contract::FIXTURE_NOW.parse()?,
            },
        };
        let check = Check {
            plugin: &plugin,
            path: &path,
            finalizing: case.finalizing || args.finalizing,
            allow: &args.allowances(),
        };
        let actual = check
            .outcomes(&fixtures)
            .with_context(|| format!("case {}", case.name))?;
        match compare(&case.expect, actual)? {
            None => println!("ok: {}", case.name),
            Some(diff) => {
                failed += 1;
                println!(
                    "mismatch: {} differs from {}\n{diff}",
                    case.name,
                    case.expect.display()
                );
            }
        }
    }
    Ok(failed)
}

/// One plugin checked on fixtures as `capstan run` would call and judge it.
struct Check<'a> {
    plugin: &'a Plugin,
    path: &'a Path,
    finalizing: bool,
    allow: &'a Allowances,
}

impl Check<'_> {
    /// The plugin's outcome for each parent of `fixtures`.
    fn outcomes(&self, fixtures: &input::FixtureArgs) -> anyhow::Result<Vec<Value>> {
        let (plugin, allow) = (self.plugin, self.allow);
        // What `capstan run` refuses at load and at discovery, in its words.
        capstan_contract::declared::offline(plugin.metadata(), allow)
            .map_err(|e| anyhow::anyhow!("{}: {e}", self.path.display()))?;
        let children = fixtures.children()?;
        let related = fixtures.related()?;
        fixtures
            .parents()?
            .into_iter()
            .map(|parent| {
                let made = input::request(
                    plugin,
                    parent.clone(),
                    children.clone(),
                    &related,
                    fixtures.now,
                    self.finalizing,
                    allow,
                );
                match made {
                    Ok(request) => outcome(plugin.metadata(), &parent, plugin.reconcile(&request), allow),
                    Err(input::Unrequestable::Dispatch(e)) => {
                        outcome(plugin.metadata(), &parent, Err(e), allow)
                    }
                    Err(input::Unrequestable::Refused(m)) => {
                        Ok(json!({ "error": { "refused": format!("related: {m}") } }))
                    }
                }
            })
            .collect()
    }
}

/// `None` when `actual` means what the file `expect` holds; else their unified diff.
fn compare(expect: &Path, actual: Vec<Value>) -> anyhow::Result<Option<String>> {
    let expected = input::documents(expect)?;
    if canonical(expected.clone()) == canonical(actual.clone()) {
        return Ok(None);
    }
    Ok(Some(
        similar::TextDiff::from_lines(&to_yaml(&expected)?, &to_yaml(&actual)?)
            .unified_diff()
            .header(&expect.display().to_string(), "actual")
            .to_string(),
    ))
}

/// A response the host would accept, or the error as data so fixtures can expect
/// failures too: the plugin's own, a fault, or `refused` — the response breaks the rules
/// `capstan run` checks before writing anything (the same [`validate::response`]).
fn outcome(
    metadata: &Metadata,
    parent: &Value,
    result: Result<Response, DispatchError>,
    allow: &Allowances,
) -> anyhow::Result<Value> {
    Ok(match result {
        Ok(response) => {
            let namespace = validate::parent_namespace(metadata, parent, allow);
            let rest = validate::Rest {
                event_reasons: response.events.iter().map(|e| e.reason.as_str()),
                parent: &response.parent,
            };
            match validate::response(metadata, namespace, response.children.clone(), rest, allow) {
                Ok(_) => serde_json::to_value(response).context("serializing the response")?,
                Err(refusal) => json!({ "error": { "refused": refusal.to_string() } }),
            }
        }
        failed => crate::record::outcome(&failed),
    })
}

fn canonical(mut docs: Vec<Value>) -> Vec<Value> {
    docs.iter_mut().for_each(Value::sort_all_objects);
    docs
}

fn to_yaml(docs: &[Value]) -> anyhow::Result<String> {
    let mut out = String::new();
    for doc in canonical(docs.to_vec()) {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&doc)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Kind;

    fn kind(group: &str, kind: &str, plural: &str, namespaced: bool) -> Kind {
        Kind {
            group: group.into(),
            version: "v1".into(),
            kind: kind.into(),
            plural: plural.into(),
            namespaced,
        }
    }

    fn metadata() -> Metadata {
        Metadata {
            name: "p".into(),
            version: "0".into(),
            parent: kind("example.com", "Parent", "parents", true),
            children: vec![
                kind("", "ConfigMap", "configmaps", true),
                kind("", "Namespace", "namespaces", false),
            ],
            related: vec![],
            settings_schema: None,
            finalizer: None,
        }
    }

    fn answer(children: Vec<Value>, allow: &Allowances) -> Value {
        let parent = json!({"metadata": {"name": "a", "namespace": "demo"}});
        let response = Response {
            children,
            ..Response::default()
        };
        outcome(&metadata(), &parent, Ok(response), allow).unwrap()
    }

    #[test]
    fn an_accepted_response_is_printed_as_the_plugin_returned_it() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
        let out = answer(vec![cm.clone()], &Allowances::default());
        assert_eq!(out["children"][0], cm, "no namespace filled in: {out}");
    }

    #[test]
    fn a_response_capstan_run_refuses_is_an_error_as_data() {
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}});
        let out = answer(vec![secret], &Allowances::default());
        assert_eq!(
            out,
            json!({"error": {"refused": "child 0 (Secret/s): v1 Secret is not a declared child kind"}})
        );
        // Under a namespaced parent, no grant makes a cluster-scoped child collectable.
        let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n"}});
        let allow = Allowances {
            cluster_kinds: vec!["Namespace".into()],
            ..Allowances::default()
        };
        let refused = answer(vec![namespace], &allow);
        let refused = refused["error"]["refused"].as_str().unwrap_or_default();
        assert!(refused.contains("OwnerRefInvalidNamespace"), "{refused}");
    }

    #[test]
    fn an_event_reason_capstan_run_would_not_record_refuses_the_response() {
        let parent = json!({"metadata": {"name": "a", "namespace": "demo"}});
        let event = |reason: &str| crate::engine::Event {
            event_type: crate::engine::EventType::Normal,
            reason: reason.into(),
            message: "m".into(),
        };
        let response = Response {
            events: vec![event("Fine"), event("not fine")],
            ..Response::default()
        };
        let out = outcome(&metadata(), &parent, Ok(response), &Allowances::default()).unwrap();
        let refused = out["error"]["refused"].as_str().unwrap_or_default();
        assert!(
            refused.starts_with("event 1: reason \"not fine\" is not CamelCase"),
            "{out}"
        );
    }

    #[test]
    fn plugin_errors_are_not_validated() {
        let parent = json!({"metadata": {"name": "a", "namespace": "demo"}});
        let fatal = Err(DispatchError::Fatal("no".into()));
        let out = outcome(&metadata(), &parent, fatal, &Allowances::default()).unwrap();
        assert_eq!(out, json!({"error": {"fatal": "no"}}));
    }
}
