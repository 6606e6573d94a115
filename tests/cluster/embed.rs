//! The host as a library, in process: `capstan::Host` on the local plane runs Echo to a
//! Job, answers `/readyz`, holds its Lease, and once its shutdown future resolves it
//! returns, releases the Lease and stops its servers.

use std::time::Duration;

use anyhow::Result;
use capstan::controller::Options;
use capstan::dev::Plane;
use capstan::engine::{Engine, EngineConfig};
use capstan::leader;
use capstan::{Host, HostConfig};
use capstan_tests::host::{
    echo, echo_resource, eventually, first_listed, http_get, install_plugin_crd, mount,
};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DynamicObject, PostParams};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_in_process_runs_echo_and_stops_on_its_shutdown_future() -> Result<()> {
    let plane = Plane::shared().await?;
    install_plugin_crd(plane, "echo").await?;
    let ns = plane.namespace("embed").await?;
    let dir = std::env::temp_dir().join(format!("capstan-embed-{ns}"));
    mount(&["echo"], &dir)?;
    let config = HostConfig {
        plugins: Some(dir.clone()),
        defaults: Options {
            namespace: Some(ns.clone()),
            ..Options::default()
        },
        metrics_addr: "127.0.0.1:0".parse()?,
        health_addr: "127.0.0.1:0".parse()?,
        election: Some(leader::Settings::new("capstan", ns.clone(), "embedded")),
        ..HostConfig::default()
    };
    // No compile cache: an embedder's test leaves nothing behind.
    let engine = Engine::new(EngineConfig::default())?;
    let host = tokio::task::spawn_blocking(move || Host::new(config, engine)).await??;
    let client = plane.client().await?;
    let serving = host.serve(client.clone()).await?;
    let health = serving.health_addr().to_string();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(serving.until(async {
        let _ = stopped.await;
    }));

    let echoes: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &echo_resource());
    echoes
        .create(&PostParams::default(), &echo("hello", "from a library")?)
        .await?;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let job = first_listed("the Echo's Job", &jobs, Duration::from_secs(60)).await?;
    assert_eq!(
        job.metadata.labels.unwrap_or_default()["capstan.dev/plugin"],
        "echo"
    );
    eventually("/readyz answers 200", Duration::from_secs(30), async || {
        Ok(http_get(&health, "/readyz")?.0.contains("200").then_some(()))
    })
    .await?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let holder = async || -> Result<Option<String>> {
        Ok(leases
            .get_opt("capstan")
            .await?
            .and_then(|l| l.spec?.holder_identity)
            .filter(|h| !h.is_empty()))
    };
    assert_eq!(holder().await?.as_deref(), Some("embedded"));

    stop.send(()).ok();
    tokio::time::timeout(Duration::from_secs(30), running).await??;
    assert_eq!(holder().await?, None, "the Lease is released on the way out");
    assert!(
        http_get(&health, "/readyz").is_err(),
        "the health server stops with the host"
    );
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}
