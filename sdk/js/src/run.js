// The plugin's four calls on the WIT's records, plain JavaScript in and out: what the Wasm
// adapter (guest.js) exports and what the testing fixtures run, so a test goes through the
// same text path as the component does.

import { Context, parseJson } from './context.js';
import { ReconcileError, fatal } from './errors.js';
import { kindRef } from './kinds.js';
import { warn } from './log.js';
import { Metadata } from './metadata.js';
import { SettingsError } from './settings.js';
import { parseTime } from './time.js';

/**
 * A reconciler: `parent` (its kind), `metadata()`, optional `related(parent, ctx)` and
 * `reconcile(parent, ctx)`, which returns a Response or throws a ReconcileError.
 */
function metadataOf(reconciler) {
  const m = reconciler.metadata();
  if (!(m instanceof Metadata)) throw new TypeError('reconciler.metadata() must return a Metadata');
  return m;
}

/** The `metadata` export's record. */
export function metadata(reconciler) {
  const m = metadataOf(reconciler);
  const schema = m.settingsSchema();
  return {
    name: m.name,
    version: m.version,
    parent: kindRef(reconciler.parent),
    children: m.children.map(kindRef),
    related: m.related.map(kindRef),
    settingsSchema: schema === undefined ? undefined : JSON.stringify(schema),
    finalizer: m.finalizerName,
  };
}

/** The `validate-settings` export: undefined, or the one-line refusal. */
export function validateSettings(reconciler, settings) {
  try {
    metadataOf(reconciler).validateSettings(settings);
    return undefined;
  } catch (e) {
    if (e instanceof SettingsError) return e.message;
    throw e;
  }
}

/** The settings as the plugin reads them; the host already accepted them, so a refusal here is fatal. */
function settingsOf(reconciler, text) {
  try {
    return metadataOf(reconciler).validateSettings(text);
  } catch (e) {
    if (e instanceof SettingsError) throw fatal(`settings: ${e.message}`);
    throw e;
  }
}

/** The `related` export: the parent's queries as WIT related-query records. */
export function related(reconciler, parentText, settingsText) {
  if (typeof reconciler.related !== 'function') return [];
  let parent;
  let settings;
  try {
    parent = parseJson('parent', parentText);
    settings = settingsOf(reconciler, settingsText);
  } catch (e) {
    // `reconcile` reports the same error as fatal; no queries until it is fixed.
    warn(`no related objects: ${e.message}`);
    return [];
  }
  const ctx = new Context({ settings });
  return (reconciler.related(parent, ctx) ?? []).map((q) => ({
    group: q.group ?? '',
    kind: q.kind,
    namespace: q.namespace,
    selector: 'names' in q.selector ? { tag: 'names', val: q.selector.names } : { tag: 'labels', val: q.selector.labels },
  }));
}

/**
 * Run one reconcile on a WIT request record. Returns `{ok: response}` (the WIT response
 * record) or `{err: reconcileError}` (the WIT variant). A thrown ReconcileError is the
 * plugin's answer; any other exception is a bug the Rust SDK would panic on, reported
 * as fatal so the host stops retrying an object the plugin cannot handle.
 */
export function reconcile(reconciler, request) {
  let response;
  try {
    response = reconcileRaw(reconciler, request);
  } catch (e) {
    return { err: errorRecord(e) };
  }
  return {
    ok: {
      children: response.children.map((c) => JSON.stringify(c)),
      status: response.status === undefined ? undefined : JSON.stringify(response.status),
      requeueAfterMs: response.requeueAfterMs === undefined ? undefined : BigInt(response.requeueAfterMs),
      events: response.events.map((e) => ({ eventType: e.type, reason: e.reason, message: e.message })),
      finalized: response.finalized,
    },
  };
}

/** The reconciler's own Response (or thrown error) for a WIT request record. */
export function reconcileRaw(reconciler, request) {
  const now = parseTime(request.now);
  if (!now) throw fatal(`the request's now ${JSON.stringify(request.now)} is not an RFC 3339 time`);
  const parent = parseJson('parent', request.parent);
  const ctx = new Context({
    children: request.children.map((c) => parseJson('child', c)),
    related: request.related.map((c) => parseJson('related object', c)),
    settings: settingsOf(reconciler, request.settings),
    now,
    nowText: request.now,
    finalizing: request.finalizing,
  });
  const response = reconciler.reconcile(parent, ctx);
  if (!response || !Array.isArray(response.children) || !Array.isArray(response.events)) {
    throw new TypeError('reconcile must return a Response');
  }
  return response;
}

/** The WIT reconcile-error variant for what a reconcile threw. */
export function errorRecord(e) {
  if (e instanceof ReconcileError) {
    return e.kind === 'fatal'
      ? { tag: 'fatal', val: e.message }
      : { tag: 'retry', val: { message: e.message, afterMs: e.afterMs === undefined ? undefined : BigInt(e.afterMs) } };
  }
  const what = e instanceof Error ? `${e.name}: ${e.message}` : String(e);
  return { tag: 'fatal', val: `plugin error: ${what}` };
}

