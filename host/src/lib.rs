//! Capstan: Kubernetes reconcilers as sandboxed WebAssembly plugins.
//!
//! The host loads plugins with [`engine`], and drives them from the command line
//! ([`cli`]).

pub mod apply;
pub mod bucket;
pub mod cli;
pub mod config;
pub mod controller;
#[cfg(feature = "dev")]
pub mod dev;
pub mod engine;
pub mod grants;
pub mod leader;
pub mod ops;
pub mod reload;
pub mod supervisor;
pub mod validate;
