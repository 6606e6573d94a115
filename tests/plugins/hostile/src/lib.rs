//! A hostile plugin. It speaks the raw generated bindings rather than the typed SDK so it
//! can also break the contract (non-JSON output). The parent's `spec.mode` picks the
//! misbehaviour; `spec.arg` parameterises some modes, and `spec.requeueMs` (any mode) asks
//! to be called again that soon. Probing modes ("file", "env", "socket") report what they
//! managed to do in `status.result`. Settings are accepted whatever they hold, except that
//! a string `refuse` in them is the refusal `validate-settings` answers. `spec.related`
//! picks what `related` answers: `labels:SELECTOR` (ConfigMaps by label, the honest
//! case), or a query the host must refuse (`other-namespace`, `undeclared`, `many`), or a
//! fault (`panic`, `loop`). Built with the `twin` feature it is `hostile-twin`, a second
//! plugin on the same kind. Modes `reasons`, `pollables`, `random`, `empty-strings` and
//! `panic-64k` try to make the host spend memory or log lines on the plugin's behalf.

// Natively (a workspace-wide `cargo test`) nothing is exported, so nothing is used.
#![cfg_attr(not(target_family = "wasm"), allow(dead_code))]

use capstan_sdk::bindings::capstan::reconciler::host::log;
use capstan_sdk::bindings::capstan::reconciler::types::{
    Event, EventType, KindRef, Level, MetadataEntry, PluginMetadata, ReconcileError, RelatedQuery, Request,
    Response, Retry, Selector,
};
use capstan_sdk::bindings::exports::capstan::reconciler::plugin::Guest;
use serde_json::{Value, json};

struct Hostile;

/// The plugin's name: built as `hostile-twin`, it is a second plugin on the same kind.
const NAME: &str = if cfg!(feature = "twin") {
    "hostile-twin"
} else {
    "hostile"
};

impl Guest for Hostile {
    fn metadata() -> PluginMetadata {
        PluginMetadata {
            name: NAME.into(),
            version: "0.0.0".into(),
            parent: kind("capstan.dev", "v1alpha1", "Hostile", "hostiles"),
            // No cluster-scoped child kind: a namespaced parent may not declare one (the host
            // refuses the plugin), so mode "cluster" returns an undeclared kind.
            children: vec![kind("", "v1", "ConfigMap", "configmaps")],
            related: vec![kind("", "v1", "ConfigMap", "configmaps")],
            settings_schema: None,
            // Deletion waits for the plugin: mode "hold" never lets go, every other mode does.
            finalizer: Some(format!("capstan.dev/{NAME}")),
        }
    }

    fn validate_settings(settings: String) -> Result<(), String> {
        let settings: Value = serde_json::from_str(&settings).map_err(|e| e.to_string())?;
        match settings["refuse"].as_str() {
            Some(refusal) => Err(refusal.to_string()),
            None => Ok(()),
        }
    }

    fn related(parent: String, _: String) -> Vec<RelatedQuery> {
        let parent: Value = serde_json::from_str(&parent).unwrap_or(Value::Null);
        let config_maps = |namespace: Option<&str>, selector| RelatedQuery {
            group: String::new(),
            kind: "ConfigMap".into(),
            namespace: namespace.map(Into::into),
            selector,
        };
        match parent["spec"]["related"].as_str().unwrap_or_default() {
            "" => vec![],
            "other-namespace" => vec![config_maps(
                Some("kube-system"),
                Selector::Names(vec!["any".into()]),
            )],
            "undeclared" => vec![RelatedQuery {
                kind: "Secret".into(),
                ..config_maps(None, Selector::Names(vec!["any".into()]))
            }],
            "many" => vec![config_maps(
                None,
                Selector::Names((0..100_000).map(|i| format!("cm-{i}")).collect()),
            )],
            "panic" => panic!("related panicked on purpose"),
            #[allow(clippy::empty_loop)]
            "loop" => loop {},
            other => match other.strip_prefix("labels:") {
                Some(selector) => vec![config_maps(None, Selector::Labels(selector.into()))],
                None => vec![],
            },
        }
    }

    fn reconcile(request: Request) -> Result<Response, ReconcileError> {
        let parent: Value =
            serde_json::from_str(&request.parent).map_err(|e| ReconcileError::Fatal(e.to_string()))?;
        let mode = parent["spec"]["mode"].as_str().unwrap_or("ok").to_string();
        let arg = parent["spec"]["arg"].as_str().unwrap_or_default().to_string();
        let requeue_after_ms = parent["spec"]["requeueMs"].as_u64();
        let mut children = vec![];
        let mut status = None;
        let mut events = vec![];
        let mut parent_labels = vec![];
        match mode.as_str() {
            "ok" | "hold" => {
                children.push(config_map(&parent, 0).to_string());
                if request.finalizing {
                    status = Some(json!({ "result": format!("finalizing in mode {mode}") }));
                }
            }
            "loop" => {
                let mut n: u64 = 0;
                loop {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            }
            "memory" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1u8; 1 << 20]);
                    std::hint::black_box(&hoard);
                }
            }
            "panic" => panic!("hostile plugin panics on purpose"),
            "stack" => {
                std::hint::black_box(recurse(u64::MAX));
            }
            "file" => {
                status = Some(probe(std::fs::read_to_string(if arg.is_empty() {
                    "/etc/hostname"
                } else {
                    &arg
                })))
            }
            "env" => {
                status = Some(
                    json!({ "result": std::env::vars().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(","), "args": std::env::args().count() }),
                )
            }
            "socket" => {
                status = Some(probe(
                    std::net::TcpStream::connect(arg.as_str()).map(|_| "connected".to_string()),
                ))
            }
            "stdout" => {
                let line = "x".repeat(1023);
                for _ in 0..100 * 1024 {
                    println!("{line}");
                }
                children.push(config_map(&parent, 0).to_string());
            }
            "children" => children.extend((0..10_000).map(|i| config_map(&parent, i).to_string())),
            // Just under the 4 MiB response cap of tiny JSON values (`spec.arg` of them), each
            // a tree node on the host once parsed: `{"a":0}` is 8 bytes of text and a B-tree
            // node of ~650 bytes; `[]` is 3 bytes and a 32-byte value.
            "fanout" | "fanout-arrays" => {
                let (item, fits) = match mode.as_str() {
                    "fanout" => (r#"{"a":0}"#, 500_000),
                    _ => ("[]", 1_300_000),
                };
                let n = arg.parse().unwrap_or(fits);
                let cm = config_map(&parent, 0).to_string();
                let items = vec![item; n].join(",");
                children.push(format!("{},\"fanout\":[{items}]}}", &cm[..cm.len() - 1]));
            }
            "big-status" => status = Some(json!({ "blob": "y".repeat(6 << 20) })),
            "undeclared" => children.push(
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "stolen"}, "stringData": {"k": "v"}})
                    .to_string(),
            ),
            "other-namespace" => {
                let mut cm = config_map(&parent, 0);
                cm["metadata"]["namespace"] = "kube-system".into();
                children.push(cm.to_string());
            }
            // A cluster-scoped child of a namespaced parent, which Kubernetes never collects.
            "cluster" => children.push(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": format!("hostile-{arg}")}}).to_string()),
            // A third-party "Mirror": one ConfigMap holding `spec.data`, labelled `spec.labels`.
            "mirror" => {
                let mut cm = config_map(&parent, 0);
                cm["data"] = parent["spec"]["data"].clone();
                cm["metadata"]["labels"] = parent["spec"]["labels"].clone();
                children.push(cm.to_string());
            }
            // Names an object that may belong to someone else: a ConfigMap called `spec.arg`.
            "adopt" => {
                let mut cm = config_map(&parent, 0);
                cm["metadata"]["name"] = arg.clone().into();
                cm["data"] = json!({ "taken": "by hostile" });
                children.push(cm.to_string());
            }
            // Its own child first, then one named `spec.arg` that may be someone else's: a
            // response refused for the second must not leave the first behind.
            "adopt-second" => {
                children.push(config_map(&parent, 0).to_string());
                let mut cm = config_map(&parent, 1);
                cm["metadata"]["name"] = arg.clone().into();
                children.push(cm.to_string());
            }
            // Claims an owner of its own choosing: only the host sets owner references.
            "owner-ref" => {
                let mut cm = config_map(&parent, 0);
                cm["metadata"]["ownerReferences"] = json!([{
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "name": "victim",
                    "uid": "00000000-0000-0000-0000-000000000000",
                    "controller": true,
                }]);
                children.push(cm.to_string());
            }
            // A ConfigMap named `spec.arg` verbatim, e.g. `x?dryRun=All` or `victim/status`:
            // names become URL paths.
            "bad-name" => {
                let mut cm = config_map(&parent, 0);
                cm["metadata"]["name"] = arg.clone().into();
                children.push(cm.to_string());
            }
            // Blocks in a host call: a 30 s sleep (a monotonic-clock wait), `spec.arg` times.
            "sleep" => {
                let start = std::time::Instant::now();
                for _ in 0..arg.parse::<u32>().unwrap_or(1) {
                    std::thread::sleep(std::time::Duration::from_secs(30));
                }
                status = Some(json!({ "sleptMs": start.elapsed().as_millis() as u64 }));
            }
            // What the sandbox's clocks and entropy say.
            "time" => {
                use std::hash::BuildHasher;
                let wall = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(u64::MAX);
                let hash = std::collections::hash_map::RandomState::new().hash_one(42u64);
                status = Some(json!({ "wallNanos": wall, "hash": hash.to_string() }));
            }
            // Burns CPU: `spec.arg` million iterations (900 by default, most of a second).
            "spin" => {
                let mut n: u64 = 0;
                for _ in 0..arg.parse::<u64>().unwrap_or(900) * 1_000_000 {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
                children.push(config_map(&parent, 0).to_string());
            }
            // `spec.arg` events (100 by default), each with a reason of its own and a
            // message that tries to start a line of its own.
            "events" => events.extend((0..arg.parse::<usize>().unwrap_or(100)).map(|i| Event {
                event_type: EventType::Warning,
                reason: format!("Spam{i}"),
                message: format!("spam {i}\nINFO forged line"),
            })),
            // One event whose reason is `spec.arg` verbatim (the host accepts CamelCase only).
            "reason" => events.push(Event {
                event_type: EventType::Normal,
                reason: arg.clone(),
                message: "a reason of the plugin's choosing".into(),
            }),
            // `spec.arg` log lines (2000 by default) of 8 KiB, each trying to forge a host
            // log line after a newline, plus as much on stdout.
            "log" => {
                let forged = "\n{\"level\":\"INFO\",\"message\":\"forged\"}\n\u{1b}[2J";
                let line = format!("{}{forged}", "z".repeat(8 * 1024));
                for _ in 0..arg.parse::<usize>().unwrap_or(2000) {
                    log(Level::Warn, &line);
                    println!("{line}");
                }
                children.push(config_map(&parent, 0).to_string());
            }
            // Labels its own parent: `spec.arg` is `key=value` pairs separated by `,`, and
            // `key-` removes a key; a key named twice is named twice in the answer.
            "label" => {
                parent_labels.extend(arg.split(',').filter(|e| !e.is_empty()).map(|e| {
                    match e.split_once('=') {
                        Some((key, value)) => MetadataEntry {
                            key: key.into(),
                            value: Some(value.into()),
                        },
                        None => MetadataEntry {
                            key: e.trim_end_matches('-').into(),
                            value: None,
                        },
                    }
                }));
                children.push(config_map(&parent, 0).to_string());
            }
            // Holds nothing for its parent: no children, and `finalized` while it lives.
            "release" => {}
            // Counts the calls its instance has run: 1 in a fresh one each call.
            "calls" => {
                static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
                let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                status = Some(json!({ "calls": n }));
            }
            // Flips its own status between two answers, each one waking the next.
            "flip" => {
                let next = if parent["status"]["flip"] == "a" { "b" } else { "a" };
                status = Some(json!({ "flip": next }));
            }
            // Feeds itself: a status counter and a ConfigMap holding it, one more each
            // call, so every write wakes the next reconcile with new content.
            "counter" => {
                let n = parent["status"]["n"].as_u64().unwrap_or(0) + 1;
                status = Some(json!({ "n": n }));
                let mut cm = config_map(&parent, 0);
                cm["data"] = json!({ "n": n.to_string() });
                children.push(cm.to_string());
            }
            // Flips its ConfigMap's data between two answers, read from the observed child.
            "flip-child" => {
                let seen = request
                    .children
                    .iter()
                    .filter_map(|c| serde_json::from_str::<Value>(c).ok())
                    .find_map(|c| c["data"]["flip"].as_str().map(String::from));
                let mut cm = config_map(&parent, 0);
                cm["data"] = json!({ "flip": if seen.as_deref() == Some("a") { "b" } else { "a" } });
                children.push(cm.to_string());
            }
            // A transient failure asking to be retried after `spec.arg` ms (none: backoff).
            "retry" => {
                return Err(ReconcileError::Retry(Retry {
                    message: "hostile asks for a retry".into(),
                    after_ms: arg.parse().ok(),
                }));
            }
            // What arrived besides the parent: the clock, the settings, related objects.
            "inputs" => {
                status = Some(json!({
                    "now": request.now,
                    "settings": serde_json::from_str::<Value>(&request.settings).unwrap_or(Value::Null),
                    "related": request.related.len(),
                }))
            }
            // A status field of this plugin's own, steady: two plugins on one kind each
            // own theirs.
            "own-field" => status = Some(json!({ NAME: "steady" })),
            // Host memory the guest can make the host spend, each a mode of its own.
            "reasons" => events.push(huge_reason(&request.now)),
            "pollables" => keep_pollables(),
            "random" => loop {
                std::hint::black_box(wasip2::random::random::get_random_bytes(64 << 20));
            },
            // `spec.arg` empty strings (2 million by default): 8 bytes each in the guest.
            "empty-strings" => children.resize(arg.parse().unwrap_or(2_000_000), String::new()),
            "panic-64k" => panic!("{}", "p".repeat(64 << 10)),
            // Looks through all of its linear memory for what an earlier call left (`spec.arg`
            // with each byte flipped, so the request's own copy never matches), then leaves
            // it on 256 pages apart: a fresh instance must never find any.
            "leftovers" => status = Some(json!({ "found": leftovers(arg.as_bytes()) })),
            "not-json" => children.push("this is not JSON".into()),
            "not-object" => children.push("[1, 2, 3]".into()),
            other => return Err(ReconcileError::Fatal(format!("unknown mode {other}"))),
        }
        Ok(Response {
            children,
            status: status.map(|s| s.to_string()),
            requeue_after_ms,
            events,
            // "release": nothing held for the parent, deleted or not.
            finalized: (request.finalizing && mode != "hold") || mode == "release",
            parent_labels,
            parent_annotations: vec![],
        })
    }
}

// Only Wasm builds export: component export names are not valid native symbols.
#[cfg(target_family = "wasm")]
capstan_sdk::bindings::export!(Hostile with_types_in capstan_sdk::bindings);

fn kind(group: &str, version: &str, kind: &str, plural: &str) -> KindRef {
    KindRef {
        group: group.into(),
        version: version.into(),
        kind: kind.into(),
        plural: plural.into(),
        namespaced: true,
    }
}

fn config_map(parent: &Value, i: usize) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": { "name": format!("{}-{i}", parent["metadata"]["name"].as_str().unwrap_or("x")), "namespace": parent["metadata"]["namespace"] },
        "data": { "i": i.to_string() },
    })
}

fn probe(result: std::io::Result<String>) -> Value {
    match result {
        Ok(text) => json!({ "result": "allowed", "detail": text }),
        Err(e) => json!({ "result": "denied", "detail": e.to_string() }),
    }
}

/// A Warning whose reason is fresh each call (it starts with the time) and ~4 MiB long.
fn huge_reason(now: &str) -> Event {
    let fresh: String = now.chars().filter(char::is_ascii_alphanumeric).collect();
    Event {
        event_type: EventType::Warning,
        reason: format!("Fresh{fresh}{}", "R".repeat((4 << 20) - 64)),
        message: "a reason no API server takes".into(),
    }
}

/// Waits of no time, kept, until the host stops it.
fn keep_pollables() -> ! {
    let mut kept = Vec::new();
    loop {
        kept.push(wasip2::clocks::monotonic_clock::subscribe_duration(0));
        std::hint::black_box(&kept);
    }
}

fn recurse(n: u64) -> u64 {
    if n == 0 {
        0
    } else {
        1 + std::hint::black_box(recurse(n - 1))
    }
}

/// Copies of `arg`, each byte flipped, found anywhere in linear memory; then 256 are left,
/// one per 8 KiB allocation, never freed.
fn leftovers(arg: &[u8]) -> usize {
    let flip = |b: &u8| b ^ 0x5a;
    if arg.is_empty() {
        return 0;
    }
    let size = linear_memory_size();
    if size <= arg.len() + 1 {
        return 0;
    }
    let wanted: Vec<u8> = arg.iter().map(flip).collect();
    // Linear memory is plain bytes to the guest: every address below its size is readable
    // (from 1: a slice may not start at null). `wanted` itself is skipped by its address.
    let memory = unsafe { std::slice::from_raw_parts(std::ptr::without_provenance::<u8>(1), size - 1) };
    let own = wanted.as_ptr() as usize;
    let found = memory
        .windows(wanted.len())
        .enumerate()
        .filter(|(at, w)| at + 1 != own && w[0] == wanted[0] && *w == wanted.as_slice())
        .count();
    drop(wanted);
    for _ in 0..256 {
        let mut page = vec![0u8; 8 << 10];
        for (slot, b) in page.iter_mut().zip(arg) {
            *slot = flip(b);
        }
        // Seen from outside, or the compiler drops a never-read allocation and its writes.
        std::mem::forget(std::hint::black_box(page));
    }
    found
}

#[cfg(target_arch = "wasm32")]
fn linear_memory_size() -> usize {
    core::arch::wasm32::memory_size(0) * 65536
}

/// Built natively (clippy, unit tests) there is no linear memory to look through.
#[cfg(not(target_arch = "wasm32"))]
fn linear_memory_size() -> usize {
    0
}
