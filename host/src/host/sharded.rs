//! A sharded host's side of membership: join the group, learn whether the API server
//! filters watches by `shardSelector`, and restart the plugins whenever the group gives
//! this replica other ranges — reporting back only once they run on them.

use k8s_openapi::api::coordination::v1::Lease;
use tokio::sync::watch;

use super::Sharding;
use crate::shard::members::{self, Channels, Membership};
use crate::shard::{Collection, Filter, Range, ShardKey};
use crate::supervisor::Supervisor;

/// Membership, the ranges it asks for, and how they are applied.
pub struct Shards {
    membership: Membership,
    target: watch::Receiver<Vec<Range>>,
    running: watch::Sender<Vec<Range>>,
    key: ShardKey,
    server_side: bool,
}

impl Shards {
    /// Leave the group: the member Lease is deleted, so the others take over at once.
    pub async fn release(self) {
        self.membership.release().await;
    }

    fn filter(&self, ranges: Vec<Range>) -> Filter {
        Filter {
            key: self.key,
            ranges,
            server_side: self.server_side,
        }
    }
}

/// Join `sharding`'s group; the supervisor's units start with no ranges.
pub async fn join(client: &kube::Client, mut sharding: Sharding, supervisor: &mut Supervisor) -> Shards {
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
    tracing::info!(
        group = %s.name,
        namespace = %s.namespace,
        identity = %s.identity,
        key = %sharding.key,
        server_side,
        "sharding on: this replica reconciles the ranges the group gives it ({} filtering)",
        if server_side { "API server" } else { "client-side; the API server does not serve shardSelector (feature gate ShardedListAndWatch)" }
    );
    let (membership, Channels { target, running }) = members::join(client.clone(), sharding.members.clone());
    let shards = Shards {
        membership,
        target,
        running,
        key: sharding.key,
        server_side,
    };
    supervisor.reshard(shards.filter(Vec::new())).await;
    shards
}

/// The next ranges the group gives this replica; pending forever without sharding.
pub async fn changed(shards: Option<&mut Shards>) -> Option<Vec<Range>> {
    let Some(shards) = shards else {
        return std::future::pending().await;
    };
    shards.target.changed().await.ok()?;
    Some(shards.target.borrow_and_update().clone())
}

/// Run every plugin on `ranges`, then tell the membership they run there.
pub async fn apply(supervisor: &mut Supervisor, shards: Option<&Shards>, ranges: Vec<Range>) {
    let Some(shards) = shards else {
        return;
    };
    supervisor.reshard(shards.filter(ranges.clone())).await;
    let _ = shards.running.send(ranges);
}
