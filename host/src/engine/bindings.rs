//! Host bindings generated from `wit/` by wasmtime's `bindgen!`.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "reconciler",
});

/// The WIT package this host implements, e.g. `capstan:reconciler@0.1.0`.
pub const WIT_PACKAGE: &str = "capstan:reconciler@0.1.0";
/// The export every plugin must provide.
pub const PLUGIN_EXPORT: &str = "capstan:reconciler/plugin@0.1.0";
/// Name prefix of the plugin export, whatever its version.
pub const PLUGIN_EXPORT_PREFIX: &str = "capstan:reconciler/plugin";
