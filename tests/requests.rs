//! What the API server itself counts, so a test or benchmark measures the host's traffic
//! where it lands rather than trusting the host's own counters: `apiserver_request_total`
//! by verb, resource and subresource, read before and after, and the server's raw write
//! floor on this machine.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;

/// Requests the API server has served, by (verb, resource, subresource).
#[derive(Clone, Debug, Default)]
pub struct Requests(HashMap<(String, String, String), f64>);

/// The samples of `metric` on the API server's `/metrics`: each one's labels and value.
async fn samples(client: &kube::Client, metric: &str) -> Result<Vec<(HashMap<String, String>, f64)>> {
    let request = http::Request::get("/metrics").body(Vec::new())?;
    let body = client
        .request_text(request)
        .await
        .context("reading the API server's /metrics")?;
    let prefix = format!("{metric}{{");
    let samples = body
        .lines()
        .filter_map(|line| line.strip_prefix(&prefix)?.rsplit_once("} "))
        .map(|(labels, value)| {
            let labels = labels
                .split(',')
                .filter_map(|l| l.split_once("=\""))
                .map(|(k, v)| (k.to_string(), v.trim_end_matches('"').to_string()))
                .collect();
            (labels, value.parse::<f64>().unwrap_or(0.0))
        })
        .collect();
    Ok(samples)
}

/// Read `apiserver_request_total` from the API server's `/metrics`.
pub async fn requests(client: &kube::Client) -> Result<Requests> {
    let mut counts = HashMap::new();
    for (labels, value) in samples(client, "apiserver_request_total").await? {
        let label = |name: &str| labels.get(name).cloned().unwrap_or_default();
        let key = (label("verb"), label("resource"), label("subresource"));
        *counts.entry(key).or_insert(0.0) += value;
    }
    Ok(Requests(counts))
}

/// Watches open on the API server now, by (resource, scope): its
/// `apiserver_longrunning_requests` gauge for the verb `WATCH`.
pub async fn watches(client: &kube::Client) -> Result<HashMap<(String, String), f64>> {
    let mut open = HashMap::new();
    for (labels, value) in samples(client, "apiserver_longrunning_requests").await? {
        let label = |name: &str| labels.get(name).cloned().unwrap_or_default();
        if label("verb") == "WATCH" {
            *open.entry((label("resource"), label("scope"))).or_insert(0.0) += value;
        }
    }
    Ok(open)
}

impl Requests {
    /// What was served since `before`.
    pub fn since(&self, before: &Requests) -> Requests {
        let mut delta = self.0.clone();
        for (key, value) in &before.0 {
            *delta.entry(key.clone()).or_insert(0.0) -= value;
        }
        delta.retain(|_, v| *v != 0.0);
        Requests(delta)
    }

    /// Every (verb, resource, subresource) counted, most first.
    pub fn all(&self) -> Vec<(String, f64)> {
        let mut all: Vec<_> = self
            .0
            .iter()
            .map(|((verb, r, s), v)| {
                (
                    format!("{verb} {r}{}{s}", if s.is_empty() { "" } else { "/" }),
                    *v,
                )
            })
            .collect();
        all.sort_by(|a, b| b.1.total_cmp(&a.1));
        all
    }

    /// Requests of these verbs on `resource` and `subresource` ("" for the object).
    pub fn count(&self, verbs: &[&str], resource: &str, subresource: &str) -> f64 {
        self.0
            .iter()
            .filter(|((verb, r, s), _)| verbs.contains(&verb.as_str()) && r == resource && s == subresource)
            .map(|(_, v)| v)
            .sum()
    }

    /// A controller's traffic, for a parent resource and its child resources.
    pub fn traffic(&self, parent: &str, children: &[&str]) -> Traffic {
        const WRITE: &[&str] = &["POST", "PATCH", "APPLY", "PUT", "DELETE"];
        let reads: f64 = [parent, "configmaps", "events"]
            .iter()
            .chain(children)
            .map(|r| self.count(&["GET"], r, "") + self.count(&["GET"], r, "status"))
            .sum();
        Traffic {
            children: children.iter().map(|c| self.count(WRITE, c, "")).sum(),
            status: self.count(WRITE, parent, "status"),
            parent: self.count(WRITE, parent, ""),
            events: self.count(WRITE, "events", ""),
            reads,
        }
    }
}

/// A controller's requests by what they touch.
#[derive(Clone, Copy, Debug, Default)]
pub struct Traffic {
    /// Writes of children (create, apply, delete).
    pub children: f64,
    /// Writes of the parents' status subresource.
    pub status: f64,
    /// Writes of the parents themselves (finalizers).
    pub parent: f64,
    /// Event creates and series updates.
    pub events: f64,
    /// Single-object GETs of the parent, child and related kinds, and events.
    pub reads: f64,
}

/// Wait until the API server has served no more of these writes for `quiet`, at most
/// `limit`: what a host queued (its events) is written by then.
pub async fn settled(
    client: &kube::Client,
    parent: &str,
    children: &[&str],
    quiet: Duration,
    limit: Duration,
) -> Result<Requests> {
    let start = Instant::now();
    let mut last = requests(client).await?;
    loop {
        tokio::time::sleep(quiet).await;
        let now = requests(client).await?;
        let moved = now.since(&last).traffic(parent, children);
        if moved.children + moved.status + moved.events + moved.parent == 0.0 || start.elapsed() > limit {
            return Ok(now);
        }
        last = now;
    }
}

/// The `n` parents of `parent` in `namespace` that [`write_floor`] writes the status of,
/// made `concurrency` at a time (untimed: the floor is the writes a controller makes).
pub async fn floor_parents(
    client: &kube::Client,
    namespace: &str,
    parent: &ApiResource,
    n: usize,
    concurrency: usize,
) -> Result<()> {
    let parents: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, parent);
    futures::stream::iter(0..n)
        .map(|i| {
            let parents = parents.clone();
            let object = serde_json::json!({
                "apiVersion": parent.api_version, "kind": parent.kind,
                "metadata": {"name": format!("floor-{i}")}, "spec": {"message": "floor"},
            });
            async move {
                let object: DynamicObject = serde_json::from_value(object)?;
                parents.create(&PostParams::default(), &object).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(concurrency)
        .try_collect::<()>()
        .await
}

/// One parent's two writes for a floor: a child to create and a status to apply.
#[derive(Clone, Debug)]
pub struct FloorWrite {
    /// The parent's name.
    pub parent: String,
    /// The child, created with a POST.
    pub child: serde_json::Value,
    /// The parent's status, applied through the status subresource.
    pub status: serde_json::Value,
}

/// The API server's raw floor for one child and one status write per parent: `n` Job
/// creates and then `n` server-side applies of a status, each `concurrency` at a time
/// over one client (one connection per request in flight), in `namespace` — which needs
/// the parents of [`floor_parents`] there first. Returns (Jobs, statuses).
pub async fn write_floor(
    client: &kube::Client,
    namespace: &str,
    parent: &ApiResource,
    n: usize,
    concurrency: usize,
) -> Result<(Duration, Duration)> {
    let writes: Vec<FloorWrite> = (0..n)
        .map(|i| FloorWrite {
            parent: format!("floor-{i}"),
            child: serde_json::json!({
                "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": format!("floor-{i}")},
                "spec": {"template": {"spec": {"restartPolicy": "Never",
                    "containers": [{"name": "echo", "image": "busybox:1.36", "command": ["echo", "floor"]}]}}},
            }),
            status: serde_json::json!({"phase": "Pending", "observedGeneration": 1}),
        })
        .collect();
    write_floor_of(client, namespace, parent, &writes, "floor", concurrency).await
}

/// The floor of [`write_floor`] for the given writes (Jobs as children), made as
/// `manager`: the creates, then the status applies. Returns (Jobs, statuses).
pub async fn write_floor_of(
    client: &kube::Client,
    namespace: &str,
    parent: &ApiResource,
    writes: &[FloorWrite],
    manager: &str,
    concurrency: usize,
) -> Result<(Duration, Duration)> {
    let parents: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, parent);
    let jobs: Api<Job> = Api::namespaced(client.clone(), namespace);
    let create = PostParams {
        field_manager: Some(manager.into()),
        ..PostParams::default()
    };
    let start = Instant::now();
    futures::stream::iter(writes)
        .map(|write| {
            let (jobs, create) = (jobs.clone(), create.clone());
            async move {
                let job: Job = serde_json::from_value(write.child.clone())?;
                jobs.create(&create, &job).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(concurrency)
        .try_collect::<()>()
        .await?;
    let creates = start.elapsed();
    let start = Instant::now();
    let params = PatchParams::apply(manager).force();
    futures::stream::iter(writes)
        .map(|write| {
            let (parents, params) = (parents.clone(), params.clone());
            let status = serde_json::json!({
                "apiVersion": parent.api_version, "kind": parent.kind,
                "metadata": {"name": write.parent}, "status": write.status,
            });
            async move {
                parents
                    .patch_status(&write.parent, &params, &Patch::Apply(&status))
                    .await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(concurrency)
        .try_collect::<()>()
        .await?;
    Ok((creates, start.elapsed()))
}
