//! Recording events on a parent: [`correlator`] decides what reaches the API server (a
//! budget per object and reason, and repeats counted on the Event already written),
//! [`recorder`] writes it off the reconcile's path.
//!
//! Events are created directly (events.k8s.io/v1, named and filled as kube-runtime's
//! `Recorder` does), not through the `Recorder`: it keeps every event it published for
//! six minutes to patch repeats into a series and scans that cache on every publish,
//! which at 10 000 parents was the host's largest memory consumer (4 KiB per parent,
//! measured with heaptrack). The correlator keeps a few words per series instead, and
//! forgets them when the series ends.

mod correlator;
mod recorder;

pub use correlator::{Due, ObjectEvents};
pub(crate) use recorder::{Busy, Dropped, Recorder, Writing};

use k8s_openapi::api::events::v1::Event as KubeEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use kube::api::{DynamicObject, ObjectMeta};
use kube::runtime::events::{EventType as KubeEventType, Reporter};

use super::Shared;
use crate::engine::EventType;
use crate::key::ObjectKey;
use correlator::Decision;
use recorder::Write;

/// The plugin's event queue, and the task that writes it (bringing up to date the series
/// `sweep` ends) as the plugin's reconciles (`busy`) leave room.
pub(super) fn start(
    (client, tenure): (kube::Client, crate::lease::Tenure),
    plugin: &str,
    sweep: impl Fn() -> Vec<Due> + Send + Sync + 'static,
    busy: &Busy,
) -> (Recorder, Writing) {
    Recorder::new((client, tenure), plugin, std::sync::Arc::new(sweep), busy)
}

/// Record one of the host's own Warnings about the parent.
pub(super) fn warn(shared: &Shared, parent: &DynamicObject, reason: &str, message: &str) {
    publish(shared, parent, KubeEventType::Warning, reason, message, false);
}

/// Queue an event (`from_plugin`: one of the plugin's own, not the host's) as its
/// object's correlator decides; recording never fails or slows the reconcile.
fn publish(
    shared: &Shared,
    parent: &DynamicObject,
    kind: KubeEventType,
    reason: &str,
    message: &str,
    from_plugin: bool,
) {
    let object = ObjectKey::of(parent);
    let identity = correlator::identity(kind == KubeEventType::Warning, reason, message);
    let events = &shared.events;
    let (now, at) = (std::time::Instant::now(), Timestamp::now());
    let decision = (shared.per_object).with(&object, |p| {
        p.events.observe_at(identity, reason, from_plugin, now, at)
    });
    match decision {
        Decision::Create(first) => {
            let reference = parent.object_ref(&shared.parent);
            let event = event(&shared.reporter, reference, kind, (reason, message), first);
            match recorder::Body::of(&event) {
                Some(body) => events.send(Write::Create(body)),
                None => recorder::dropped(&shared.plugin().metadata().name, recorder::Dropped::Failed),
            }
        }
        Decision::Count { first, count } => events.send(Write::Count(Due { object, first, count })),
        Decision::Held => tracing::debug!(reason, "event repeated over its budget; counted in its series"),
        Decision::Dropped => {
            recorder::dropped(&shared.plugin().metadata().name, recorder::Dropped::Budget);
            tracing::debug!(reason, "event over the budget of its object and reason; dropped");
        }
    }
}

/// An event about `regarding`, as kube-runtime's `Recorder` makes one.
fn event(
    reporter: &Reporter,
    regarding: k8s_openapi::api::core::v1::ObjectReference,
    kind: KubeEventType,
    (reason, message): (&str, &str),
    first: u64,
) -> KubeEvent {
    let object = ObjectKey::new(
        regarding.namespace.as_deref(),
        regarding.name.as_deref().unwrap_or_default(),
    );
    let (namespace, name) = recorder::event_name(&object, first);
    let now = Timestamp::from_nanosecond(i128::from(first)).unwrap_or_else(|_| Timestamp::now());
    KubeEvent {
        metadata: ObjectMeta {
            namespace: Some(namespace),
            name: Some(name),
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
pub(super) fn record(shared: &Shared, parent: &DynamicObject, event: &crate::engine::Event) {
    let kind = match event.event_type {
        EventType::Normal => KubeEventType::Normal,
        EventType::Warning => KubeEventType::Warning,
    };
    publish(shared, parent, kind, &event.reason, &event.message, true);
}
