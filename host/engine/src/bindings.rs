//! Host bindings generated from `wit/` by wasmtime's `bindgen!`: the current contract,
//! and each older version the host still serves (from its frozen copy in `wit/<version>/`).

wasmtime::component::bindgen!({
    path: "../../wit",
    world: "reconciler",
});

/// `capstan:reconciler@0.2.0`, for plugins built against it.
pub mod v0_2 {
    wasmtime::component::bindgen!({
        path: "../../wit/0.2.0",
        world: "reconciler",
    });
}

/// `capstan:reconciler@0.1.0`, for plugins built against it.
pub mod v0_1 {
    wasmtime::component::bindgen!({
        path: "../../wit/0.1.0",
        world: "reconciler",
    });
}

pub use capstan_contract::{OLDER_VERSIONS, PLUGIN_EXPORT, PLUGIN_EXPORT_PREFIX, WIT_PACKAGE, WIT_VERSION};
