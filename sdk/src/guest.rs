//! Glue between the generated WIT bindings and the typed [`Reconciler`] API; used by
//! [`crate::export!`], not meant to be called directly.

use serde_json::value::RawValue;

use crate::bindings::capstan::reconciler::types as wit;
use crate::{Context, EventType, KindRef, ReconcileError, Reconciler, Response};

/// Run `R` on parsed JSON, through the same text path as the Wasm export; used by
/// [`crate::testing`].
pub fn run<R: Reconciler>(
    parent: serde_json::Value,
    children: Vec<serde_json::Value>,
    finalizing: bool,
) -> Result<Response, ReconcileError> {
    respond::<R>(&json(&parent), children.iter().map(json).collect(), finalizing)
}

/// Parse the request's texts and call `R`.
fn respond<R: Reconciler>(
    parent: &str,
    children: Vec<String>,
    finalizing: bool,
) -> Result<Response, ReconcileError> {
    let parent = parse_parent::<R>(parent)?;
    let children = children
        .into_iter()
        .map(|c| {
            RawValue::from_string(c).map_err(|e| ReconcileError::fatal(format!("child is not JSON: {e}")))
        })
        .collect::<Result<_, _>>()?;
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
    let result = respond::<R>(&request.parent, request.children, request.finalizing);
    match result {
        Ok(r) => Ok(wit::Response {
            // The text moves from `RawValue` to `String` without a copy.
            children: r
                .children
                .into_iter()
                .map(|c| Box::<str>::from(c).into_string())
                .collect(),
            status: r.status.as_ref().map(json),
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

/// Straight from text to the typed parent: going through a `Value` first doubles the
/// work of the most expensive step of a small reconcile.
fn parse_parent<R: Reconciler>(text: &str) -> Result<R::Parent, ReconcileError> {
    serde_json::from_str(text).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => {
            ReconcileError::fatal(format!("parent does not match the plugin's type: {e}"))
        }
        _ => ReconcileError::fatal(format!("parent is not JSON: {e}")),
    })
}

/// `serde_json::to_string`, not `Display`: the latter writes through `fmt::Formatter`
/// piece by piece, several times slower in Wasm.
fn json(value: &serde_json::Value) -> String {
    serde_json::to_string(value).expect("a Value has string keys, so it always serializes")
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

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    /// Mirrors its ConfigMap's data into the status, to see what arrived.
    struct Mirror;

    impl Reconciler for Mirror {
        type Parent = ConfigMap;

        fn metadata() -> crate::Metadata {
            crate::Metadata::new("mirror", "0.1.0")
        }

        fn reconcile(parent: ConfigMap, ctx: &Context) -> Result<Response, ReconcileError> {
            Response::new().status(&serde_json::json!({
                "data": parent.data,
                "children": ctx.raw_children().len(),
            }))
        }
    }

    fn call(parent: &str, children: &[&str]) -> Result<wit::Response, wit::ReconcileError> {
        reconcile::<Mirror>(wit::Request {
            parent: parent.into(),
            children: children.iter().map(|c| c.to_string()).collect(),
            finalizing: false,
        })
    }

    fn fatal(result: Result<wit::Response, wit::ReconcileError>) -> String {
        match result {
            Err(wit::ReconcileError::Fatal(m)) => m,
            other => panic!("expected fatal, got {other:?}"),
        }
    }

    #[test]
    fn the_parent_is_parsed_straight_into_its_type_and_the_answer_is_json() {
        let parent =
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"data":{"k":"v \"q\""}}"#;
        let child = r#"{"apiVersion":"batch/v1","kind":"Job"}"#;
        let response = call(parent, &[child]).unwrap();
        let status: serde_json::Value = serde_json::from_str(response.status.as_deref().unwrap()).unwrap();
        assert_eq!(
            status,
            serde_json::json!({"data": {"k": "v \"q\""}, "children": 1})
        );
    }

    #[test]
    fn bad_input_is_fatal_and_says_which_part_and_why() {
        let not_json = fatal(call("{nope", &[]));
        assert!(not_json.starts_with("parent is not JSON"), "{not_json}");
        let wrong_type = fatal(call(r#"{"metadata": {"name": 7}}"#, &[]));
        assert!(
            wrong_type.starts_with("parent does not match the plugin's type"),
            "{wrong_type}"
        );
        let child = fatal(call(r#"{"metadata": {"name": "a"}}"#, &["[1,"]));
        assert!(child.starts_with("child is not JSON"), "{child}");
    }
}
