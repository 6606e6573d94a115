//! Controllers written for Metacontroller (ours: the counter with Python hooks, with
//! JavaScript ones and with Jsonnet ones), imported with `capstan import metacontroller` and run by `capstan run
//! --config run.yaml` on the real plane: the customize hook picks the related ConfigMaps,
//! the sync hook's child and status are written and follow a new ConfigMap, the finalize
//! hook holds the parent's deletion until its child is gone, and a parent the parent
//! rule's labelSelector does not pick is left alone; a DecoratorController (ours, Python)
//! attaches a child to each target it selects, sets and removes the target's own labels
//! and annotations, and lets go of a target it no longer selects; a cluster-scoped parent
//! (ours, Python) reads related objects through a `customize` rule's `namespaceSelector`,
//! following the namespaces' labels.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use capstan::dev::Plane;
use capstan_tests::host::{Host, eventually};
use capstan_tests::toolchains::{componentize_py, js_toolchain};
use capstan_tests::{arg, capstan_bin, workspace};
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
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
        .env("CARGO_TARGET_DIR", capstan_tests::authors_target())
        .env_remove("RUST_LOG")
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "capstan {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `tests/fixtures/metacontroller/EXAMPLE` imported into `dir/project` (with this
/// checkout's SDK), built, its CRDs installed, and `capstan run --config run.yaml` started
/// on `ns` (every namespace: `None`): the project and the host.
async fn imported_and_running(
    plane: &Plane,
    example: &str,
    ns: Option<&str>,
    dir: &Path,
) -> Result<(PathBuf, Host)> {
    let project = dir.join("project");
    let example = workspace().join("tests/fixtures/metacontroller").join(example);
    let import = ["import", "metacontroller", arg(&example), "--out", arg(&project)];
    capstan_in(dir, &[&import[..], &["--sdk", arg(workspace())]].concat())?;
    capstan_in(&project, &["build"])?;
    // A controller of built-in kinds alone has no CRDs to install.
    if let Ok(text) = std::fs::read_to_string(project.join("crds.yaml")) {
        let crds: Vec<CustomResourceDefinition> = serde_saphyr::from_multiple(&text)?;
        plane.install_crds(&crds).await?;
    }
    let config = project.join("run.yaml");
    let scope = ns.map(|ns| ["--namespace", ns]);
    let args = [
        &["--config", arg(&config)][..],
        scope.as_ref().map_or(&[][..], |s| &s[..]),
    ]
    .concat();
    let host = Host::start(plane, &args, &dir.join("host.log"), &[])?;
    Ok((project, host))
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_imported_controller_with_jsonnet_hooks_does_the_same_evaluated_in_the_component() -> Result<()> {
    counts_follows_and_finalizes(
        "counter-jsonnet",
        "configmap-counter-jsonnet",
        &[("counted", "yes")],
    )
    .await
}

/// The counter of `tests/fixtures/metacontroller/EXAMPLE`, imported, built and run: it
/// counts, follows a new ConfigMap and finalizes a parent labelled `labels`; when those
/// are the parent rule's selector, a parent without them is never reconciled. Its hooks
/// are v2 and its rule names no namespace, so it reads every namespace the parent may:
/// under the host's `--namespace`, that one alone.
async fn counts_follows_and_finalizes(
    example: &str,
    controller: &str,
    labels: &[(&str, &str)],
) -> Result<()> {
    let finalizer = format!("metacontroller.io/compositecontroller-{controller}");
    let plane = Plane::shared().await?;
    let ns = plane.namespace(example).await?;
    let dir = tempfile::tempdir()?;
    let (_, host) = imported_and_running(plane, example, Some(&ns), dir.path()).await?;
    let client = plane.client().await?;
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let web = format!("web-{example}");
    for (name, app) in [("a", web.as_str()), ("b", &web), ("c", "db")] {
        configmaps
            .create(&PostParams::default(), &configmap(name, app)?)
            .await?;
    }
    let counters: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &counter_resource());
    let labels: serde_json::Map<String, serde_json::Value> =
        labels.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
    let counter = |name: &str, labels: &serde_json::Map<String, serde_json::Value>| {
        serde_json::from_value::<DynamicObject>(json!({
            "apiVersion": "examples.capstan.dev/v1", "kind": "ConfigMapCounter",
            "metadata": {"name": name, "labels": labels}, "spec": {"selector": {"app": web}},
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

    // A related ConfigMap that appears is followed; one in another namespace, outside
    // the host's `--namespace`, is not read.
    let elsewhere = plane.namespace(&format!("{example}-elsewhere")).await?;
    Api::<ConfigMap>::namespaced(client.clone(), &elsewhere)
        .create(&PostParams::default(), &configmap("e", &web)?)
        .await?;
    configmaps
        .create(&PostParams::default(), &configmap("d", &web)?)
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

fn release_resource() -> ApiResource {
    let gvk = kube::api::GroupVersionKind::gvk("examples.capstan.dev", "v1", "ConfigRelease");
    ApiResource::from_gvk_with_plural(&gvk, "configreleases")
}

/// The reconciles the host has finished, all outcomes.
async fn reconciles(host: &Host) -> Result<f64> {
    let metrics = host.metrics().await?;
    Ok(metrics
        .lines()
        .filter(|l| l.starts_with("controller_runtime_reconcile_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum())
}

/// Wait until the host has reconciled again since it had finished `before` reconciles,
/// and a little longer: what that reconcile would write has been written.
async fn reconciled_since(host: &Host, before: f64) -> Result<()> {
    eventually("a reconcile", Duration::from_secs(30), async || {
        Ok((reconciles(host).await? > before).then_some(()))
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    Ok(())
}

/// A ServiceAccount's UID, `examples.capstan.dev/data` annotation and `side-effect` label.
type Account = (String, Option<String>, Option<String>);

/// A ConfigMap's `data.KEY`.
fn data(cm: &Option<ConfigMap>, key: &str) -> Option<String> {
    cm.as_ref()?.data.as_ref()?.get(key).cloned()
}

/// Metacontroller's update methods, imported from the child rules of our own controller
/// (`tests/fixtures/metacontroller/update-methods`, after Metacontroller's own
/// update-strategy example): a field someone else adds changes neither child; a new
/// answer leaves the OnDelete child as it is until it is deleted, deletes and creates
/// again the Recreate child — once, not in a loop — and rolls the three Roles to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn imported_update_methods_keep_or_recreate_a_child_that_differs() -> Result<()> {
    use k8s_openapi::api::core::v1::ServiceAccount;
    use kube::api::{Patch, PatchParams};
    let plane = Plane::shared().await?;
    let ns = plane.namespace("update-methods").await?;
    let dir = tempfile::tempdir()?;
    let (project, host) = imported_and_running(plane, "update-methods", Some(&ns), dir.path()).await?;
    let run = std::fs::read_to_string(project.join("run.yaml"))?;
    assert!(
        run.contains(
            "updates:\n    ConfigMap: OnDelete\n    ServiceAccount: Recreate\n    Role: RollingInPlace\n"
        ),
        "{run}"
    );
    let client = plane.client().await?;
    let releases: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &release_resource());
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
    let roles: Api<k8s_openapi::api::rbac::v1::Role> = Api::namespaced(client.clone(), &ns);
    let rolled = async |data: &str| -> Result<Option<()>> {
        let mut at = 0;
        for i in 0..3 {
            let role = roles.get_opt(&format!("web-rolled-{i}")).await?;
            let annotations = role.and_then(|r| r.metadata.annotations).unwrap_or_default();
            at += usize::from(annotations.get("examples.capstan.dev/data").map(String::as_str) == Some(data));
        }
        Ok((at == 3).then_some(()))
    };
    let log = || {
        format!(
            "host log: {:?}",
            host.log().iter().rev().take(8).collect::<Vec<_>>()
        )
    };
    let account = async || -> Result<Option<Account>> {
        let Some(sa) = accounts.get_opt("web-renewed").await? else {
            return Ok(None);
        };
        let meta = sa.metadata;
        let annotation = meta
            .annotations
            .and_then(|a| a.get("examples.capstan.dev/data").cloned());
        let label = meta.labels.and_then(|l| l.get("side-effect").cloned());
        Ok(Some((meta.uid.unwrap_or_default(), annotation, label)))
    };
    let status = async || -> Result<Option<String>> {
        let parent = releases.get_opt("web").await?;
        Ok(parent.and_then(|p| p.data["status"]["data"].as_str().map(String::from)))
    };
    let release: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "examples.capstan.dev/v1", "kind": "ConfigRelease",
        "metadata": {"name": "web"}, "spec": {"data": "v1"},
    }))?;
    releases.create(&PostParams::default(), &release).await?;
    let (first_uid, _, _) = eventually("both children at v1", Duration::from_secs(120), async || {
        let kept = data(&configmaps.get_opt("web-kept").await?, "data");
        let renewed = account().await?;
        Ok(renewed.filter(|r| r.1.as_deref() == Some("v1") && kept.as_deref() == Some("v1")))
    })
    .await
    .with_context(log)?;
    eventually("the Roles at v1", Duration::from_secs(30), async || {
        rolled("v1").await
    })
    .await
    .with_context(log)?;

    // Fields another manager adds are not the plugin's: neither child changes for them.
    let before = reconciles(&host).await?;
    let injected = PatchParams::default();
    let cm_patch = json!({"data": {"side-effect": "injected"}});
    configmaps
        .patch("web-kept", &injected, &Patch::Merge(&cm_patch))
        .await?;
    let sa_patch = json!({"metadata": {"labels": {"side-effect": "injected"}}});
    accounts
        .patch("web-renewed", &injected, &Patch::Merge(&sa_patch))
        .await?;
    reconciled_since(&host, before).await?;
    let (uid, _, label) = account().await?.context("the ServiceAccount")?;
    assert_eq!(
        (uid.as_str(), label.as_deref()),
        (first_uid.as_str(), Some("injected"))
    );

    // A new answer: the Recreate child is deleted and made afresh (without the added
    // label); the OnDelete child keeps what it had.
    let spec = json!({"spec": {"data": "v2"}});
    releases
        .patch("web", &PatchParams::default(), &Patch::Merge(&spec))
        .await?;
    let (second_uid, _, label) = eventually(
        "the ServiceAccount recreated at v2",
        Duration::from_secs(60),
        async || {
            let done = status().await?.as_deref() == Some("v2");
            Ok(account().await?.filter(|a| done && a.1.as_deref() == Some("v2")))
        },
    )
    .await
    .with_context(log)?;
    assert_ne!(second_uid, first_uid, "recreated, not updated");
    assert_eq!(label, None, "the new object carries only the answer");
    let kept = configmaps.get_opt("web-kept").await?;
    assert_eq!(
        data(&kept, "data").as_deref(),
        Some("v1"),
        "OnDelete: not updated"
    );
    assert_eq!(data(&kept, "side-effect").as_deref(), Some("injected"));

    eventually("the Roles rolled to v2", Duration::from_secs(60), async || {
        rolled("v2").await
    })
    .await
    .with_context(log)?;

    // Once it holds the answer, the Recreate child stays: a label added again is no cause.
    let before = reconciles(&host).await?;
    accounts
        .patch("web-renewed", &injected, &Patch::Merge(&sa_patch))
        .await?;
    reconciled_since(&host, before).await?;
    let (uid, annotation, _) = account().await?.context("the ServiceAccount")?;
    assert_eq!(
        (uid, annotation.as_deref()),
        (second_uid, Some("v2")),
        "no recreation loop"
    );

    // Deleted, the OnDelete child comes back from the answer.
    configmaps.delete("web-kept", &DeleteParams::default()).await?;
    let kept = eventually(
        "the ConfigMap made again at v2",
        Duration::from_secs(60),
        async || {
            let kept = configmaps.get_opt("web-kept").await?;
            Ok((data(&kept, "data").as_deref() == Some("v2")).then_some(kept))
        },
    )
    .await
    .with_context(log)?;
    assert_eq!(data(&kept, "side-effect"), None);
    Ok(())
}

/// What a decorated Service shows: its attachment's ports, its labels, and the annotation
/// naming the attachment.
async fn decorated(
    services: &Api<Service>,
    configmaps: &Api<ConfigMap>,
    name: &str,
) -> Result<(Option<String>, Vec<(String, String)>, Option<String>)> {
    let info = configmaps.get_opt(&format!("{name}-info")).await?;
    let ports = info.and_then(|c| c.data?.get("ports").cloned());
    let service = services.get(name).await?.metadata;
    let labels = service.labels.unwrap_or_default().into_iter().collect();
    let note = service
        .annotations
        .and_then(|a| a.get("service-info/attachment").cloned());
    Ok((ports, labels, note))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_imported_decorator_attaches_labels_its_target_and_lets_go_of_one_it_no_longer_selects()
-> Result<()> {
    let plane = Plane::shared().await?;
    let ns = plane.namespace("service-info").await?;
    let dir = tempfile::tempdir()?;
    let (_, host) = imported_and_running(plane, "service-info", Some(&ns), dir.path()).await?;
    let client = plane.client().await?;
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let service = |name: &str, annotations: serde_json::Value| -> Result<Service> {
        Ok(serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"team": "a", "stale": "x"}, "annotations": annotations},
            "spec": {"ports": [{"name": "http", "port": 80}, {"name": "alt", "port": 8080}]},
        }))?)
    };
    let post = PostParams::default();
    services
        .create(&post, &service("web", json!({"service-info": "the shop"}))?)
        .await?;
    services.create(&post, &service("plain", json!({}))?).await?;
    let pairs = |p: &[(&str, &str)]| -> Vec<(String, String)> {
        p.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    };
    let log = || std::fs::read_to_string(dir.path().join("host.log")).unwrap_or_default();
    let want = (
        Some("80,8080".to_string()),
        pairs(&[("described", "yes"), ("team", "a")]),
        Some("web-info".to_string()),
    );
    // The first wait covers the host's cold compile of a Python component, as the other
    // tests' first waits do.
    eventually(
        "the attachment, labels and annotation",
        Duration::from_secs(120),
        async || Ok((decorated(&services, &configmaps, "web").await? == want).then_some(())),
    )
    .await
    .with_context(log)?;
    // A Service the rule does not select is left as it is.
    let plain = decorated(&services, &configmaps, "plain").await?;
    assert_eq!(plain, (None, pairs(&[("stale", "x"), ("team", "a")]), None));

    // Opted out: the finalize hook removes the attachment and the target is let go; the
    // labels the hook set stay, as under Metacontroller.
    let opt_out = json!({"metadata": {"annotations": {"service-info": null}}});
    services
        .patch("web", &PatchParams::default(), &Patch::Merge(&opt_out))
        .await?;
    let finalizer = "metacontroller.io/decoratorcontroller-service-info";
    eventually(
        "the attachment gone and the target let go",
        Duration::from_secs(90),
        async || {
            let gone = configmaps.get_opt("web-info").await?.is_none();
            let held = services.get("web").await?.metadata.finalizers.unwrap_or_default();
            Ok((gone && !held.iter().any(|f| f == finalizer)).then_some(()))
        },
    )
    .await
    .with_context(log)?;
    let (_, labels, _) = decorated(&services, &configmaps, "web").await?;
    assert_eq!(labels, pairs(&[("described", "yes"), ("team", "a")]));
    drop(host);
    Ok(())
}

/// A census's `status.names`, once it has one.
async fn census(censuses: &Api<DynamicObject>, name: &str) -> Result<Option<String>> {
    let parent = censuses.get_opt(name).await?;
    Ok(parent.and_then(|p| p.data["status"]["names"].as_str().map(str::to_string)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_selector_reads_the_namespaces_whose_labels_match_and_follows_them() -> Result<()> {
    let plane = Plane::shared().await?;
    let (red, blue) = (
        plane.namespace("census-red").await?,
        plane.namespace("census-blue").await?,
    );
    let dir = tempfile::tempdir()?;
    let (_, host) = imported_and_running(plane, "team-census", None, dir.path()).await?;
    let client = plane.client().await?;
    // The team is this run's own: the host reads every namespace of the shared plane.
    let team = red.clone();
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let label = |ns: &str, team: Option<&str>| {
        let patch = json!({"metadata": {"labels": {"team": team}}});
        let namespaces = namespaces.clone();
        let ns = ns.to_string();
        async move {
            namespaces
                .patch(&ns, &PatchParams::default(), &Patch::Merge(&patch))
                .await
        }
    };
    label(&red, Some(&team)).await?;
    let post = PostParams::default();
    for (ns, name, census) in [(&red, "a", "yes"), (&red, "skipped", "no"), (&blue, "b", "yes")] {
        let cm: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": name, "labels": {"census": census}}}))?;
        Api::<ConfigMap>::namespaced(client.clone(), ns)
            .create(&post, &cm)
            .await?;
    }
    let gvk = kube::api::GroupVersionKind::gvk("examples.capstan.dev", "v1", "TeamCensus");
    let censuses: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(&gvk, "teamcensuses"),
    );
    let parent: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "examples.capstan.dev/v1", "kind": "TeamCensus",
        "metadata": {"name": team}, "spec": {"team": team},
    }))?;
    censuses.create(&post, &parent).await?;
    let log = || std::fs::read_to_string(dir.path().join("host.log")).unwrap_or_default();
    let names = |want: String| {
        let censuses = censuses.clone();
        let team = team.clone();
        async move {
            // The first covers the host's cold compile of a Python component.
            eventually(
                &format!("the census {want:?}"),
                Duration::from_secs(120),
                async || {
                    Ok((census(&censuses, &team).await?.as_deref() == Some(want.as_str())).then_some(()))
                },
            )
            .await
        }
    };
    // Only the labelled namespace's ConfigMaps that the label selector picks.
    names(format!("{red}/a")).await.with_context(log)?;
    // A namespace labelled into the selection is read; one labelled out of it is not.
    label(&blue, Some(&team)).await?;
    names(format!("{blue}/b,{red}/a")).await.with_context(log)?;
    label(&red, None).await?;
    names(format!("{blue}/b")).await.with_context(log)?;
    censuses.delete(&team, &DeleteParams::default()).await?;
    drop(host);
    Ok(())
}
