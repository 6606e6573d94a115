//! Side by side with Metacontroller, on one plane: a Metacontroller controller with Python
//! hooks and one with JavaScript hooks — the ConfigMapCounters of
//! `tests/fixtures/metacontroller/counter` and `counter-js`, ours — at N parents
//! (`CAPSTAN_BENCH_N`, default 1000), each parent counting the ConfigMaps its selector
//! picks (`customize`) into a child ConfigMap and its status (`sync`).
//!
//! Metacontroller is built from the checkout `CAPSTAN_BENCH_METACONTROLLER` names (`go
//! build`; its files are not part of this repository), tuned (16 workers, client QPS and
//! burst 500) and calls the hooks as they are served: `python3 hooks.py`, and the
//! checkout's own nodejs server with the JavaScript hooks, over HTTP on loopback. Capstan
//! runs the same hooks imported (`capstan import metacontroller`, `capstan build`) in the
//! release `capstan run`, its compile cache warm (as on every start but the first). Printed
//! per hook and controller: seconds from start until every
//! parent's status holds its count, CPU seconds (Metacontroller's with its hook server's),
//! peak RSS (the same), and API writes per parent.
//!
//! `CAPSTAN_BENCH_METACONTROLLER=~/src/metacontroller cargo bench -p capstan-tests --bench metacontroller`

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use capstan::dev::{Plane, PlaneConfig};
use capstan_tests::host::{Host, sample};
use capstan_tests::process::{cpu_seconds, peak_rss_mib};
use capstan_tests::requests::{Requests, requests};
use capstan_tests::toolchains::{componentize_py, js_toolchain};
use capstan_tests::{arg, capstan_bin, release_capstan, target_dir, workspace};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use serde_json::{Value, json};

/// One controller of ours, as Metacontroller's examples lay them out.
struct Hooked {
    language: &'static str,
    /// Its directory under `tests/fixtures/metacontroller`.
    example: &'static str,
    /// Its controller's name, the plugin's.
    controller: &'static str,
    /// The labels its parent rule selects.
    labels: &'static [(&'static str, &'static str)],
}

const HOOKED: [Hooked; 2] = [
    Hooked {
        language: "Python",
        example: "counter",
        controller: "configmap-counter",
        labels: &[],
    },
    Hooked {
        language: "JavaScript",
        example: "counter-js",
        controller: "configmap-counter-js",
        labels: &[("counted", "yes")],
    },
];

/// The ConfigMaps every parent counts.
const COUNTED: usize = 3;

/// What one controller did at one size.
struct Row {
    seconds: f64,
    cpu: f64,
    rss_mib: f64,
    writes_per_parent: f64,
}

fn main() -> Result<()> {
    let checkout = std::env::var_os("CAPSTAN_BENCH_METACONTROLLER")
        .map(PathBuf::from)
        .context("CAPSTAN_BENCH_METACONTROLLER must name a checkout of Metacontroller's repository")?;
    let n: usize = std::env::var("CAPSTAN_BENCH_N")
        .ok()
        .map_or(Ok(1000), |v| v.parse())
        .context("CAPSTAN_BENCH_N")?;
    let metacontroller = build_metacontroller(&checkout)?;
    let capstan = release_capstan()?;
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let plane = Plane::start(PlaneConfig::api_only()).await?;
        install(&plane, &checkout).await?;
        println!(
            "| hook | controller | N | time to all statuses (s) | CPU (s) | peak RSS (MiB) | writes/parent |"
        );
        println!("|---|---|---|---|---|---|---|");
        for hooked in &HOOKED {
            let project = import(hooked)?;
            // Metacontroller first: it watches every namespace, and Capstan's parents
            // would be its work too; Capstan runs with --namespace.
            let row = run_metacontroller(&plane, &checkout, &metacontroller, hooked, &project, n).await?;
            print_row(hooked, "Metacontroller (16 workers, QPS 500)", n, &row);
            let row = run_capstan(&plane, &capstan, hooked, &project, n).await?;
            print_row(hooked, "Capstan", n, &row);
        }
        anyhow::Ok(())
    })
}

fn print_row(hooked: &Hooked, controller: &str, n: usize, r: &Row) {
    println!(
        "| {} | {controller} | {n} | {:.2} | {:.2} | {:.0} | {:.2} |",
        hooked.language, r.seconds, r.cpu, r.rss_mib, r.writes_per_parent
    );
}

/// `go build` of Metacontroller's command in `checkout`, into the target directory.
fn build_metacontroller(checkout: &Path) -> Result<PathBuf> {
    let out = target_dir().join("metacontroller/metacontroller");
    let status = Command::new("go")
        .args(["build", "-o", arg(&out), "./pkg/cmd/metacontroller"])
        .current_dir(checkout)
        .status()
        .context("running go build (Go is needed to build Metacontroller)")?;
    if !status.success() {
        bail!("go build of Metacontroller in {} failed", checkout.display());
    }
    Ok(out)
}

/// The counter's CRD and Metacontroller's own.
async fn install(plane: &Plane, checkout: &Path) -> Result<()> {
    let mut crds: Vec<CustomResourceDefinition> = Vec::new();
    let fixture = workspace().join("tests/fixtures/metacontroller/counter/v1/crd.yaml");
    let theirs = checkout.join("manifests/production/metacontroller-crds-v1.yaml");
    for file in [fixture, theirs] {
        let text = std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
        crds.extend(serde_saphyr::from_multiple::<CustomResourceDefinition>(&text)?);
    }
    plane.install_crds(&crds).await
}

/// The controller imported and built outside the repository.
fn import(hooked: &Hooked) -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("capstan-bench-mc-{}", hooked.example));
    let _ = std::fs::remove_dir_all(&dir);
    let example = workspace()
        .join("tests/fixtures/metacontroller")
        .join(hooked.example);
    let run = |args: &[&str], at: &Path| -> Result<()> {
        let out = Command::new(capstan_bin())
            .args(args)
            .current_dir(at)
            .env("COMPONENTIZE_PY", componentize_py())
            .env("CAPSTAN_JS_TOOLCHAIN", js_toolchain())
            .output()?;
        if !out.status.success() {
            bail!("capstan {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(())
    };
    let sdk = workspace();
    run(
        &[
            "import",
            "metacontroller",
            arg(&example),
            "--out",
            arg(&dir),
            "--sdk",
            arg(sdk),
        ],
        workspace(),
    )?;
    run(&["build"], &dir)?;
    Ok(dir)
}

fn counters() -> ApiResource {
    let gvk = GroupVersionKind::gvk("examples.capstan.dev", "v1", "ConfigMapCounter");
    ApiResource::from_gvk_with_plural(&gvk, "configmapcounters")
}

/// A namespace with the ConfigMaps to count and `n` parents.
async fn seed(plane: &Plane, hooked: &Hooked, who: &str, n: usize) -> Result<String> {
    let ns = plane.namespace(&format!("mc-{who}-{}", hooked.example)).await?;
    let client = plane.client().await?;
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    // Labelled with the namespace's own name: under Metacontroller a v2 customize rule
    // without a namespace reads every namespace, the other runs' ConfigMaps too.
    for i in 0..COUNTED {
        let cm = serde_json::from_value(
            json!({"metadata": {"name": format!("web-{i}"), "labels": {"app": &ns}}}),
        )?;
        configmaps.create(&PostParams::default(), &cm).await?;
    }
    let parents: Api<DynamicObject> = Api::namespaced_with(client, &ns, &counters());
    futures::stream::iter(0..n)
        .map(|i| {
            let (parents, ns) = (parents.clone(), ns.clone());
            let labels: serde_json::Map<String, Value> = hooked
                .labels
                .iter()
                .map(|(k, v)| (k.to_string(), json!(v)))
                .collect();
            async move {
                let parent: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": "examples.capstan.dev/v1", "kind": "ConfigMapCounter",
                    "metadata": {"name": format!("c-{i}"), "labels": labels},
                    "spec": {"selector": {"app": ns}},
                }))?;
                parents.create(&PostParams::default(), &parent).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(ns)
}

/// Seconds from `t0` until every parent in `ns` has its count in its status.
async fn converged(plane: &Plane, ns: &str, n: usize, t0: Instant) -> Result<f64> {
    let parents: Api<DynamicObject> = Api::namespaced_with(plane.client().await?, ns, &counters());
    loop {
        let list = parents.list(&ListParams::default()).await?;
        let done = (list.items.iter())
            .filter(|p| p.data["status"]["count"].as_u64() == Some(COUNTED as u64))
            .count();
        if done == n {
            return Ok(t0.elapsed().as_secs_f64());
        }
        if t0.elapsed() > Duration::from_secs(1800) {
            bail!("{done} of {n} parents counted after 30 minutes");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// API writes since `before` — the children's and the parents' (status included) — per
/// parent.
fn writes_per_parent(after: &Requests, before: &Requests, n: usize) -> f64 {
    let t = after.since(before).traffic("configmapcounters", &["configmaps"]);
    (t.children + t.status + t.parent) / n as f64
}

async fn run_capstan(
    plane: &Plane,
    capstan: &Path,
    hooked: &Hooked,
    project: &Path,
    n: usize,
) -> Result<Row> {
    let config = project.join("run.yaml");
    // The component compiled once into the compile cache, as on every start but an
    // operator's first: the timed start loads it from there (the e2e bench's `wasm`).
    let warm = plane.namespace("mc-warm").await?;
    let log = project.join("warm.log");
    let started = Instant::now();
    let mut host = Host::start_binary(
        capstan,
        plane,
        &["--config", arg(&config), "--namespace", &warm],
        &log,
        &[],
    )?;
    host.ready(Duration::from_secs(600)).await?;
    eprintln!(
        "{}: the first start (compiling the component) took {:.1} s, {:.1} s of CPU",
        hooked.language,
        started.elapsed().as_secs_f64(),
        cpu_seconds(host.pid())
    );
    host.signal(libc::SIGTERM);
    host.wait(Duration::from_secs(30))?;

    let ns = seed(plane, hooked, "capstan", n).await?;
    let client = plane.client().await?;
    let before = requests(&client).await?;
    let log = project.join("host.log");
    let t0 = Instant::now();
    let mut host = Host::start_binary(
        capstan,
        plane,
        &["--config", arg(&config), "--namespace", &ns],
        &log,
        &[],
    )?;
    let seconds = converged(plane, &ns, n, t0).await?;
    said_apart(hooked, &host.metrics().await?, n);
    let row = Row {
        seconds,
        cpu: cpu_seconds(host.pid()),
        rss_mib: peak_rss_mib(host.pid()),
        writes_per_parent: writes_per_parent(&requests(&client).await?, &before, n),
    };
    host.signal(libc::SIGTERM);
    host.wait(Duration::from_secs(30))?;
    Ok(row)
}

/// Where Capstan's CPU went, from its metrics: reconciles per parent, and the plugin's
/// share of the CPU (its calls, related and reconcile, in the sandbox).
fn said_apart(hooked: &Hooked, page: &str, n: usize) {
    let reconciles: f64 = ["success", "error", "requeue", "requeue_after"]
        .iter()
        .map(|r| {
            let series = format!(
                r#"controller_runtime_reconcile_total{{controller="{}",result="{r}"}}"#,
                hooked.controller
            );
            sample(page, &series)
        })
        .sum();
    let series = format!(
        r#"capstan_wasm_cpu_seconds_total{{plugin="{}"}}"#,
        hooked.controller
    );
    let plugin = sample(page, &series);
    eprintln!(
        "{}: Capstan reconciled {:.2} times per parent; the plugin's calls took {plugin:.2} s of CPU ({:.2} ms per parent)",
        hooked.language,
        reconciles / n as f64,
        plugin * 1000.0 / n as f64
    );
}

/// A child process, killed when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The hook server Metacontroller calls, listening on loopback port 80 as the example's
/// Deployment would.
fn hook_server(checkout: &Path, hooked: &Hooked, project: &Path) -> Result<Killed> {
    let hooks = project.join("hooks");
    let log = std::fs::File::create(project.join("hooks.log"))?;
    let mut command = if hooked.language == "Python" {
        let mut c = Command::new("python3");
        c.arg("hooks.py").current_dir(&hooks);
        c
    } else {
        // The nodejs server requires ./hooks/NAME.js beside itself, as in its image.
        let server = project.join("server.js");
        std::fs::copy(checkout.join("examples/nodejs/server.js"), &server)?;
        let mut c = Command::new("node");
        c.arg(&server).current_dir(project);
        c
    };
    let child = command
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .context("starting the hook server")?;
    let t0 = Instant::now();
    while std::net::TcpStream::connect("127.0.0.1:80").is_err() {
        if t0.elapsed() > Duration::from_secs(30) {
            bail!("the hook server did not listen on port 80 within 30 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(Killed(child))
}

/// The example's CompositeController, its webhooks pointed at the hook server.
fn composite_controller(hooked: &Hooked) -> Result<DynamicObject> {
    let file = workspace()
        .join("tests/fixtures/metacontroller")
        .join(hooked.example)
        .join("manifest/controller.yaml");
    let docs: Vec<Value> = serde_saphyr::from_multiple(&std::fs::read_to_string(&file)?)?;
    let mut controller = docs
        .into_iter()
        .find(|d| d["kind"] == "CompositeController")
        .context("no CompositeController")?;
    for hook in ["sync", "finalize", "customize"] {
        let url = &mut controller["spec"]["hooks"][hook]["webhook"]["url"];
        if let Some(path) = url
            .as_str()
            .and_then(|u| u.split_once("://"))
            .and_then(|(_, r)| r.split_once('/'))
        {
            *url = json!(format!("http://127.0.0.1:80/{}", path.1));
        }
    }
    Ok(serde_json::from_value(controller)?)
}

async fn run_metacontroller(
    plane: &Plane,
    checkout: &Path,
    binary: &Path,
    hooked: &Hooked,
    project: &Path,
    n: usize,
) -> Result<Row> {
    let ns = seed(plane, hooked, "metacontroller", n).await?;
    let client = plane.client().await?;
    let hooks = hook_server(checkout, hooked, project)?;
    let before = requests(&client).await?;
    let log = std::fs::File::create(project.join("metacontroller.log"))?;
    let t0 = Instant::now();
    let controller = Killed(
        Command::new(binary)
            .args(["--workers=16", "--client-go-qps=500", "--client-go-burst=500"])
            .args([
                "--metrics-address=0",
                "--health-probe-bind-address=0",
                "--zap-log-level=error",
            ])
            .env("KUBECONFIG", plane.kubeconfig())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("starting metacontroller")?,
    );
    let composite = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("metacontroller.k8s.io", "v1alpha1", "CompositeController"),
        "compositecontrollers",
    );
    let controllers: Api<DynamicObject> = Api::all_with(client.clone(), &composite);
    let object = composite_controller(hooked)?;
    let name = object.metadata.name.clone().unwrap_or_default();
    controllers
        .patch(
            &name,
            &PatchParams::apply("capstan-bench").force(),
            &Patch::Apply(&object),
        )
        .await?;
    let seconds = converged(plane, &ns, n, t0).await?;
    let (pid, hooks_pid) = (controller.0.id(), hooks.0.id());
    let row = Row {
        seconds,
        cpu: cpu_seconds(pid) + cpu_seconds(hooks_pid),
        rss_mib: peak_rss_mib(pid) + peak_rss_mib(hooks_pid),
        writes_per_parent: writes_per_parent(&requests(&client).await?, &before, n),
    };
    // Its parents keep its finalizer; no one reconciles them again.
    controllers.delete(&name, &Default::default()).await?;
    drop(controller);
    drop(hooks);
    Ok(row)
}
