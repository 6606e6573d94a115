//! One live instance of a plugin: its calls (metadata, settings, related, reconcile),
//! each under the deadline, with the guest's output flushed and faults classified.

use std::sync::Arc;
use std::time::Duration;

use wasmtime::Store;

use super::bindings::capstan::reconciler::types as wit;
use super::sandbox::State;
use super::text::one_line;
use super::{
    DispatchError, Fault, Json, Limits, LoadError, MAX_RETRY_DELAY, Metadata, RelatedQuery, Request, Response,
};
use super::{deadline, fault, limits, slots, versions};

/// One live instance of a plugin.
pub struct Instance {
    pub(super) store: Store<State>,
    pub(super) bindings: versions::Bindings,
    pub(super) limits: Limits,
    pub(super) settings: Arc<str>,
    /// Keeps the deadline clock ticking while this instance runs calls (not while kept).
    pub(super) ticking: Option<deadline::Ticking>,
    /// Last, so the pool slot is given back only after the store has been dropped.
    pub(super) _slot: slots::Slot,
}

impl Instance {
    /// What this instance holds of its plugin's memory now.
    pub(super) fn footprint(&self) -> usize {
        self.store.data().limiter.held()
    }

    /// Whether a call may run in this instance after the one that just ended cleanly:
    /// it was never denied memory and holds no more than `floor`.
    pub(super) fn reusable(&self, floor: usize) -> bool {
        let limiter = &self.store.data().limiter;
        limiter.denied.is_none() && limiter.held() <= floor
    }

    /// Kept idle: the deadline clock need not tick for it.
    pub(super) fn pause(&mut self) {
        self.ticking = None;
    }

    /// Taken from the kept ones for a call on `object`: a full lift allowance again, its
    /// logs under the new object's key, and the clock ticking.
    pub(super) fn resume(&mut self, object: &str, ticking: deadline::Ticking) {
        self.store.data_mut().begin_call(object);
        let fuel = self.store.data().lift_fuel();
        self.store.set_hostcall_fuel(fuel);
        self.ticking = Some(ticking);
    }

    pub(super) fn metadata(&mut self) -> Result<Result<Metadata, LoadError>, Fault> {
        deadline::arm(&mut self.store, self.limits.deadline);
        let result = self.bindings.metadata(&mut self.store);
        let result = result.map_err(|e| fault_of(&self.store, &e, self.limits.deadline));
        self.store.data().flush_output();
        result
    }

    pub(super) fn validate_settings(&mut self, settings: &str) -> Result<(), LoadError> {
        deadline::arm(&mut self.store, self.limits.deadline);
        let result = self.bindings.validate_settings(&mut self.store, settings);
        let result = result.map_err(|e| fault_of(&self.store, &e, self.limits.deadline));
        self.store.data().flush_output();
        match result {
            Ok(Ok(())) => Ok(()),
            // The plugin's own words, on one line and bounded: they end up in a log line.
            Ok(Err(message)) => Err(LoadError::Settings(one_line(&message))),
            Err(fault) => Err(LoadError::Settings(format!("validate-settings {fault}"))),
        }
    }

    pub(super) fn related(&mut self, parent: &Json) -> Result<Vec<RelatedQuery>, Fault> {
        deadline::arm(&mut self.store, self.limits.deadline);
        let result = self
            .bindings
            .related(&mut self.store, parent.text(), &self.settings);
        let result = result.map_err(|e| fault_of(&self.store, &e, self.limits.deadline));
        self.store.data().flush_output();
        result
    }

    /// Call `reconcile` and validate the answer against the limits.
    pub fn reconcile(&mut self, request: &Request) -> Result<Response, DispatchError> {
        let now = request
            .now
            .unwrap_or_else(jiff::Timestamp::now)
            .round(jiff::Unit::Millisecond)
            .unwrap_or_else(|_| jiff::Timestamp::now());
        deadline::arm(&mut self.store, self.limits.deadline);
        let result = self
            .bindings
            .reconcile(&mut self.store, request, &self.settings, now.to_string());
        // Classify before flushing: the panic text on stderr is part of the evidence.
        let result = result.map_err(|e| fault_of(&self.store, &e, self.limits.deadline));
        self.store.data().flush_output();
        match result? {
            Ok(response) => {
                let memory = self.store.data().limiter.memory().clone();
                Ok(limits::validate(response, &self.limits, &memory)?)
            }
            // The plugin's words end up in the host's log lines: one line, bounded.
            Err(wit::ReconcileError::Retry(r)) => Err(DispatchError::Retry {
                message: one_line(&r.message),
                after: r
                    .after_ms
                    .map(|ms| Duration::from_millis(ms).clamp(self.limits.min_requeue, MAX_RETRY_DELAY)),
            }),
            Err(wit::ReconcileError::Fatal(m)) => Err(DispatchError::Fatal(one_line(&m))),
        }
    }
}

pub(super) fn fault_of(store: &Store<State>, err: &wasmtime::Error, deadline: Duration) -> Fault {
    let stderr = store.data().stderr.text();
    fault::classify(
        err,
        fault::Evidence {
            deadline,
            memory_denied: store.data().limiter.denied.clone(),
            stderr: &stderr,
            lift: store.hostcall_fuel(),
        },
    )
}

pub(super) fn json(value: &serde_json::Value) -> String {
    serde_json::to_string(value).expect("a Value has string keys, so it always serializes")
}
