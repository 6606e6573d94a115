//! Sharding the host across replicas (issue 18): which hashes each replica owns
//! ([`Ring`](crate::shard::Ring), [`Range`](crate::shard::Range)), the selector naming
//! them ([`render`](crate::shard::render)) and a client that has the API server filter by
//! it ([`client`](crate::shard::client)). The API server's side is alpha in Kubernetes
//! v1.37 (KEP-5866, feature gate `ShardedListAndWatch`); [`matches`](crate::shard::matches)
//! is the same filter for servers without it. Membership, the host's own filter and the
//! member Leases' wire format are the crate's own.

pub(crate) mod filter;
mod member_lease;
pub(crate) mod members;
pub(crate) mod range;
mod ring;
mod selector;
mod wire;

pub(crate) use filter::Filter;
pub use range::{Range, subtract};
pub use ring::Ring;
pub(crate) use ring::parameters;
pub use selector::{ShardKey, hash_of, matches, render};
pub(crate) use wire::served_at;
pub use wire::{Collection, client, served};
