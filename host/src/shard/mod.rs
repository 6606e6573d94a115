//! Sharding the host across replicas (issue 18): which hashes each replica owns
//! ([`ring`], [`range`]), the selector naming them ([`selector`]), and a client that has
//! the API server filter by it ([`wire`]). The API server's side is alpha in Kubernetes
//! v1.37 (KEP-5866, feature gate `ShardedListAndWatch`); [`selector::matches`] is the
//! same filter for servers without it.

pub mod filter;
mod member_lease;
pub mod members;
pub mod range;
pub mod ring;
pub mod selector;
pub mod wire;

pub use filter::Filter;
pub use range::Range;
pub use ring::{Ring, fnv1a64};
pub use selector::{ShardKey, hash_of, matches, render};
pub use wire::{Collection, served, served_at};
