//! Running the plugin for one parent: within its CPU share, on a blocking thread, charged
//! the thread's CPU time; and what its answer means for the reconcile — a response to
//! act on, a fatal error recorded on the parent, or an error to retry.

use std::sync::Arc;

use super::compact::Compact;
use super::outcome::{Error, Observed};
use super::sink::{At, Warning};
use super::throttle::{Call, Permit};
use super::version::Current;
use crate::engine::{DispatchError, Request, Response};
use crate::key::ObjectKey;
use crate::ops::metrics::{CallLabels, ControllerLabel, FaultLabels};
use crate::preview::Change;

/// The plugin's response to the request for `compact`; `None` when the plugin answered
/// with a fatal error, recorded on the parent. Over the plugin's CPU share nothing runs:
/// the parent comes back when the share allows, and no worker (nor shutdown) waits.
pub(super) async fn run(
    compact: &Compact,
    at: &At<'_>,
    plugin: &Current,
    (observed, related): (&[Observed], &[Arc<Compact>]),
) -> Result<Option<Response>, Error> {
    let shared = at.shared;
    let key = crate::key::ObjectKey::of(at.parent);
    let permit = shared.cpu.acquire(Call::Reconcile, &key).await.map_err(|wait| {
        tracing::debug!(wait = ?wait, "plugin over its CPU share; later");
        Error::Deferred(wait)
    })?;
    let request = Request {
        parent: compact.json()?,
        children: observed
            .iter()
            .map(|o| o.object.json())
            .collect::<Result<_, _>>()?,
        related: related.iter().map(|o| o.json()).collect::<Result<_, _>>()?,
        // A recorded reconcile says what time the plugin was told, to be replayed with it.
        now: shared.options.record.as_ref().map(|_| recorded_now()),
        finalizing: compact.metadata.deletion_timestamp.is_some(),
    };
    let record = shared
        .options
        .record
        .clone()
        .map(|recorder| (recorder, shared.options.settings.clone()));
    let result = dispatch(request, &plugin.plugin, permit, record).await?;
    answer(at, plugin, result)
}

/// The time a recorded reconcile is told: now, to the millisecond the engine rounds to.
fn recorded_now() -> k8s_openapi::jiff::Timestamp {
    let now = k8s_openapi::jiff::Timestamp::now();
    now.round(k8s_openapi::jiff::Unit::Millisecond).unwrap_or(now)
}

/// Run the plugin on one of its threads; the permit is charged there, so a reconcile
/// cancelled meanwhile still pays for the call it started. With a recorder (and the
/// plugin's settings) the call is recorded there too, after the plugin is charged; the
/// request is dropped there as well, off the runtime's threads.
async fn dispatch(
    request: Request,
    plugin: &Arc<dyn crate::engine::Reconcile>,
    permit: Permit,
    record: Option<(Arc<crate::record::Recorder>, serde_json::Value)>,
) -> Result<Result<Response, DispatchError>, Error> {
    let name = plugin.metadata().name.clone();
    let plugin = plugin.clone();
    let start = std::time::Instant::now();
    let done = permit
        .on_thread(move |permit| {
            let result = permit.run(|| plugin.reconcile(&request));
            if let Some((recorder, settings)) = record {
                let m = plugin.metadata();
                let recording =
                    crate::record::Recording::new((&m.name, &m.version), &settings, &request, &result);
                recorder.record(&recording);
            }
            result
        })
        .await
        .map_err(|e| Error::Join(e.to_string()))?;
    timed(&name, "reconcile", start);
    Ok(done)
}

/// Count a call of the plugin's export `call` that began at `start`.
pub(super) fn timed(plugin: &str, call: &str, start: std::time::Instant) {
    let labels = CallLabels {
        plugin: plugin.into(),
        call: call.into(),
    };
    crate::ops::metrics::get()
        .dispatch_time
        .get_or_create(&labels)
        .observe(start.elapsed().as_secs_f64());
}

/// The plugin's answer: a response to act on, `None` for a fatal error (recorded, wait
/// for a change), or an error to retry with backoff.
pub(super) fn answer(
    at: &At<'_>,
    plugin: &Current,
    result: Result<Response, DispatchError>,
) -> Result<Option<Response>, Error> {
    let sink = &at.shared.sink;
    let name = &plugin.plugin.metadata().name;
    match result {
        Ok(response) => Ok(Some(response)),
        Err(DispatchError::Retry { message, after }) => Err(Error::Retry { message, after }),
        Err(DispatchError::Fatal(m)) => {
            let kind = at.shared.parent.kind.clone();
            let warning = Warning {
                finding: Some((Change::Fail, kind, ObjectKey::of(at.parent))),
                ..Warning::plain("ReconcileFailed", m)
            };
            sink.warn(at, warning);
            Ok(None)
        }
        Err(DispatchError::Fault(f)) => {
            let metrics = crate::ops::metrics::get();
            let cause = FaultLabels {
                plugin: name.clone(),
                cause: f.cause().into(),
            };
            metrics.faults.get_or_create(&cause).inc();
            if matches!(f, crate::engine::Fault::Panic(_) | crate::engine::Fault::Trap(_)) {
                let controller = ControllerLabel {
                    controller: name.clone(),
                };
                metrics.reconcile_panics.get_or_create(&controller).inc();
            }
            sink.warn(at, Warning::plain("PluginFault", format!("plugin {f}")));
            Err(Error::Fault(f))
        }
    }
}
