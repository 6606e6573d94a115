//! Running `capstan run` as a process in end-to-end tests: start it against a plane,
//! read its JSON log and its metrics and probes, signal it, and wait for conditions.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use capstan::dev::Plane;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};

use crate::{capstan_bin, compile_cache, plugin};

/// A `capstan run` process, killed when the test ends however it ends.
pub struct Host {
    child: Child,
    log: PathBuf,
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Copy the named test plugins into `dir` as `<name>.wasm`.
pub fn mount(plugins: &[&str], dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    for p in plugins {
        std::fs::copy(plugin(p), dir.join(format!("{p}.wasm")))?;
    }
    Ok(())
}

/// Start `capstan run` on `plugins` (copied into `dir`), watching `namespace`; logs go to `dir/host.log`.
pub fn start_host(plane: &Plane, plugins: &[&str], namespace: &str, dir: &Path) -> Result<Host> {
    start_host_with(plane, plugins, namespace, dir, &[])
}

/// [`start_host`] with extra arguments.
pub fn start_host_with(
    plane: &Plane,
    plugins: &[&str],
    namespace: &str,
    dir: &Path,
    extra: &[&str],
) -> Result<Host> {
    mount(plugins, dir)?;
    let mut args = vec![
        "--plugins",
        dir.to_str().context("utf-8 path")?,
        "--namespace",
        namespace,
    ];
    args.extend_from_slice(extra);
    Host::start(plane, &args, &dir.join("host.log"), &[])
}

impl Host {
    /// Start `capstan run ARGS` with JSON logs (at `RUST_LOG=info` unless `env` says
    /// otherwise) written to `log`, metrics and probes on free loopback ports, and the
    /// tests' own compile cache ([`compile_cache`]).
    pub fn start(plane: &Plane, args: &[&str], log: &Path, env: &[(&str, &str)]) -> Result<Host> {
        Host::start_binary(&capstan_bin(), plane, args, log, env)
    }

    /// [`Host::start`] with another `capstan` binary (a benchmark's release build).
    pub fn start_binary(
        binary: &Path,
        plane: &Plane,
        args: &[&str],
        log: &Path,
        env: &[(&str, &str)],
    ) -> Result<Host> {
        let file = std::fs::File::create(log)?;
        let mut command = Command::new(binary);
        command
            .arg("run")
            .args(args)
            .args(["--metrics-addr", "127.0.0.1:0", "--health-addr", "127.0.0.1:0"])
            .args(["--log-format", "json"])
            .env("KUBECONFIG", plane.kubeconfig())
            .env("RUST_LOG", "info")
            .env("CAPSTAN_CACHE_DIR", compile_cache())
            .env("CAPSTAN_PULL_DIR", crate::pull_dir())
            .stdout(Stdio::null())
            .stderr(file);
        for (k, v) in env {
            // An empty value unsets the variable (e.g. RUST_LOG, to get the default level).
            if v.is_empty() {
                command.env_remove(k);
            } else {
                command.env(k, v);
            }
        }
        let child = command.spawn().context("starting capstan run")?;
        Ok(Host {
            child,
            log: log.to_path_buf(),
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Send `signal` (e.g. `libc::SIGTERM`).
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on our own child's pid has no memory-safety preconditions.
        unsafe {
            libc::kill(self.child.id() as i32, signal);
        }
    }

    /// Wait for the process to exit, at most `timeout`.
    pub fn wait(&mut self, timeout: Duration) -> Result<ExitStatus> {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            if start.elapsed() > timeout {
                bail!("capstan run did not exit within {timeout:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Wait until the host says it is ready — every plugin loaded (compiled, the first
    /// time a test binary meets it) and its caches synced — failing at once if it exits
    /// first, or after `timeout`. A test that times what the host does next starts its
    /// clock here, not at the start, which a cold compile can take minutes of.
    pub async fn ready(&mut self, timeout: Duration) -> Result<()> {
        let log = self.log.clone();
        eventually("the host to say it is ready", timeout, async || {
            if let Some(status) = self.child.try_wait()? {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                bail!("capstan run exited with {status} before it was ready:\n{text}");
            }
            Ok(self.logged("caches synced; ready").then_some(()))
        })
        .await
    }

    /// The JSON log lines written so far.
    pub fn log(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Bytes of log written so far.
    pub fn log_bytes(&self) -> u64 {
        std::fs::metadata(&self.log).map_or(0, |m| m.len())
    }

    /// Whether a log line with this `message` was written.
    pub fn logged(&self, message: &str) -> bool {
        self.log().iter().any(|l| l["message"] == message)
    }

    /// The address the host logged for `what` ("metrics" or "health probes").
    pub fn address(&self, what: &str) -> Option<String> {
        self.log()
            .into_iter()
            .find(|l| l["message"] == format!("serving {what}"))
            .and_then(|l| l["address"].as_str().map(String::from))
    }

    /// The `/metrics` text, once the endpoint is up.
    pub async fn metrics(&self) -> Result<String> {
        let addr = eventually("the metrics address", Duration::from_secs(30), async || {
            Ok(self.address("metrics"))
        })
        .await?;
        Ok(http_get(&addr, "/metrics")?.1)
    }
}

/// The pod a Lease holder's identity names: the host adds a suffix of its own per
/// process (`POD_NAME-1a2b3c4d`).
pub fn pod_of(identity: &str) -> &str {
    identity.rsplit_once('-').map_or(identity, |(pod, _)| pod)
}

/// A plain HTTP/1.0 GET: status line and body.
pub fn http_get(addr: &str, path: &str) -> Result<(String, String)> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr)?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut text = String::new();
    stream.read_to_string(&mut text)?;
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    Ok((
        head.lines().next().unwrap_or_default().to_string(),
        body.to_string(),
    ))
}

/// The first object `api` lists, once there is one, failing after `timeout`.
pub async fn first_listed<K>(what: &str, api: &Api<K>, timeout: Duration) -> Result<K>
where
    K: kube::Resource + Clone + k8s_openapi::serde::de::DeserializeOwned + std::fmt::Debug,
{
    eventually(what, timeout, async || {
        Ok(api.list(&ListParams::default()).await?.items.into_iter().next())
    })
    .await
}

/// Poll `check` every 200 ms until it yields a value, failing after `timeout`.
pub async fn eventually<T>(
    what: &str,
    timeout: Duration,
    mut check: impl AsyncFnMut() -> Result<Option<T>>,
) -> Result<T> {
    let start = Instant::now();
    loop {
        if let Some(v) = check().await? {
            return Ok(v);
        }
        if start.elapsed() > timeout {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The API resource of a `capstan.dev/v1alpha1` kind.
fn capstan_resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("capstan.dev", "v1alpha1", kind), plural)
}

/// The Echo kind's API resource.
pub fn echo_resource() -> ApiResource {
    capstan_resource("Echo", "echoes")
}

/// The ScheduledEcho kind's API resource.
pub fn scheduled_echo_resource() -> ApiResource {
    capstan_resource("ScheduledEcho", "scheduledechoes")
}

/// The Hostile test plugin's API resource.
pub fn hostile_resource() -> ApiResource {
    capstan_resource("Hostile", "hostiles")
}

/// The value of one sample line in a metrics text, 0 when absent.
pub fn sample(body: &str, series: &str) -> f64 {
    body.lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

/// Install the CRD a plugin ships (`plugins/<name>/crd.yaml`).
pub async fn install_plugin_crd(plane: &Plane, name: &str) -> Result<()> {
    let path = crate::workspace().join("plugins").join(name).join("crd.yaml");
    let crd = serde_saphyr::from_str(&std::fs::read_to_string(&path)?)
        .with_context(|| format!("{}", path.display()))?;
    plane.install_crds(&[crd]).await
}

/// The Hostile test plugin's CRD: any spec goes.
pub fn hostile_crd() -> Result<CustomResourceDefinition> {
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "hostiles.capstan.dev"},
        "spec": {"group": "capstan.dev", "scope": "Namespaced",
            "names": {"kind": "Hostile", "plural": "hostiles", "singular": "hostile"},
            "versions": [{"name": "v1alpha1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]},
    }))?)
}

/// An Echo object.
pub fn echo(name: &str, message: &str) -> Result<DynamicObject> {
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": "capstan.dev/v1alpha1", "kind": "Echo",
        "metadata": {"name": name}, "spec": {"message": message},
    }))?)
}

/// When a JSON log line was written.
pub fn timestamp(line: &serde_json::Value) -> Option<k8s_openapi::jiff::Timestamp> {
    line["timestamp"].as_str()?.parse().ok()
}

/// The object a JSON log line's `reconcile` span names.
pub fn reconciled_object(line: &serde_json::Value) -> Option<String> {
    line["spans"]
        .as_array()?
        .iter()
        .find(|s| s["name"] == "reconcile")?["object"]
        .as_str()
        .map(String::from)
}

/// `(object, start, end)` of every reconcile a host logged; one still running at the end
/// of the log (a killed host) lasts until `ended`. A reconcile cancelled because its lease
/// term ended (`fenced_at`), or one that finished in a term since ended (`term_ends_at`,
/// the term's end when it logged), could act only until then: its writes after it are
/// refused.
pub fn reconciles(
    host: &Host,
    ended: k8s_openapi::jiff::Timestamp,
) -> Vec<(String, k8s_openapi::jiff::Timestamp, k8s_openapi::jiff::Timestamp)> {
    let mut open: std::collections::HashMap<String, Vec<k8s_openapi::jiff::Timestamp>> =
        std::collections::HashMap::new();
    let mut done = Vec::new();
    for line in host.log() {
        let (Some(object), Some(at)) = (reconciled_object(&line), timestamp(&line)) else {
            continue;
        };
        match line["message"].as_str() {
            Some("reconcile started") => open.entry(object).or_default().push(at),
            Some("reconcile finished") => {
                let bound = |field: &str| -> Option<k8s_openapi::jiff::Timestamp> {
                    line[field].as_str().and_then(|t| t.parse().ok())
                };
                let end = [bound("fenced_at"), bound("term_ends_at")]
                    .into_iter()
                    .flatten()
                    .fold(at, std::cmp::min);
                if let Some(start) = open.get_mut(&object).and_then(|s| s.pop()) {
                    done.push((object, start, end.max(start)));
                }
            }
            _ => {}
        }
    }
    for (object, starts) in open {
        done.extend(starts.into_iter().map(|s| (object.clone(), s, ended)));
    }
    done
}

/// Short lease timings so failover and hand-over tests take seconds, not the 15 s default.
pub const LEASE: [&str; 6] = [
    "--lease-duration",
    "6s",
    "--renew-deadline",
    "4s",
    "--retry-period",
    "1s",
];
/// The lease duration [`LEASE`] sets.
pub const LEASE_DURATION: Duration = Duration::from_secs(6);
/// Per-reconcile start/finish lines, to check no object is reconciled twice at once.
pub const DEBUG: (&str, &str) = ("RUST_LOG", "info,capstan::controller=debug");

/// One reconcile a host logged: object, start, end.
pub type Run = (String, k8s_openapi::jiff::Timestamp, k8s_openapi::jiff::Timestamp);

/// Reconciles of one object by two replicas at once, from every replica's runs (see
/// [`reconciles`]): `(object, "replica start..end", "replica start..end")` for each, so a
/// failure says which runs and when.
pub fn overlapping(runs: &[(String, Vec<Run>)]) -> Vec<(String, String, String)> {
    type Span<'a> = (
        &'a str,
        k8s_openapi::jiff::Timestamp,
        k8s_openapi::jiff::Timestamp,
    );
    let mut by_object: std::collections::HashMap<&str, Vec<Span<'_>>> = std::collections::HashMap::new();
    for (replica, list) in runs {
        for (object, start, end) in list {
            by_object.entry(object).or_default().push((replica, *start, *end));
        }
    }
    let mut found = Vec::new();
    for (object, list) in by_object {
        for (i, a) in list.iter().enumerate() {
            for b in &list[i + 1..] {
                if a.0 != b.0 && a.1 < b.2 && b.1 < a.2 {
                    let run = |r: &Span<'_>| format!("{} {}..{}", r.0, r.1, r.2);
                    found.push((object.to_string(), run(a), run(b)));
                }
            }
        }
    }
    found
}
