//! Recording events on a parent within a budget, per object and reason — client-go's
//! event correlator's spam filter, keyed finer: a small burst, then one event a minute. A
//! plugin that emits an event on every reconcile (or requeues in a tight loop) fills
//! neither the API server nor `kubectl describe`; what is dropped is counted. The
//! plugin's own events also share one budget per object across reasons (as client-go's
//! filter does per object), so inventing a new reason each time buys nothing; the host's
//! warnings about the plugin are not charged to it.
//!
//! Events are created directly (events.k8s.io/v1, named and filled as kube-runtime's
//! `Recorder` does), not through the `Recorder`: it keeps every event it published for
//! six minutes to patch repeats into a series and scans that cache on every publish,
//! which at 10 000 parents is the host's largest memory consumer (4 KiB per parent,
//! measured with heaptrack) for repeats the budget already bounds.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::events::v1::Event as KubeEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use kube::api::{Api, DynamicObject, ObjectMeta, PostParams};
use kube::runtime::events::{EventType as KubeEventType, Reporter};

use super::Shared;
use crate::bucket::Bucket;
use crate::engine::EventType;
use crate::key::ObjectKey;
use crate::ops::metrics::PluginLabel;

/// Events of one reason on one object recorded back to back before the rate applies.
const BURST: f64 = 3.0;
/// After the burst, one event of a reason per object per this long.
const REFILL: Duration = Duration::from_secs(60);
/// The plugin's events on one object, of any reason, recorded back to back.
const OBJECT_BURST: f64 = 10.0;
/// The key of an object's all-reasons budget (not a valid reason).
const ANY_REASON: &str = "\0plugin";
/// Reasons with a budget kept per object. A bucket that has refilled is as good as a new
/// one and is dropped to make room; a new reason finding no room is not recorded, so
/// invented reasons cannot grow the host's memory for as long as the parent lives.
const REASONS_KEPT: usize = 32;

/// Token buckets per object key, then reason (so forgetting an object is one removal).
#[derive(Default)]
pub struct EventBudget {
    buckets: Mutex<HashMap<ObjectKey, HashMap<String, Bucket>>>,
}

impl EventBudget {
    /// Whether an event of `reason` on `object` may be recorded now (and take its token);
    /// `from_plugin` for the plugin's own events.
    pub fn allow(&self, object: &ObjectKey, reason: &str, from_plugin: bool) -> bool {
        self.allow_at(object, reason, from_plugin, Instant::now())
    }

    fn allow_at(&self, object: &ObjectKey, reason: &str, from_plugin: bool, now: Instant) -> bool {
        let mut all = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let buckets = all.entry(object.clone()).or_default();
        if !room(buckets, reason, now) {
            return false;
        }
        let mut has = |reason: &str, burst| {
            buckets
                .entry(reason.to_string())
                .or_insert_with(|| Bucket::new(1.0 / REFILL.as_secs_f64(), burst, now))
                .has(1.0, now)
        };
        // The object's budget first: a plugin inventing reasons gets no bucket for them
        // beyond what that budget lets through, so it cannot grow this map either.
        if (from_plugin && !has(ANY_REASON, OBJECT_BURST)) || !has(reason, BURST) {
            return false;
        }
        let charged = std::iter::once(reason).chain(from_plugin.then_some(ANY_REASON));
        for reason in charged {
            if let Some(bucket) = buckets.get_mut(reason) {
                bucket.spend(1.0, now);
            }
        }
        true
    }

    /// How many reasons `object` has a budget kept for.
    #[cfg(test)]
    fn kept(&self, object: &ObjectKey) -> usize {
        let all = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        all.get(object).map_or(0, HashMap::len)
    }

    /// Drop the buckets of an object that is gone.
    pub fn forget(&self, object: &ObjectKey) {
        self.buckets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(object);
    }

    /// Keep only the objects `keep` accepts.
    pub fn retain(&self, keep: &dyn Fn(&ObjectKey) -> bool) {
        self.buckets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|k, _| keep(k));
    }
}

/// Whether `reason` has a bucket among an object's `buckets` or room for one (after the
/// refilled ones are dropped).
fn room(buckets: &mut HashMap<String, Bucket>, reason: &str, now: Instant) -> bool {
    if buckets.contains_key(reason) || buckets.len() < REASONS_KEPT {
        return true;
    }
    buckets.retain(|_, bucket| !bucket.full(now));
    buckets.len() < REASONS_KEPT
}

/// Record one of the host's own Warnings about the parent.
pub(super) async fn warn(shared: &Shared, parent: &DynamicObject, reason: &str, message: &str) {
    publish(shared, parent, KubeEventType::Warning, reason, message, false).await;
}

/// Record an event (`from_plugin`: one of the plugin's own, not the host's); a failure to
/// record is logged, never fatal to the reconcile.
async fn publish(
    shared: &Shared,
    parent: &DynamicObject,
    kind: KubeEventType,
    reason: &str,
    message: &str,
    from_plugin: bool,
) {
    let plugin = shared.plugin().metadata().name.clone();
    if !shared
        .per_object
        .events
        .allow(&ObjectKey::of(parent), reason, from_plugin)
    {
        let label = PluginLabel { plugin };
        crate::ops::metrics::get()
            .events_dropped
            .get_or_create(&label)
            .inc();
        tracing::debug!(reason, "event over the budget of its object and reason; dropped");
        return;
    }
    let reference = parent.object_ref(&shared.parent);
    let event = event(&shared.reporter, reference, kind, reason, message);
    let namespace = event
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    super::outcome::count_write(&plugin);
    let events: Api<KubeEvent> = Api::namespaced(shared.client.clone(), &namespace);
    if let Err(e) = events.create(&PostParams::default(), &event).await {
        tracing::warn!(error = %e, reason, "could not record event");
    }
}

/// An event about `regarding`, as kube-runtime's `Recorder` makes one.
fn event(
    reporter: &Reporter,
    regarding: k8s_openapi::api::core::v1::ObjectReference,
    kind: KubeEventType,
    reason: &str,
    message: &str,
) -> KubeEvent {
    let now = Timestamp::now();
    let name = regarding
        .name
        .clone()
        .unwrap_or_else(|| reporter.controller.clone());
    KubeEvent {
        metadata: ObjectMeta {
            namespace: regarding.namespace.clone(),
            name: Some(format!("{name}.{:x}", now.as_nanosecond())),
            ..ObjectMeta::default()
        },
        action: Some("Reconcile".into()),
        reason: Some(reason.into()),
        note: Some(message.chars().take(1024).collect()),
        event_time: Some(MicroTime(now)),
        regarding: Some(regarding),
        reporting_controller: Some(reporter.controller.clone()),
        reporting_instance: Some(
            reporter
                .instance
                .clone()
                .unwrap_or_else(|| reporter.controller.clone()),
        ),
        type_: Some(
            match kind {
                KubeEventType::Normal => "Normal",
                KubeEventType::Warning => "Warning",
            }
            .into(),
        ),
        ..KubeEvent::default()
    }
}

/// Record one of the plugin's own events on the parent.
pub(super) async fn record(shared: &Shared, parent: &DynamicObject, event: &crate::engine::Event) {
    let kind = match event.event_type {
        EventType::Normal => KubeEventType::Normal,
        EventType::Warning => KubeEventType::Warning,
    };
    publish(shared, parent, kind, &event.reason, &event.message, true).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_one_a_minute_per_object_and_reason() {
        let budget = EventBudget::default();
        let t0 = Instant::now();
        let allowed = (0..100)
            .filter(|_| budget.allow_at(&"ns/a".into(), "Spam", true, t0))
            .count();
        assert_eq!(allowed, 3, "the burst");
        assert!(
            budget.allow_at(&"ns/a".into(), "Other", true, t0),
            "reasons have their own budget"
        );
        assert!(
            budget.allow_at(&"ns/b".into(), "Spam", true, t0),
            "objects have their own budget"
        );
        assert!(!budget.allow_at(&"ns/a".into(), "Spam", true, t0 + Duration::from_secs(30)));
        assert!(budget.allow_at(&"ns/a".into(), "Spam", true, t0 + Duration::from_secs(61)));
        assert!(!budget.allow_at(&"ns/a".into(), "Spam", true, t0 + Duration::from_secs(62)));
        budget.forget(&"ns/a".into());
        assert!(
            budget.allow_at(&"ns/a".into(), "Spam", true, t0 + Duration::from_secs(62)),
            "a new object starts afresh"
        );
    }

    #[test]
    fn new_reasons_buy_a_plugin_nothing_and_the_hosts_warnings_still_go_out() {
        let budget = EventBudget::default();
        let t0 = Instant::now();
        let allowed = (0..100)
            .filter(|i| budget.allow_at(&"ns/a".into(), &format!("Spam{i}"), true, t0))
            .count();
        assert_eq!(allowed, OBJECT_BURST as usize, "one budget across reasons");
        assert!(
            budget.allow_at(&"ns/a".into(), "PluginFault", false, t0),
            "the host's own warning is not charged to the plugin"
        );
        assert!(budget.allow_at(&"ns/a".into(), "Spam0", true, t0 + Duration::from_secs(61)));
    }

    #[test]
    fn the_reasons_kept_per_object_are_bounded_however_many_are_invented() {
        let budget = EventBudget::default();
        let t0 = Instant::now();
        let object: ObjectKey = "ns/a".into();
        // A new reason every minute for a day, the pace the object's budget lets through.
        for minute in 0..24 * 60 {
            let at = t0 + Duration::from_secs(60 * minute);
            budget.allow_at(&object, &format!("Reason{minute}"), true, at);
            assert!(budget.kept(&object) <= REASONS_KEPT);
        }
        // Host warnings of a few fixed reasons keep going out among them.
        let late = t0 + Duration::from_secs(60 * 24 * 60);
        assert!(budget.allow_at(&object, "PluginFault", false, late));
        // Thirty-two reasons used at once hold all the room: a thirty-third is dropped,
        // and goes out once the others' buckets have refilled.
        let other: ObjectKey = "ns/b".into();
        for i in 0..REASONS_KEPT {
            assert!(budget.allow_at(&other, &format!("Host{i}"), false, t0));
        }
        assert!(!budget.allow_at(&other, "OneMore", false, t0));
        assert!(budget.allow_at(&other, "OneMore", false, t0 + REFILL));
    }
}
