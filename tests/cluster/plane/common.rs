//! Helpers shared by the plane tests.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use capstan::dev::Plane;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

/// Full planes besides the shared one take most of a 2-core machine while starting;
/// tests that start one take turns.
pub static HEAVY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

pub async fn shared() -> &'static Plane {
    let t0 = Instant::now();
    let plane = Plane::shared().await.expect("starting the shared plane");
    if let Some(start) = plane.startup_time() {
        eprintln!(
            "shared plane: started in {:.1} s, RSS {} MiB, waited {:.1} s here",
            start.as_secs_f64(),
            plane.rss_bytes() / (1 << 20),
            t0.elapsed().as_secs_f64()
        );
    }
    plane
}

/// Polls `check` every 200 ms until it yields `Some`, or fails after `timeout`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check().await? {
            return Ok(v);
        }
        if Instant::now() >= deadline {
            bail!("{what}: not within {} s", timeout.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub fn echo_crd() -> CustomResourceDefinition {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/echo/crd.yaml");
    let text = std::fs::read_to_string(&file).unwrap_or_else(|_| INLINE_ECHO_CRD.to_string());
    serde_saphyr::from_str(&text).expect("the Echo CRD parses")
}

const INLINE_ECHO_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: { name: echoes.capstan.dev }
spec:
  group: capstan.dev
  names: { kind: Echo, plural: echoes, singular: echo }
  scope: Namespaced
  versions:
  - name: v1alpha1
    served: true
    storage: true
    subresources: { status: {} }
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [message]
            properties: { message: { type: string } }
"#;

/// Processes whose command line mentions `needle` (a plane dir): nothing else of ours.
pub fn processes_mentioning(needle: &Path) -> Vec<u32> {
    let needle = needle.to_string_lossy().into_owned();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&needle))
        })
        .collect()
}

pub fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat.rsplit(')').next().and_then(|r| r.split_whitespace().next()) == Some("Z"),
    }
}

/// `(log path, plane dir)` from an error naming `(log: <path>)`; the log must exist.
pub fn log_of(err: &str) -> (PathBuf, PathBuf) {
    let path = err
        .rsplit_once("(log: ")
        .and_then(|(_, rest)| rest.strip_suffix(')'));
    let log = PathBuf::from(path.unwrap_or_else(|| panic!("no log path in: {err}")));
    assert!(
        log.is_file(),
        "log {} named by the error does not exist",
        log.display()
    );
    let dir = log.parent().unwrap().to_path_buf();
    (log, dir)
}

/// Set when this test binary re-runs itself to act as a separate process.
pub const HELPER: &str = "CAPSTAN_TESTENV_HELPER";

/// Runs `helper_process` in a child copy of this test binary; returns its output.
pub fn run_helper(task: &str, envs: &[(&str, &str)]) -> Result<std::process::Output> {
    let out = std::process::Command::new(std::env::current_exe()?)
        .args([
            "--exact",
            "plane::helper_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HELPER, task)
        .envs(envs.iter().copied())
        .output()?;
    Ok(out)
}

/// A Job running `echo hi` in busybox once.
pub fn echo_job(name: &str) -> Job {
    serde_json::from_value(serde_json::json!({
        "metadata": { "name": name },
        "spec": {
            "backoffLimit": 0,
            "template": { "spec": {
                "restartPolicy": "Never",
                "containers": [{ "name": "hi", "image": "busybox", "command": ["echo", "hi"] }],
            }},
        },
    }))
    .expect("a valid Job")
}
