//! What a plugin version would do to the cluster, found without writing anything: the
//! dry side of the reconcile path, behind `capstan diff` and shadow mode.
//!
//! A controller given a [`Preview`] runs every step a live one runs — the same caches,
//! validation, ownership claims and "would this write change anything" rule — but each
//! write becomes a server-side apply with `dryRun=All` (what the API server would store)
//! or, for deletes, status and finalizers, a note of what would be done. Nothing reaches
//! the cluster: no apply, no status, no event, no finalizer. What it finds is kept per
//! parent (the last reconcile's findings stand for the parent), counted in the shadow
//! metrics and, for a shadow, logged at a bounded rate.

pub mod fields;

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use crate::bucket::Bucket;
use crate::key::ObjectKey;
use crate::ops::metrics::DivergenceLabels;
pub use fields::FieldChange;

/// What one write of a reconcile would have done.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
// `change` is what `capstan diff --output json` and the metric's label call it.
#[allow(clippy::enum_variant_names)]
pub enum Change {
    /// A child would be created.
    Create,
    /// A child or the parent's status would change.
    Change,
    /// A child would be pruned.
    Delete,
    /// The response, or one child of it, would be refused.
    Refuse,
    /// The reconcile would fail (plugin fault, fatal error, API error).
    Fail,
}

impl Change {
    /// The metric's `change` label.
    pub fn label(self) -> &'static str {
        match self {
            Change::Create => "would-create",
            Change::Change => "would-change",
            Change::Delete => "would-delete",
            Change::Refuse => "would-refuse",
            Change::Fail => "would-fail",
        }
    }
}

/// One thing a reconcile would have done differently from the cluster as it is.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Finding {
    /// The parent reconciled, `namespace/name`.
    pub parent: String,
    /// What would happen.
    pub change: Change,
    /// The kind of the object it would happen to.
    pub kind: String,
    /// That object, `namespace/name` (the parent itself for its status).
    pub object: String,
    /// Which fields, for a change (and a create: every field set).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<FieldChange>,
    /// Why, for a refusal or a failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Finding {
    /// A finding about `object` of `kind` under `parent`.
    pub fn new(parent: &ObjectKey, change: Change, kind: &str, object: String) -> Finding {
        Finding {
            parent: parent.to_string(),
            change,
            kind: kind.into(),
            object,
            fields: Vec::new(),
            reason: None,
        }
    }

    /// With the fields that would change.
    pub fn with_fields(mut self, fields: Vec<FieldChange>) -> Finding {
        self.fields = fields;
        self
    }

    /// With why.
    pub fn because(mut self, reason: impl Into<String>) -> Finding {
        self.reason = Some(reason.into());
        self
    }
}

/// Lines a shadow logs about diverging parents: a burst, then one a second.
const LOG_RATE: f64 = 1.0;
const LOG_BURST: f64 = 10.0;

/// A dry run of one plugin: whose children and fields it previews, and what it found.
pub struct Preview {
    /// The plugin whose children, labels and field manager the preview uses: the live one.
    writer: String,
    /// A shadow logs what it finds; a diff collects it quietly.
    shadow: bool,
    /// What each parent's reconcile found so far, until it finishes.
    pending: Mutex<HashMap<ObjectKey, Vec<Finding>>>,
    /// Each parent's last finished reconcile's findings (empty: nothing would change).
    last: Mutex<HashMap<ObjectKey, Vec<Finding>>>,
    log: Mutex<Bucket>,
    /// Whether the API server refused a dry run for lack of permission (said once).
    local: AtomicBool,
}

impl Preview {
    /// A preview of `writer`'s effect, kept for a report (`capstan diff`).
    pub fn collecting(writer: &str) -> Preview {
        Preview::new(writer, false)
    }

    /// A shadow of `writer`: findings counted and logged as they come.
    pub fn shadow(writer: &str) -> Preview {
        Preview::new(writer, true)
    }

    fn new(writer: &str, shadow: bool) -> Preview {
        Preview {
            writer: writer.into(),
            shadow,
            pending: Mutex::default(),
            last: Mutex::default(),
            log: Mutex::new(Bucket::new(LOG_RATE, LOG_BURST, Instant::now())),
            local: AtomicBool::new(false),
        }
    }

    /// The live plugin whose children and fields are previewed.
    pub fn writer(&self) -> &str {
        &self.writer
    }

    /// Note what a running reconcile of `parent` would do.
    pub fn found(&self, parent: &ObjectKey, finding: Finding) {
        lock(&self.pending)
            .entry(parent.clone())
            .or_default()
            .push(finding);
    }

    /// A reconcile of `parent` by plugin `name` finished: its findings replace the
    /// parent's last, counted and (for a shadow) logged.
    pub fn reconciled(&self, name: &str, parent: &ObjectKey) {
        let found = lock(&self.pending).remove(parent).unwrap_or_default();
        let metrics = crate::ops::metrics::get();
        for f in &found {
            metrics.divergences.get_or_create(&labels(name, f)).inc();
            metrics.divergent.get_or_create(&labels(name, f)).inc();
        }
        if self.shadow && !found.is_empty() && lock(&self.log).try_take(1.0, Instant::now()) {
            say(parent, &found);
        }
        if let Some(before) = lock(&self.last).insert(parent.clone(), found) {
            for f in &before {
                metrics.divergent.get_or_create(&labels(name, f)).dec();
            }
        }
    }

    /// A reconcile of `parent` ended without an answer to report (deferred, cancelled):
    /// what it noted so far is dropped.
    pub fn abandoned(&self, parent: &ObjectKey) {
        lock(&self.pending).remove(parent);
    }

    /// A parent that is gone no longer diverges.
    pub fn forget(&self, name: &str, parent: &ObjectKey) {
        if let Some(before) = lock(&self.last).remove(parent) {
            for f in &before {
                crate::ops::metrics::get()
                    .divergent
                    .get_or_create(&labels(name, f))
                    .dec();
            }
        }
    }

    /// Whether a reconcile of `parent` has finished.
    pub fn has_reconciled(&self, parent: &ObjectKey) -> bool {
        lock(&self.last).contains_key(parent)
    }

    /// Every parent's last findings, ordered by parent.
    pub fn findings(&self) -> Vec<(ObjectKey, Vec<Finding>)> {
        let mut all: Vec<_> = lock(&self.last)
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    /// The API server refused a dry run for lack of permission: compare locally from now
    /// on, and say so once.
    pub fn compare_locally(&self) {
        if !self.local.swap(true, Ordering::Relaxed) {
            tracing::warn!(writer = %self.writer, "no permission to dry-run writes; comparing with the live objects locally (defaults the API server would add are not shown)");
        }
    }

    /// Whether dry runs were refused and comparisons are made locally.
    pub fn is_local(&self) -> bool {
        self.local.load(Ordering::Relaxed)
    }
}

impl std::fmt::Debug for Preview {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Preview")
            .field("writer", &self.writer)
            .field("shadow", &self.shadow)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn labels(name: &str, f: &Finding) -> DivergenceLabels {
    DivergenceLabels {
        plugin: name.into(),
        kind: f.kind.clone(),
        change: f.change.label().into(),
    }
}

/// One line for a diverging parent: what would change, the first few fields and the
/// first reason. Field values and reasons are the plugin's text: each is cut short, so
/// a line stays small whatever the plugin answers.
fn say(parent: &ObjectKey, found: &[Finding]) {
    const SHOWN: usize = 3;
    let what: Vec<String> = found
        .iter()
        .take(SHOWN)
        .map(|f| format!("{} {} {}", f.change.label(), f.kind, f.object))
        .collect();
    let fields: Vec<String> = found
        .iter()
        .flat_map(|f| f.fields.iter())
        .take(SHOWN)
        .map(|c| short(&c.to_string()))
        .collect();
    let reason = found.iter().find_map(|f| f.reason.as_deref()).map(short);
    tracing::info!(object = %parent, objects = found.len(), would = %what.join(", "), fields = %fields.join("; "), reason = %reason.unwrap_or_default(), "shadow diverges");
}

/// At most [`SHORT`] characters of `text`, marked when cut.
fn short(text: &str) -> String {
    match text.char_indices().nth(SHORT) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// Characters of plugin-made text a shadow's log line repeats, per piece.
const SHORT: usize = 160;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_text_in_a_shadow_line_is_cut_short() {
        assert_eq!(short("abc"), "abc");
        let long = "é".repeat(10_000);
        let cut = short(&long);
        assert_eq!(cut.chars().count(), SHORT + 1);
        assert!(cut.ends_with('…'));
    }

    #[test]
    fn the_last_reconcile_of_a_parent_stands_and_the_gauge_follows_it() {
        let preview = Preview::shadow("echo");
        let name = "echo-shadow-test-gauge";
        let parent = ObjectKey::new(Some("ns"), "a");
        let gauge = || {
            crate::ops::metrics::get()
                .divergent
                .get_or_create(&DivergenceLabels {
                    plugin: name.into(),
                    kind: "Job".into(),
                    change: "would-change".into(),
                })
                .get()
        };
        for _ in 0..3 {
            preview.found(
                &parent,
                Finding::new(&parent, Change::Change, "Job", "ns/a".into()),
            );
            preview.reconciled(name, &parent);
        }
        assert_eq!(gauge(), 1, "three reconciles of one diverging parent: one object");
        assert!(preview.has_reconciled(&parent));
        preview.reconciled(name, &parent);
        assert_eq!(gauge(), 0, "converged: nothing diverges");
        let findings = preview.findings();
        assert_eq!(findings.len(), 1);
        assert!(findings[0].1.is_empty());
    }
}
