//! A plugin's watches on a sharded host (`capstan run --sharding`): only objects in the
//! replica's hash ranges reach its caches and queue. The API server drops the others
//! when it serves `shardSelector` (parents always; children when they share their
//! parent's key, see [`Filter::server_filters_children`]); the same predicate runs on the
//! host in every case, so a server without the feature behaves the same, only with more
//! watch traffic.

use std::future::ready;

use futures::{Stream, TryStreamExt};
use kube::Client;
use kube::discovery::ApiResource;
use kube::runtime::watcher::{self, Event};

use super::compact::Compact;
use crate::shard::{Collection, Filter};

/// Which of a plugin's objects a replica reconciles: its parents by their key, its
/// children by their parent's, and the related objects its parents may read.
#[derive(Clone, Debug)]
pub(super) enum Role {
    Parent,
    Child {
        parent_namespaced: bool,
    },
    /// A related kind; `namespaced` when its objects concern only parents of their own
    /// namespace (a namespaced kind, read by a plugin granted no other namespace).
    Related {
        namespaced: bool,
    },
}

/// The client for a watch of `resource`: the host's, or one whose list and watch of
/// `resource` carry the replica's `shardSelector`.
pub(super) fn client(
    client: &Client,
    filter: Option<&Filter>,
    resource: &ApiResource,
    role: &Role,
) -> Client {
    let by_server = filter.is_some_and(|f| match role {
        Role::Parent => f.server_side,
        Role::Child { parent_namespaced } => f.server_filters_children(*parent_namespaced),
        Role::Related { namespaced } => f.server_side && f.shards_related(*namespaced),
    });
    match filter {
        Some(f) if by_server => f.client(client, vec![Collection::from_api_resource(resource)]),
        _ => client.clone(),
    }
}

/// `events` without the objects outside the replica's ranges.
pub(super) fn only_mine<S>(
    events: S,
    filter: Option<Filter>,
    role: Role,
) -> impl Stream<Item = Result<Event<Compact>, watcher::Error>> + Send + use<S>
where
    S: Stream<Item = Result<Event<Compact>, watcher::Error>> + Send,
{
    events.try_filter(move |event| {
        let keep = match (event, &filter) {
            (Event::Apply(o) | Event::InitApply(o) | Event::Delete(o), Some(f)) => match role {
                Role::Parent => f.parent(o),
                Role::Child { .. } => f.child(o),
                Role::Related { namespaced } => f.related(o, namespaced),
            },
            _ => true,
        };
        ready(keep)
    })
}
