//! The sink that writes: every write passes the write-loop guard and leaves what the
//! parent's next reconcile must see first ([`super::super::written`]); every write and
//! every problem is counted for the plugin, and problems raise a Warning on the parent.

mod create;

use std::time::Duration;

use kube::ResourceExt;
use serde_json::Value;

use super::{At, Sink, Warning, status_apply, status_held};
use crate::apply;
use crate::controller::Shared;
use crate::controller::churn::{self, Verdict};
use crate::controller::events;
use crate::controller::outcome::{Error, Observed, Outcome, Writes, count_write};
use crate::controller::plan::{self, Action, Step};
use crate::controller::written::{self, Cache, Expected, Seen};
use crate::engine::ParentMetadata;
use crate::key::ObjectKey;

/// The sink of a controller that writes.
pub(in crate::controller) struct Live;

#[async_trait::async_trait]
impl Sink for Live {
    fn writer<'a>(&'a self, plugin: &'a str) -> &'a str {
        plugin
    }

    async fn create(&self, at: &At<'_>, steps: &[&Step]) -> Outcome {
        create::all(self, at, steps).await
    }

    async fn update(&self, at: &At<'_>, step: &Step) -> Outcome {
        let Action::Update {
            uid,
            seen,
            held_by_create,
        } = &step.action
        else {
            return Ok(Writes::default());
        };
        let target = plan::describe(&step.child);
        if !self.guard(at, &target, (step.digest(), seen))? {
            return Ok(Writes::default());
        }
        let (client, resource) = (&at.shared.client, &at.shared.children[step.kind].resource);
        if *held_by_create {
            apply::ownership::hand_over(client, resource, &step.child, uid, at.writer).await?;
        }
        let version = apply::update(client, resource, &step.child, uid, at.writer).await?;
        if version == *seen {
            // Answered at the version it was made over: the child held this already (a list
            // a webhook extends looks unapplied here). Nothing was written.
            let memory = &at.shared.per_object;
            memory.with(&ObjectKey::of(at.parent), |p| {
                p.churn.unchanged(&target, step.digest(), &version)
            });
            return Ok(Writes::default());
        }
        expect(at, step, Seen::AtLeast(version));
        Ok(Writes::wrote(at.writer))
    }

    async fn prune(&self, at: &At<'_>, child: &Observed) -> Outcome {
        let resource = &at.shared.children[child.kind].resource;
        apply::prune(&at.shared.client, resource, &*child.object).await?;
        let cache = Cache::Child {
            kind: child.kind,
            key: ObjectKey::of(&*child.object),
        };
        let seen = Seen::Past(child.object.resource_version().unwrap_or_default());
        written::expect(at.shared, &ObjectKey::of(at.parent), Expected { cache, seen });
        Ok(Writes::wrote(at.writer))
    }

    async fn metadata(&self, at: &At<'_>, changes: &ParentMetadata) -> Outcome {
        let seen = at.parent.resource_version().unwrap_or_default();
        let digest = apply::digest(&serde_json::to_value(changes).unwrap_or_default());
        if !self.guard(at, "metadata", (&digest, &seen))? {
            return Ok(Writes::default());
        }
        let (client, kind) = (&at.shared.client, &at.shared.parent);
        let version = apply::parent_metadata(client, kind, at.parent, changes).await?;
        written::parent(at.shared, at.parent, version);
        Ok(Writes::wrote(at.writer))
    }

    async fn status(&self, at: &At<'_>, status: &Value) -> Outcome {
        let seen = at.parent.resource_version().unwrap_or_default();
        let digest = apply::digest(status);
        if !self.guard(at, "status", (&digest, &seen))? {
            return Ok(Writes::default());
        }
        let message = match status_apply(at, status).write().await? {
            // Answered at the version it was made over: the status held this already (a
            // condition list another controller shares looks unapplied here).
            apply::StatusWrite::Written(version) if version == seen => {
                let memory = &at.shared.per_object;
                memory.with(&ObjectKey::of(at.parent), |p| {
                    p.churn.unchanged("status", &digest, &version)
                });
                return Ok(Writes::default());
            }
            apply::StatusWrite::Written(version) => {
                written::parent(at.shared, at.parent, version);
                return Ok(Writes::wrote(at.writer));
            }
            apply::StatusWrite::HeldBy(message) => {
                count_write(at.writer);
                message
            }
        };
        Err(status_held(self, at, &message))
    }

    async fn finalizers(
        &self,
        at: &At<'_>,
        finalizers: Vec<String>,
        record: Option<&str>,
    ) -> Result<bool, Error> {
        let record = record.map(|r| (crate::controller::finalizer::RECORD_ANNOTATION, r));
        let (client, kind) = (&at.shared.client, &at.shared.parent);
        let version = apply::finalizers(client, kind, at.parent, finalizers, record).await?;
        written::parent(at.shared, at.parent, version);
        count_write(at.writer);
        Ok(true)
    }

    fn warn(&self, at: &At<'_>, warning: Warning) {
        if let Some(counter) = warning.counter {
            crate::ops::metrics::count(counter, at.writer);
        }
        events::warn(at.shared, at.parent, warning.reason, &warning.message);
    }

    fn event(&self, at: &At<'_>, event: &crate::engine::Event) {
        events::record(at.shared, at.parent, event);
    }

    fn finished(&self, _: &str, _: &ObjectKey, _: &Result<Outcome<Option<Duration>>, tokio::time::Instant>) {}

    fn failed(&self, shared: &Shared, object: &ObjectKey, error: &Error, delay: Duration) {
        let plugin = shared.plugin();
        let name = &plugin.metadata().name;
        let text = error.to_string();
        // The error may carry the plugin's own text (a panic message, its retry reason): the
        // host repeats it on every retry, so it is charged to the plugin's log budget.
        if plugin.charge_log(text.len()) {
            tracing::warn!(plugin = %name, object = %object, error = %text, retry_in = ?delay, "reconcile failed");
        } else {
            tracing::warn!(plugin = %name, object = %object, error = error.kind(), retry_in = ?delay, "reconcile failed (the plugin's text left out: over its log budget)");
        }
    }
}

impl Live {
    /// Let a write of `target` (content `digest`, observed at `seen`) through (`true`), or
    /// say it would change nothing (`false`: [`churn::Targets::unchanged`]); refuse it as
    /// ping-pong (a `WriteLoop`, `capstan_write_loops_total`, and an error that backs the
    /// parent off), or put the parent off while the object's write budget refills.
    fn guard(&self, at: &At<'_>, target: &str, (digest, seen): (&str, &str)) -> Result<bool, Error> {
        let key = ObjectKey::of(at.parent);
        let wait = match at.shared.per_object.check_write(&key, target, (digest, seen)) {
            Verdict::Write => return Ok(true),
            Verdict::Unchanged => return Ok(false),
            Verdict::Later(wait) => wait,
            Verdict::Loop => {
                let message = churn::loop_message(target, at.writer);
                let warning = Warning {
                    counter: Some(|m| &m.write_loops),
                    ..Warning::plain("WriteLoop", message.clone())
                };
                self.warn(at, warning);
                return Err(Error::Loop(message));
            }
        };
        let message = churn::rate_message(target, at.writer);
        self.warn(at, Warning::plain("WriteRate", message));
        Err(Error::Slowed(wait))
    }
}

/// Keep a write of `step`'s child for the parent's next reconcile to see first.
fn expect(at: &At<'_>, step: &Step, seen: Seen) {
    let cache = Cache::Child {
        kind: step.kind,
        key: plan::key_of(&step.child),
    };
    written::expect(at.shared, &ObjectKey::of(at.parent), Expected { cache, seen });
}
