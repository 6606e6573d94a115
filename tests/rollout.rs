//! Rolling out a new plugin version on the real plane (API server and etcd only, so
//! nothing but the host touches the Jobs): `capstan diff` shows what each candidate would
//! do and writes nothing; a shadow beside the live plugin counts where it would differ
//! and writes nothing; a canary reconciles only the parents its selector picks.

use std::collections::BTreeMap;
use std::process::Output;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use capstan::dev::{Plane, PlaneConfig};
use capstan_tests::host::{echo, echo_resource, eventually, install_plugin_crd, sample};
use capstan_tests::{arg, capstan_bin, compile_cache, plugin};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams, PostParams};

/// How long Echo may take to converge.
const CONVERGE: Duration = Duration::from_secs(180);
/// Echos converged by v1 in each test.
const ECHOES: usize = 200;

/// `count` Echos in `ns`, each with a message.
async fn create_echoes(
    echoes: &Api<DynamicObject>,
    count: usize,
    labels: impl Fn(usize) -> Option<(&'static str, &'static str)>,
) -> Result<()> {
    futures::stream::iter(0..count)
        .map(|i| {
            let echoes = echoes.clone();
            let label = labels(i);
            async move {
                let mut object = echo(&format!("e{i}"), &format!("hello {i}"))?;
                if let Some((k, v)) = label {
                    object.labels_mut().insert(k.into(), v.into());
                }
                echoes.create(&PostParams::default(), &object).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(16)
        .try_collect::<()>()
        .await
}

/// Wait until every Echo in `echoes` has a status and a Job.
async fn converged(echoes: &Api<DynamicObject>, jobs: &Api<Job>, count: usize) -> Result<()> {
    eventually("every Echo has a status and a Job", CONVERGE, async || {
        let statuses = echoes
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|e| e.data.get("status").is_some_and(|s| !s.is_null()))
            .count();
        let made = jobs.list(&ListParams::default()).await?.items.len();
        Ok((statuses == count && made == count).then_some(()))
    })
    .await
}

/// Every object's resourceVersion and field managers, by kind and name.
async fn state(
    echoes: &Api<DynamicObject>,
    jobs: &Api<Job>,
) -> Result<BTreeMap<String, (String, Vec<String>)>> {
    let managers = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        let mut names: Vec<String> = m
            .managed_fields
            .iter()
            .flatten()
            .filter_map(|f| f.manager.clone())
            .collect();
        names.sort();
        names
    };
    let mut all = BTreeMap::new();
    for e in echoes.list(&ListParams::default()).await?.items {
        all.insert(
            format!("Echo {}", e.name_any()),
            (e.resource_version().unwrap_or_default(), managers(&e.metadata)),
        );
    }
    for j in jobs.list(&ListParams::default()).await?.items {
        all.insert(
            format!("Job {}", j.name_any()),
            (j.resource_version().unwrap_or_default(), managers(&j.metadata)),
        );
    }
    Ok(all)
}

/// `capstan diff ARGS` against the plane.
fn diff(plane: &Plane, args: &[&str]) -> Result<Output> {
    Ok(std::process::Command::new(capstan_bin())
        .arg("diff")
        .args(args)
        .env("KUBECONFIG", plane.kubeconfig())
        .env("CAPSTAN_CACHE_DIR", compile_cache())
        .env_remove("RUST_LOG")
        .output()?)
}

/// Lines of stdout starting with `prefix`.
fn lines_with(out: &Output, prefix: &str) -> usize {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with(prefix))
        .count()
}

fn shown(out: &Output) -> String {
    format!(
        "exit {:?}\n{}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn diff_shows_what_each_new_version_would_do_and_writes_nothing() -> Result<()> {
    let plane = Plane::start(PlaneConfig::api_only()).await?;
    install_plugin_crd(&plane, "echo").await?;
    let ns = plane.namespace("rollout-diff").await?;
    let client = plane.client().await?;
    let echoes: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &echo_resource());
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    create_echoes(&echoes, ECHOES, |_| None).await?;
    let dir = std::env::temp_dir().join(format!("capstan-rollout-{ns}"));
    let mut host = capstan_tests::host::start_host(&plane, &["echo"], &ns, &dir)?;
    converged(&echoes, &jobs, ECHOES).await?;
    host.signal(libc::SIGTERM);
    host.wait(Duration::from_secs(30))?;
    let before = state(&echoes, &jobs).await?;

    // The live version itself: nothing would change.
    let same = diff(&plane, &[arg(&plugin("echo")), "-n", &ns])?;
    ensure!(same.status.code() == Some(0), "{}", shown(&same));
    ensure!(
        String::from_utf8_lossy(&same.stdout)
            .contains(&format!("{ECHOES} parents reconciled: 0 would change")),
        "{}",
        shown(&same)
    );
    // A v2 that labels its Jobs: every Job changes in place, field by field.
    let canary = diff(&plane, &[arg(&plugin("echo-canary")), "-n", &ns])?;
    ensure!(canary.status.code() == Some(1), "{}", shown(&canary));
    ensure!(
        lines_with(&canary, "~ change Job ") == ECHOES,
        "{}",
        shown(&canary)
    );
    ensure!(
        lines_with(&canary, "    + metadata.labels.capstan.dev/canary: \"true\"") == ECHOES,
        "{}",
        shown(&canary)
    );
    // A v2 with another image: Job templates are immutable, so a new Job each and the old
    // one pruned — as JSON for tools.
    let settings = dir.join("image.yaml");
    std::fs::write(&settings, "image: busybox:1.37\n")?;
    let image = diff(
        &plane,
        &[
            arg(&plugin("echo")),
            "-n",
            &ns,
            "--settings",
            arg(&settings),
            "-o",
            "json",
        ],
    )?;
    ensure!(image.status.code() == Some(1), "{}", shown(&image));
    let report: serde_json::Value = serde_json::from_slice(&image.stdout).context("diff -o json")?;
    ensure!(
        report["summary"]["counts"]["create"] == ECHOES,
        "{}",
        shown(&image)
    );
    ensure!(
        report["summary"]["counts"]["delete"] == ECHOES,
        "{}",
        shown(&image)
    );
    ensure!(
        report["findings"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|f| f["change"] == "create"
                && f["fields"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["after"] == "busybox:1.37")),
        "the created Job shows its image: {}",
        shown(&image)
    );
    // A v2 that answers with a kind it never declared: refused, nothing applied.
    let rogue = |answer: &str| -> Result<Output> {
        let settings = dir.join(format!("{answer}.yaml"));
        std::fs::write(&settings, format!("answer: {answer}\n"))?;
        diff(
            &plane,
            &[
                arg(&plugin("echo-rogue")),
                "--name",
                "echo",
                "-n",
                &ns,
                "--settings",
                arg(&settings),
            ],
        )
    };
    let undeclared = rogue("undeclared")?;
    ensure!(undeclared.status.code() == Some(1), "{}", shown(&undeclared));
    ensure!(
        lines_with(&undeclared, "! refused Echo ") == ECHOES,
        "{}",
        shown(&undeclared)
    );
    ensure!(
        shown(&undeclared).contains("ConfigMap is not a declared child kind"),
        "{}",
        shown(&undeclared)
    );
    // A v2 that drops its child: every Job would be pruned.
    let nothing = rogue("nothing")?;
    ensure!(nothing.status.code() == Some(1), "{}", shown(&nothing));
    ensure!(
        lines_with(&nothing, "- prune Job ") == ECHOES,
        "{}",
        shown(&nothing)
    );
    // A selector narrows the parents.
    let none = diff(
        &plane,
        &[arg(&plugin("echo-canary")), "-n", &ns, "-l", "absent=label"],
    )?;
    ensure!(none.status.code() == Some(0), "{}", shown(&none));

    // Nothing was written: the same versions and the same field managers everywhere.
    let after = state(&echoes, &jobs).await?;
    ensure!(before.len() == 2 * ECHOES, "{} objects", before.len());
    ensure!(before == after, "the diffs wrote to the cluster");
    // A diff of a file that is not a plugin is one line and exit 2.
    let broken = dir.join("broken.wasm");
    std::fs::write(&broken, b"not wasm")?;
    let bad = diff(&plane, &[arg(&broken), "-n", &ns])?;
    ensure!(bad.status.code() == Some(2), "{}", shown(&bad));
    ensure!(
        String::from_utf8_lossy(&bad.stderr).trim().lines().count() == 1,
        "{}",
        shown(&bad)
    );
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}
