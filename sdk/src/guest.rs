//! Glue between the generated WIT bindings and the typed [`Reconciler`] API; used by
//! [`crate::export!`], not meant to be called directly.

use capstan_contract::{RelatedQuery, Selector};
use serde_json::value::RawValue;

use crate::bindings::capstan::reconciler::types as wit;
use crate::{Context, EventType, KindRef, ReconcileError, Reconciler, Response};

/// Run `R` on a request, through the same text path as the Wasm export; used by
/// `testing`.
pub fn run<R: Reconciler>(request: wit::Request) -> Result<Response, ReconcileError> {
    let parent = parse_parent::<R>(&request.parent)?;
    R::reconcile(parent, &context(request)?)
}

/// The request's children, related objects, settings and time as a [`Context`].
pub(crate) fn context(request: wit::Request) -> Result<Context, ReconcileError> {
    let now = request.now.parse().map_err(|e| {
        ReconcileError::fatal(format!(
            "the request's now {:?} is not an RFC 3339 time: {e}",
            request.now
        ))
    })?;
    Ok(Context::new(raw("child", request.children)?, request.finalizing)
        .with_related(raw("related object", request.related)?)
        .with_settings(request.settings)
        .with_now(now))
}

/// Each text as a `RawValue`, checked to be JSON; `what` names one in the error.
fn raw(what: &str, texts: Vec<String>) -> Result<Vec<Box<RawValue>>, ReconcileError> {
    texts
        .into_iter()
        .map(|t| {
            RawValue::from_string(t).map_err(|e| ReconcileError::fatal(format!("{what} is not JSON: {e}")))
        })
        .collect()
}

/// The full metadata of `R`, parent kind included.
pub fn full_metadata<R: Reconciler>() -> (KindRef, crate::Metadata) {
    (KindRef::of::<R::Parent>(), R::metadata())
}

/// `metadata` export.
pub fn metadata<R: Reconciler>() -> wit::PluginMetadata {
    let (parent, m) = full_metadata::<R>();
    wit_metadata(parent, m)
}

/// A plugin's metadata as the contract has it.
pub(crate) fn wit_metadata(parent: KindRef, m: crate::Metadata) -> wit::PluginMetadata {
    wit::PluginMetadata {
        settings_schema: m.settings_schema().map(json),
        name: m.name,
        version: m.version,
        parent: kind_ref(parent),
        children: m.children.into_iter().map(kind_ref).collect(),
        related: m.related.into_iter().map(kind_ref).collect(),
        finalizer: m.finalizer,
    }
}

/// `validate-settings` export.
pub fn validate_settings<R: Reconciler>(settings: String) -> Result<(), String> {
    R::metadata().validate_settings(&settings)
}

/// The queries `R` asks for this parent, as the host checks them; used by
/// `testing` and the `related` export.
pub fn queries<R: Reconciler>(parent: &str, settings: String) -> Vec<RelatedQuery> {
    match parse_parent::<R>(parent) {
        Ok(parent) => R::related(&parent, &Context::default().with_settings(settings))
            .into_iter()
            .map(RelatedQuery::from)
            .collect(),
        Err(e) => {
            // `reconcile` reports the same error as fatal; no queries until it is fixed.
            crate::log::warn(&format!("no related objects: {}", e.message()));
            Vec::new()
        }
    }
}

/// `related` export.
pub fn related<R: Reconciler>(parent: String, settings: String) -> Vec<wit::RelatedQuery> {
    wit_queries(queries::<R>(&parent, settings))
}

/// Related queries as the contract has them.
pub(crate) fn wit_queries(queries: Vec<RelatedQuery>) -> Vec<wit::RelatedQuery> {
    queries
        .into_iter()
        .map(|q| wit::RelatedQuery {
            group: q.group,
            kind: q.kind,
            namespace: q.namespace,
            selector: match q.selector {
                Selector::Names(names) => wit::Selector::Names(names),
                Selector::Labels(labels) => wit::Selector::Labels(labels),
            },
        })
        .collect()
}

/// A parent's labels or annotations as the contract lists them.
fn entries(map: std::collections::BTreeMap<String, Option<String>>) -> Vec<wit::MetadataEntry> {
    map.into_iter()
        .map(|(key, value)| wit::MetadataEntry { key, value })
        .collect()
}

/// `reconcile` export.
pub fn reconcile<R: Reconciler>(request: wit::Request) -> Result<wit::Response, wit::ReconcileError> {
    wit_outcome(run::<R>(request))
}

/// A reconcile's outcome as the contract has it.
pub(crate) fn wit_outcome(
    outcome: Result<Response, ReconcileError>,
) -> Result<wit::Response, wit::ReconcileError> {
    match outcome {
        Ok(r) => Ok(wit::Response {
            // The text moves from `RawValue` to `String` without a copy.
            children: r
                .children
                .into_iter()
                .map(|c| Box::<str>::from(c).into_string())
                .collect(),
            status: r.status.as_ref().map(json),
            requeue_after_ms: r.requeue_after.map(millis),
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
            parent_labels: entries(r.parent.labels),
            parent_annotations: entries(r.parent.annotations),
        }),
        Err(ReconcileError::Retry { message, after }) => Err(wit::ReconcileError::Retry(wit::Retry {
            message,
            after_ms: after.map(millis),
        })),
        Err(ReconcileError::Fatal(m)) => Err(wit::ReconcileError::Fatal(m)),
    }
}

fn millis(d: std::time::Duration) -> u64 {
    d.as_millis().min(u64::MAX as u128) as u64
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
pub(crate) fn json(value: &serde_json::Value) -> String {
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
    use crate::Related;
    use k8s_openapi::api::core::v1::ConfigMap;
    use std::time::Duration;

    /// Mirrors what arrived into the status; data `retry` asks for a retry after that
    /// many ms, data `source` for a related ConfigMap of that name.
    struct Mirror;

    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct MirrorSettings {
        #[serde(default)]
        tag: String,
    }

    impl crate::Settings for MirrorSettings {}

    impl Reconciler for Mirror {
        type Parent = ConfigMap;

        fn metadata() -> crate::Metadata {
            crate::Metadata::new("mirror", "0.1.0")
                .related::<ConfigMap>()
                .settings::<MirrorSettings>()
        }

        fn related(parent: &ConfigMap, ctx: &Context) -> Vec<Related> {
            let tag = ctx
                .settings::<MirrorSettings>()
                .map(|s| s.tag)
                .unwrap_or_default();
            let data = parent.data.clone().unwrap_or_default();
            data.get("source")
                .map(|s| Related::named::<ConfigMap>([format!("{s}{tag}")]))
                .into_iter()
                .collect()
        }

        fn reconcile(parent: ConfigMap, ctx: &Context) -> Result<Response, ReconcileError> {
            let data = parent.data.unwrap_or_default();
            if let Some(ms) = data.get("retry") {
                let ms = ms.parse().unwrap_or_default();
                return Err(ReconcileError::retry_after("later", Duration::from_millis(ms)));
            }
            Response::new().status(&serde_json::json!({
                "data": data,
                "children": ctx.raw_children().len(),
                "related": ctx.related::<ConfigMap>()?.len(),
                "tag": ctx.settings::<MirrorSettings>()?.tag,
                "now": ctx.now().to_string(),
            }))
        }
    }

    fn request(parent: &str, children: &[&str]) -> wit::Request {
        wit::Request {
            parent: parent.into(),
            children: children.iter().map(|c| c.to_string()).collect(),
            related: vec![r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"r"}}"#.into()],
            settings: r#"{"tag":"t"}"#.into(),
            now: "2026-11-24T09:30:00.123Z".into(),
            finalizing: false,
        }
    }

    fn call(parent: &str, children: &[&str]) -> Result<wit::Response, wit::ReconcileError> {
        reconcile::<Mirror>(request(parent, children))
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
            serde_json::json!({"data": {"k": "v \"q\""}, "children": 1, "related": 1, "tag": "t",
                "now": "2026-11-24T09:30:00.123Z"})
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
        let mut r = request(r#"{"metadata": {"name": "a"}}"#, &[]);
        r.now = "yesterday".into();
        let now = fatal(reconcile::<Mirror>(r));
        assert!(now.starts_with("the request's now \"yesterday\""), "{now}");
    }

    #[test]
    fn a_retry_delay_crosses_as_milliseconds() {
        let parent = r#"{"metadata": {"name": "a"}, "data": {"retry": "1500"}}"#;
        match call(parent, &[]) {
            Err(wit::ReconcileError::Retry(r)) => {
                assert_eq!((r.message.as_str(), r.after_ms), ("later", Some(1500)))
            }
            other => panic!("expected a retry, got {other:?}"),
        }
    }

    #[test]
    fn metadata_carries_related_kinds_and_the_settings_schema() {
        let m = metadata::<Mirror>();
        assert_eq!(m.related.len(), 1);
        assert_eq!(m.related[0].kind, "ConfigMap");
        let schema: serde_json::Value = serde_json::from_str(&m.settings_schema.unwrap()).unwrap();
        assert!(schema["properties"]["tag"].is_object(), "{schema}");
        assert_eq!(validate_settings::<Mirror>(r#"{"tag": "x"}"#.into()), Ok(()));
        assert_eq!(
            validate_settings::<Mirror>(r#"{"tag": 1}"#.into()),
            Err("tag: invalid type: integer `1`, expected a string".into())
        );
    }

    #[test]
    fn related_queries_see_the_settings_and_cross_as_wit_records() {
        let parent = r#"{"metadata": {"name": "a"}, "data": {"source": "cfg-"}}"#;
        let q = related::<Mirror>(parent.into(), r#"{"tag": "blue"}"#.into());
        assert_eq!(q.len(), 1);
        assert_eq!((q[0].group.as_str(), q[0].kind.as_str()), ("", "ConfigMap"));
        assert_eq!(q[0].namespace, None);
        assert!(matches!(&q[0].selector, wit::Selector::Names(n) if n == &["cfg-blue"]));
        assert!(related::<Mirror>("{nope".into(), "{}".into()).is_empty());
    }
}
