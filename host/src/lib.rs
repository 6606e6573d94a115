//! Capstan: Kubernetes reconcilers as sandboxed WebAssembly plugins.
//!
//! The host loads plugins with [`engine`] and runs them against a cluster as a [`Host`]
//! (one [`controller`] per plugin, under a [`supervisor`]); [`cli`] is the command line.

pub mod admission;
pub mod apply;
pub use capstan_engine::bucket;
pub mod cli;
pub mod config;
pub mod controller;
#[cfg(feature = "dev")]
pub mod dev;
pub use capstan_engine as engine;
mod field_name;
pub mod host;
pub mod key;
pub mod layered;
pub mod leader;
pub mod lease;
pub mod ops;
pub mod preview;
pub mod project;
pub mod record;
pub use capstan_registry as registry;
pub mod reload;
/// Splitting the watched objects between replicas by hash range.
pub mod shard;
pub mod supervisor;
pub mod validate;

pub use host::{Host, HostConfig};
