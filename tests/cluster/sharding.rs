//! `capstan run --sharding` on the real plane: three replicas split 3 000 Echos, each
//! reconciling and caching about a third; a replica killed with -9 has its range taken over
//! within the lease duration + 3 s; a fourth replica joining takes a share; and no Echo is
//! ever reconciled by two replicas at once — with the API server filtering watches
//! (feature gate `ShardedListAndWatch` on) and without it (filtering on the host). By
//! namespace, parents, children and related objects are each cached by one replica.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use capstan::dev::{Plane, PlaneConfig};
use capstan_tests::host::{
    DEBUG, Host, LEASE, LEASE_DURATION, echo, echo_resource, eventually, install_plugin_crd, mount,
    reconciles, sample, timestamp,
};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams, PostParams};

const ECHOS: usize = 3000;
/// Planes take turns: two at once take all of a 2-core machine.
static PLANES: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn replica(plane: &Plane, ns: &str, dir: &Path, identity: &str) -> Result<Host> {
    let mut args = vec![
        "--plugins",
        dir.to_str().context("utf-8 path")?,
        "--namespace",
        ns,
        "--sharding",
        "--leader-election-namespace",
        ns,
    ];
    args.extend(LEASE);
    let log = dir.join(format!("{identity}.log"));
    Host::start(plane, &args, &log, &[("POD_NAME", identity), DEBUG])
}

async fn create_echos(echoes: &Api<DynamicObject>, prefix: &str, n: usize) -> Result<()> {
    futures::stream::iter(0..n)
        .map(|i| async move {
            echoes
                .create(&PostParams::default(), &echo(&format!("{prefix}{i}"), "hi")?)
                .await?;
            anyhow::Ok(())
        })
        .buffer_unordered(16)
        .try_collect()
        .await
}

/// Echos (by name) with exactly one Job each, or an error naming one with two.
async fn converged(echoes: &Api<DynamicObject>, jobs: &Api<Job>) -> Result<BTreeSet<String>> {
    let mut owners: HashMap<String, usize> = HashMap::new();
    for job in jobs.list(&ListParams::default()).await?.items {
        for r in job.owner_references() {
            *owners.entry(r.name.clone()).or_default() += 1;
        }
    }
    if let Some((echo, n)) = owners.iter().find(|(_, n)| **n > 1) {
        anyhow::bail!("Echo {echo} has {n} Jobs");
    }
    Ok(echoes
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| !e.data["status"]["observedGeneration"].is_null() && owners.contains_key(&e.name_any()))
        .map(|e| e.name_any())
        .collect())
}

/// Wait until the Echos named `prefix0..prefixN` all have a status, polling once a second
/// (a list of thousands of objects every 200 ms would load the API server the replicas
/// share); returns how long that took.
async fn statuses(
    echoes: &Api<DynamicObject>,
    prefix: &str,
    n: usize,
    timeout: Duration,
) -> Result<Duration> {
    let start = Instant::now();
    let mut pending: BTreeSet<String> = (0..n).map(|i| format!("{prefix}{i}")).collect();
    while !pending.is_empty() {
        anyhow::ensure!(
            start.elapsed() < timeout,
            "{} Echos ({prefix}*) without a status after {timeout:?}",
            pending.len()
        );
        let mut done = Vec::new();
        for name in &pending {
            if echoes
                .get_opt(name)
                .await?
                .is_some_and(|e| !e.data["status"]["observedGeneration"].is_null())
            {
                done.push(name.clone());
            }
        }
        for name in done {
            pending.remove(&name);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Ok(start.elapsed())
}

/// Distinct Echos a replica reconciled.
fn reconciled(host: &Host) -> BTreeSet<String> {
    reconciles(host, Timestamp::MAX)
        .into_iter()
        .map(|(object, _, _)| object)
        .collect()
}

async fn cached_echos(host: &Host) -> Result<f64> {
    Ok(sample(
        &host.metrics().await?,
        r#"capstan_cache_objects{plugin="echo",kind="Echo"}"#,
    ))
}

async fn three_replicas_split_the_echos(server_side: bool) -> Result<()> {
    let _turn = PLANES.lock().await;
    let plane = Plane::start(PlaneConfig {
        sharded_watch: server_side,
        ..PlaneConfig::api_only()
    })
    .await?;
    install_plugin_crd(&plane, "echo").await?;
    let ns = plane.namespace("sharding").await?;
    let dir = std::env::temp_dir().join(format!("capstan-sharding-{ns}"));
    mount(&["echo"], &dir)?;
    let client = plane.client().await?;
    let echoes: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &echo_resource());
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    create_echos(&echoes, "e", ECHOS).await?;

    let mut hosts: Vec<(&str, Host)> = ["r-a", "r-b", "r-c"]
        .into_iter()
        .map(|id| Ok((id, replica(&plane, &ns, &dir, id)?)))
        .collect::<Result<_>>()?;
    let start = Instant::now();
    loop {
        if converged(&echoes, &jobs).await?.len() == ECHOS {
            break;
        }
        anyhow::ensure!(
            start.elapsed() < Duration::from_secs(300),
            "not converged in 300 s"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    println!(
        "{ECHOS} Echos converged on 3 replicas in {:?} (server-side filtering: {server_side})",
        start.elapsed()
    );
    for (id, host) in &hosts {
        let filtering = if server_side { "API server" } else { "client-side" };
        assert!(
            host.log().iter().any(|l| l["server_side"] == server_side
                && l["message"].as_str().is_some_and(|m| m.contains(filtering))),
            "{id} says how it filters"
        );
    }
    // Each replica caches and reconciled the Echos its share of the ring covers, and
    // together exactly all. The share is the ring's (random identities, 32 points each:
    // a third give or take ~0.09, see the ring's own tests), so it is read, not assumed;
    // 3 000 UIDs put a replica's count within ~0.03 of it.
    let mut total = 0.0;
    for (id, host) in &hosts {
        let metrics = host.metrics().await?;
        let share = sample(&metrics, "capstan_shard_share");
        let mine = reconciled(host).len() as f64 / ECHOS as f64;
        let cached = cached_echos(host).await?;
        println!(
            "{id}: {:.1}% of the ring, reconciled {:.1}% of the Echos, caches {cached} of them",
            share * 100.0,
            mine * 100.0
        );
        assert!((0.15..0.55).contains(&share), "{id} holds {share:.2} of the ring");
        assert!(
            (mine - share).abs() < 0.06,
            "{id} reconciled {mine:.2} of the Echos, holds {share:.2}"
        );
        assert!(
            (cached / ECHOS as f64 - share).abs() < 0.05,
            "{id} caches {cached}, holds {share:.2}"
        );
        total += cached;
    }
    assert_eq!(total, ECHOS as f64, "the caches split the Echos");

    // kill -9 one: Echos created after it are reconciled by the others once its Lease
    // expires. How fast is the bench's to measure (`cargo bench --bench e2e`).
    let (killed_id, killed) = hosts.remove(0);
    let its_range = reconciled(&killed);
    killed.signal(libc::SIGKILL);
    let killed_at = Instant::now();
    let killed_ts = Timestamp::now();
    create_echos(&echoes, "after-kill-", 60).await?;
    statuses(&echoes, "after-kill-", 60, Duration::from_secs(120)).await?;
    println!(
        "kill -9 of {killed_id} → its range reconciled by the others in {:?} (lease {LEASE_DURATION:?}, debug build)",
        killed_at.elapsed()
    );
    // The first reconcile of one of the killed replica's Echos by another replica.
    let taken = hosts
        .iter()
        .flat_map(|(_, host)| reconciles(host, Timestamp::MAX))
        .filter(|(object, started, _)| *started > killed_ts && its_range.contains(object))
        .map(|(_, started, _)| started.duration_since(killed_ts))
        .min();
    println!("  its range first reconciled by another replica {taken:?} after the kill");
    for (id, host) in &hosts {
        let after = |message: &str| {
            host.log()
                .iter()
                .filter(|l| l["message"].as_str().is_some_and(|m| m.contains(message)))
                .filter_map(timestamp)
                .find(|t| *t > killed_ts)
                .map(|t| t.duration_since(killed_ts))
        };
        println!(
            "  {id}: ranges changed {:?} after the kill, controllers running again {:?} after",
            after("shard ranges changed"),
            after("caches synced")
        );
    }

    // A new replica joins: the ranges rebalance and it takes a share.
    hosts.push(("r-d", replica(&plane, &ns, &dir, "r-d")?));
    eventually("r-d's share", Duration::from_secs(60), async || {
        let share = sample(&hosts[2].1.metrics().await?, "capstan_shard_share");
        Ok((share > 0.15).then_some(()))
    })
    .await?;
    create_echos(&echoes, "after-join-", 60).await?;
    statuses(&echoes, "after-join-", 60, Duration::from_secs(120)).await?;
    assert_eq!(
        converged(&echoes, &jobs).await?.len(),
        ECHOS + 120,
        "one Job per Echo"
    );
    assert!(!reconciled(&hosts[2].1).is_empty(), "r-d reconciles its share");
    let rebalanced = sample(&hosts[0].1.metrics().await?, "capstan_shard_rebalances_total");
    assert!(
        rebalanced >= 3.0,
        "r-b's ranges changed on start, kill and join: {rebalanced}"
    );

    // No Echo was ever reconciled by two replicas at once.
    let mut all: Vec<(&str, String, Timestamp, Timestamp)> = reconciles(&killed, killed_ts)
        .into_iter()
        .map(|(o, s, e)| (killed_id, o, s, e))
        .collect();
    for (id, host) in &hosts {
        all.extend(
            reconciles(host, Timestamp::now())
                .into_iter()
                .map(|(o, s, e)| (*id, o, s, e)),
        );
    }
    let mut by_object: HashMap<&str, Vec<&(&str, String, Timestamp, Timestamp)>> = HashMap::new();
    for r in &all {
        by_object.entry(r.1.as_str()).or_default().push(r);
    }
    for (object, runs) in by_object {
        for (i, a) in runs.iter().enumerate() {
            for b in &runs[i + 1..] {
                let overlap = a.0 != b.0 && a.2 < b.3 && b.2 < a.3;
                assert!(!overlap, "{} and {} reconciled {object} at once", a.0, b.0);
            }
        }
    }
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_split_the_echos_with_the_api_server_filtering() -> Result<()> {
    three_replicas_split_the_echos(true).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_split_the_echos_without_the_feature_gate() -> Result<()> {
    three_replicas_split_the_echos(false).await
}

/// Namespaces and Echos per namespace of the `namespace`-key test.
const SPACES: usize = 16;
const PER_SPACE: usize = 3;

/// The container command of a Job's pod.
fn command(job: &Job) -> Vec<String> {
    job.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|p| p.containers.first())
        .and_then(|c| c.command.clone())
        .unwrap_or_default()
}

/// With `--shard-key namespace` a replica watches every namespace, and the API server
/// splits parents, children and the related ConfigMaps they read by namespace: each
/// object is cached by exactly one replica, and a changed ConfigMap still re-runs its
/// namespace's Echos.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_namespace_parents_children_and_related_objects_are_split() -> Result<()> {
    let _turn = PLANES.lock().await;
    let plane = Plane::start(PlaneConfig::api_only()).await?;
    install_plugin_crd(&plane, "echo").await?;
    let client = plane.client().await?;
    let mut spaces = Vec::new();
    for i in 0..SPACES {
        spaces.push(plane.namespace(&format!("by-ns-{i}")).await?);
    }
    let greeting = |ns: &str, word: &str| -> Result<ConfigMap> {
        Ok(serde_json::from_value(serde_json::json!({
            "metadata": {"name": "greetings"}, "data": {"text": format!("{word} from {ns}")},
        }))?)
    };
    for ns in &spaces {
        let maps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        maps.create(&PostParams::default(), &greeting(ns, "hello")?)
            .await?;
        let echoes: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &echo_resource());
        for i in 0..PER_SPACE {
            let echo: DynamicObject = serde_json::from_value(serde_json::json!({
                "apiVersion": "capstan.dev/v1alpha1", "kind": "Echo", "metadata": {"name": format!("e{i}")},
                "spec": {"messageFrom": {"configMapKeyRef": {"name": "greetings", "key": "text"}}},
            }))?;
            echoes.create(&PostParams::default(), &echo).await?;
        }
    }
    let dir = std::env::temp_dir().join(format!("capstan-sharding-{}", spaces[0]));
    mount(&["echo"], &dir)?;
    let hosts: Vec<Host> = ["n-a", "n-b"]
        .into_iter()
        .map(|id| {
            let mut args = vec![
                "--plugins",
                dir.to_str().context("utf-8 path")?,
                "--sharding",
                "--shard-key",
                "namespace",
                "--leader-election-namespace",
                &spaces[0],
            ];
            args.extend(LEASE);
            Host::start(&plane, &args, &dir.join(format!("{id}.log")), &[("POD_NAME", id)])
        })
        .collect::<Result<_>>()?;
    let jobs: Api<Job> = Api::all(client.clone());
    // Every Echo's Job echoes its own namespace's ConfigMap.
    let echoed = async |word: &str, spaces: &[String]| -> Result<usize> {
        let list = jobs.list(&ListParams::default()).await?.items;
        Ok(spaces
            .iter()
            .map(|ns| {
                let want = format!("{word} from {ns}");
                list.iter()
                    .filter(|j| j.namespace().as_deref() == Some(ns.as_str()))
                    .filter(|j| command(j).last() == Some(&want))
                    .count()
            })
            .sum())
    };
    eventually("every Echo's Job", Duration::from_secs(180), async || {
        Ok((echoed("hello", &spaces).await? == SPACES * PER_SPACE).then_some(()))
    })
    .await?;

    let cached = async |kind: &str| -> Result<Vec<f64>> {
        let mut each = Vec::new();
        for host in &hosts {
            let metric = format!(r#"capstan_cache_objects{{plugin="echo",kind="{kind}"}}"#);
            each.push(sample(&host.metrics().await?, &metric));
        }
        Ok(each)
    };
    let all_maps = Api::<ConfigMap>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items
        .len() as f64;
    let total = (SPACES * PER_SPACE) as f64;
    // Until the group has settled, a replica giving ranges up may still hold them, and one
    // not yet joined holds none.
    let mut seen = String::new();
    let (echos, job_caches, maps) = eventually(
        "the objects split, each cached by one replica",
        Duration::from_secs(60),
        async || {
            let (echos, job_caches, maps) = (
                cached("Echo").await?,
                cached("Job").await?,
                cached("ConfigMap").await?,
            );
            seen = format!("Echos {echos:?}, Jobs {job_caches:?}, ConfigMaps {maps:?}");
            let once = |each: &[f64], all: f64| each.iter().sum::<f64>() == all;
            // Both replicas hold ranges: neither caches every namespace's ConfigMaps.
            let split = maps.iter().all(|m| *m < all_maps);
            Ok(
                (once(&echos, total) && once(&job_caches, total) && once(&maps, all_maps) && split)
                    .then_some((echos, job_caches, maps)),
            )
        },
    )
    .await
    .with_context(|| format!("last seen: {seen} (of {total} Echos and Jobs, {all_maps} ConfigMaps)"))?;
    println!(
        "by namespace, 2 replicas: Echos {echos:?}, Jobs {job_caches:?}, ConfigMaps {maps:?} of {all_maps}"
    );
    // Before the group gives it ranges, a replica watches nothing: no controller starts.
    for host in &hosts {
        let log = host.log();
        let first = |m: &str| log.iter().position(|l| l["message"] == m);
        let (waiting, ranges, started) = (
            first("no shard ranges held; waiting"),
            first("shard ranges changed"),
            first("controller started"),
        );
        assert!(
            waiting.is_some() && matches!((ranges, started), (Some(r), Some(s)) if r < s),
            "a replica's controller started before it had ranges: waiting at {waiting:?}, ranges at {ranges:?}, started at {started:?}"
        );
    }

    // A changed ConfigMap re-runs its namespace's Echos, on whichever replica has them.
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &spaces[0]);
    maps.replace("greetings", &PostParams::default(), &{
        let mut map = maps.get("greetings").await?;
        map.data = greeting(&spaces[0], "goodbye")?.data;
        map
    })
    .await?;
    eventually("the new message's Jobs", Duration::from_secs(60), async || {
        Ok((echoed("goodbye", &spaces[..1]).await? == PER_SPACE).then_some(()))
    })
    .await?;
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}
