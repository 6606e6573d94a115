// The Wasm adapter: the WIT `plugin` interface as componentize-js presents it, over a
// reconciler written against the plain SDK. A plugin's component entry is
//
//   import { exportPlugin } from '@capstan/sdk/guest';
//   import { reconciler } from './echo.js';
//   export const plugin = exportPlugin(reconciler);
//
// Only this module imports the host, whose module exists only inside the component:
// everything else in the SDK runs under plain node.

import { log as hostLog } from 'capstan:reconciler/host@0.3.0';

import { setLogSink } from './log.js';
import * as run from './run.js';

/** Run each sample through the calls the host makes, answers discarded. */
function warm(reconciler, samples) {
  const attempt = (call) => {
    try {
      return call();
    } catch {
      return undefined;
    }
  };
  attempt(() => run.metadata(reconciler));
  for (const sample of samples) {
    const settings = JSON.stringify(sample.settings ?? {});
    const parent = JSON.stringify(sample.parent);
    attempt(() => run.validateSettings(reconciler, settings));
    attempt(() => run.related(reconciler, parent, settings));
    const answer = attempt(() =>
      run.reconcile(reconciler, {
        parent,
        children: (sample.children ?? []).map((c) => JSON.stringify(c)),
        related: (sample.related ?? []).map((c) => JSON.stringify(c)),
        settings,
        now: sample.now ?? '2026-01-01T00:00:00Z',
        finalizing: sample.finalizing ?? false,
      }),
    );
    if (answer !== undefined && 'err' in answer) attempt(() => failWith(answer.err));
  }
}

/**
 * componentize-js turns an exception thrown from an export returning `result` into its
 * `err`, taking the error's `payload` when it has one.
 */
function failWith(payload) {
  const e = new Error(typeof payload === 'string' ? payload : 'reconcile failed');
  e.payload = payload;
  return e;
}

/**
 * The `capstan:reconciler/plugin@0.3.0` export for `reconciler`.
 *
 * `warmUp` is a few sample requests (`{parent, children?, related?, settings?, now?}`, as
 * objects) to reconcile once while the component is built: componentize-js snapshots the
 * module's state after its top level has run (Wizer), so what the samples compile
 * (SpiderMonkey parses function bodies lazily, on their first call) and cache (the
 * reconciler's Metadata) is in every instance from the start, and a fresh instance's first
 * call skips that work. Their answers are thrown away; an error in one is ignored.
 */
export function exportPlugin(reconciler, { warmUp = [] } = {}) {
  // The host's functions cannot be called while the component is built.
  setLogSink(() => {});
  warm(reconciler, warmUp);
  setLogSink((level, message) => hostLog(level, message));
  return {
    metadata() {
      return run.metadata(reconciler);
    },
    validateSettings(settings) {
      const refusal = run.validateSettings(reconciler, settings);
      if (refusal !== undefined) throw failWith(refusal);
    },
    related(parent, settings) {
      return run.related(reconciler, parent, settings);
    },
    reconcile(request) {
      return run.andThen(run.reconcile(reconciler, request), (result) => {
        if ('err' in result) throw failWith(result.err);
        return result.ok;
      });
    },
  };
}
