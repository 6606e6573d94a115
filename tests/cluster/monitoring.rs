//! The chart's alerts and dashboard (`charts/capstan/monitoring`): `promtool` checks the
//! rules and runs their unit tests (every alert firing, and silent on a healthy twin);
//! every expression of the rules and the dashboard names only metrics the host exports;
//! every alert has its runbook; the chart ships both files unchanged; and a real
//! Prometheus scraping a host on the local plane, while a plugin faults, has data for every
//! panel and every metric the alerts read, and holds the fault alert.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result};
use capstan_tests::host::{
    echo, echo_resource, eventually, hostile_crd, hostile_resource, install_plugin_crd,
};
use capstan_tests::{plugin, workspace};
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::Value;

fn monitoring() -> PathBuf {
    workspace().join("charts/capstan/monitoring")
}

/// `promtool ARGS` in the monitoring directory; its output, or why it failed.
fn promtool(args: &[&str]) -> Result<String> {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(monitoring())
        .output()
        .context("promtool (Debian's prometheus package; scripts/node-packages.sh installs it)")?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    anyhow::ensure!(out.status.success(), "promtool {}:\n{text}", args.join(" "));
    Ok(text)
}

#[test]
fn the_rules_pass_promtool_and_their_unit_tests() -> Result<()> {
    let checked = promtool(&["check", "rules", "alerts.yaml"])?;
    assert!(checked.contains("SUCCESS"), "{checked}");
    let tested = promtool(&["test", "rules", "alerts_test.yaml"])?;
    assert!(tested.contains("SUCCESS"), "{tested}");
    // Every alert has a case in the unit tests.
    let cases = std::fs::read_to_string(monitoring().join("alerts_test.yaml"))?;
    for alert in alerts()?.iter().map(|a| a.0.clone()) {
        assert!(
            cases.contains(&format!("alertname: {alert}")),
            "{alert} has no promtool test"
        );
    }
    Ok(())
}

/// Every alert of alerts.yaml: name and expression.
fn alerts() -> Result<Vec<(String, String)>> {
    let rules: Value = serde_saphyr::from_str(&std::fs::read_to_string(monitoring().join("alerts.yaml"))?)?;
    let mut found = Vec::new();
    for group in rules["groups"].as_array().context("groups")? {
        for rule in group["rules"].as_array().context("rules")? {
            let name = rule["alert"].as_str().context("an alert name")?;
            let expr = rule["expr"].as_str().context("an expression")?;
            found.push((name.to_string(), expr.to_string()));
        }
    }
    Ok(found)
}

/// Every query of the dashboard: its panels' targets and its variables'.
fn dashboard_queries(dashboard: &Value) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for panel in dashboard["panels"].as_array().into_iter().flatten() {
        let title = panel["title"].as_str().unwrap_or_default();
        for target in panel["targets"].as_array().into_iter().flatten() {
            found.push((
                title.to_string(),
                target["expr"].as_str().unwrap_or_default().to_string(),
            ));
        }
    }
    for variable in dashboard["templating"]["list"].as_array().into_iter().flatten() {
        if let Some(query) = variable["query"]["query"].as_str() {
            found.push((
                format!("${}", variable["name"].as_str().unwrap_or_default()),
                query.to_string(),
            ));
        }
    }
    found
}

fn dashboard() -> Result<Value> {
    Ok(serde_json::from_str(&std::fs::read_to_string(
        monitoring().join("dashboard.json"),
    )?)?)
}

/// The series names of every metric the host's registry holds.
fn exported() -> BTreeSet<String> {
    capstan::ops::metrics::get()
        .described()
        .iter()
        .flat_map(|d| d.series())
        .collect()
}

/// The metric names an expression reads: every identifier with one of the host's prefixes.
fn metrics_read(expr: &str) -> BTreeSet<String> {
    expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter(|w| {
            [
                "capstan_",
                "controller_runtime_",
                "workqueue_",
                "leader_election_",
            ]
            .iter()
            .any(|p| w.starts_with(p))
        })
        .map(str::to_string)
        .collect()
}

#[test]
fn every_expression_reads_only_metrics_the_host_exports() -> Result<()> {
    let exported = exported();
    assert!(exported.len() > 30, "too few metrics read: {exported:?}");
    let dashboard = dashboard()?;
    let queries = dashboard_queries(&dashboard);
    assert!(queries.len() > 20, "too few dashboard queries: {}", queries.len());
    let mut read = BTreeSet::new();
    for (place, expr) in alerts()?.into_iter().chain(queries) {
        let names = metrics_read(&expr);
        assert!(!names.is_empty(), "{place} reads no metric of the host: {expr}");
        for name in names {
            assert!(
                exported.contains(&name),
                "{place} reads {name}, which the host does not export"
            );
            read.insert(name);
        }
    }
    // What the issue asks the dashboard to show, each from its metric.
    for wanted in [
        "controller_runtime_reconcile_total",
        "capstan_wasm_dispatch_seconds_bucket",
        "workqueue_depth",
        "workqueue_queue_duration_seconds_bucket",
        "capstan_wasm_faults_total",
        "capstan_plugin_response_refused_total",
        "capstan_events_dropped_total",
        "capstan_api_writes_total",
        "capstan_cache_objects",
        "capstan_shard_ranges",
        "capstan_shard_members",
        "leader_election_master_status",
    ] {
        assert!(read.contains(wanted), "nothing shows {wanted}");
    }
    Ok(())
}

#[test]
fn every_alert_has_a_runbook_section_it_links_to() -> Result<()> {
    let runbooks = std::fs::read_to_string(workspace().join("docs/runbooks.md"))?;
    let headings: BTreeSet<String> = runbooks
        .lines()
        .filter_map(|l| l.strip_prefix("## "))
        .map(|h| h.trim().to_lowercase())
        .collect();
    let rules: Value = serde_saphyr::from_str(&std::fs::read_to_string(monitoring().join("alerts.yaml"))?)?;
    for rule in rules["groups"][0]["rules"].as_array().context("rules")? {
        let name = rule["alert"].as_str().context("alert")?;
        assert!(
            headings.contains(&name.to_lowercase()),
            "docs/runbooks.md has no section {name}"
        );
        let url = rule["annotations"]["runbook_url"].as_str().unwrap_or_default();
        assert!(
            url.ends_with(&format!("docs/runbooks.md#{}", name.to_lowercase())),
            "{name} links {url:?}"
        );
    }
    Ok(())
}

#[test]
fn the_chart_ships_the_rules_and_the_dashboard_unchanged() -> Result<()> {
    let values = capstan_tests::helm::ci_values("single-values.yaml");
    let echo = capstan_tests::helm::wasm_from("echo", &plugin("echo"));
    let off = capstan_tests::helm::render("capstan", &["-f", &values, "--set-file", &echo])?;
    assert!(
        capstan_tests::helm::of_kind(&off, "PrometheusRule").is_empty(),
        "off by default"
    );
    let docs = capstan_tests::helm::render(
        "capstan",
        &[
            "-f",
            &values,
            "--set-file",
            &echo,
            "--set",
            "metrics.prometheusRule.enabled=true,metrics.dashboard.enabled=true",
            "--set",
            "metrics.prometheusRule.labels.release=kube-prometheus-stack",
        ],
    )?;
    let rule = capstan_tests::helm::one(&docs, "PrometheusRule");
    let file: Value = serde_saphyr::from_str(&std::fs::read_to_string(monitoring().join("alerts.yaml"))?)?;
    assert_eq!(rule["spec"], file, "the PrometheusRule's spec is alerts.yaml");
    assert_eq!(rule["metadata"]["labels"]["release"], "kube-prometheus-stack");
    let shipped = capstan_tests::helm::of_kind(&docs, "ConfigMap")
        .into_iter()
        .find(|c| c["metadata"]["labels"]["grafana_dashboard"] == "1")
        .context("a ConfigMap labelled grafana_dashboard=1")?;
    let json = shipped["data"]["capstan.json"].as_str().context("capstan.json")?;
    assert_eq!(serde_json::from_str::<Value>(json)?, dashboard()?);
    Ok(())
}

/// A Prometheus server (Debian's) on a free loopback port, scraping `target` every second
/// with the labels a ServiceMonitor gives, and evaluating the chart's alerts.
struct Prometheus {
    child: std::process::Child,
    address: String,
}

impl Prometheus {
    fn start(dir: &std::path::Path, target: &str) -> Result<Prometheus> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
                 rule_files: [{rules:?}]\n\
                 scrape_configs:\n\
                 - job_name: capstan\n  \
                   static_configs:\n  \
                   - targets: [{target:?}]\n    \
                     labels: {{namespace: monitoring-test, pod: capstan-0}}\n",
                rules = monitoring().join("alerts.yaml").display().to_string(),
            ),
        )?;
        let log = std::fs::File::create(dir.join("prometheus.log"))?;
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("prometheus (Debian's prometheus package; scripts/node-packages.sh installs it)")?;
        Ok(Prometheus {
            child,
            address: format!("127.0.0.1:{port}"),
        })
    }

    /// The series `expr` returns now.
    fn query(&self, expr: &str) -> Result<Vec<Value>> {
        let query = form_urlencoded::Serializer::new(String::new())
            .append_pair("query", expr)
            .finish();
        let path = format!("/api/v1/query?{query}");
        let (status, body) = capstan_tests::host::http_get(&self.address, &path)?;
        anyhow::ensure!(status.contains(" 200 "), "{expr}: {status}: {body}");
        let answer: Value = serde_json::from_str(&body)?;
        Ok(answer["data"]["result"].as_array().cloned().unwrap_or_default())
    }

    /// The alerts Prometheus evaluates as pending or firing now.
    fn alerts(&self) -> Result<Vec<Value>> {
        let (_, body) = capstan_tests::host::http_get(&self.address, "/api/v1/alerts")?;
        let answer: Value = serde_json::from_str(&body)?;
        Ok(answer["data"]["alerts"].as_array().cloned().unwrap_or_default())
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

/// A dashboard query as Grafana sends it with every variable at "All".
fn as_grafana_sends(expr: &str) -> String {
    expr.replace("$__rate_interval", "30s")
        .replace("$namespace", ".*")
        .replace("$job", ".*")
        .replace("$plugin", ".*")
}

/// A real Prometheus scrapes a host running Echo and a plugin that panics on one object:
/// every dashboard query returns a series, every metric the alerts read has one, and the
/// fault alert's expression becomes true (Prometheus itself holds it pending or firing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_shows_every_panel_and_the_fault_alert() -> Result<()> {
    let plane = capstan::dev::Plane::shared().await?;
    plane.install_crds(&[hostile_crd()?]).await?;
    install_plugin_crd(plane, "echo").await?;
    let ns = plane.namespace("monitoring").await?;
    let dir = std::env::temp_dir().join(format!("capstan-monitoring-{ns}"));
    let host = capstan_tests::host::start_host_with(
        plane,
        &["echo", "hostile"],
        &ns,
        &dir,
        &["--leader-elect", "--leader-election-namespace", &ns],
    )?;
    let metrics = eventually("the host serving metrics", WAIT, async || {
        Ok(host.address("metrics"))
    })
    .await?;
    let prometheus = Prometheus::start(&dir, &metrics)?;
    let client = plane.client().await?;
    let echoes: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &echo_resource());
    echoes
        .create(&PostParams::default(), &echo("hello", "hi")?)
        .await?;
    // Scraped once before the fault, so the fault counter's increase is seen.
    eventually("a first scrape", WAIT, async || {
        // Prometheus may still be starting: no answer is no scrape yet.
        let up = prometheus.query(r#"capstan_plugin_up{plugin="hostile"} == 1"#);
        Ok(up.ok().filter(|r| !r.is_empty()).map(drop))
    })
    .await?;
    let hostiles: Api<DynamicObject> = Api::namespaced_with(client, &ns, &hostile_resource());
    let panics: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "capstan.dev/v1alpha1", "kind": "Hostile",
        "metadata": {"name": "panic"}, "spec": {"mode": "panic", "arg": ns},
    }))?;
    hostiles.create(&PostParams::default(), &panics).await?;

    the_fault_alert_fires(&prometheus).await?;
    let empty = queries_without_data(&prometheus)?;
    assert!(empty.is_empty(), "no data for:\n{}", empty.join("\n"));
    drop(prometheus);
    drop(host);
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}

/// How long the live test waits for each thing it waits for.
const WAIT: std::time::Duration = std::time::Duration::from_secs(90);

/// The fault alert's expression returns the panicking plugin, and Prometheus holds the
/// alert pending or firing.
async fn the_fault_alert_fires(prometheus: &Prometheus) -> Result<()> {
    let (fault, expr) = alerts()?
        .into_iter()
        .find(|(name, _)| name == "CapstanPluginFaulting")
        .context("the fault alert")?;
    let firing = eventually("the fault alert's expression", WAIT, async || {
        let result = prometheus.query(&expr)?;
        Ok((!result.is_empty()).then_some(result))
    })
    .await?;
    assert_eq!(firing[0]["metric"]["plugin"], "hostile", "{firing:?}");
    assert_eq!(firing[0]["metric"]["cause"], "panic", "{firing:?}");
    let held = eventually("Prometheus evaluating the fault alert", WAIT, async || {
        let alerts = prometheus.alerts()?;
        Ok(alerts
            .into_iter()
            .find(|a| a["labels"]["alertname"] == fault.as_str()))
    })
    .await?;
    assert!(
        matches!(held["state"].as_str(), Some("pending" | "firing")),
        "{held}"
    );
    Ok(())
}

/// The dashboard queries (as Grafana sends them) and the metrics the alerts read that
/// return no series from the real host.
fn queries_without_data(prometheus: &Prometheus) -> Result<Vec<String>> {
    let mut empty = Vec::new();
    for (place, expr) in dashboard_queries(&dashboard()?) {
        let sent = as_grafana_sends(&expr);
        let sent = if place.starts_with('$') {
            // A variable's label_values(metric, label) is the metric's series.
            metrics_read(&sent).into_iter().next().unwrap_or_default()
        } else {
            sent
        };
        if prometheus.query(&sent)?.is_empty() {
            empty.push(format!("{place}: {sent}"));
        }
    }
    for (name, expr) in alerts()? {
        for metric in metrics_read(&expr) {
            if prometheus.query(&metric)?.is_empty() {
                empty.push(format!("{name}: {metric}"));
            }
        }
    }
    Ok(empty)
}
