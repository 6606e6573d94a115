//! The sink of a preview (`capstan diff`, a shadow): each write is asked of the API server
//! as a dry run (or, without permission for one, laid over the live object here) and
//! becomes a finding — what would be created, changed or deleted, field by field. Nothing
//! is written, no budget is spent, no event is recorded.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::{At, Sink, Warning, conflict, status_apply, status_held};
use crate::apply;
use crate::apply::dry::Dry as Answer;
use crate::controller::Shared;
use crate::controller::outcome::{Error, Observed, Outcome, Writes};
use crate::controller::plan::{self, Step};
use crate::engine::ParentMetadata;
use crate::key::ObjectKey;
use crate::preview::{self, Change, Finding, Preview};

/// The sink of a controller that previews.
pub(in crate::controller) struct Dry(pub Arc<Preview>);

#[async_trait::async_trait]
impl Sink for Dry {
    fn writer<'a>(&'a self, _: &'a str) -> &'a str {
        self.0.writer()
    }

    async fn create(&self, at: &At<'_>, steps: &[&Step]) -> Outcome {
        let mut writes = Writes::default();
        for step in steps {
            writes = writes.and(self.child(at, step).await?);
        }
        Ok(writes)
    }

    async fn update(&self, at: &At<'_>, step: &Step) -> Outcome {
        self.child(at, step).await
    }

    async fn prune(&self, at: &At<'_>, child: &Observed) -> Outcome {
        let kind = &at.shared.children[child.kind].kind.kind;
        let parent = ObjectKey::of(at.parent);
        let key = ObjectKey::of(&*child.object);
        let finding = Finding::new(&parent, Change::Delete, kind, key.to_string());
        self.0.found(&parent, finding);
        Ok(Writes::would())
    }

    /// Labels and annotations set by key: what the merge patch would store is known here.
    async fn metadata(&self, at: &At<'_>, changes: &ParentMetadata) -> Outcome {
        let meta = &at.parent.metadata;
        let live = serde_json::json!({"labels": meta.labels, "annotations": meta.annotations});
        let mut after = live.clone();
        for (field, set) in [("labels", &changes.labels), ("annotations", &changes.annotations)] {
            for (key, value) in set {
                match value {
                    Some(v) => after[field][key] = v.clone().into(),
                    None => _ = after[field].as_object_mut().map(|m| m.remove(key)),
                }
            }
        }
        let mut fields = preview::fields::changes(&live, &after);
        for c in &mut fields {
            c.path = format!("metadata.{}", c.path);
        }
        let key = ObjectKey::of(at.parent);
        let finding = Finding::new(&key, Change::Change, &at.shared.parent.kind, key.to_string());
        self.0.found(&key, finding.with_fields(fields));
        Ok(Writes::would())
    }

    async fn status(&self, at: &At<'_>, status: &Value) -> Outcome {
        let live = at.parent.data.get("status").cloned().unwrap_or_default();
        let stored = if self.0.is_local() {
            Answer::Forbidden
        } else {
            status_apply(at, status).dry_run().await?
        };
        let after = match stored {
            Answer::Stored(object) => object.get("status").cloned().unwrap_or_default(),
            Answer::Forbidden | Answer::Held(_) => {
                self.0.compare_locally();
                preview::fields::overlay(&live, status)
            }
            Answer::Conflict(m) => return Err(status_held(self, at, &m)),
        };
        let mut changes = preview::fields::changes(&live, &after);
        if changes.is_empty() {
            return Ok(Writes::default());
        }
        for c in &mut changes {
            c.path = format!("status.{}", c.path);
        }
        let key = ObjectKey::of(at.parent);
        let finding = Finding::new(&key, Change::Change, &at.shared.parent.kind, key.to_string());
        self.0.found(&key, finding.with_fields(changes));
        Ok(Writes::would())
    }

    /// A preview adds and removes no finalizer: it reconciles the parent as though the
    /// running version's were on.
    async fn finalizers(&self, _: &At<'_>, _: Vec<String>, _: Option<&str>) -> Result<bool, Error> {
        Ok(false)
    }

    fn warn(&self, at: &At<'_>, warning: Warning) {
        let Some((change, kind, object)) = warning.finding else {
            return;
        };
        let parent = ObjectKey::of(at.parent);
        let finding = Finding::new(&parent, change, &kind, object.to_string());
        self.0.found(&parent, finding.because(warning.message));
    }

    fn event(&self, _: &At<'_>, _: &crate::engine::Event) {}

    /// What the reconcile found stands for the parent, with a failure the writes did not
    /// already note; one that was put off or cancelled found nothing yet.
    fn finished(
        &self,
        plugin: &str,
        object: &ObjectKey,
        result: &Result<Outcome<Option<Duration>>, tokio::time::Instant>,
    ) {
        match result {
            Err(_) => return self.0.abandoned(object),
            Ok(Err(e)) if e.put_off().is_some() => return self.0.abandoned(object),
            Ok(Err(
                Error::Refused(_) | Error::RelatedRefused(_) | Error::Conflict(_) | Error::StatusHeld(_),
            ))
            | Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                let finding = Finding::new(object, Change::Fail, "", object.to_string());
                self.0.found(object, finding.because(e.to_string()));
            }
        }
        self.0.reconciled(plugin, object);
    }

    /// A preview reports its failures as findings (and a shadow logs them at its own rate).
    fn failed(&self, shared: &Shared, object: &ObjectKey, error: &Error, delay: Duration) {
        let plugin = shared.plugin();
        let name = &plugin.metadata().name;
        tracing::debug!(plugin = %name, object = %object, error = %error, retry_in = ?delay, "previewed reconcile failed");
    }
}

impl Dry {
    /// What creating or updating one child would store, asked of the API server with a
    /// dry run (or laid over the live object here), as a finding.
    async fn child(&self, at: &At<'_>, step: &Step) -> Outcome {
        let (client, kind) = (&at.shared.client, &at.shared.children[step.kind]);
        let uid = match &step.action {
            plan::Action::Update { uid, .. } => Some(uid.as_str()),
            _ => None,
        };
        let live = uid.and_then(|_| {
            let cached = kind.cache.get(&plan::key_of(&step.child));
            cached.and_then(|o| o.value().ok())
        });
        let stored = if self.0.is_local() {
            Answer::Forbidden
        } else {
            apply::dry::child(client, &kind.resource, &step.child, uid, at.writer).await?
        };
        let stored = match stored {
            Answer::Stored(object) => object,
            Answer::Forbidden => {
                self.0.compare_locally();
                live.as_ref().map_or_else(
                    || step.child.object.clone(),
                    |l| preview::fields::overlay(l, &step.child.object),
                )
            }
            Answer::Held(object) => return Err(conflict(self, at, &step.child, &*object)),
            Answer::Conflict(m) => return Err(Error::Conflict(m)),
        };
        let (change, fields) = match &live {
            Some(live) => (Change::Change, preview::fields::changes(live, &stored)),
            None => (
                Change::Create,
                preview::fields::changes(&serde_json::json!({}), &stored),
            ),
        };
        if change == Change::Change && fields.is_empty() {
            return Ok(Writes::default());
        }
        let parent = ObjectKey::of(at.parent);
        let key = plan::key_of(&step.child).to_string();
        let finding = Finding::new(&parent, change, &step.child.kind.kind, key);
        self.0.found(&parent, finding.with_fields(fields));
        Ok(Writes::would())
    }
}
