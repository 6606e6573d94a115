// Run a reconciler natively under `node --test`, on YAML or JSON fixture files, with no
// Wasm: the JavaScript counterpart of the Rust SDK's `testing::Fixture`. A fixture holds
// what the host would send (parent, observed children, the related objects that exist,
// settings, clock, finalizing) and runs the reconciler through the same calls the
// component exports: settings are validated first as the host does at load, the plugin's
// related queries select among the fixture's related objects by the host's rules, and the
// response is checked against the host's main rules before it is returned.
//
// YAML needs the `yaml` package (an optional peer dependency: `npm i -D yaml`); JSON
// fixtures need nothing.

import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';

import { ReconcileError } from './errors.js';
import { isKind } from './kinds.js';
import { dns1123Subdomain } from './names.js';
import * as run from './run.js';
import { parseTime } from './time.js';

/** The clock of a fixture that sets none, the host's `capstan test` default. */
export const DEFAULT_NOW = '2026-01-01T00:00:00Z';

let yamlModule;

function yaml() {
  if (yamlModule) return yamlModule;
  // From the SDK first, then from the project running the tests: with a `file:`
  // dependency the SDK's real path is outside that project's node_modules.
  for (const base of [import.meta.url, join(process.cwd(), 'package.json')]) {
    try {
      yamlModule = createRequire(base)('yaml');
      return yamlModule;
    } catch {
      // Try the next place.
    }
  }
  throw new Error('YAML fixtures need the `yaml` package: npm install --save-dev yaml');
}

/** The documents (`---` separated) of YAML or JSON text; empty documents are skipped. */
export function parseDocuments(text) {
  const trimmed = text.trim();
  if (trimmed === '') return [];
  if (trimmed.startsWith('{') || trimmed.startsWith('[')) {
    try {
      const value = JSON.parse(trimmed);
      return [value];
    } catch {
      // Flow-style YAML looks like JSON too.
    }
  }
  const docs = yaml().parseAllDocuments(text);
  return docs
    .map((d) => {
      if (d.errors.length) throw new FixtureError(d.errors[0].message.split('\n')[0]);
      return d.toJS({ maxAliasCount: 1000 });
    })
    .filter((v) => v !== null && v !== undefined);
}

/** The documents of a YAML or JSON file. */
export function loadDocuments(path) {
  try {
    return parseDocuments(readFileSync(path, 'utf8'));
  } catch (e) {
    throw new FixtureError(`${path}: ${e.message}`);
  }
}

export class FixtureError extends Error {
  constructor(message) {
    super(message);
    this.name = 'FixtureError';
  }
}

function one(docs, what) {
  if (docs.length !== 1) throw new FixtureError(`expected one ${what} document, found ${docs.length}`);
  return docs[0];
}

/**
 * Why `Fixture.check` has no response: `settings` (the host would not load the plugin
 * with them), `related` (it would refuse the related queries), `plugin` (the plugin's
 * ReconcileError, in `error`) or `refused` (the host would write nothing of the response).
 */
export class Failure extends Error {
  constructor(kind, message, error = undefined) {
    super(message);
    this.name = 'Failure';
    this.kind = kind;
    this.error = error;
  }
}

export class Fixture {
  /** A fixture whose parent is this object. */
  constructor(parent) {
    this.parent = parent;
    this.childObjects = [];
    this.relatedObjects = [];
    this.settingsValue = {};
    this.nowText = DEFAULT_NOW;
    this.isFinalizing = false;
    this.namespaces = [];
  }

  /** A fixture whose parent is the one document in `text`. */
  static parse(text) {
    return new Fixture(one(parseDocuments(text), 'parent'));
  }

  /** A fixture whose parent is the one document in the file at `path`. */
  static load(path) {
    return new Fixture(one(loadDocuments(path), 'parent'));
  }

  /** Add observed children from YAML/JSON text (one or more documents). */
  children(text) {
    this.childObjects.push(...parseDocuments(text));
    return this;
  }

  /** Add observed children from a file (one or more documents). */
  childrenFile(path) {
    this.childObjects.push(...loadDocuments(path));
    return this;
  }

  /** Add one observed child. */
  child(object) {
    this.childObjects.push(object);
    return this;
  }

  /** Add objects of related kinds (what exists in the cluster) from YAML/JSON text. */
  related(text) {
    this.relatedObjects.push(...parseDocuments(text));
    return this;
  }

  /** Add objects of related kinds from a file. */
  relatedFile(path) {
    this.relatedObjects.push(...loadDocuments(path));
    return this;
  }

  /** Add one object of a related kind. */
  relatedObject(object) {
    this.relatedObjects.push(object);
    return this;
  }

  /** Use these settings, from YAML/JSON text holding one object. */
  settings(text) {
    this.settingsValue = one(parseDocuments(text), 'settings');
    return this;
  }

  /** Use these settings, from a file holding one object. */
  settingsFile(path) {
    this.settingsValue = one(loadDocuments(path), 'settings');
    return this;
  }

  /** Use these settings. */
  withSettings(value) {
    this.settingsValue = value;
    return this;
  }

  /** Set the host's clock (a Date or RFC 3339 text); DEFAULT_NOW otherwise. */
  now(time) {
    this.nowText = time instanceof Date ? time.toISOString() : String(time);
    if (!parseTime(this.nowText)) throw new FixtureError(`now ${JSON.stringify(time)} is not an RFC 3339 time`);
    return this;
  }

  /** Mark the parent as being finalized. */
  finalizing() {
    this.isFinalizing = true;
    return this;
  }

  /** Let a cluster-scoped parent read from and write into this namespace. */
  allowNamespace(namespace) {
    this.namespaces.push(namespace);
    return this;
  }

  /** The related queries the reconciler asks for this parent and settings, unchecked. */
  relatedQueries(reconciler) {
    return run.related(reconciler, JSON.stringify(shownToRelated(this.parent)), JSON.stringify(this.settingsValue));
  }

  /**
   * Run the reconciler as the component would and check it with the host's rules.
   * Returns the Response, or throws a Failure (see there).
   */
  check(reconciler) {
    const metadata = run.metadata(reconciler);
    const settings = JSON.stringify(this.settingsValue);
    const refusal = run.validateSettings(reconciler, settings);
    if (refusal !== undefined) throw new Failure('settings', `invalid settings: ${refusal}`);
    const namespace = parentNamespace(metadata, this.parent);
    const reconciled = (related) => {
      const request = {
        parent: JSON.stringify(this.parent),
        children: this.childObjects.map((c) => JSON.stringify(c)),
        related: related.map((c) => JSON.stringify(c)),
        settings,
        now: this.nowText,
        finalizing: this.isFinalizing,
      };
      const checked = (response) => {
        // Through JSON and back, as the host receives it: `undefined` fields vanish.
        const children = response.children.map((c) => JSON.parse(JSON.stringify(c)));
        checkResponse(metadata, namespace, this.namespaces, children, response);
        return response;
      };
      return settle(() => run.reconcileRaw(reconciler, request), checked, (e) => {
        if (e instanceof ReconcileError) throw new Failure('plugin', e.toString(), e);
        throw e;
      });
    };
    if (!metadata.related.length) return reconciled([]);
    const queries = run.related(reconciler, JSON.stringify(shownToRelated(this.parent)), settings);
    return run.andThen(queries, (queries) => {
      const resolved = queries.flatMap((q) => resolve(metadata, namespace, this.namespaces, q));
      return reconciled(select(metadata, resolved, this.relatedObjects.map((o) => inDefault(metadata, o))));
    });
  }

  /**
   * Run the reconciler; returns its Response or throws its ReconcileError. Anything the
   * host would refuse (settings, related queries, the response) throws a Failure, which
   * fails the test like an assertion: a plugin bug, not an answer.
   */
  reconcile(reconciler) {
    return settle(
      () => this.check(reconciler),
      (response) => response,
      (e) => {
        if (e instanceof Failure && e.kind === 'plugin') throw e.error;
        throw e;
      },
    );
  }

  /**
   * The outcome as `capstan test` prints it (children, status, events, requeueAfter,
   * finalized; or `{error: {fatal | retry, retryAfter}}`), to compare with golden files.
   */
  outcome(reconciler) {
    return settle(() => this.check(reconciler), outcomeOf, (e) => {
      if (!(e instanceof Failure)) throw e;
      if (e.kind === 'plugin') {
        const err = e.error;
        if (err.kind === 'fatal') return { error: { fatal: err.message } };
        return err.afterMs === undefined
          ? { error: { retry: err.message } }
          : { error: { retry: err.message, retryAfter: `${err.afterMs}ms` } };
      }
      if (e.kind === 'refused') return { error: { refused: e.message } };
      if (e.kind === 'related') return { error: { refused: `related: ${e.message}` } };
      throw e;
    });
  }
}

/**
 * `ok(call())`, or `failed(error)` when it throws; for an `async` reconciler, whose call
 * answers a promise, a promise of the same.
 */
function settle(call, ok, failed) {
  let value;
  try {
    value = call();
  } catch (e) {
    return failed(e);
  }
  return value !== null && typeof value === 'object' && typeof value.then === 'function' ? value.then(ok, failed) : ok(value);
}

/** A Response as `capstan test` prints it. */
export function outcomeOf(response) {
  const out = { children: response.children.map((c) => JSON.parse(JSON.stringify(c))) };
  if (response.status !== undefined) out.status = JSON.parse(JSON.stringify(response.status));
  if (response.requeueAfterMs !== undefined) out.requeueAfter = `${response.requeueAfterMs}ms`;
  if (response.events.length) {
    out.events = response.events.map((e) => ({
      type: e.type === 'warning' ? 'Warning' : 'Normal',
      reason: e.reason,
      message: e.message,
    }));
  }
  if (response.finalized) out.finalized = true;
  const parentMetadata = {};
  for (const [field, map] of [['labels', response.parentLabels], ['annotations', response.parentAnnotations]]) {
    if (map && Object.keys(map).length) parentMetadata[field] = Object.fromEntries(Object.keys(map).sort().map((k) => [k, map[k]]));
  }
  if (Object.keys(parentMetadata).length) out.parentMetadata = parentMetadata;
  return out;
}

/** Check settings as the host does at load: undefined, or its refusal. */
export function validateSettings(reconciler, settings) {
  return run.validateSettings(reconciler, JSON.stringify(settings));
}

/**
 * The cases of a golden `cases.toml` (`[[case]]` tables of strings and string lists,
 * the format `capstan test` reads), with paths resolved against its directory.
 */
export function loadCases(path) {
  const dir = path.replace(/[^/]*$/, '');
  const cases = [];
  let current;
  for (const [i, raw] of readFileSync(path, 'utf8').split('\n').entries()) {
    const line = raw.replace(/^\s+|\s+$/g, '');
    if (line === '' || line.startsWith('#')) continue;
    if (line === '[[case]]') {
      current = {};
      cases.push(current);
      continue;
    }
    const m = /^([A-Za-z_-]+)\s*=\s*(.+)$/.exec(line);
    if (!m || !current) throw new FixtureError(`${path}:${i + 1}: not understood: ${line}`);
    const value = JSON.parse(m[2]);
    const resolved = (p) => (p.startsWith('/') ? p : dir + p);
    current[m[1]] =
      m[1] === 'name' || m[1] === 'now' ? value : Array.isArray(value) ? value.map(resolved) : resolved(value);
  }
  return cases;
}

/** A golden case as a Fixture. */
export function caseFixture(c) {
  const f = Fixture.load(c.parent);
  for (const p of c.children ?? []) f.childrenFile(p);
  for (const p of c.related ?? []) f.relatedFile(p);
  if (c.settings) f.settingsFile(c.settings);
  if (c.now) f.now(c.now);
  return f;
}

// --- The host's rules, the part a plugin test can trip over -----------------------------

function parentNamespace(metadata, parent) {
  if (!metadata.parent.namespaced) return undefined;
  const ns = parent?.metadata?.namespace;
  return typeof ns === 'string' && ns !== '' ? ns : 'default';
}

function inDefault(metadata, object) {
  const namespaced = metadata.related.some((k) => k.namespaced && isKind(k, object));
  if (namespaced && !object?.metadata?.namespace) {
    return { ...object, metadata: { ...object.metadata, namespace: 'default' } };
  }
  return object;
}

/** The grant of every namespace, and a query for every namespace the parent may read. */
const ANY_NAMESPACE = '*';

/** A query as the host resolves it: one per namespace it reads (`*`: any). */
function resolve(metadata, own, allowed, q) {
  const kind = metadata.related.find((k) => k.group === q.group && k.kind === q.kind);
  if (!kind) throw new Failure('related', `related query for ${q.group ? `${q.kind}.${q.group}` : q.kind}: not a declared related kind`);
  const namespaces = kind.namespaced ? readable(kind, own, allowed, q.namespace ?? own) : [undefined];
  let selector;
  if (q.selector.tag === 'names') {
    for (const n of q.selector.val) {
      if (dns1123Subdomain(n) !== undefined) throw new Failure('related', `related query for ${kind.kind}: ${dns1123Subdomain(n)}`);
    }
    selector = { names: q.selector.val };
  } else {
    selector = { labels: labelSelector(q.selector.val) };
  }
  return namespaces.map((namespace) => ({ kind, namespace, ...selector }));
}

/** The namespaces a query for namespaced `kind` reads: `*` is every one where the
 * operator grants every one, else the parent's own and each granted. */
function readable(kind, own, allowed, asked) {
  const every = allowed.includes(ANY_NAMESPACE);
  if (asked === ANY_NAMESPACE) {
    if (every) return [ANY_NAMESPACE];
    const namespaces = [...new Set([own, ...allowed].filter((ns) => ns))];
    if (!namespaces.length) {
      throw new Failure('related', `related query for ${kind.kind} in every namespace ("*"): a cluster-scoped parent reads none unless the operator grants them (allowNamespaces)`);
    }
    return namespaces;
  }
  if (asked === undefined) {
    throw new Failure('related', `related query for namespaced ${kind.kind} from a cluster-scoped parent must name its namespace`);
  }
  if (asked !== own && !allowed.includes(asked) && !every) {
    throw new Failure('related', `related query for ${kind.kind}: namespace ${JSON.stringify(asked)} is not the parent's namespace`);
  }
  return [asked];
}

/** The objects answering `resolved`, query by query, each query's in namespace and name
 * order (as the host answers), each object once. */
function select(metadata, resolved, candidates) {
  const out = [];
  const key = (c) => `${c.metadata?.namespace ?? ''}\u0000${c.metadata?.name ?? ''}`;
  const ordered = [...candidates].sort((a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0));
  for (const q of resolved) {
    for (const c of ordered) {
      if (!isKind(q.kind, c)) continue;
      const ns = q.kind.namespaced ? c.metadata?.namespace : undefined;
      const name = c.metadata?.name ?? '';
      const labels = c.metadata?.labels ?? {};
      if ((ns === q.namespace || q.namespace === ANY_NAMESPACE) && (!q.names || q.names.includes(name)) && (!q.labels || q.labels(labels)) && !out.includes(c)) {
        out.push(c);
      }
    }
  }
  return out;
}

/** A Kubernetes label selector (`a=b,c!=d,e in (f,g),h notin (i),j,!k`) as a predicate. */
export function labelSelector(text) {
  const terms = [];
  const parts = text.match(/([^,(]+(\([^)]*\))?)/g) ?? [];
  for (const raw of parts) {
    const part = raw.trim();
    if (part === '') continue;
    let m;
    if ((m = /^([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)$/.exec(part))) {
      const [, key, op, values] = m;
      const set = values.split(',').map((v) => v.trim());
      terms.push((l) => (op === 'in' ? Object.hasOwn(l, key) && set.includes(l[key]) : !Object.hasOwn(l, key) || !set.includes(l[key])));
    } else if ((m = /^([^\s!=]+)\s*(==|=|!=)\s*([^\s]*)$/.exec(part))) {
      const [, key, op, value] = m;
      terms.push((l) => (op === '!=' ? l[key] !== value : l[key] === value));
    } else if ((m = /^!\s*([^\s!=]+)$/.exec(part))) {
      terms.push((l) => !Object.hasOwn(l, m[1]));
    } else if ((m = /^([^\s!=()]+)$/.exec(part))) {
      const key = m[1];
      terms.push((l) => Object.hasOwn(l, key));
    } else {
      throw new Failure('related', `${JSON.stringify(text)} is not a label selector`);
    }
  }
  return (labels) => terms.every((t) => t(labels));
}

function checkResponse(metadata, namespace, allowed, children, response) {
  for (const [what, map] of [['label', response?.parentLabels], ['annotation', response?.parentAnnotations]]) {
    for (const key of Object.keys(map ?? {})) {
      const prefix = key.includes('/') ? key.slice(0, key.indexOf('/')) : '';
      if (prefix === 'capstan.dev' || prefix.endsWith('.capstan.dev')) {
        throw new Failure('refused', `parent ${what} ${JSON.stringify(key)}: is under capstan.dev/, which only the host sets`);
      }
    }
  }
  const seen = new Set();
  children.forEach((c, i) => {
    const name = c?.metadata?.name;
    const what = `child ${i} (${c?.kind ?? '?'}/${name ?? '?'})`;
    const refuse = (why) => {
      throw new Failure('refused', `${what}: ${why}`);
    };
    const kind = metadata.children.find((k) => isKind(k, c));
    if (!kind) refuse(`${c?.apiVersion ?? ''} ${c?.kind ?? ''} is not a declared child kind`);
    if (typeof name !== 'string' || dns1123Subdomain(name) !== undefined) refuse(dns1123Subdomain(String(name ?? '')));
    const ns = c.metadata.namespace;
    if (kind.namespaced) {
      const where = ns ?? namespace;
      if (where === undefined) refuse('a namespaced child of a cluster-scoped parent must name its namespace');
      if (where !== namespace && !allowed.includes(where)) {
        refuse(`namespace ${where} is not the parent's namespace ${namespace}`);
      }
    } else {
      // The host needs the operator's grant for these, which fixtures do not model.
      refuse(`${kind.kind} is cluster-scoped and not allowed`);
    }
    if (c.metadata.ownerReferences !== undefined) refuse('ownerReferences are the host\'s to set');
    const plugin = c.metadata.labels?.['capstan.dev/plugin'];
    if (plugin !== undefined && plugin !== metadata.name) refuse(`label capstan.dev/plugin is ${JSON.stringify(plugin)}, not this plugin`);
    const key = `${c.apiVersion}/${c.kind}/${ns ?? namespace ?? ''}/${name}`;
    if (seen.has(key)) refuse('returned twice');
    seen.add(key);
  });
}

/**
 * The parent as the host shows `related`: without `status` and `metadata.resourceVersion`
 * (which objects it reads follows from what it asks for).
 */
function shownToRelated(parent) {
  if (parent === null || typeof parent !== 'object' || Array.isArray(parent)) return parent;
  const { status: _status, ...shown } = parent;
  if (shown.metadata !== null && typeof shown.metadata === 'object' && !Array.isArray(shown.metadata)) {
    const { resourceVersion: _version, ...metadata } = shown.metadata;
    shown.metadata = metadata;
  }
  return shown;
}
