//! Sharded list and watch against the real kube-apiserver (v1.37, alpha gate
//! `ShardedListAndWatch`): the server filters with our FNV-1a and our half-open ranges, so
//! `shard::matches` predicts exactly what it returns, and `served` tells a server with the
//! gate from one without.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::{Context, Result};
use capstan::dev::{Plane, PlaneConfig};
use capstan::shard::{self, Collection, Range, Ring, ShardKey};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, ObjectMeta, PostParams, WatchEvent, WatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, ResourceExt};

/// Planes take turns: two starting at once take all of a 2-core machine.
static PLANES: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
const LABEL: &str = "capstan.dev/shard-test";

async fn config(plane: &Plane) -> Result<kube::Config> {
    let kc = Kubeconfig::read_from(plane.kubeconfig())?;
    Ok(kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?)
}

async fn sharded(plane: &Plane, key: ShardKey, ranges: &[Range]) -> Result<Client> {
    let selector = shard::render(key, ranges);
    shard::client(config(plane).await?, &selector, [Collection::of::<ConfigMap>()])
}

async fn create(api: &Api<ConfigMap>, name: &str, run: &str) -> Result<ConfigMap> {
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(BTreeMap::from([(LABEL.to_string(), run.to_string())])),
            ..Default::default()
        },
        ..Default::default()
    };
    Ok(api.create(&PostParams::default(), &cm).await?)
}

/// `(namespace, name)` of every labelled ConfigMap the client lists (in `ns`, or everywhere),
/// each checked against the client-side predicate for `ranges`.
async fn listed(
    client: Client,
    ns: Option<&str>,
    run: &str,
    key: ShardKey,
    ranges: &[Range],
) -> Result<BTreeSet<(String, String)>> {
    let api: Api<ConfigMap> = match ns {
        Some(ns) => Api::namespaced(client, ns),
        None => Api::all(client),
    };
    let list = api
        .list(&ListParams::default().labels(&format!("{LABEL}={run}")))
        .await?;
    let mut out = BTreeSet::new();
    for cm in list {
        let (ns, uid) = (cm.namespace(), cm.uid().context("a uid")?);
        assert!(
            shard::matches(key, ranges, ns.as_deref(), &uid),
            "{} {uid} is not ours",
            cm.name_any()
        );
        out.insert((ns.unwrap_or_default(), cm.name_any()));
    }
    Ok(out)
}

/// Lists through two clients with complementary ranges: disjoint halves making up `all`.
async fn assert_split(
    plane: &Plane,
    ns: Option<&str>,
    run: &str,
    key: ShardKey,
    all: &BTreeSet<(String, String)>,
) -> Result<()> {
    let ring = Ring::new(["replica-a", "replica-b"]);
    let (a, b) = (ring.ranges("replica-a"), ring.ranges("replica-b"));
    let got_a = listed(sharded(plane, key, &a).await?, ns, run, key, &a).await?;
    let got_b = listed(sharded(plane, key, &b).await?, ns, run, key, &b).await?;
    eprintln!(
        "{key}: {} + {} of {} ({} + {} ranges)",
        got_a.len(),
        got_b.len(),
        all.len(),
        a.len(),
        b.len()
    );
    assert!(
        got_a.is_disjoint(&got_b),
        "{key}: both shards got {:?}",
        got_a.intersection(&got_b)
    );
    assert_eq!(
        &got_a.union(&got_b).cloned().collect::<BTreeSet<_>>(),
        all,
        "{key}: the union is not everything"
    );
    Ok(())
}

#[tokio::test]
async fn the_server_splits_lists_and_watches_as_matches_predicts() -> Result<()> {
    let guard = PLANES.lock().await;
    let plane = Plane::start(PlaneConfig::api_only()).await?;
    drop(guard);
    let client = plane.client().await?;
    assert!(
        shard::served(&client).await?,
        "the gate is on, yet shardSelector is not honoured"
    );

    // Uid: 20 ConfigMaps in one namespace, listed in it.
    let ns = plane.namespace("shard").await?;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let mut all = BTreeSet::new();
    let mut uids = Vec::new();
    for i in 0..20 {
        let cm = create(&api, &format!("cm-{i}"), "uid").await?;
        uids.push((cm.name_any(), cm.uid().context("a uid")?));
        all.insert((ns.clone(), cm.name_any()));
    }
    assert_split(&plane, Some(&ns), "uid", ShardKey::Uid, &all).await?;

    // Exactly one hash: the server's FNV-1a of the uid is ours to the bit.
    let (name, uid) = &uids[7];
    let h = shard::hash_of(ShardKey::Uid, Some(&ns), uid);
    let one = Range::new(h, u128::from(h) + 1).context("a one-hash range")?;
    let got = listed(
        sharded(&plane, ShardKey::Uid, &[one]).await?,
        Some(&ns),
        "uid",
        ShardKey::Uid,
        &[one],
    )
    .await?;
    assert_eq!(got, BTreeSet::from([(ns.clone(), name.clone())]));
    let rest = shard::subtract(&[Range::FULL], &[one]);
    let got = listed(
        sharded(&plane, ShardKey::Uid, &rest).await?,
        Some(&ns),
        "uid",
        ShardKey::Uid,
        &rest,
    )
    .await?;
    assert_eq!(got.len(), 19);

    // Namespace: 8 namespaces of 3 ConfigMaps, listed across all namespaces.
    let mut all = BTreeSet::new();
    for n in 0..8 {
        let ns = plane.namespace(&format!("shard-ns{n}")).await?;
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
        for i in 0..3 {
            create(&api, &format!("cm-{i}"), "namespace").await?;
            all.insert((ns.clone(), format!("cm-{i}")));
        }
    }
    assert_split(&plane, None, "namespace", ShardKey::Namespace, &all).await?;
    // One hash again: exactly the 3 ConfigMaps of the namespace hashing to it.
    let (first, _) = all.first().context("ConfigMaps")?;
    let h = shard::hash_of(ShardKey::Namespace, Some(first), "");
    let one = [Range::new(h, u128::from(h) + 1).context("a one-hash range")?];
    let client_one = sharded(&plane, ShardKey::Namespace, &one).await?;
    let got = listed(client_one, None, "namespace", ShardKey::Namespace, &one).await?;
    assert_eq!(got, all.iter().filter(|(ns, _)| ns == first).cloned().collect());

    // Watches carry the selector too: new objects arrive at exactly one shard.
    let ring = Ring::new(["replica-a", "replica-b"]);
    let mut streams = Vec::new();
    for member in ["replica-a", "replica-b"] {
        let ranges = ring.ranges(member);
        let api: Api<ConfigMap> = Api::namespaced(sharded(&plane, ShardKey::Uid, &ranges).await?, &ns);
        let rv = api
            .list(&ListParams::default())
            .await?
            .metadata
            .resource_version
            .context("an rv")?;
        streams.push((
            ranges,
            // No bookmarks: any event past this shard's share is then a leak.
            api.watch(&WatchParams::default().timeout(30).disable_bookmarks(), &rv)
                .await?
                .boxed(),
        ));
    }
    let mut created = BTreeSet::new();
    for i in 0..10 {
        created.insert(
            create(&api, &format!("late-{i}"), "watch")
                .await?
                .uid()
                .context("a uid")?,
        );
    }
    let mut seen = BTreeSet::new();
    for (ranges, stream) in &mut streams {
        // Each watch yields its share of the 10, then nothing until the timeout.
        let mine = created
            .iter()
            .filter(|u| shard::matches(ShardKey::Uid, ranges, None, u))
            .count();
        for _ in 0..mine {
            let next = tokio::time::timeout(Duration::from_secs(20), stream.try_next()).await;
            let Ok(Ok(Some(WatchEvent::Added(cm)))) = next else {
                panic!("expected an Added event, got {next:?}");
            };
            let uid = cm.uid().context("a uid")?;
            assert!(shard::matches(ShardKey::Uid, ranges, None, &uid));
            assert!(seen.insert(uid), "an object arrived twice");
        }
        let extra = tokio::time::timeout(Duration::from_millis(500), stream.try_next()).await;
        assert!(extra.is_err(), "an event beyond this shard's share: {extra:?}");
    }
    assert_eq!(seen, created);
    Ok(())
}

/// The status of a raw GET and, for an error, its message.
async fn status_of(client: &Client, path: &str) -> Result<(u16, String)> {
    let req = http::Request::get(path).body(Vec::new())?;
    match client.request_text(req).await {
        Ok(_) => Ok((200, String::new())),
        Err(kube::Error::Api(s)) => Ok((s.code, s.message)),
        Err(e) => Err(e.into()),
    }
}

#[tokio::test]
async fn served_tells_the_gate_on_from_the_gate_off() -> Result<()> {
    let malformed = "/api/v1/namespaces?limit=1&shardSelector=shardRange%28";
    let short_hex = "/api/v1/namespaces?limit=1&shardSelector=shardRange%28object.metadata.uid%2C%270x0%27%2C%270x10000000000000000%27%29";
    for gate in [false, true] {
        let guard = PLANES.lock().await;
        let config = PlaneConfig {
            sharded_watch: gate,
            ..PlaneConfig::api_only()
        };
        let plane = Plane::start(config).await?;
        drop(guard);
        let client = plane.client().await?;
        assert_eq!(shard::served(&client).await?, gate, "gate {gate}");
        let (bad, short) = (
            status_of(&client, malformed).await?,
            status_of(&client, short_hex).await?,
        );
        eprintln!("gate {gate}: malformed selector -> {bad:?}\n  '0x0' -> {short:?}");
        // Off, the parameter is ignored outright; on, a selector the parser refuses fails
        // the request, with a 500: the store returns a plain error, not an Invalid.
        let want = if gate { 500 } else { 200 };
        assert_eq!((bad.0, short.0), (want, want));
        if gate {
            assert!(
                bad.1.contains("invalid shard selector: CEL parse error"),
                "{}",
                bad.1
            );
            assert!(short.1.contains("16-digit hex value"), "{}", short.1);
        }
    }
    Ok(())
}
