//! A [`Controller`] as the plugin's exports, for
//! [`export_metacontroller!`](crate::export_metacontroller).

use serde_json::Value;

use super::Controller;
use crate::bindings::capstan::reconciler::types as wit;
use crate::{Context, ReconcileError};

/// `metadata` export.
pub fn metadata(c: &Controller) -> wit::PluginMetadata {
    crate::guest::wit_metadata(c.parent.clone(), c.metadata.clone())
}

/// `validate-settings` export: a Metacontroller controller takes none.
pub fn validate_settings(c: &Controller, settings: String) -> Result<(), String> {
    c.metadata.validate_settings(&settings)
}

/// `related` export: the customize hook's rules, none when it fails (`reconcile` then
/// reports the same error).
pub fn related(c: &Controller, parent: String, _settings: String) -> Vec<wit::RelatedQuery> {
    let queries = parse(&parent).and_then(|p| c.related(&p));
    match queries {
        Ok(queries) => crate::guest::wit_queries(queries),
        Err(e) => {
            crate::log::warn(&format!("no related objects: {}", e.message()));
            Vec::new()
        }
    }
}

/// `reconcile` export.
pub fn reconcile(c: &Controller, request: wit::Request) -> Result<wit::Response, wit::ReconcileError> {
    let parent = parse(&request.parent);
    let outcome = parent.and_then(|p| {
        let ctx: Context = crate::guest::context(request)?;
        c.reconcile(p, &ctx)
    });
    crate::guest::wit_outcome(outcome)
}

fn parse(text: &str) -> Result<Value, ReconcileError> {
    serde_json::from_str(text).map_err(|e| ReconcileError::fatal(format!("parent is not JSON: {e}")))
}

/// Export a Metacontroller [`Controller`] as the plugin's `capstan:reconciler/plugin`
/// implementation; `$controller` is a function returning `&'static Controller`.
#[macro_export]
macro_rules! export_metacontroller {
    ($controller:path) => {
        $crate::__export_guest!(
            $crate::metacontroller::metadata($controller()),
            |settings| $crate::metacontroller::validate_settings($controller(), settings),
            |parent, settings| $crate::metacontroller::related($controller(), parent, settings),
            |request| $crate::metacontroller::reconcile($controller(), request)
        );
    };
}
