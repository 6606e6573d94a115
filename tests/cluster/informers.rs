//! One watch per kind and scope, whatever the number of plugins: three copies of Echo
//! under their own names (`name:` in the config, each with its own image so their Jobs
//! differ) all converge, each with its own Jobs, and the API server counts one watch of
//! Echoes, one of Jobs and one of ConfigMaps (Echo's related kind) in the namespace,
//! where three plugins each watching for themselves opened three of each.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use capstan::dev::Plane;
use capstan_tests::host::{Host, echo, echo_resource, eventually, install_plugin_crd, mount};
use capstan_tests::requests::watches;
use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams, PostParams};

const COPIES: [&str; 3] = ["echo-a", "echo-b", "echo-c"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_plugins_of_one_kind_share_one_watch_of_parents_and_of_children() -> Result<()> {
    let plane = Plane::shared().await?;
    install_plugin_crd(plane, "echo").await?;
    let ns = plane.namespace("informers").await?;
    let dir = std::env::temp_dir().join(format!("capstan-informers-{ns}"));
    mount(&["echo"], &dir)?;
    let entries: String = COPIES
        .iter()
        .map(|name| format!("- path: echo.wasm\n  name: {name}\n  settings: {{image: \"busybox:{name}\"}}\n"))
        .collect();
    let config = dir.join("capstan.yaml");
    std::fs::write(&config, format!("plugins:\n{entries}"))?;
    let args = ["--config", config.to_str().context("utf-8")?, "--namespace", &ns];
    // System components keep namespaced watches of their own (kube-system's ConfigMaps):
    // the host's are what it adds.
    let before = watches(&plane.client().await?).await?;
    let mut host = Host::start(plane, &args, &dir.join("host.log"), &[])?;

    let client = plane.client().await?;
    let echoes: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &echo_resource());
    for name in ["one", "two"] {
        echoes
            .create(&PostParams::default(), &echo(name, "shared")?)
            .await?;
    }
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let by_plugin = eventually("two Jobs of each copy", Duration::from_secs(90), async || {
        let list = jobs.list(&ListParams::default()).await?.items;
        let mut made: Vec<String> = list
            .iter()
            .filter_map(|j| j.labels().get("capstan.dev/plugin").cloned())
            .collect();
        made.sort();
        Ok((made.len() == 6).then_some(made))
    })
    .await?;
    ensure!(
        by_plugin == ["echo-a", "echo-a", "echo-b", "echo-b", "echo-c", "echo-c"],
        "{by_plugin:?}"
    );

    let open = watches(&client).await?;
    let namespaced = |resource: &str| {
        let key = (resource.to_string(), "namespace".to_string());
        open.get(&key)
            .map(|n| n - before.get(&key).copied().unwrap_or(0.0))
    };
    ensure!(
        (namespaced("echoes"), namespaced("jobs"), namespaced("configmaps"))
            == (Some(1.0), Some(1.0), Some(1.0)),
        "one watch of each kind in the namespace (Echo reads ConfigMaps), not one per plugin: {open:?}"
    );
    let given = host
        .log()
        .into_iter()
        .filter(|l| {
            l["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("plugin given"))
        })
        .count();
    ensure!(
        given == COPIES.len(),
        "each copy says what it was given once: {given}"
    );
    host.signal(libc::SIGTERM);
    ensure!(
        host.wait(Duration::from_secs(30))?.code() == Some(0),
        "a clean exit"
    );
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}
