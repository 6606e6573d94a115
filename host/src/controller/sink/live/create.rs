//! Creating an answer's new children: all of them, or — when one meets an object another
//! owner holds — none. With more than one to make, each name is read first; a holder
//! that appears after that read is met by the create, and what was made is taken back.
//! Creations spend a budget (`controller::creations`): a plugin that multiplies its
//! children (or, granted its own kind, itself) is slowed, not stopped — a creation over
//! the budget is left for later, and the answer says when to come back for it. Nothing
//! waits in line, so shutdown never waits for a plugin's budget.

use std::time::Duration;

use kube::ResourceExt;

use super::{Live, expect};
use crate::apply;
use crate::controller::outcome::{Error, Outcome, Writes, count_write};
use crate::controller::plan::{self, Step};
use crate::controller::sink::{At, conflict};
use crate::controller::written::{self, Seen};

/// Create every child in `steps`, or — if one meets another holder — none of them.
pub(super) async fn all(live: &Live, at: &At<'_>, steps: &[&Step]) -> Outcome {
    if steps.len() > 1 {
        held_elsewhere(live, at, steps).await?;
    }
    let mut writes = Writes::default();
    let mut made = Vec::new();
    let mut later = None;
    for &step in steps {
        match one(live, at, step).await {
            Ok(Creation::Made(version)) => made.push((step, version)),
            Ok(Creation::Not(w)) => writes = writes.and(w),
            Ok(Creation::Later(wait)) => later = Some(later.map_or(wait, |l: Duration| l.min(wait))),
            Err(error) => {
                if matches!(error, Error::Conflict(_)) {
                    take_back(at, &made).await;
                } else {
                    // Not a refusal: what was made stays (written, and counted so), and
                    // the retry goes on from it.
                    for (s, v) in &made {
                        expect(at, s, Seen::AtLeast(v.clone()));
                        count_write(at.writer);
                    }
                }
                return Err(error);
            }
        }
    }
    for (step, version) in made {
        expect(at, step, Seen::AtLeast(version));
        writes = writes.and(Writes::wrote(at.writer));
    }
    if let Some(wait) = later {
        // Once per reconcile, however many of its creations wait.
        crate::ops::metrics::put_off(at.writer, "creation_rate");
        writes = writes.and(Writes::deferred(wait));
    }
    Ok(writes)
}

/// Decide before writing: with more than one child to create, each name is read first,
/// and one held by another owner refuses the answer before anything is made. A single
/// creation needs no read (its create fails on the holder and writes nothing), so the
/// common case costs nothing; a holder that appears between the read and the create is
/// met by the create, and [`take_back`] undoes the rest.
async fn held_elsewhere(live: &Live, at: &At<'_>, steps: &[&Step]) -> Result<(), Error> {
    let uid = at.parent.uid().unwrap_or_default();
    for step in steps {
        let resource = &at.shared.children[step.kind].resource;
        let Some(held) = apply::holder(&at.shared.client, resource, &step.child).await? else {
            continue;
        };
        if !apply::controlled_by(&held, &uid, at.writer) {
            return Err(conflict(live, at, &step.child, &held));
        }
    }
    Ok(())
}

/// Delete the children this reconcile just made (each only at the version it made), so a
/// refused answer leaves nothing behind; the parent's next reconcile waits for the
/// caches to show them gone.
async fn take_back(at: &At<'_>, made: &[(&Step, String)]) {
    for (step, version) in made {
        let resource = &at.shared.children[step.kind].resource;
        if let Err(e) = apply::take_back(&at.shared.client, resource, &step.child, version).await {
            tracing::warn!(error = %e, child = %plan::describe(&step.child), "a child made by a refused answer was not taken back");
        }
        expect(at, step, Seen::Past(version.clone()));
    }
}

/// What came of one creation.
enum Creation {
    /// Made, at this resourceVersion.
    Made(String),
    /// Not made, and nothing to take back: made already, or a ping-pong.
    Not(Writes),
    /// Left for later by the creation budget, which has room again after this long.
    Later(Duration),
}

/// Create one child, unless over the plugin's creation rate or a ping-pong.
async fn one(live: &Live, at: &At<'_>, step: &Step) -> Result<Creation, Error> {
    let target = plan::describe(&step.child);
    if let Err(wait) = at.shared.creation(at.parent) {
        tracing::debug!(wait = ?wait, child = %target, "plugin over its creation budget; later");
        return Ok(Creation::Later(wait));
    }
    // A creation is over no observed version: never found unchanged.
    live.guard(at, &target, (step.digest(), ""))?;
    let resource = &at.shared.children[step.kind].resource;
    match apply::create(&at.shared.client, resource, &step.child, at.writer).await? {
        apply::Created::Made(version) => Ok(Creation::Made(version)),
        apply::Created::Held(object)
            if apply::controlled_by(&*object, &at.parent.uid().unwrap_or_default(), at.writer) =>
        {
            // This parent's own child, made by a reconcile whose write the cache has not
            // shown in time: nothing to take, and nothing to write until it shows.
            let version = object.resource_version().unwrap_or_default();
            expect(at, step, Seen::AtLeast(version));
            Ok(Creation::Not(Writes::deferred(written::PATIENCE)))
        }
        apply::Created::Held(object) => Err(conflict(live, at, &step.child, &*object)),
    }
}
