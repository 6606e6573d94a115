//! Host bindings generated from `wit/` by wasmtime's `bindgen!`.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "reconciler",
});

pub use capstan_contract::{PLUGIN_EXPORT, PLUGIN_EXPORT_PREFIX, WIT_PACKAGE};
