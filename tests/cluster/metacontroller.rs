//! Controllers written for Metacontroller (ours: the counter with Python hooks, and with
//! JavaScript ones), imported with `capstan import metacontroller` and run by `capstan run
//! --config run.yaml` on the real plane: the customize hook picks the related ConfigMaps,
//! the sync hook's child and status are written and follow a new ConfigMap, the finalize
//! hook holds the parent's deletion until its child is gone, and a parent the parent
//! rule's labelSelector does not pick is left alone.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use capstan::dev::Plane;
use capstan_tests::host::{Host, eventually};
use capstan_tests::toolchains::{componentize_py, js_toolchain};
use capstan_tests::{arg, capstan_bin, workspace};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, PostParams};
use serde_json::json;

fn counter_resource() -> ApiResource {
    let gvk = kube::api::GroupVersionKind::gvk("examples.capstan.dev", "v1", "ConfigMapCounter");
    ApiResource::from_gvk_with_plural(&gvk, "configmapcounters")
}

/// `capstan ARGS` in `dir`, which must succeed; its stdout.
fn capstan_in(dir: &Path, args: &[&str]) -> Result<String> {
    let out = std::process::Command::new(capstan_bin())
        .args(args)
        .current_dir(dir)
        .env("COMPONENTIZE_PY", componentize_py())
        .env("CAPSTAN_JS_TOOLCHAIN", js_toolchain())
        .env_remove("RUST_LOG")
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "capstan {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn configmap(name: &str, app: &str) -> Result<ConfigMap> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": app}},
    }))?)
}

/// The child's `data.names` and the parent's `status.count`, once both are there.
async fn counted(
    configmaps: &Api<ConfigMap>,
    counters: &Api<DynamicObject>,
) -> Result<Option<(String, i64)>> {
    let child = configmaps.get_opt("web-count").await?;
    let names = child.and_then(|c| c.data?.get("names").cloned());
    let parent = counters.get_opt("web").await?;
    let count = parent.and_then(|p| p.data["status"]["count"].as_i64());
    Ok(names.zip(count))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_imported_metacontroller_controller_reconciles_and_finalizes_on_the_plane() -> Result<()> {
    counts_follows_and_finalizes("counter", "configmap-counter", &[]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_imported_controller_with_javascript_hooks_does_the_same_for_the_parents_it_selects() -> Result<()>
{
    counts_follows_and_finalizes("counter-js", "configmap-counter-js", &[("counted", "yes")]).await
}

/// The counter of `tests/fixtures/metacontroller/EXAMPLE`, imported, built and run: it
/// counts, follows a new ConfigMap and finalizes a parent labelled `labels`; when those
/// are the parent rule's selector, a parent without them is never reconciled.
async fn counts_follows_and_finalizes(
    example: &str,
    controller: &str,
    labels: &[(&str, &str)],
) -> Result<()> {
    let finalizer = format!("metacontroller.io/compositecontroller-{controller}");
    let plane = Plane::shared().await?;
    let ns = plane.namespace(example).await?;
    let dir = tempfile::tempdir()?;
    let project = dir.path().join("counter");
    let example = workspace().join("tests/fixtures/metacontroller").join(example);
    capstan_in(
        dir.path(),
        &[
            "import",
            "metacontroller",
            arg(&example),
            "--out",
            arg(&project),
            "--sdk",
            arg(workspace()),
        ],
    )?;
    capstan_in(&project, &["build"])?;
    let crds: Vec<CustomResourceDefinition> =
        serde_saphyr::from_multiple(&std::fs::read_to_string(project.join("crds.yaml"))?)?;
    plane.install_crds(&crds).await?;

    let client = plane.client().await?;
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    for (name, app) in [("a", "web"), ("b", "web"), ("c", "db")] {
        configmaps
            .create(&PostParams::default(), &configmap(name, app)?)
            .await?;
    }
    let config = project.join("run.yaml");
    let host = Host::start(
        plane,
        &["--config", arg(&config), "--namespace", &ns],
        &dir.path().join("host.log"),
        &[],
    )?;
    let counters: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &counter_resource());
    let labels: serde_json::Map<String, serde_json::Value> =
        labels.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
    let counter = |name: &str, labels: &serde_json::Map<String, serde_json::Value>| {
        serde_json::from_value::<DynamicObject>(json!({
            "apiVersion": "examples.capstan.dev/v1", "kind": "ConfigMapCounter",
            "metadata": {"name": name, "labels": labels}, "spec": {"selector": {"app": "web"}},
        }))
    };
    let unselected = !labels.is_empty();
    if unselected {
        counters
            .create(&PostParams::default(), &counter("ignored", &Default::default())?)
            .await?;
    }
    counters
        .create(&PostParams::default(), &counter("web", &labels)?)
        .await?;
    let log = || {
        format!(
            "host log: {:?}",
            host.log().iter().rev().take(8).collect::<Vec<_>>()
        )
    };
    let want = |names: &str, count: i64| (names.to_string(), count);

    // customize picked app=web; sync wrote the child and the status (keys are v2's).
    let seen = eventually("the count of two", Duration::from_secs(120), async || {
        Ok(counted(&configmaps, &counters).await?.filter(|c| c.1 == 2))
    })
    .await
    .with_context(log)?;
    assert_eq!(seen, want(&format!("{ns}/a,{ns}/b"), 2));
    let parent = counters.get("web").await?;
    assert_eq!(parent.metadata.finalizers.as_deref(), Some(&[finalizer][..]));
    if unselected {
        // Created before the selected one, which is counted by now: the host never saw it.
        let ignored = counters.get("ignored").await?;
        assert_eq!(ignored.metadata.finalizers, None, "{ignored:?}");
        assert!(ignored.data.get("status").is_none(), "{ignored:?}");
        assert!(configmaps.get_opt("ignored-count").await?.is_none());
    }

    // A related ConfigMap that appears is followed.
    configmaps
        .create(&PostParams::default(), &configmap("d", "web")?)
        .await?;
    let seen = eventually("the count of three", Duration::from_secs(60), async || {
        Ok(counted(&configmaps, &counters).await?.filter(|c| c.1 == 3))
    })
    .await
    .with_context(log)?;
    assert_eq!(seen, want(&format!("{ns}/a,{ns}/b,{ns}/d"), 3));

    // finalize answers no children until the child is gone, then releases the parent.
    counters.delete("web", &DeleteParams::default()).await?;
    eventually(
        "the parent and its child gone",
        Duration::from_secs(60),
        async || {
            let gone =
                counters.get_opt("web").await?.is_none() && configmaps.get_opt("web-count").await?.is_none();
            Ok(gone.then_some(()))
        },
    )
    .await
    .with_context(log)?;
    Ok(())
}
