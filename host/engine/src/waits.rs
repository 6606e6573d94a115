//! The monotonic clock's waits as the sandbox links them: ready at once, moving the
//! plugin's virtual clock (see `clocks`) rather than sleeping a host thread. Kept apart
//! from `clocks` so the clocks know nothing of the store they are linked into.

use wasmtime::component::{Linker, Resource};
use wasmtime_wasi::p2::{DynPollable, subscribe};

use super::clocks::Ready;
use super::sandbox::State;

/// The interface whose waits are replaced; the version `wasmtime-wasi` links (guests'
/// older 0.2 imports resolve to it by semver).
const MONOTONIC_CLOCK: &str = "wasi:clocks/monotonic-clock@0.2.12";

/// Replace the monotonic clock's waits in `linker` with ones that are ready at once and
/// move the plugin's virtual clock instead (`wasmtime-wasi`'s would sleep the thread).
pub(crate) fn add_to_linker(linker: &mut Linker<State>) -> anyhow::Result<()> {
    linker.allow_shadowing(true);
    let mut clock = linker.instance(MONOTONIC_CLOCK)?;
    clock.func_wrap("subscribe-duration", |mut store, (nanos,): (u64,)| {
        let state: &mut State = store.data_mut();
        state.clock().advance(nanos);
        ready(state).map(|r| (r,))
    })?;
    clock.func_wrap("subscribe-instant", |mut store, (instant,): (u64,)| {
        let state: &mut State = store.data_mut();
        state.clock().advance_to(instant);
        ready(state).map(|r| (r,))
    })?;
    linker.allow_shadowing(false);
    Ok(())
}

/// A ready pollable in the call's resource table. Each wait takes two entries, so a
/// plugin that keeps its pollables fills the table (capped, see `sandbox`) and traps.
fn ready(state: &mut State) -> wasmtime::Result<Resource<DynPollable>> {
    let table = state.table();
    let ready = table.push(Ready)?;
    subscribe(table, ready)
}
