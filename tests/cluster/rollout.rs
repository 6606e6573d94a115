//! Rolling out a new plugin version on the real plane (API server and etcd only, so
//! nothing but the host touches the Jobs): `capstan diff` shows what each candidate would
//! do and writes nothing; a shadow beside the live plugin counts where it would differ
//! and writes nothing; a canary reconciles only the parents its selector picks.

use std::collections::BTreeMap;
use std::process::Output;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use capstan::dev::{Plane, PlaneConfig};
use capstan_tests::host::{Host, echo, echo_resource, eventually, install_plugin_crd, sample};
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

/// A kubeconfig for a ServiceAccount of `ns` that may only read Echos, Jobs and
/// ConfigMaps there.
async fn read_only_kubeconfig(
    plane: &Plane,
    client: &kube::Client,
    ns: &str,
    dir: &std::path::Path,
) -> Result<std::path::PathBuf> {
    use k8s_openapi::api::authentication::v1::TokenRequest;
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    let post = PostParams::default();
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    accounts
        .create(
            &post,
            &serde_json::from_value(serde_json::json!({"metadata": {"name": "viewer"}}))?,
        )
        .await?;
    let role: Role = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "viewer"},
        "rules": [
            {"apiGroups": ["capstan.dev"], "resources": ["echoes"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]},
        ],
    }))?;
    Api::<Role>::namespaced(client.clone(), ns)
        .create(&post, &role)
        .await?;
    let binding: RoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "viewer"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "viewer"},
        "subjects": [{"kind": "ServiceAccount", "name": "viewer", "namespace": ns}],
    }))?;
    Api::<RoleBinding>::namespaced(client.clone(), ns)
        .create(&post, &binding)
        .await?;
    let request: TokenRequest = serde_json::from_value(serde_json::json!({"spec": {"audiences": []}}))?;
    let token: TokenRequest = accounts
        .create_subresource("token", "viewer", &post, &request)
        .await?;
    let token = token.status.and_then(|s| s.token).context("a token")?;
    let mut config = kube::config::Kubeconfig::read_from(plane.kubeconfig())?;
    for user in &mut config.auth_infos {
        user.auth_info = Some(kube::config::AuthInfo {
            token: Some(token.clone().into()),
            ..Default::default()
        });
    }
    let path = dir.join("viewer.kubeconfig");
    std::fs::write(&path, serde_json::to_vec(&config)?)?;
    Ok(path)
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
    // Said once each, on stdout: not again on stderr as retried failures.
    ensure!(
        String::from_utf8_lossy(&undeclared.stderr).lines().count() < 10,
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

    // Read-only credentials: dry runs are refused (they are authorized as writes), and the
    // diff compares with the live objects itself, saying so.
    let viewer = read_only_kubeconfig(&plane, &client, &ns, &dir).await?;
    let read_only = std::process::Command::new(capstan_bin())
        .args(["diff", arg(&plugin("echo-canary")), "-n", &ns])
        .env("KUBECONFIG", &viewer)
        .env("CAPSTAN_CACHE_DIR", compile_cache())
        .env_remove("RUST_LOG")
        .output()?;
    ensure!(read_only.status.code() == Some(1), "{}", shown(&read_only));
    ensure!(
        lines_with(&read_only, "    + metadata.labels.capstan.dev/canary: \"true\"") == ECHOES,
        "{}",
        shown(&read_only)
    );
    ensure!(
        String::from_utf8_lossy(&read_only.stderr).contains("no permission to dry-run"),
        "{}",
        shown(&read_only)
    );

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

/// Start `capstan run --config` in `ns` with `config` (plugin paths relative to `dir`,
/// where `files` are copied).
fn host_with_config(
    plane: &Plane,
    dir: &std::path::Path,
    ns: &str,
    files: &[&str],
    config: &str,
    extra: &[&str],
) -> Result<Host> {
    std::fs::create_dir_all(dir)?;
    for f in files {
        std::fs::copy(plugin(f), dir.join(format!("{f}.wasm")))?;
    }
    let file = dir.join("config.yaml");
    std::fs::write(&file, config)?;
    let mut args = vec!["--config", arg(&file), "--namespace", ns];
    args.extend_from_slice(extra);
    Host::start(plane, &args, &dir.join("host.log"), &[])
}

/// Job names in `jobs` with the canary's label, and without.
async fn labelled(jobs: &Api<Job>) -> Result<(usize, usize)> {
    let all = jobs.list(&ListParams::default()).await?.items;
    let canary = all
        .iter()
        .filter(|j| j.labels().contains_key("capstan.dev/canary"))
        .count();
    Ok((canary, all.len() - canary))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadow_reports_divergence_without_writing_and_a_canary_takes_only_its_parents() -> Result<()> {
    let plane = Plane::start(PlaneConfig::api_only()).await?;
    install_plugin_crd(&plane, "echo").await?;
    let client = plane.client().await?;

    // Shadow: Echo live, its relabelling v2 beside it.
    let ns = plane.namespace("rollout-shadow").await?;
    let echoes: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &echo_resource());
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    create_echoes(&echoes, ECHOES, |_| None).await?;
    let dir = std::env::temp_dir().join(format!("capstan-rollout-{ns}"));
    let config =
        "plugins:\n  - path: echo.wasm\n  - path: echo-canary.wasm\n    name: echo\n    mode: shadow\n";
    let mut host = host_with_config(&plane, &dir, &ns, &["echo", "echo-canary"], config, &[])?;
    converged(&echoes, &jobs, ECHOES).await?;
    let diverging =
        "capstan_shadow_divergent_objects{plugin=\"echo-shadow\",kind=\"Job\",change=\"would-change\"}";
    let metrics = eventually(
        "the shadow counts every Job it would change",
        CONVERGE,
        async || {
            let body = host.metrics().await?;
            Ok((sample(&body, diverging) == ECHOES as f64).then_some(body))
        },
    )
    .await?;
    ensure!(
        sample(&metrics, "capstan_api_writes_total{plugin=\"echo-shadow\"}") == 0.0,
        "the shadow wrote"
    );
    // The live plugin's writes are a first convergence's, shadow or not: a Job and a status each.
    ensure!(
        sample(&metrics, "capstan_api_writes_total{plugin=\"echo\"}") == 2.0 * ECHOES as f64,
        "live writes: {}",
        sample(&metrics, "capstan_api_writes_total{plugin=\"echo\"}")
    );
    ensure!(host.logged("shadow diverges"), "a diverging object is logged");
    for (name, (_, managers)) in state(&echoes, &jobs).await? {
        let foreign: Vec<&String> = managers.iter().filter(|m| m.contains("shadow")).collect();
        ensure!(foreign.is_empty(), "{name}: {foreign:?}");
    }
    ensure!(
        labelled(&jobs).await? == (0, ECHOES),
        "the shadow's label reached a Job"
    );
    host.signal(libc::SIGTERM);
    host.wait(Duration::from_secs(30))?;

    // Canary: one Echo in ten labelled for the candidate; promoting is a file swap.
    let ns = plane.namespace("rollout-canary").await?;
    let echoes: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &echo_resource());
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    const CANARIES: usize = ECHOES / 10;
    create_echoes(&echoes, ECHOES, |i| {
        i.is_multiple_of(10).then_some(("canary", "true"))
    })
    .await?;
    let dir = std::env::temp_dir().join(format!("capstan-rollout-{ns}"));
    let config = "plugins:\n  - path: echo.wasm\n    canary:\n      path: echo-canary.wasm\n      selector: {matchLabels: {canary: \"true\"}}\n";
    let mut host = host_with_config(
        &plane,
        &dir,
        &ns,
        &["echo", "echo-canary"],
        config,
        &["--hot-reload", "--reload-interval", "500ms"],
    )?;
    converged(&echoes, &jobs, ECHOES).await?;
    ensure!(host.logged("canary loaded"), "the canary is said at start");
    let split = labelled(&jobs).await?;
    ensure!(
        split == (CANARIES, ECHOES - CANARIES),
        "canary / stable Jobs: {split:?}"
    );
    for job in jobs.list(&ListParams::default()).await?.items {
        let canary = job.labels().contains_key("capstan.dev/canary");
        let owner = job
            .owner_references()
            .first()
            .map(|o| o.name.clone())
            .unwrap_or_default();
        let index: usize = owner.trim_start_matches('e').parse()?;
        ensure!(
            canary == index.is_multiple_of(10),
            "{} of {owner}",
            job.name_any()
        );
    }
    // Promote: the candidate's file replaces the stable one, and every parent follows.
    let stable = dir.join("echo.wasm");
    let swap = dir.join("echo.wasm.new");
    std::fs::copy(plugin("echo-canary"), &swap)?;
    std::fs::rename(&swap, &stable)?;
    eventually(
        "every Job has the promoted version's label",
        CONVERGE,
        async || Ok((labelled(&jobs).await? == (ECHOES, 0)).then_some(())),
    )
    .await?;
    // A new canary build is a versioned channel of its own: rewritten, it is reloaded and
    // takes its parents again (here the old stable build, which sets no label).
    let candidate = dir.join("echo-canary.wasm");
    std::fs::copy(plugin("echo"), &swap)?;
    std::fs::rename(&swap, &candidate)?;
    eventually(
        "the canary's parents follow its new build",
        CONVERGE,
        async || Ok((labelled(&jobs).await? == (ECHOES - CANARIES, CANARIES)).then_some(())),
    )
    .await?;
    ensure!(host.logged("canary reloaded"), "the new canary build is said");
    // A stable version of other kinds restarts the plugin with new watches; the canary,
    // checked against them again, fits the old kinds only and is dropped.
    install_plugin_crd(&plane, "scheduled-echo").await?;
    std::fs::copy(plugin("scheduled-echo"), &swap)?;
    std::fs::rename(&swap, &stable)?;
    let dropped = "canary dropped: it does not fit the new version's kinds";
    eventually("the canary dropped", CONVERGE, async || {
        Ok(host.logged(dropped).then_some(()))
    })
    .await?;
    host.signal(libc::SIGTERM);
    host.wait(Duration::from_secs(30))?;
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}

/// A child the live host created (a POST) and never updated holds its fields as the
/// create's; the live update hands them to the plugin's apply first, so a field the new
/// settings stop setting is removed — and the diff says so, though its dry run cannot
/// hand them over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn diff_shows_a_field_no_longer_set_on_a_created_child_as_removed() -> Result<()> {
    let plane = Plane::shared().await?;
    install_plugin_crd(plane, "echo").await?;
    let ns = plane.namespace("rollout-dropped").await?;
    let dir = std::env::temp_dir().join(format!("capstan-rollout-{ns}"));
    std::fs::create_dir_all(&dir)?;
    let file = dir.join("echo.wasm");
    std::fs::copy(plugin("echo"), &file)?;
    let config = dir.join("config.yaml");
    let entry = serde_json::json!({"path": file, "settings": {"ttlSecondsAfterFinished": 600}});
    std::fs::write(
        &config,
        serde_json::to_string(&serde_json::json!({"plugins": [entry]}))?,
    )?;
    let client = plane.client().await?;
    let echoes: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &echo_resource());
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    create_echoes(&echoes, 1, |_| None).await?;
    let mut host = Host::start(
        plane,
        &["--config", arg(&config), "--namespace", &ns],
        &dir.join("host.log"),
        &[],
    )?;
    converged(&echoes, &jobs, 1).await?;
    host.signal(libc::SIGTERM);
    host.wait(Duration::from_secs(30))?;

    // Echo's default settings set no TTL.
    let out = diff(plane, &[arg(&plugin("echo")), "-n", &ns])?;
    ensure!(out.status.code() == Some(1), "{}", shown(&out));
    ensure!(
        lines_with(&out, "~ change Job ") == 1
            && lines_with(&out, "    - spec.ttlSecondsAfterFinished: 600") == 1,
        "{}",
        shown(&out)
    );
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}

/// Every Job's `ttlSecondsAfterFinished`, which Echo's settings set.
async fn ttls(jobs: &Api<Job>) -> Result<Vec<Option<i32>>> {
    let all = jobs.list(&ListParams::default()).await?.items;
    Ok(all
        .iter()
        .map(|j| j.spec.as_ref().and_then(|s| s.ttl_seconds_after_finished))
        .collect())
}

/// `Some` once all three Jobs have `ttl`.
async fn all_at(jobs: &Api<Job>, ttl: i32) -> Result<Option<()>> {
    let now = ttls(jobs).await?;
    Ok((now.len() == 3 && now.iter().all(|t| *t == Some(ttl))).then_some(()))
}

/// Hot reload follows the config file's entries, not only its files: a changed entry runs
/// under its new settings, a removed one stops, a new one starts, and a signature policy
/// added to the config refuses the plugin files it now covers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_reload_applies_changed_new_and_removed_config_entries_and_a_new_policy() -> Result<()> {
    let plane = Plane::shared().await?;
    install_plugin_crd(plane, "echo").await?;
    let ns = plane.namespace("rollout-config").await?;
    let client = plane.client().await?;
    let echoes: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &echo_resource());
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    create_echoes(&echoes, 3, |_| None).await?;
    let dir = std::env::temp_dir().join(format!("capstan-rollout-{ns}"));
    let entry = |file: &str, ttl: u32| {
        format!("  - path: {file}\n    name: echo\n    settings: {{ttlSecondsAfterFinished: {ttl}}}\n")
    };
    let config = format!("plugins:\n{}", entry("echo.wasm", 600));
    let reload = ["--hot-reload", "--reload-interval", "300ms"];
    let mut host = host_with_config(plane, &dir, &ns, &["echo"], &config, &reload)?;
    converged(&echoes, &jobs, 3).await?;
    eventually("every Job made under the first settings", CONVERGE, async || {
        all_at(&jobs, 600).await
    })
    .await?;
    let rewrite = |text: String| -> Result<()> {
        let tmp = dir.join(".config.yaml.tmp");
        std::fs::write(&tmp, text)?;
        Ok(std::fs::rename(&tmp, dir.join("config.yaml"))?)
    };

    // Changed: the entry's settings.
    rewrite(format!("plugins:\n{}", entry("echo.wasm", 900)))?;
    eventually("every Job under the changed settings", CONVERGE, async || {
        all_at(&jobs, 900).await
    })
    .await?;

    // Removed and new: the same plugin from another file, with its own settings.
    std::fs::copy(plugin("echo"), dir.join("echo-copy.wasm"))?;
    rewrite(format!("plugins:\n{}", entry("echo-copy.wasm", 1200)))?;
    eventually("every Job under the new entry", CONVERGE, async || {
        all_at(&jobs, 1200).await
    })
    .await?;
    ensure!(
        host.logged("plugin no longer configured; stopped"),
        "the removed entry is said"
    );
    ensure!(host.logged("new plugin started"), "the new entry is said");

    // A policy now covers the file: it stops, and `/readyz` says why.
    let policy = format!(
        "verify: {{keys: [release.pub]}}\nplugins:\n{}",
        entry("echo-copy.wasm", 1200)
    );
    rewrite(policy)?;
    let health = host.address("health probes").context("health address")?;
    eventually("the unsigned file refused", CONVERGE, async || {
        let (status, body) = capstan_tests::host::http_get(&health, "/readyz")?;
        Ok((status.contains("503") && body.contains("carries no signature")).then_some(()))
    })
    .await?;
    echoes
        .create(&PostParams::default(), &echo("late", "after the policy")?)
        .await?;
    // The API server has seen the Echo; a host that still ran the file would make its Job
    // within a reload interval and a reconcile. Give it far longer than that, then look.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let made = jobs.list(&ListParams::default()).await?.items.len();
    ensure!(made == 3, "a refused file still reconciles: {made} Jobs");
    host.signal(libc::SIGTERM);
    ensure!(
        host.wait(Duration::from_secs(30))?.code() == Some(0),
        "the host ended cleanly"
    );
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}
