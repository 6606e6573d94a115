//! Making the cluster what an answer says, as named steps: the answer checked as a whole
//! ([`check`]), its writes planned before any is made ([`super::plan`]), the plan carried
//! out by the controller's sink ([`super::sink`]), and then what follows from the outcome
//! ([`follow`]): the answer's events and, on a deletion the plugin finalized, the
//! finalizer's release.

use kube::api::DynamicObject;

use super::Shared;
use super::finalizer;
use super::outcome::{Error, Observed, Outcome, Writes};
use super::plan::{self, Inputs};
use super::sink::{self, At, Warning};
use crate::engine::{Metadata, Response};
use crate::validate;

/// Write what `response` asks: its children checked, planned and carried out, then its
/// status. A refused or conflicting answer writes nothing.
pub(super) async fn write(
    at: &At<'_>,
    metadata: &Metadata,
    response: &mut Response,
    observed: &[Observed],
) -> Outcome {
    let shared = at.shared;
    let children = std::mem::take(&mut response.children);
    let desired = check(at, metadata, children, response)?;
    let kinds: Vec<_> = shared
        .children
        .iter()
        .map(|c| (&c.kind, c.update.clone()))
        .collect();
    let inputs = Inputs {
        parent: at.parent,
        parent_kind: &shared.parent,
        writer: at.writer,
        kinds: &kinds,
        observed,
    };
    let cached = |kind: usize, key: &_| shared.children[kind].cache.get(key);
    let plan = plan::plan(
        &inputs,
        desired,
        (response.status.as_ref(), &response.parent),
        cached,
    )
    .map_err(|f| sink::conflict(&*shared.sink, at, &f.child, &*f.holder))?;
    sink::execute(&*shared.sink, at, &plan).await
}

/// What follows the writes, whatever their outcome: the answer's events and, on a
/// deletion the plugin finalized, the finalizer's release — unless the answer was
/// refused or conflicted as a whole, when nothing of it stands. `None` when the parent was
/// let go; then its failed writes matter no more (its children go with it).
pub(super) async fn follow(
    at: &At<'_>,
    metadata: &Metadata,
    response: &Response,
    written: Outcome,
) -> Result<Option<Writes>, Error> {
    if !stands(&written) {
        return written.map(Some);
    }
    for event in &response.events {
        at.shared.sink.event(at, event);
    }
    if at.parent.metadata.deletion_timestamp.is_some() && response.finalized {
        if !lets_go(&written) {
            return written.map(Some);
        }
        if let Err(e) = &written {
            tracing::info!(error = %e, "the finalized deletion's last writes failed; the finalizer is released all the same");
        }
        finalizer::release(at, metadata).await?;
        return Ok(None);
    }
    written.map(Some)
}

/// Whether a finalized deletion lets its finalizer go after `written`: not while writes
/// were put off (slowed, over the CPU share, unseen), which are still to be made — the
/// last status before letting go, as Metacontroller writes it. A write that failed does
/// not hold the deletion up.
fn lets_go(written: &Outcome) -> bool {
    !written.as_ref().is_err_and(|e| e.put_off().is_some())
}

/// Whether an answer's events and `finalized` stand after its writes: for every outcome
/// (written, deferred, slowed, a loop, a status or API error) but an answer that wrote
/// nothing because it was refused or named another owner's child.
fn stands(written: &Outcome) -> bool {
    !matches!(written, Err(Error::Refused(_) | Error::Conflict(_)))
}

/// Validate the whole answer (children, events, the parent's labels and annotations)
/// before anything of it is written; `children` are the answer's, taken out of it.
fn check(
    at: &At<'_>,
    metadata: &Metadata,
    children: Vec<serde_json::Value>,
    response: &Response,
) -> Result<Vec<validate::Child>, Error> {
    let home = super::scope::home(metadata, &at.parent.metadata, &at.shared.options);
    let rest = validate::Rest {
        event_reasons: response.events.iter().map(|e| e.reason.as_str()),
        parent: &response.parent,
    };
    match validate::response(metadata, home, children, rest, &at.shared.options.allow) {
        Ok(desired) => Ok(desired),
        Err(r) => {
            refused(at, &format!("nothing applied: {r}"));
            Err(Error::Refused(r))
        }
    }
}

/// Report related queries that broke the rules.
pub(super) fn refused_related(at: &At<'_>, message: String) -> Error {
    refused(at, &format!("nothing dispatched: {message}"));
    Error::RelatedRefused(message)
}

/// Report an answer (or related queries) that broke the rules; `what` says what was not
/// done.
fn refused(at: &At<'_>, what: &str) {
    let warning = Warning {
        counter: Some(|m| &m.refused),
        ..Warning::about_parent(at, "InvalidResponse", what.to_string())
    };
    at.shared.sink.warn(at, warning);
}

/// Where a reconcile of `parent` writes: `shared`'s sink, as the writer of `plugin`.
pub(super) fn at<'a>(shared: &'a Shared, parent: &'a DynamicObject, plugin: &'a str) -> At<'a> {
    At {
        shared,
        parent,
        writer: shared.sink.writer(plugin),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_finalizer_waits_for_writes_put_off_but_not_for_failed_ones() {
        assert!(lets_go(&Ok(Writes::default())));
        assert!(lets_go(&Err(Error::StatusHeld("status.phase".into()))));
        assert!(!lets_go(&Err(Error::Slowed(Duration::from_secs(3)))));
        assert!(!lets_go(&Err(Error::Deferred(Duration::from_secs(1)))));
        assert!(!lets_go(&Err(Error::Unseen(Duration::from_secs(1)))));
    }

    #[test]
    fn events_and_the_release_follow_every_outcome_but_an_answer_that_wrote_nothing() {
        let outcomes = [
            Ok(Writes::default()),
            Ok(Writes::deferred(Duration::from_secs(1))),
            Err(Error::Loop("the same content again".into())),
            Err(Error::Slowed(Duration::from_secs(3))),
            Err(Error::StatusHeld("status.phase".into())),
            Err(Error::Deferred(Duration::from_secs(1))),
        ];
        for written in &outcomes {
            assert!(stands(written), "{written:?}");
        }
        let refused = capstan_contract::Refusal {
            subject: "child 0".into(),
            reason: "no kind".into(),
        };
        assert!(!stands(&Err(Error::Refused(refused))));
        assert!(!stands(&Err(Error::Conflict("Job default/x".into()))));
    }
}
