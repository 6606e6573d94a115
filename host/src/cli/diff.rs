//! `capstan diff NEW.wasm`: what a plugin version would do to a live cluster, before it
//! does anything. Every parent of its kind is reconciled once by the controller `capstan
//! run` uses — same caches, validation, ownership claims and "would this write change
//! anything" — run as a [`Preview`]: each write is a server-side apply with `dryRun=All`,
//! so what is shown is what the API server would store. Nothing is written. Exit 0 when
//! nothing would change, 1 when something would, 2 when the diff could not tell.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Args, ValueEnum};
use kube::api::{Api, ListParams};

use super::PluginArgs;
use crate::config::PluginConfig;
use crate::controller::{self, Options};
use crate::engine::Reconcile;
use crate::key::ObjectKey;
use crate::preview::{Change, Finding, Preview};

/// How often the diff looks at whether every parent has been reconciled.
const POLL: Duration = Duration::from_millis(100);

/// Arguments of `capstan diff`.
#[derive(Args, Debug)]
pub struct DiffArgs {
    #[command(flatten)]
    plugin: PluginArgs,
    /// The live plugin's name, whose children and fields are compared [default: the
    /// plugin's own].
    #[arg(long)]
    name: Option<String>,
    /// The host's config file, for the entry of this plugin (its `name`, or its file's
    /// stem): settings, limits and allowances, as installed. `--settings` wins.
    #[arg(long, value_name = "FILE", conflicts_with = "config_map")]
    config: Option<PathBuf>,
    /// The same, read from the chart's ConfigMap (`NAMESPACE/NAME`, key `config.yaml`).
    #[arg(long, value_name = "NAMESPACE/NAME")]
    config_map: Option<String>,
    /// Only parents in this namespace.
    #[arg(long, short = 'n')]
    namespace: Option<String>,
    /// Only parents with these labels (a label selector, e.g. `tier=web,canary!=true`).
    #[arg(long, short = 'l')]
    selector: Option<String>,
    /// Reconciles at once (the host's default: no more load than the host itself).
    #[arg(long, default_value_t = crate::controller::DEFAULT_CONCURRENCY)]
    concurrency: u16,
    /// Give up (exit 2) when not every parent was reconciled by then.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10m")]
    timeout: Duration,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value_t = Output::Text)]
    output: Output,
}

/// How findings are printed.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum Output {
    /// One line per object, field changes indented under it, and a summary.
    Text,
    /// The findings and the summary as YAML.
    Yaml,
    /// The findings and the summary as JSON.
    Json,
}

/// Diff the plugin against the cluster the kubeconfig names.
pub fn run(args: DiffArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Runtime::new()?;
    let kube_config = runtime
        .block_on(kube::Config::infer())
        .map_err(|e| anyhow::anyhow!("no Kubernetes configuration: {e}"))?;
    // The client's connection pool lives in the runtime; plugins load outside it.
    let client = {
        let _inside = runtime.enter();
        kube::Client::try_from(kube_config).context("the Kubernetes client")?
    };
    let (path, memory) = args.plugin.component()?;
    let bare = args.plugin.load_bare(&path, memory)?;
    let name = args.name.clone().unwrap_or_else(|| bare.metadata().name.clone());
    let entry = runtime.block_on(installed(&args, &client, &name))?;
    let mut options = options(&args, entry.as_ref())?;
    let plugin = bare
        .with_settings(&options.settings)
        .and_then(|p| p.named(args.name.as_deref()))
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    capstan_contract::declared::declared(plugin.metadata(), &options.allow)
        .map_err(|why| anyhow::anyhow!("{}: {why}", path.display()))?;
    let preview = Arc::new(Preview::collecting(&name));
    options.preview = Some(preview.clone());
    let plugin: Arc<dyn Reconcile> = Arc::new(plugin);
    let findings = runtime.block_on(reconcile_all(client, plugin, options, &args, &preview))?;
    report(&findings, args.output)
}

/// The host config's entry for `name`: from `--config`, or the chart's ConfigMap.
async fn installed(
    args: &DiffArgs,
    client: &kube::Client,
    name: &str,
) -> anyhow::Result<Option<PluginConfig>> {
    let config = match (&args.config, &args.config_map) {
        (Some(file), _) => crate::config::load(file)?,
        (None, Some(at)) => {
            let (ns, cm) = at
                .split_once('/')
                .with_context(|| format!("--config-map {at}: expected NAMESPACE/NAME"))?;
            let api: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), ns);
            let map = api.get(cm).await.with_context(|| format!("ConfigMap {at}"))?;
            let text = map
                .data
                .and_then(|mut d| d.remove("config.yaml"))
                .with_context(|| format!("ConfigMap {at} has no config.yaml"))?;
            crate::config::parse(&text).with_context(|| format!("ConfigMap {at}"))?
        }
        (None, None) => return Ok(None),
    };
    let entry = config.plugins.into_iter().find(|e| {
        e.name.as_deref() == Some(name) || (e.name.is_none() && e.path.file_stem().is_some_and(|s| s == name))
    });
    anyhow::ensure!(
        entry.is_some(),
        "the host's config has no entry for plugin {name}"
    );
    Ok(entry)
}

/// The options `capstan run` would give the plugin, as a preview.
fn options(args: &DiffArgs, entry: Option<&PluginConfig>) -> anyhow::Result<Options> {
    let defaults = Options {
        namespace: args.namespace.clone(),
        parent_labels: args.selector.clone(),
        concurrency: args.concurrency,
        // Once each: a diff never comes back to a parent by itself.
        resync: Duration::from_secs(24 * 3600),
        ..Options::default()
    };
    let mut options = match entry {
        Some(e) => crate::host::entry_options(e, &defaults)?,
        None => defaults,
    };
    options.concurrency = args.concurrency;
    if let Some(file) = &args.plugin.settings {
        options.settings = super::settings_file(file)?;
    }
    Ok(options)
}

/// Run the preview until every listed parent was reconciled once; its findings.
async fn reconcile_all(
    client: kube::Client,
    plugin: Arc<dyn Reconcile>,
    options: Options,
    args: &DiffArgs,
    preview: &Preview,
) -> anyhow::Result<Vec<(ObjectKey, Vec<Finding>)>> {
    let parents = list(&client, &*plugin, &options).await?;
    eprintln!(
        "diff: {} {} to reconcile",
        parents.len(),
        plugin.metadata().parent.kind
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (synced, _) = tokio::sync::oneshot::channel();
    let (_keep, channel) = tokio::sync::watch::channel(plugin);
    let tenure = crate::lease::Tenure::always();
    let memory = controller::Memory::default();
    let shutdown = async move {
        let _ = stopped.await;
    };
    let running = tokio::spawn(controller::run(
        client, channel, options, tenure, shutdown, synced, memory,
    ));
    let waited = wait(&parents, preview, args.timeout, &running).await;
    let _ = stop.send(());
    running.await.context("the diff's controller")??;
    waited?;
    Ok(preview
        .findings()
        .into_iter()
        .filter(|(k, _)| parents.contains(k))
        .collect())
}

/// The parents the diff covers, listed as the controller will see them.
async fn list(
    client: &kube::Client,
    plugin: &dyn Reconcile,
    options: &Options,
) -> anyhow::Result<HashSet<ObjectKey>> {
    let kind = &plugin.metadata().parent;
    let resource = controller::resolve(client, kind).await?;
    let namespace = options.namespace.as_deref().filter(|_| kind.namespaced);
    let api = crate::apply::api(client, &resource, namespace);
    let mut params = ListParams::default();
    if let Some(labels) = &options.parent_labels {
        params = params.labels(labels);
    }
    let listed = api
        .list_metadata(&params)
        .await
        .with_context(|| format!("listing {}", resource.plural))?;
    Ok(listed.items.iter().map(ObjectKey::of).collect())
}

/// Wait until every parent has been reconciled (or is gone), saying how far on stderr.
async fn wait(
    parents: &HashSet<ObjectKey>,
    preview: &Preview,
    timeout: Duration,
    running: &tokio::task::JoinHandle<anyhow::Result<()>>,
) -> anyhow::Result<()> {
    let (start, mut said) = (Instant::now(), Instant::now());
    loop {
        let done = parents.iter().filter(|p| preview.has_reconciled(p)).count();
        if done == parents.len() {
            return Ok(());
        }
        anyhow::ensure!(!running.is_finished(), "the diff's controller stopped early");
        anyhow::ensure!(
            start.elapsed() < timeout,
            "{done} of {} parents reconciled in {timeout:?}; the rest could not be (see the log)",
            parents.len()
        );
        if said.elapsed() >= Duration::from_secs(2) {
            eprintln!("diff: {done}/{} reconciled", parents.len());
            said = Instant::now();
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Print the findings; the exit code says whether anything would change.
fn report(findings: &[(ObjectKey, Vec<Finding>)], output: Output) -> anyhow::Result<ExitCode> {
    let all: Vec<&Finding> = findings.iter().flat_map(|(_, f)| f).collect();
    let summary = Summary::of(findings);
    match output {
        Output::Text => {
            for f in &all {
                print_text(f);
            }
            println!("{}", summary.line());
        }
        Output::Yaml | Output::Json => {
            let doc = serde_json::json!({ "findings": all, "summary": summary });
            let text = match output {
                Output::Json => serde_json::to_string_pretty(&doc)?,
                _ => serde_saphyr::to_string(&doc)?,
            };
            println!("{text}");
        }
    }
    Ok(ExitCode::from(summary.exit()))
}

fn print_text(f: &Finding) {
    let mark = match f.change {
        Change::Create => "+",
        Change::Change => "~",
        Change::Delete => "-",
        Change::Refuse => "!",
        Change::Fail => "x",
    };
    let verb = match f.change {
        Change::Create => "create",
        Change::Change => "change",
        Change::Delete => "prune",
        Change::Refuse => "refused",
        Change::Fail => "failed",
    };
    let reason = f.reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default();
    println!(
        "{mark} {verb} {} {} (parent {}){reason}",
        f.kind, f.object, f.parent
    );
    if f.change == Change::Change {
        for field in &f.fields {
            println!("    {field}");
        }
    }
}

/// Counts of what would happen.
#[derive(serde::Serialize, Default)]
struct Summary {
    parents: usize,
    changing: usize,
    counts: BTreeMap<&'static str, usize>,
}

impl Summary {
    fn of(findings: &[(ObjectKey, Vec<Finding>)]) -> Summary {
        let mut summary = Summary {
            parents: findings.len(),
            changing: findings.iter().filter(|(_, f)| !f.is_empty()).count(),
            counts: BTreeMap::new(),
        };
        for change in [
            Change::Create,
            Change::Change,
            Change::Delete,
            Change::Refuse,
            Change::Fail,
        ] {
            let n = findings
                .iter()
                .flat_map(|(_, f)| f)
                .filter(|f| f.change == change)
                .count();
            summary
                .counts
                .insert(change.label().trim_start_matches("would-"), n);
        }
        summary
    }

    fn line(&self) -> String {
        let counts: Vec<String> = self.counts.iter().map(|(k, v)| format!("{v} {k}")).collect();
        format!(
            "{} parents reconciled: {} would change ({})",
            self.parents,
            self.changing,
            counts.join(", ")
        )
    }

    /// 2 when some reconcile failed (the diff cannot tell), 1 when anything would change.
    fn exit(&self) -> u8 {
        if self.counts.get("fail").copied().unwrap_or(0) > 0 {
            2
        } else if self.changing > 0 {
            1
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(parent: &str, change: Change) -> Finding {
        let key = ObjectKey::new(Some("ns"), parent);
        Finding::new(&key, change, "Job", format!("ns/{parent}-job"))
    }

    #[test]
    fn the_exit_code_says_nothing_something_or_could_not_tell() {
        let key = |n: &str| ObjectKey::new(Some("ns"), n);
        let quiet = vec![(key("a"), vec![]), (key("b"), vec![])];
        assert_eq!(Summary::of(&quiet).exit(), 0);
        assert_eq!(
            Summary::of(&quiet).line(),
            "2 parents reconciled: 0 would change (0 change, 0 create, 0 delete, 0 fail, 0 refuse)"
        );
        let moved = vec![
            (
                key("a"),
                vec![found("a", Change::Create), found("a", Change::Delete)],
            ),
            (key("b"), vec![]),
        ];
        let summary = Summary::of(&moved);
        assert_eq!(summary.exit(), 1);
        assert_eq!(summary.changing, 1, "one parent, two objects");
        assert_eq!(summary.counts["create"], 1);
        let failed = vec![
            (key("a"), vec![found("a", Change::Fail)]),
            (key("b"), vec![found("b", Change::Change)]),
        ];
        assert_eq!(
            Summary::of(&failed).exit(),
            2,
            "a diff that could not tell is no pass"
        );
    }
}
