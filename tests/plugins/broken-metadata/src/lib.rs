//! A plugin whose `metadata()` writes to stdout and then panics.

#![cfg_attr(not(target_family = "wasm"), allow(dead_code))]

use capstan_sdk::bindings::capstan::reconciler::types::{
    PluginMetadata, ReconcileError, RelatedQuery, Request, Response,
};
use capstan_sdk::bindings::exports::capstan::reconciler::plugin::Guest;

struct Broken;

impl Guest for Broken {
    fn metadata() -> PluginMetadata {
        println!("broken-metadata: about to panic");
        panic!("metadata() panics on purpose")
    }

    fn validate_settings(_: String) -> Result<(), String> {
        Err("never loaded".into())
    }

    fn related(_: String, _: String) -> Vec<RelatedQuery> {
        vec![]
    }

    fn reconcile(_: Request) -> Result<Response, ReconcileError> {
        Err(ReconcileError::Fatal("never loaded".into()))
    }
}

#[cfg(target_family = "wasm")]
capstan_sdk::bindings::export!(Broken with_types_in capstan_sdk::bindings);
