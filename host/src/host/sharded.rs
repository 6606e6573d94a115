//! A sharded host's side of membership: join the group, learn whether the API server
//! filters watches by `shardSelector`, and hand the supervisor the group's assignments.

use k8s_openapi::api::coordination::v1::Lease;

use super::Sharding;
use crate::shard::Collection;
use crate::shard::members::{self, Channels, Membership};
use crate::supervisor::Shards;

/// Join `sharding`'s group: the membership, and the feed the supervisor runs on.
pub async fn join(client: &kube::Client, mut sharding: Sharding) -> (Membership, Shards) {
    if sharding.members.namespace.is_empty() {
        sharding.members.namespace = client.default_namespace().to_string();
    }
    let s = &sharding.members;
    let leases = Collection::of::<Lease>();
    let server_side = match crate::shard::served_at(client, &leases, Some(&s.namespace)).await {
        Ok(served) => served,
        Err(e) => {
            tracing::warn!(error = %format!("{e:#}"), "could not tell whether the API server filters by shardSelector; filtering here");
            false
        }
    };
    // Replicas split the objects together only if they hash the same key on the same ring.
    let space = format!("{}/{}", sharding.key, crate::shard::parameters());
    tracing::info!(
        group = %s.name,
        namespace = %s.namespace,
        identity = %s.identity,
        key = %sharding.key,
        space = %space,
        server_side,
        "sharding on: this replica reconciles the ranges the group gives it ({} filtering)",
        if server_side { "API server" } else { "client-side; the API server does not serve shardSelector (feature gate ShardedListAndWatch)" }
    );
    let (membership, Channels { target, running }) =
        members::join(client.clone(), sharding.members.clone(), space);
    let shards = Shards {
        target,
        running,
        key: sharding.key,
        server_side,
    };
    (membership, shards)
}
