//! Recording dispatched reconciles as fixtures: `capstan run --record DIR` writes each
//! reconcile's input (parent, observed children, related objects, settings, the time the
//! plugin was told) and the plugin's answer, one JSON file each, under `DIR/<plugin>/`;
//! `capstan test --replay DIR NEW.wasm` runs another version on the same inputs and lists
//! what it would answer differently. A plugin is a pure function of its request, so a
//! replay with the same version answers exactly what was recorded.
//!
//! The directory is bounded: once its recordings pass the size given, the oldest are
//! deleted (rotation), so a host left recording never fills its disk. Recordings hold what
//! the plugin saw — Secrets it reads included — so the directories are created `0700` and
//! the files `0600`: as private as the host's own credentials.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::Context;
use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::engine::{DispatchError, Json, Request, Response};

/// Where recordings go and how much of them is kept.
#[derive(Clone, Debug)]
pub struct RecordConfig {
    /// The directory (created if missing).
    pub dir: PathBuf,
    /// Bytes of recordings kept; the oldest beyond this are deleted.
    pub max_bytes: u64,
}

/// One dispatched reconcile: what the plugin was given and what it answered.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Recording {
    /// The plugin, by the name it ran under.
    pub plugin: String,
    /// The plugin's version, as it declares it.
    pub version: String,
    /// The plugin's settings (`null` for none).
    pub settings: Value,
    /// The time the plugin was told it is.
    pub now: Timestamp,
    /// The parent was being deleted.
    #[serde(default)]
    pub finalizing: bool,
    /// The parent, as the plugin got it.
    pub parent: Value,
    /// The observed children.
    #[serde(default)]
    pub children: Vec<Value>,
    /// The related objects the plugin's queries selected.
    #[serde(default)]
    pub related: Vec<Value>,
    /// What the plugin answered: its response, or its error as data ([`outcome`]).
    pub outcome: Value,
}

impl Recording {
    /// The recording of `request` answered with `result`.
    pub fn new(
        (plugin, version): (&str, &str),
        settings: &Value,
        request: &Request,
        result: &Result<Response, DispatchError>,
    ) -> Recording {
        Recording {
            plugin: plugin.to_string(),
            version: version.to_string(),
            settings: settings.clone(),
            now: request.now.unwrap_or_else(Timestamp::now),
            finalizing: request.finalizing,
            parent: request.parent.value(),
            children: request.children.iter().map(Json::value).collect(),
            related: request.related.iter().map(Json::value).collect(),
            outcome: outcome(result),
        }
    }

    /// `namespace/name` of the parent.
    pub fn object(&self) -> String {
        let meta = &self.parent["metadata"];
        let name = meta["name"].as_str().unwrap_or_default();
        match meta["namespace"].as_str() {
            Some(ns) => format!("{ns}/{name}"),
            None => name.to_string(),
        }
    }

    /// Read one recording file.
    pub fn read(path: &Path) -> anyhow::Result<Recording> {
        let text = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        serde_json::from_slice(&text)
            .with_context(|| format!("{} is not a Capstan recording", path.display()))
    }
}

/// A plugin's answer as data: the response, or `{error: {retry|fatal|fault…}}` — what
/// `capstan test` prints and a replay compares.
pub fn outcome(result: &Result<Response, DispatchError>) -> Value {
    match result {
        Ok(response) => serde_json::to_value(response)
            .unwrap_or_else(|e| json!({ "error": { "unserializable": e.to_string() } })),
        Err(DispatchError::Retry { message, after: None }) => json!({ "error": { "retry": message } }),
        Err(DispatchError::Retry {
            message,
            after: Some(after),
        }) => json!({ "error": { "retry": message, "retryAfter": format!("{}ms", after.as_millis()) } }),
        Err(DispatchError::Fatal(m)) => json!({ "error": { "fatal": m } }),
        Err(DispatchError::Fault(f)) => json!({ "error": { "fault": f.cause(), "message": f.to_string() } }),
    }
}

/// Writes recordings into a directory, deleting the oldest past its size.
#[derive(Debug)]
pub struct Recorder {
    config: RecordConfig,
    kept: Mutex<Kept>,
}

/// The recordings on disk, oldest first, and their total size.
#[derive(Debug, Default)]
struct Kept {
    files: VecDeque<(PathBuf, u64)>,
    bytes: u64,
    written: u64,
}

impl Recorder {
    /// A recorder into `config.dir`, counting the recordings already there (oldest first).
    pub fn new(config: RecordConfig) -> anyhow::Result<Recorder> {
        private_dir(&config.dir)
            .with_context(|| format!("--record {}: cannot create the directory", config.dir.display()))?;
        let mut files = files(&config.dir)?;
        files.sort_by(|a, b| a.0.file_name().cmp(&b.0.file_name()));
        let bytes = files.iter().map(|(_, n)| n).sum();
        Ok(Recorder {
            config,
            kept: Mutex::new(Kept {
                files: files.into(),
                bytes,
                written: 0,
            }),
        })
    }

    /// Write one recording, then rotate. A recording that cannot be written is logged and
    /// dropped: recording never stops a reconcile.
    pub fn record(&self, recording: &Recording) {
        if let Err(e) = self.write(recording) {
            tracing::warn!(plugin = %recording.plugin, object = %recording.object(), error = %format!("{e:#}"), "reconcile not recorded");
        }
    }

    fn write(&self, recording: &Recording) -> anyhow::Result<()> {
        let body = serde_json::to_vec_pretty(recording)?;
        let dir = self.config.dir.join(&recording.plugin);
        if !dir.is_dir() {
            private_dir(&dir)?;
        }
        let written = {
            let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
            kept.written += 1;
            kept.written
        };
        // Millisecond time then a counter: names sort in the order they were written,
        // across restarts too. The file is written outside the lock: plugins recording at
        // once do not wait for each other's disk.
        let name = format!(
            "{:013}-{:06}-{}.json",
            Timestamp::now().as_millisecond(),
            written % 1_000_000,
            recording.object().replace('/', "."),
        );
        let path = dir.join(name);
        write_private(&path, &body).with_context(|| format!("writing {}", path.display()))?;
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        kept.files.push_back((path, body.len() as u64));
        kept.bytes += body.len() as u64;
        while kept.bytes > self.config.max_bytes
            && let Some((oldest, size)) = kept.files.pop_front()
        {
            kept.bytes -= size;
            let _ = std::fs::remove_file(oldest);
        }
        Ok(())
    }
}

/// Create `dir` (and its parents) readable by this user only.
fn private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

/// Write `path` readable by this user only.
fn write_private(path: &Path, body: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(body)
}

/// Every recording file under `dir` (one level of plugin directories, or flat), with its
/// size.
pub fn files(dir: &Path) -> anyhow::Result<Vec<(PathBuf, u64)>> {
    let mut out = Vec::new();
    let entries = std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))?;
    for entry in entries {
        let entry = entry?;
        let meta = entry.metadata()?;
        if meta.is_dir() {
            for inner in std::fs::read_dir(entry.path())? {
                let inner = inner?;
                if is_recording(&inner.path()) {
                    out.push((inner.path(), inner.metadata()?.len()));
                }
            }
        } else if is_recording(&entry.path()) {
            out.push((entry.path(), meta.len()));
        }
    }
    Ok(out)
}

fn is_recording(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "json")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recording(name: &str) -> Recording {
        let request = Request {
            parent: json!({"apiVersion": "capstan.dev/v1alpha1", "kind": "Echo", "metadata": {"name": name, "namespace": "ns"}}).into(),
            now: Some("2026-01-01T00:00:00Z".parse().unwrap()),
            ..Request::default()
        };
        Recording::new(
            ("echo", "0.2.0"),
            &json!({"image": "busybox"}),
            &request,
            &Ok(Response::default()),
        )
    }

    #[test]
    fn recordings_round_trip_and_the_oldest_go_past_the_size() {
        let dir = std::env::temp_dir().join(format!("capstan-record-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let one = serde_json::to_vec_pretty(&recording("e-0")).unwrap().len() as u64;
        let recorder = Recorder::new(RecordConfig {
            dir: dir.clone(),
            max_bytes: one * 3,
        })
        .unwrap();
        for i in 0..5 {
            recorder.record(&recording(&format!("e-{i}")));
        }
        let mut kept = files(&dir).unwrap();
        kept.sort();
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(
            (mode(&dir), mode(&kept[0].0)),
            (0o700, 0o600),
            "as private as what they hold"
        );
        let objects: Vec<String> = kept
            .iter()
            .map(|(p, _)| Recording::read(p).unwrap().object())
            .collect();
        assert_eq!(objects, ["ns/e-2", "ns/e-3", "ns/e-4"], "the newest three fit");
        assert_eq!(Recording::read(&kept[0].0).unwrap(), recording("e-2"));
        // A new recorder counts what is there and keeps rotating it.
        let again = Recorder::new(RecordConfig {
            dir: dir.clone(),
            max_bytes: one * 3,
        })
        .unwrap();
        again.record(&recording("e-5"));
        assert_eq!(files(&dir).unwrap().len(), 3);
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn errors_are_recorded_as_data() {
        let retry = Err(DispatchError::Retry {
            message: "later".into(),
            after: Some(std::time::Duration::from_millis(1500)),
        });
        assert_eq!(
            outcome(&retry),
            json!({"error": {"retry": "later", "retryAfter": "1500ms"}})
        );
        assert_eq!(
            outcome(&Err(DispatchError::Fatal("no".into()))),
            json!({"error": {"fatal": "no"}})
        );
    }
}
