//! The chart's alerts and dashboard (`charts/capstan/monitoring`): `promtool` checks the
//! rules and runs their unit tests (every alert firing, and silent on a healthy twin);
//! every expression of the rules and the dashboard names only metrics the host exports;
//! every alert has its runbook; and the chart ships both files unchanged.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result};
use capstan_tests::{plugin, workspace};
use serde_json::Value;

#[path = "helm/common.rs"]
mod common;

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
    let values = common::ci_values("single-values.yaml");
    let echo = common::wasm_from("echo", &plugin("echo"));
    let off = common::render("capstan", &["-f", &values, "--set-file", &echo])?;
    assert!(
        common::of_kind(&off, "PrometheusRule").is_empty(),
        "off by default"
    );
    let docs = common::render(
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
    let rule = common::one(&docs, "PrometheusRule");
    let file: Value = serde_saphyr::from_str(&std::fs::read_to_string(monitoring().join("alerts.yaml"))?)?;
    assert_eq!(rule["spec"], file, "the PrometheusRule's spec is alerts.yaml");
    assert_eq!(rule["metadata"]["labels"]["release"], "kube-prometheus-stack");
    let shipped = common::of_kind(&docs, "ConfigMap")
        .into_iter()
        .find(|c| c["metadata"]["labels"]["grafana_dashboard"] == "1")
        .context("a ConfigMap labelled grafana_dashboard=1")?;
    let json = shipped["data"]["capstan.json"].as_str().context("capstan.json")?;
    assert_eq!(serde_json::from_str::<Value>(json)?, dashboard()?);
    Ok(())
}
