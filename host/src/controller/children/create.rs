//! Creating a response's new children: all of them, or — when one meets an object another
//! owner holds — none. With more than one to make, each name is read first; a holder
//! that appears after that read is met by the create, and what was made is taken back.

use kube::ResourceExt;
use kube::api::DynamicObject;

use super::{Step, churn, conflict, describe, expect};
use crate::apply;
use crate::controller::Shared;
use crate::controller::outcome::{Error, Writes, count_write};
use crate::controller::written::{self, Seen};

/// Create every child in `steps`, or — if one meets another holder — none of them.
pub(super) async fn all(
    shared: &Shared,
    parent: &DynamicObject,
    plugin: &str,
    steps: &[&Step],
) -> Result<Writes, Error> {
    if steps.len() > 1 {
        held_elsewhere(shared, parent, plugin, steps).await?;
    }
    let mut writes = Writes::default();
    let mut made = Vec::new();
    for &step in steps {
        match one(shared, parent, plugin, step).await {
            Ok(Creation::Made(version)) => made.push((step, version)),
            Ok(Creation::Not(w)) => writes = writes.and(w),
            Err(error) => {
                if matches!(error, Error::Conflict(_)) {
                    take_back(shared, parent, &made).await;
                } else {
                    // Not a refusal: what was made stays (written, and counted so), and
                    // the retry goes on from it.
                    for (s, v) in &made {
                        expect(shared, parent, s, Seen::AtLeast(v.clone()));
                        count_write(plugin);
                    }
                }
                return Err(error);
            }
        }
    }
    for (step, version) in made {
        expect(shared, parent, step, Seen::AtLeast(version));
        writes = writes.and(Writes::wrote(plugin));
    }
    Ok(writes)
}

/// Decide before writing: with more than one child to create, each name is read first,
/// and one held by another owner refuses the response before anything is made. A single
/// creation needs no read (its create fails on the holder and writes nothing), so the
/// common case costs nothing; a holder that appears between the read and the create is
/// met by the create, and [`take_back`] undoes the rest.
async fn held_elsewhere(
    shared: &Shared,
    parent: &DynamicObject,
    plugin: &str,
    steps: &[&Step],
) -> Result<(), Error> {
    let uid = parent.uid().unwrap_or_default();
    for step in steps {
        let resource = &shared.children[step.kind].resource;
        let Some(held) = apply::holder(&shared.client, resource, &step.child).await? else {
            continue;
        };
        if !apply::controlled_by(&held, &uid, plugin) {
            return Err(conflict(shared, parent, plugin, &step.child, &held).await);
        }
    }
    Ok(())
}

/// Delete the children this reconcile just made (each only at the version it made), so a
/// refused response leaves nothing behind; the parent's next reconcile waits for the
/// caches to show them gone.
async fn take_back(shared: &Shared, parent: &DynamicObject, made: &[(&Step, String)]) {
    for (step, version) in made {
        let resource = &shared.children[step.kind].resource;
        if let Err(e) = apply::take_back(&shared.client, resource, &step.child, version).await {
            tracing::warn!(error = %e, child = %describe(&step.child), "a child made by a refused response was not taken back");
        }
        expect(shared, parent, step, Seen::Past(version.clone()));
    }
}

/// What came of one creation.
enum Creation {
    /// Made, at this resourceVersion.
    Made(String),
    /// Not made, and nothing to take back: left for later, or made already.
    Not(Writes),
}

/// Create one child, unless over the plugin's creation rate or a ping-pong.
async fn one(shared: &Shared, parent: &DynamicObject, plugin: &str, step: &Step) -> Result<Creation, Error> {
    if let Err(wait) = shared.creation() {
        tracing::debug!(wait = ?wait, child = %describe(&step.child), "plugin over its creation rate; later");
        return Ok(Creation::Not(Writes::deferred(wait)));
    }
    // A creation is over no observed version: never found unchanged.
    churn(shared, parent, plugin, step).await?;
    let resource = &shared.children[step.kind].resource;
    match apply::create(&shared.client, resource, &step.child, plugin).await? {
        apply::Created::Made(version) => Ok(Creation::Made(version)),
        apply::Created::Held(object)
            if apply::controlled_by(&*object, &parent.uid().unwrap_or_default(), plugin) =>
        {
            // This parent's own child, made by a reconcile whose write the cache has not
            // shown in time: nothing to take, and nothing to write until it shows.
            let version = object.resource_version().unwrap_or_default();
            expect(shared, parent, step, Seen::AtLeast(version));
            Ok(Creation::Not(Writes::deferred(written::PATIENCE)))
        }
        apply::Created::Held(object) => Err(conflict(shared, parent, plugin, &step.child, &*object).await),
    }
}
