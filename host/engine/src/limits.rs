//! What one call may use and return: the per-plugin [`Limits`] and their enforcement on
//! a raw response before the host believes any of it.

use std::time::Duration;

use std::sync::Arc;

use super::bindings::capstan::reconciler::types as wit;
use super::memory::PluginMemory;
use super::parsed::{Held, tree_bytes};
use super::{Event, Fault, ParentMetadata, Response};

/// Per-plugin limits on one call.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Limits {
    /// CPU-time deadline of one call (ten times as much wall-clock time stops it regardless).
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String")]
    pub deadline: Duration,
    /// Linear memory cap of one call, in bytes.
    pub memory: usize,
    /// Linear memory all the plugin's calls running at once may hold together, in bytes;
    /// the most it may take of the host's `--memory-budget` (it reserves only what one
    /// instance was measured to hold).
    pub memory_total: usize,
    /// Cap on the total bytes of JSON in one response.
    pub response_bytes: usize,
    /// Cap on the number of children in one response.
    pub max_children: usize,
    /// Shortest requeue a response may ask for: `requeue-after-ms: 0` would otherwise be
    /// a busy loop of reconciles.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String")]
    pub min_requeue: Duration,
    /// CPU the plugin's calls may use per second, in millicores (1000 = one core), kept
    /// over ten seconds for cheap calls (a restart's pass) and one for the rest; over it,
    /// its reconciles wait.
    pub cpu_millicores: u32,
    /// Children the plugin may create per second (twice that at once) beyond what its
    /// users' parents create on their own allowance (16 each at once, one more a minute);
    /// parents a plugin made have none. Over it, creations wait.
    pub creations_per_second: u32,
    /// Bytes of text (`log` lines, stdout, stderr) the plugin may put in the host's log
    /// per second, after a burst of 256 KiB; the rest is dropped and counted.
    pub log_bytes_per_second: u32,
    /// How long a deletion may wait for the plugin's `finalized` before the host warns
    /// (`FinalizerStuck`) and says how to release the finalizer.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String")]
    pub finalizer_timeout: Duration,
    /// Run a call in an instance an earlier call ended in, instead of a fresh one: what
    /// the plugin keeps in memory then carries from call to call, as in a long-running
    /// hook server. For plugins whose start is costly (a Python or JavaScript runtime);
    /// their calls are no longer independent, so a recording may not replay the same.
    pub reuse_instances: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            deadline: Duration::from_secs(1),
            memory: 64 << 20,
            memory_total: 128 << 20,
            response_bytes: 4 << 20,
            max_children: 1000,
            min_requeue: Duration::from_secs(1),
            cpu_millicores: 1000,
            creations_per_second: 500,
            log_bytes_per_second: 4096,
            finalizer_timeout: Duration::from_secs(600),
            reuse_instances: false,
        }
    }
}

/// Events of one response the lift allowance holds besides its text (the host records
/// ten per object at once anyway).
const LIFTED_EVENTS: usize = 1000;

/// Host bytes lifting may take in one call (see `sandbox::store`): what the largest
/// response within `limits` takes, as wasmtime counts it — its text, plus each child and
/// event at its host size. Arguments of host calls (a `log` line, a write) fit easily.
pub(crate) fn lift_allowance(limits: &Limits) -> usize {
    let children = limits.max_children.saturating_mul(size_of::<String>());
    let events = LIFTED_EVENTS * size_of::<wit::Event>();
    limits
        .response_bytes
        .saturating_add(children)
        .saturating_add(events)
}

/// What one label or annotation for the parent takes in the host besides its text: the
/// map entry and its share of the map's nodes.
const ENTRY_BYTES: usize = 2 * std::mem::size_of::<(String, Option<String>)>();

/// What the parsed trees of `raw`'s children and status, and its labels and annotations
/// for the parent, will take, held from the plugin's `memory` before any is built
/// ([`parsed`](super::parsed)).
fn hold_trees(raw: &wit::Response, memory: &Arc<PluginMemory>) -> Result<Held, Fault> {
    let texts = raw
        .children
        .iter()
        .enumerate()
        .map(|(i, c)| (c, format!("child {i}")));
    let texts = texts.chain(raw.status.iter().map(|s| (s, "status".to_string())));
    let mut bytes = (raw.parent_labels.iter().chain(&raw.parent_annotations))
        .map(|e| ENTRY_BYTES + e.key.len() + e.value.as_ref().map_or(0, String::len))
        .fold(0usize, usize::saturating_add);
    for (text, what) in texts {
        let tree =
            tree_bytes(text).map_err(|e| Fault::MalformedResponse(format!("{what} is not JSON: {e}")))?;
        bytes = bytes.saturating_add(tree);
    }
    Held::take(memory, bytes)
}

/// Enforce the caps and parse the JSON texts of a raw response, its trees held from the
/// plugin's `memory`.
pub(crate) fn validate(
    raw: wit::Response,
    limits: &Limits,
    memory: &Arc<PluginMemory>,
) -> Result<Response, Fault> {
    if raw.children.len() > limits.max_children {
        return Err(Fault::TooManyChildren {
            count: raw.children.len(),
            cap: limits.max_children,
        });
    }
    let size = raw
        .children
        .iter()
        .chain(&raw.status)
        .map(String::len)
        .sum::<usize>()
        + raw
            .events
            .iter()
            .map(|e| e.reason.len() + e.message.len())
            .sum::<usize>()
        + raw
            .parent_labels
            .iter()
            .chain(&raw.parent_annotations)
            .map(|e| e.key.len() + e.value.as_ref().map_or(0, String::len))
            .sum::<usize>();
    if size > limits.response_bytes {
        return Err(Fault::ResponseTooLarge {
            size,
            cap: limits.response_bytes,
        });
    }
    let held = hold_trees(&raw, memory)?;
    let object = |text: &str, what: &str| -> Result<serde_json::Value, Fault> {
        match serde_json::from_str(text) {
            Ok(v @ serde_json::Value::Object(_)) => Ok(v),
            Ok(_) => Err(Fault::MalformedResponse(format!("{what} is not a JSON object"))),
            Err(e) => Err(Fault::MalformedResponse(format!("{what} is not JSON: {e}"))),
        }
    };
    Ok(Response {
        held,
        children: raw
            .children
            .iter()
            .enumerate()
            .map(|(i, c)| object(c, &format!("child {i}")))
            .collect::<Result<_, _>>()?,
        status: raw.status.as_deref().map(|s| object(s, "status")).transpose()?,
        requeue_after: raw
            .requeue_after_ms
            .map(|ms| Duration::from_millis(ms).max(limits.min_requeue)),
        events: raw.events.into_iter().map(Event::from).collect(),
        finalized: raw.finalized,
        parent: ParentMetadata {
            labels: entries(raw.parent_labels, "label")?,
            annotations: entries(raw.parent_annotations, "annotation")?,
        },
    })
}

/// The parent's labels or annotations an answer names, each key once.
fn entries(
    list: Vec<wit::MetadataEntry>,
    what: &str,
) -> Result<std::collections::BTreeMap<String, Option<String>>, Fault> {
    let mut map = std::collections::BTreeMap::new();
    for entry in list {
        if map.contains_key(&entry.key) {
            let key = capstan_contract::printable(&entry.key);
            return Err(Fault::MalformedResponse(format!(
                "parent {what} {key:?} is named twice"
            )));
        }
        map.insert(entry.key, entry.value);
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_requeue_is_never_sooner_than_the_floor() {
        let raw = |ms| wit::Response {
            children: vec![],
            status: None,
            requeue_after_ms: ms,
            events: vec![],
            finalized: false,
            parent_labels: vec![],
            parent_annotations: vec![],
        };
        let limits = Limits::default();
        let memory = PluginMemory::new(usize::MAX, None);
        let after = |ms| validate(raw(ms), &limits, &memory).unwrap().requeue_after;
        assert_eq!(after(Some(0)), Some(Duration::from_secs(1)));
        assert_eq!(after(Some(5_000)), Some(Duration::from_secs(5)));
        assert_eq!(after(None), None);
    }

    #[test]
    fn labels_for_the_parent_are_held_from_the_plugins_memory() {
        let entry = |i: usize| wit::MetadataEntry {
            key: format!("k{i}"),
            value: None,
        };
        let raw = |n: usize| wit::Response {
            children: vec![],
            status: None,
            requeue_after_ms: None,
            events: vec![],
            finalized: false,
            parent_labels: (0..n).map(entry).collect(),
            parent_annotations: vec![],
        };
        let limits = Limits::default();
        let memory = PluginMemory::new(64 * 1024, None);
        let few = validate(raw(10), &limits, &memory).unwrap();
        assert!(few.held.bytes() >= 10 * ENTRY_BYTES, "{}", few.held.bytes());
        assert_eq!(few.parent.labels.len(), 10);
        let many = validate(raw(10_000), &limits, &memory);
        assert!(matches!(many, Err(Fault::PluginMemory(_))), "{many:?}");
    }
}
