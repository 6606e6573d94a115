//! Glue between the generated WIT bindings and the typed [`Reconciler`] API; used by
//! [`crate::export!`], not meant to be called directly.

use crate::bindings::capstan::reconciler::types as wit;
use crate::{Context, EventType, KindRef, ReconcileError, Reconciler, Response};

/// Run `R` on an already-parsed request; shared by the Wasm export and [`crate::testing`].
pub fn run<R: Reconciler>(
    parent: serde_json::Value,
    children: Vec<serde_json::Value>,
    finalizing: bool,
) -> Result<Response, ReconcileError> {
    let parent = serde_json::from_value(parent)
        .map_err(|e| ReconcileError::fatal(format!("parent does not match the plugin's type: {e}")))?;
    R::reconcile(parent, &Context::new(children, finalizing))
}

/// The full metadata of `R`, parent kind included.
pub fn full_metadata<R: Reconciler>() -> (KindRef, crate::Metadata) {
    (KindRef::of::<R::Parent>(), R::metadata())
}

/// `metadata` export.
pub fn metadata<R: Reconciler>() -> wit::PluginMetadata {
    let (parent, m) = full_metadata::<R>();
    wit::PluginMetadata {
        name: m.name,
        version: m.version,
        parent: kind_ref(parent),
        children: m.children.into_iter().map(kind_ref).collect(),
        finalizer: m.finalizer,
    }
}

/// `reconcile` export.
pub fn reconcile<R: Reconciler>(request: wit::Request) -> Result<wit::Response, wit::ReconcileError> {
    let parse = |text: &str, what: &str| {
        serde_json::from_str(text).map_err(|e| ReconcileError::fatal(format!("{what} is not JSON: {e}")))
    };
    let result = parse(&request.parent, "parent").and_then(|parent| {
        let children = request
            .children
            .iter()
            .map(|c| parse(c, "child"))
            .collect::<Result<_, _>>()?;
        run::<R>(parent, children, request.finalizing)
    });
    match result {
        Ok(r) => Ok(wit::Response {
            children: r.children.iter().map(|c| c.to_string()).collect(),
            status: r.status.map(|s| s.to_string()),
            requeue_after_ms: r
                .requeue_after
                .map(|d| d.as_millis().min(u64::MAX as u128) as u64),
            events: r
                .events
                .into_iter()
                .map(|e| wit::Event {
                    event_type: match e.event_type {
                        EventType::Normal => wit::EventType::Normal,
                        EventType::Warning => wit::EventType::Warning,
                    },
                    reason: e.reason,
                    message: e.message,
                })
                .collect(),
            finalized: r.finalized,
        }),
        Err(ReconcileError::Retry(m)) => Err(wit::ReconcileError::Retry(m)),
        Err(ReconcileError::Fatal(m)) => Err(wit::ReconcileError::Fatal(m)),
    }
}

fn kind_ref(k: KindRef) -> wit::KindRef {
    wit::KindRef {
        group: k.group,
        version: k.version,
        kind: k.kind,
        plural: k.plural,
        namespaced: k.namespaced,
    }
}
