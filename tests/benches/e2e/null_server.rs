//! A null API server: a loopback HTTP server that answers discovery, lists, watches and
//! writes at once, from memory, so that the host's own ceiling (parents per second per
//! core) is measured with no API server or etcd taking the cores. It keeps objects and
//! their changes (for watches from a resourceVersion), and counts what the bench waits
//! for: parents with a status, and writes. Selectors are not applied: the bench's host
//! is the only client, and everything here is its own.
//!
//! `CAPSTAN_BENCH_WRITE_LATENCY_MS` answers every write that long after it arrives, as an
//! API server under load does (its etcd commit): reads and watches stay immediate. With it,
//! what caps a host that waits on the API server (how many reconciles it runs at once)
//! shows on any machine, where at once only its CPU does.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::Result;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::response::Response;
use serde_json::{Value, json};

/// A resource the server serves (discovery lists these, and nothing else is stored).
struct Served {
    group: &'static str,
    version: &'static str,
    plural: &'static str,
    kind: &'static str,
    namespaced: bool,
}

const SERVED: &[Served] = &[
    Served {
        group: "capstan.dev",
        version: "v1alpha1",
        plural: "echoes",
        kind: "Echo",
        namespaced: true,
    },
    Served {
        group: "batch",
        version: "v1",
        plural: "jobs",
        kind: "Job",
        namespaced: true,
    },
    Served {
        group: "",
        version: "v1",
        plural: "configmaps",
        kind: "ConfigMap",
        namespaced: true,
    },
    Served {
        group: "",
        version: "v1",
        plural: "events",
        kind: "Event",
        namespaced: true,
    },
    Served {
        group: "",
        version: "v1",
        plural: "namespaces",
        kind: "Namespace",
        namespaced: false,
    },
    Served {
        group: "events.k8s.io",
        version: "v1",
        plural: "events",
        kind: "Event",
        namespaced: true,
    },
    Served {
        group: "coordination.k8s.io",
        version: "v1",
        plural: "leases",
        kind: "Lease",
        namespaced: true,
    },
];

/// One collection's objects by (namespace, name), and its changes in order for watches:
/// (resourceVersion, namespace, the watch event's line).
#[derive(Default)]
struct Collection {
    objects: BTreeMap<(String, String), Value>,
    changes: Vec<(u64, String, Bytes)>,
}

#[derive(Default)]
struct Store {
    collections: HashMap<usize, Collection>,
    rv: u64,
    uids: u64,
    /// Parents whose status has an observedGeneration.
    statused: HashSet<String>,
    /// Children created.
    created: usize,
    /// Writes of anything but Events, and Events written.
    writes: usize,
    events: usize,
}

/// The running server.
pub struct NullServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

struct Shared {
    store: Mutex<Store>,
    /// The resourceVersion of the last change: watches wait on it.
    changed: tokio::sync::watch::Sender<u64>,
    unknown: Mutex<HashSet<String>>,
    /// How long every write takes to be answered (`CAPSTAN_BENCH_WRITE_LATENCY_MS`).
    write_latency: std::time::Duration,
}

impl NullServer {
    /// Serve on a loopback port with `n` Echos in `namespace` already there.
    pub async fn start(namespace: &str, n: usize) -> Result<NullServer> {
        let (changed, _) = tokio::sync::watch::channel(0);
        let shared = Arc::new(Shared {
            store: Mutex::new(Store::default()),
            changed,
            unknown: Mutex::new(HashSet::new()),
            write_latency: write_latency(),
        });
        {
            let mut store = shared.store.lock().unwrap();
            let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}});
            store.create(&SERVED[4], "", ns);
            for i in 0..n {
                let echo = json!({
                    "apiVersion": "capstan.dev/v1alpha1", "kind": "Echo",
                    "metadata": {"name": format!("e{i}"), "namespace": namespace},
                    "spec": {"message": "hi"},
                });
                store.create(&SERVED[0], namespace, echo);
            }
            store.writes = 0;
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let app = axum::Router::new().fallback(handle).with_state(shared.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok(NullServer { addr, shared })
    }

    /// A kubeconfig for this server, written into `dir`.
    pub fn kubeconfig(&self, dir: &Path) -> Result<PathBuf> {
        let path = dir.join("null-server.kubeconfig");
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: nullserver\n  cluster:\n    server: http://{}\nusers:\n- name: nobody\n  user: {{}}\ncontexts:\n- name: nullserver\n  context: {{cluster: nullserver, user: nobody}}\ncurrent-context: nullserver\n",
            self.addr
        );
        std::fs::write(&path, text)?;
        Ok(path)
    }

    /// Parents with a status, children created and writes so far.
    pub fn progress(&self) -> (usize, usize, usize) {
        let store = self.shared.store.lock().unwrap();
        (store.statused.len(), store.created, store.writes)
    }

    /// Events written so far.
    pub fn events(&self) -> usize {
        self.shared.store.lock().unwrap().events
    }

    /// Paths asked for that the server does not serve (each once).
    pub fn unknown(&self) -> Vec<String> {
        self.shared.unknown.lock().unwrap().iter().cloned().collect()
    }
}

/// What a request's path names.
enum Target<'a> {
    Versions,
    Groups,
    Resources(&'a str, &'a str),
    Object {
        served: &'static Served,
        namespace: &'a str,
        name: Option<&'a str>,
        status: bool,
    },
    Version,
}

fn parse_target(path: &str) -> Option<Target<'_>> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match parts.as_slice() {
        ["version"] => return Some(Target::Version),
        ["api"] => return Some(Target::Versions),
        ["apis"] => return Some(Target::Groups),
        ["api", v] => return Some(Target::Resources("", v)),
        ["apis", g, v] => return Some(Target::Resources(g, v)),
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return None,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (*ns, rest),
        _ => ("", rest),
    };
    let (plural, name, sub) = match rest {
        [plural] => (*plural, None, None),
        [plural, name] => (*plural, Some(*name), None),
        [plural, name, sub] => (*plural, Some(*name), Some(*sub)),
        _ => return None,
    };
    let served = SERVED
        .iter()
        .find(|s| s.group == group && s.version == version && s.plural == plural)?;
    Some(Target::Object {
        served,
        namespace,
        name,
        status: sub == Some("status"),
    })
}

async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let path = parts.uri.path().to_string();
    let query: HashMap<String, String> = form_urlencoded::parse(parts.uri.query().unwrap_or("").as_bytes())
        .into_owned()
        .collect();
    let body = axum::body::to_bytes(body, usize::MAX).await.unwrap_or_default();
    if parts.method != Method::GET && !shared.write_latency.is_zero() {
        tokio::time::sleep(shared.write_latency).await;
    }
    if std::env::var_os("CAPSTAN_BENCH_LOG").is_some() {
        eprintln!("null server: {} {}", parts.method, parts.uri);
    }
    let content_type = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let Some(target) = parse_target(&path) else {
        if parts.method == Method::POST {
            // Reviews (access, token): allowed, as the body asked.
            let mut review: Value = serde_json::from_slice(&body).unwrap_or(json!({}));
            review["status"] = json!({"allowed": true});
            return answer(StatusCode::CREATED, &review);
        }
        shared
            .unknown
            .lock()
            .unwrap()
            .insert(format!("{} {path}", parts.method));
        return status(StatusCode::NOT_FOUND, "NotFound", &path);
    };
    match (target, parts.method) {
        (Target::Version, _) => answer(StatusCode::OK, &version()),
        (Target::Versions, _) => answer(
            StatusCode::OK,
            &json!({"kind": "APIVersions", "versions": ["v1"]}),
        ),
        (Target::Groups, _) => answer(StatusCode::OK, &groups()),
        (Target::Resources(group, version), _) => answer(StatusCode::OK, &resources(group, version)),
        (
            Target::Object {
                served,
                namespace,
                name: None,
                ..
            },
            Method::GET,
        ) => {
            if matches!(query.get("watch").map(String::as_str), Some("true" | "1")) {
                let since = query
                    .get("resourceVersion")
                    .and_then(|rv| rv.parse().ok())
                    .unwrap_or(0);
                watch(shared, served, namespace.to_string(), since)
            } else {
                let store = shared.store.lock().unwrap();
                answer(StatusCode::OK, &store.list(served, namespace))
            }
        }
        (
            Target::Object {
                served,
                namespace,
                name: None,
                ..
            },
            Method::POST,
        ) => {
            let Ok(object) = serde_json::from_slice::<Value>(&body) else {
                return status(StatusCode::BAD_REQUEST, "BadRequest", "not JSON");
            };
            let mut store = shared.store.lock().unwrap();
            let name = object["metadata"]["name"].as_str().map(str::to_string);
            if name.is_some_and(|name| store.get(served, namespace, &name).is_some()) {
                return status(StatusCode::CONFLICT, "AlreadyExists", &path);
            }
            let created = store.create(served, namespace, object);
            shared.changed.send_replace(store.rv);
            answer(StatusCode::CREATED, &created)
        }
        (
            Target::Object {
                served,
                namespace,
                name: Some(name),
                status: sub,
            },
            method,
        ) => {
            let mut store = shared.store.lock().unwrap();
            let existing = store.get(served, namespace, name).cloned();
            let (code, object) = match (method, existing) {
                (Method::GET, Some(object)) => (StatusCode::OK, object),
                (Method::GET, None) => return status(StatusCode::NOT_FOUND, "NotFound", &path),
                (Method::DELETE, Some(_)) => (StatusCode::OK, store.delete(served, namespace, name)),
                (Method::PATCH | Method::PUT, existing) => {
                    let Ok(patch) = serde_json::from_slice::<Value>(&body) else {
                        return status(StatusCode::BAD_REQUEST, "BadRequest", "not JSON");
                    };
                    match existing {
                        None if content_type.starts_with("application/apply-patch") => {
                            (StatusCode::CREATED, store.create(served, namespace, patch))
                        }
                        None => return status(StatusCode::NOT_FOUND, "NotFound", &path),
                        Some(old) => {
                            let json_patch = content_type.starts_with("application/json-patch");
                            (
                                StatusCode::OK,
                                store.update(served, namespace, name, old, patch, sub, json_patch),
                            )
                        }
                    }
                }
                _ => return status(StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed", &path),
            };
            shared.changed.send_replace(store.rv);
            answer(code, &object)
        }
        (Target::Object { .. }, _) => status(StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed", &path),
    }
}

impl Store {
    fn next_rv(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }

    fn get(&self, served: &Served, namespace: &str, name: &str) -> Option<&Value> {
        self.collections
            .get(&served.key())
            .and_then(|c| c.objects.get(&(namespace.to_string(), name.to_string())))
    }

    fn list(&self, served: &Served, namespace: &str) -> Value {
        let items: Vec<&Value> = self
            .collections
            .get(&served.key())
            .map(|c| {
                c.objects
                    .iter()
                    .filter(|((ns, _), _)| namespace.is_empty() || ns == namespace)
                    .map(|(_, o)| o)
                    .collect()
            })
            .unwrap_or_default();
        json!({
            "apiVersion": served.api_version(),
            "kind": format!("{}List", served.kind),
            "metadata": {"resourceVersion": self.rv.to_string()},
            "items": items,
        })
    }

    fn create(&mut self, served: &Served, namespace: &str, mut object: Value) -> Value {
        self.uids += 1;
        let rv = self.next_rv();
        let meta = &mut object["metadata"];
        if meta["name"].is_null() {
            meta["name"] = json!(format!(
                "{}{}",
                meta["generateName"].as_str().unwrap_or("x-"),
                self.uids
            ));
        }
        if !namespace.is_empty() {
            meta["namespace"] = json!(namespace);
        }
        meta["uid"] = json!(format!("00000000-0000-4000-8000-{:012}", self.uids));
        meta["resourceVersion"] = json!(rv.to_string());
        meta["generation"] = json!(1);
        meta["creationTimestamp"] = json!("2026-01-01T00:00:00Z");
        object["apiVersion"] = json!(served.api_version());
        object["kind"] = json!(served.kind);
        // Events are counted apart, as the README's writes per parent leave them out.
        match served.plural {
            "events" => self.events += 1,
            "echoes" | "namespaces" => self.writes += 1,
            _ => {
                self.created += 1;
                self.writes += 1;
            }
        }
        self.record(served, namespace, "ADDED", &object);
        object
    }

    #[allow(clippy::too_many_arguments)]
    fn update(
        &mut self,
        served: &Served,
        namespace: &str,
        name: &str,
        old: Value,
        patch: Value,
        status: bool,
        json_patch: bool,
    ) -> Value {
        let mut object = old.clone();
        if status {
            if let Some(s) = patch.get("status") {
                object["status"] = s.clone();
            }
        } else if json_patch {
            // json-patch, as the host itself uses it; a patch it cannot apply changes nothing.
            if let Ok(ops) = serde_json::from_value::<json_patch::Patch>(patch.clone()) {
                json_patch::patch(&mut object, &ops).ok();
            }
        } else {
            merge(&mut object, &patch);
            object["metadata"]["uid"] = old["metadata"]["uid"].clone();
            object["metadata"]["creationTimestamp"] = old["metadata"]["creationTimestamp"].clone();
            if object.get("spec") != old.get("spec") {
                let generation = old["metadata"]["generation"].as_i64().unwrap_or(1) + 1;
                object["metadata"]["generation"] = json!(generation);
            }
        }
        if served.plural == "echoes" && !object["status"]["observedGeneration"].is_null() {
            self.statused.insert(format!("{namespace}/{name}"));
        }
        object["metadata"]["resourceVersion"] = json!(self.next_rv().to_string());
        self.writes += 1;
        self.record(served, namespace, "MODIFIED", &object);
        object
    }

    fn delete(&mut self, served: &Served, namespace: &str, name: &str) -> Value {
        let key = (namespace.to_string(), name.to_string());
        let mut object = self
            .collections
            .get_mut(&served.key())
            .and_then(|c| c.objects.remove(&key))
            .unwrap_or(Value::Null);
        object["metadata"]["resourceVersion"] = json!(self.next_rv().to_string());
        self.writes += 1;
        self.record(served, namespace, "DELETED", &object);
        object
    }

    /// Keep `object` and its change: what a watch from an older resourceVersion sends.
    fn record(&mut self, served: &Served, namespace: &str, kind: &str, object: &Value) {
        let rv = self.rv;
        let collection = self.collections.entry(served.key()).or_default();
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if kind != "DELETED" {
            collection
                .objects
                .insert((namespace.to_string(), name), object.clone());
        }
        let mut line = serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap_or_default();
        line.push(b'\n');
        collection
            .changes
            .push((rv, namespace.to_string(), Bytes::from(line)));
    }
}

impl Served {
    /// Its place in the table: one entry per group, version and plural.
    fn key(&self) -> usize {
        SERVED.iter().position(|s| std::ptr::eq(s, self)).unwrap_or(0)
    }

    fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

/// A watch of `served` in `namespace` (all when empty) from resourceVersion `since`: every
/// later change, as it happens, until the client goes.
fn watch(shared: Arc<Shared>, served: &'static Served, namespace: String, since: u64) -> Response {
    let changed = shared.changed.subscribe();
    let stream = futures::stream::unfold(
        (shared, changed, since),
        move |(shared, mut changed, mut since)| {
            let namespace = namespace.clone();
            async move {
                loop {
                    let (chunk, last) = {
                        let store = shared.store.lock().unwrap();
                        let changes = store
                            .collections
                            .get(&served.key())
                            .map(|c| &c.changes[c.changes.partition_point(|(rv, _, _)| *rv <= since)..])
                            .unwrap_or(&[]);
                        let mut chunk = Vec::new();
                        for (_, ns, line) in changes {
                            if namespace.is_empty() || *ns == namespace {
                                chunk.extend_from_slice(line);
                            }
                        }
                        (chunk, changes.last().map_or(since, |(rv, _, _)| *rv))
                    };
                    since = last;
                    if !chunk.is_empty() {
                        return Some((
                            Ok::<_, std::io::Error>(Bytes::from(chunk)),
                            (shared, changed, since),
                        ));
                    }
                    if changed.changed().await.is_err() {
                        return None;
                    }
                }
            }
        },
    );
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from_stream(stream))
        .unwrap_or_default()
}

/// `CAPSTAN_BENCH_WRITE_LATENCY_MS`, or none.
pub fn write_latency() -> std::time::Duration {
    let ms = std::env::var("CAPSTAN_BENCH_WRITE_LATENCY_MS").ok();
    std::time::Duration::from_millis(ms.and_then(|ms| ms.parse().ok()).unwrap_or(0))
}

fn version() -> Value {
    json!({
        "major": "1", "minor": "37", "gitVersion": "v1.37.2", "gitCommit": "null", "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.25", "compiler": "gc", "platform": "linux/amd64",
    })
}

fn groups() -> Value {
    let mut groups: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for s in SERVED.iter().filter(|s| !s.group.is_empty()) {
        groups.entry(s.group).or_default().push(s.version);
    }
    let groups: Vec<Value> = groups
        .into_iter()
        .map(|(name, versions)| {
            let versions: Vec<Value> = versions
                .iter()
                .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
                .collect();
            json!({"name": name, "versions": versions, "preferredVersion": versions[0]})
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

fn resources(group: &str, version: &str) -> Value {
    let verbs = ["create", "delete", "get", "list", "patch", "update", "watch"];
    let mut resources = Vec::new();
    for s in SERVED.iter().filter(|s| s.group == group && s.version == version) {
        let singular = s.kind.to_lowercase();
        resources.push(json!({"name": s.plural, "singularName": singular, "namespaced": s.namespaced, "kind": s.kind, "verbs": verbs}));
        resources.push(json!({"name": format!("{}/status", s.plural), "singularName": "", "namespaced": s.namespaced, "kind": s.kind, "verbs": ["get", "patch", "update"]}));
    }
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources})
}

/// RFC 7386: what the patch names replaces, null removes.
fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(target), Value::Object(patch)) => {
            for (key, value) in patch {
                if value.is_null() {
                    target.remove(key);
                } else {
                    merge(target.entry(key.clone()).or_insert(Value::Null), value);
                }
            }
        }
        (target, patch) => *target = patch.clone(),
    }
}

fn answer(code: StatusCode, body: &Value) -> Response {
    Response::builder()
        .status(code)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(serde_json::to_vec(body).unwrap_or_default()))
        .unwrap_or_default()
}

fn status(code: StatusCode, reason: &str, message: &str) -> Response {
    answer(
        code,
        &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "message": message, "code": code.as_u16()}),
    )
}
