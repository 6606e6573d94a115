// The plugin's four calls on the WIT's records, plain JavaScript in and out: what the Wasm
// adapter (guest.js) exports and what the testing fixtures run, so a test goes through the
// same text path as the component does.
//
// A call is cheap when it does little JavaScript: the component runs SpiderMonkey's
// interpreter (no JIT), where each function call, iterator step (for-of, spread, array
// destructuring) and self-hosted builtin (map, filter, find) counts. So what cannot change
// between calls is worked out once per instance and kept in module state, which a reused
// instance keeps: the reconciler's Metadata, and its settings, by their text (the host
// sends the same text on every call).

import { Context, parseJson } from './context.js';
import { ReconcileError, fatal } from './errors.js';
import { kindRef } from './kinds.js';
import { warn } from './log.js';
import { Metadata } from './metadata.js';
import { SettingsError, freezeDeep } from './settings.js';
import { parseTime } from './time.js';

/**
 * A reconciler: `parent` (its kind), `metadata()`, optional `related(parent, ctx)` and
 * `reconcile(parent, ctx)`, which returns a Response or throws a ReconcileError.
 */
function metadataOf(reconciler) {
  return stateOf(reconciler).metadata;
}

/** What is kept per reconciler: its Metadata, and the settings last checked. */
const states = new WeakMap();

function stateOf(reconciler) {
  let state = states.get(reconciler);
  if (state === undefined) {
    const m = reconciler.metadata();
    if (!(m instanceof Metadata)) throw new TypeError('reconciler.metadata() must return a Metadata');
    state = { metadata: m, settingsText: undefined, settings: undefined, refusal: undefined };
    states.set(reconciler, state);
  }
  return state;
}

/**
 * The settings in `text`, checked: the value (frozen, since every call shares it), or a
 * SettingsError thrown. The last text's outcome is kept, so a call with the same settings
 * as the one before checks nothing.
 */
function checkedSettings(reconciler, text) {
  const state = stateOf(reconciler);
  if (typeof text !== 'string') return state.metadata.validateSettings(text);
  if (state.settingsText !== text) {
    state.settingsText = undefined;
    try {
      state.settings = freezeDeep(state.metadata.validateSettings(text));
      state.refusal = undefined;
    } catch (e) {
      if (!(e instanceof SettingsError)) throw e;
      state.settings = undefined;
      state.refusal = e.message;
    }
    state.settingsText = text;
  }
  if (state.refusal !== undefined) throw new SettingsError(state.refusal);
  return state.settings;
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
    checkedSettings(reconciler, settings);
    return undefined;
  } catch (e) {
    if (e instanceof SettingsError) return e.message;
    throw e;
  }
}

/** The settings as the plugin reads them; the host already accepted them, so a refusal here is fatal. */
function settingsOf(reconciler, text) {
  try {
    return checkedSettings(reconciler, text);
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
  return andThen(reconciler.related(parent, ctx), (queries) =>
    (queries ?? []).map((q) => ({
      group: q.group ?? '',
      kind: q.kind,
      namespace: q.namespace,
      selector: 'names' in q.selector ? { tag: 'names', val: q.selector.names } : { tag: 'labels', val: q.selector.labels },
    })),
  );
}

/**
 * `f(value)`, or for a promise (an `async` reconciler's answer) a promise of it: an async
 * export, whose promise componentize-js settles by running the event loop. A plain
 * reconciler stays synchronous, with no promise on its path.
 */
export function andThen(value, f) {
  return value !== null && typeof value === 'object' && typeof value.then === 'function' ? value.then(f) : f(value);
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
  if (typeof response.then === 'function') {
    return response.then(record, (e) => ({ err: errorRecord(e) }));
  }
  return record(response);
}

/** The WIT result record of a Response. */
function record(response) {
  const children = [];
  for (let i = 0; i < response.children.length; i++) children.push(JSON.stringify(response.children[i]));
  const events = [];
  for (let i = 0; i < response.events.length; i++) {
    const e = response.events[i];
    events.push({ eventType: e.type, reason: e.reason, message: e.message });
  }
  return {
    ok: {
      children,
      status: response.status === undefined ? undefined : JSON.stringify(response.status),
      requeueAfterMs: response.requeueAfterMs === undefined ? undefined : BigInt(response.requeueAfterMs),
      events,
      finalized: response.finalized,
      parentLabels: entries(response.parentLabels),
      parentAnnotations: entries(response.parentAnnotations),
    },
  };
}

/** A parent's labels or annotations as the contract lists them (a null value removes). */
function entries(map) {
  return Object.keys(map ?? {}).sort().map((key) => ({ key, value: map[key] ?? undefined }));
}

/**
 * The reconciler's own Response (or thrown error) for a WIT request record; a promise of
 * it when the reconciler's `reconcile` is `async`.
 */
export function reconcileRaw(reconciler, request) {
  const now = parseTime(request.now);
  if (!now) throw fatal(`the request's now ${JSON.stringify(request.now)} is not an RFC 3339 time`);
  const parent = parseJson('parent', request.parent);
  const ctx = new Context({
    children: parseAll('child', request.children),
    related: parseAll('related object', request.related),
    settings: settingsOf(reconciler, request.settings),
    now,
    nowText: request.now,
    finalizing: request.finalizing,
  });
  return andThen(reconciler.reconcile(parent, ctx), checked);
}

function checked(response) {
  if (!response || !Array.isArray(response.children) || !Array.isArray(response.events)) {
    throw new TypeError('reconcile must return a Response');
  }
  return response;
}

function parseAll(what, texts) {
  const out = [];
  for (let i = 0; i < texts.length; i++) out.push(parseJson(what, texts[i]));
  return out;
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

