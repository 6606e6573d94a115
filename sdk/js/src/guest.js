// The Wasm adapter: the WIT `plugin` interface as componentize-js presents it, over a
// reconciler written against the plain SDK. A plugin's component entry is
//
//   import { exportPlugin } from '@capstan/sdk/guest';
//   import { reconciler } from './echo.js';
//   export const plugin = exportPlugin(reconciler);
//
// Only this module imports the host, whose module exists only inside the component:
// everything else in the SDK runs under plain node.

import { log as hostLog } from 'capstan:reconciler/host@0.2.0';

import { setLogSink } from './log.js';
import * as run from './run.js';

/**
 * componentize-js turns an exception thrown from an export returning `result` into its
 * `err`, taking the error's `payload` when it has one.
 */
function failWith(payload) {
  const e = new Error(typeof payload === 'string' ? payload : 'reconcile failed');
  e.payload = payload;
  return e;
}

/** The `capstan:reconciler/plugin@0.2.0` export for `reconciler`. */
export function exportPlugin(reconciler) {
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
      const result = run.reconcile(reconciler, request);
      if ('err' in result) throw failWith(result.err);
      return result.ok;
    },
  };
}
