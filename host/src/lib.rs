//! Capstan: Kubernetes reconcilers as sandboxed WebAssembly plugins.
//!
//! The host loads plugins with [`engine`] and runs them against a cluster as a [`Host`]
//! (one [`controller`] per plugin, under a supervisor); [`cli`] is the command line.

#![warn(missing_docs)]

pub(crate) mod admission;
pub mod apply;
pub(crate) use capstan_engine::bucket;
pub mod cli;
pub mod config;
pub mod controller;
#[cfg(feature = "dev")]
pub use capstan_dev as dev;
pub use capstan_engine as engine;
mod field_name;
pub mod host;
pub(crate) mod key;
pub(crate) mod layered;
pub mod leader;
pub(crate) mod lease;
pub mod ops;
pub(crate) mod preview;
pub(crate) mod project;
pub mod record;
pub use capstan_registry as registry;
pub(crate) mod reload;
/// Splitting the watched objects between replicas by hash range.
pub mod shard;
pub(crate) mod supervisor;
pub(crate) mod validate;

pub use host::{Host, HostConfig};
