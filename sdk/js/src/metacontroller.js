// Metacontroller's hook contract on Capstan's: a CompositeController's or a
// DecoratorController's `sync`, `finalize` and `customize` hooks run as a plugin's
// `reconcile` and `related` — the same mapping as the Python SDK's
// `capstan_sdk.metacontroller`, for hooks written in JavaScript.
//
// A hook is a function from a request's JSON to (a promise of) its response's JSON; a
// fission-style function (`module.exports = async function (context)`, as Metacontroller's
// nodejs server runs them) becomes one with `fission`. `Composite` (and `Decorator`, whose
// parent is `object` and children `attachments`) builds each request as Metacontroller
// would — the `controller` object, the `parent`, the `children` and `related` object maps
// keyed by `Kind.apiVersion` and then by name (hook version v1) or `namespace/name` (v2),
// `finalizing` — and turns the response into Capstan's: the children applied (namespaced
// ones without a namespace in the parent's), the status as the hook returns it with
// `observedGeneration`, `resyncAfterSeconds` as a requeue, `finalized` as the finalizer's
// release.

import { fatal, retry } from './errors.js';
import { apiVersion, isKind } from './kinds.js';
import { Related } from './related.js';
import { Response } from './response.js';

/** The hook versions Metacontroller defines: how the object maps are keyed. */
export const VERSIONS = ['v1', 'v2'];

/**
 * A fission-style function (`async function (context)`, answering `{status, headers,
 * body}`) as a hook: called with `{request: {body}}` as Metacontroller's nodejs server
 * calls it. A status other than 2xx, or a body that is no JSON object, is an error to
 * retry, as Metacontroller retries a failed webhook.
 */
export function fission(fn, urlPath) {
  if (typeof fn !== 'function') throw new TypeError(`${urlPath}: the hook's module exports no function`);
  return async (request) => {
    const answer = await fn({ request: { body: request } });
    const status = answer?.status ?? 200;
    let body = answer?.body;
    if (status < 200 || status >= 300) {
      throw retry(`${urlPath} answered ${status}: ${String(typeof body === 'string' ? body : JSON.stringify(body)).slice(0, 200)}`);
    }
    if (typeof body === 'string') {
      try {
        body = JSON.parse(body || '{}');
      } catch (e) {
        throw retry(`${urlPath} answered with JSON that does not parse: ${e.message}`);
      }
    }
    if (body === null || typeof body !== 'object' || Array.isArray(body)) {
      throw retry(`${urlPath} answered ${body === null ? 'null' : typeof body}, not an object`);
    }
    return body;
  };
}

/** `Kind.apiVersion`, the key of a kind's map: `Pod.v1`, `StatefulSet.apps/v1`. */
export function kindKey(kind) {
  return `${kind.kind}.${apiVersion(kind)}`;
}

/**
 * An object's key in its kind's map. v2: `namespace/name` for a namespaced object, its
 * name otherwise. v1: the name when the object and the parent have one scope,
 * `namespace/name` for a namespaced object of a cluster-scoped parent.
 */
export function objectKey(object, parentNamespaced, version) {
  const name = object?.metadata?.name ?? '';
  const ns = object?.metadata?.namespace;
  if (!ns || (version === 'v1' && parentNamespaced)) return name;
  return `${ns}/${name}`;
}

/** Every kind's map (an empty one for a kind with no objects), as Metacontroller sends them. */
export function objectMap(kinds, objects, parent, version) {
  const parentNamespaced = Boolean(parent?.metadata?.namespace);
  const out = {};
  for (const kind of kinds) {
    const map = {};
    for (const o of objects) if (isKind(kind, o)) map[objectKey(o, parentNamespaced, version)] = o;
    out[kindKey(kind)] = map;
  }
  return out;
}

/** A `metav1.LabelSelector`'s requirements as [key, operator, values], matchLabels first. */
function requirements(selector) {
  const out = Object.entries(selector?.matchLabels ?? {})
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([k, v]) => [k, 'In', [v]]);
  for (const e of selector?.matchExpressions ?? []) {
    const op = e.operator ?? '';
    if (!['In', 'NotIn', 'Exists', 'DoesNotExist'].includes(op)) {
      throw fatal(`label selector: unknown operator ${JSON.stringify(op)} for key ${JSON.stringify(e.key ?? '')}`);
    }
    out.push([e.key ?? '', op, e.values ?? []]);
  }
  return out;
}

/** A `metav1.LabelSelector` as selector text: `app=web,tier in (a,b),!legacy`. */
export function labelSelector(selector) {
  const text = {
    In: (k, v) => (v.length === 1 ? `${k}=${v[0]}` : `${k} in (${v.join(',')})`),
    NotIn: (k, v) => `${k} notin (${v.join(',')})`,
    Exists: (k) => k,
    DoesNotExist: (k) => `!${k}`,
  };
  return requirements(selector)
    .map(([k, op, v]) => text[op](k, v))
    .join(',');
}

/** Whether `labels` match a `metav1.LabelSelector` (none or empty matches all). */
export function selects(selector, labels = {}) {
  const has = (k) => Object.hasOwn(labels, k);
  return requirements(selector).every(([k, op, v]) => {
    if (op === 'In') return has(k) && v.includes(labels[k]);
    if (op === 'NotIn') return !has(k) || !v.includes(labels[k]);
    return op === 'Exists' ? has(k) : !has(k);
  });
}

function isNamespace(object) {
  return object?.apiVersion === 'v1' && object?.kind === 'Namespace';
}

/**
 * `value` as the API server stores it under a structural `schema`: the fields the schema
 * does not declare dropped, unless it preserves unknown fields.
 */
export function prune(value, schema) {
  if (Array.isArray(value)) {
    return schema?.items && typeof schema.items === 'object' ? value.map((v) => prune(v, schema.items)) : value;
  }
  if (value === null || typeof value !== 'object') return value;
  const props = schema?.properties ?? {};
  const extra = schema?.additionalProperties;
  const keep = schema?.['x-kubernetes-preserve-unknown-fields'] === true || extra === true;
  const out = {};
  for (const [key, item] of Object.entries(value)) {
    if (Object.hasOwn(props, key)) out[key] = prune(item, props[key]);
    else if (extra && typeof extra === 'object') out[key] = prune(item, extra);
    else if (keep) out[key] = item;
  }
  return out;
}

/**
 * A CompositeController's hooks as a plugin. `controller` is the CompositeController
 * object as Metacontroller would send it; `metadata` declares its parent, child and
 * related kinds (and a finalizer when there is a `finalize` hook); `version` is the
 * hooks' (`spec.hooks.sync.version`); `statusSchema`, the parent's status schema (its
 * CRD's), prunes the status written as the API server prunes Metacontroller's status
 * update (an applied status with an undeclared field is refused instead).
 */
export class Composite {
  static PARENT_FIELD = 'parent';
  static CHILDREN_FIELD = 'children';

  constructor({ controller, metadata, parent, sync, finalize, customize, version = 'v1', statusSchema }) {
    if (!VERSIONS.includes(version)) {
      throw new TypeError(`hook version ${JSON.stringify(version)}: Metacontroller has ${VERSIONS.join(', ')}`);
    }
    Object.assign(this, { controller, declared: metadata, parent, sync, finalize, customize, version, statusSchema });
  }

  metadata() {
    return this.declared;
  }

  async related(parent) {
    if (!this.customize) return [];
    return (await this.rules(parent)).flatMap((rule) => this.queries(rule, parent));
  }

  /** The customize hook's `relatedResources` for `parent`. */
  async rules(parent) {
    const answer = await this.customize({ controller: this.controller, [this.constructor.PARENT_FIELD]: parent });
    return answer?.relatedResources ?? [];
  }

  /** The declared related kind a rule names. */
  kindOf(rule) {
    const kind = this.declared.related.find((k) => apiVersion(k) === rule.apiVersion && k.plural === rule.resource);
    if (!kind) throw fatal(`customize: ${rule.resource} (${rule.apiVersion}) is not declared related`);
    return kind;
  }

  /**
   * A rule's queries: one, or for a `namespaceSelector` two — the Namespaces it selects,
   * and its objects in every namespace the parent may read (the hook is shown those in a
   * selected namespace, see `shown`).
   */
  queries(rule, parent) {
    const kind = this.kindOf(rule);
    if (rule.namespaceSelector === undefined || rule.namespaceSelector === null) return [this.query(kind, rule, parent)];
    const what = `customize: ${rule.resource} (${rule.apiVersion})`;
    if (rule.names?.length) throw fatal(`${what}: a rule cannot have both names and a namespaceSelector`);
    if (rule.namespace) throw fatal(`${what}: a rule cannot have both a namespace and a namespaceSelector`);
    if (this.everyNamespace(parent) === undefined) throw fatal(`${what}: a namespaceSelector cannot be used by a namespaced parent in a v1 hook`);
    if (!kind.namespaced) throw fatal(`${what}: a namespaceSelector is only for namespaced resources`);
    const namespaces = this.declared.related.find((k) => apiVersion(k) === 'v1' && k.kind === 'Namespace');
    if (!namespaces) throw fatal(`${what}: a namespaceSelector reads the Namespaces it selects; declare v1 namespaces related`);
    return [Related.labelled(namespaces, labelSelector(rule.namespaceSelector)), Related.labelled(kind, labelSelector(rule.labelSelector)).inNamespace('*')];
  }

  /** A rule without a `namespaceSelector` as Capstan's query. */
  query(kind, rule, parent) {
    const query = rule.names?.length ? Related.named(kind, rule.names) : Related.labelled(kind, labelSelector(rule.labelSelector));
    const ns = rule.namespace || this.everyNamespace(parent);
    return ns ? query.inNamespace(ns) : query;
  }

  /**
   * Where a rule naming no namespace reads: a v1 hook's namespaced parent its own
   * (undefined: the default); otherwise, as Metacontroller, every namespace (`*`: every
   * one the operator lets the parent read).
   */
  everyNamespace(parent) {
    return this.version === 'v1' && parent?.metadata?.namespace ? undefined : '*';
  }

  /** The hook request for `parent`, as Metacontroller sends it. */
  async request(parent, ctx) {
    const { PARENT_FIELD, CHILDREN_FIELD } = this.constructor;
    return {
      controller: this.controller,
      [PARENT_FIELD]: parent,
      [CHILDREN_FIELD]: objectMap(this.declared.children, ctx.children, parent, this.version),
      related: objectMap(this.declared.related, await this.shown(parent, ctx.related), parent, this.version),
      finalizing: ctx.finalizing,
    };
  }

  /**
   * The related objects the hook is shown. Under a `namespaceSelector` rule the host read
   * the rule's kind in every namespace and the Namespaces the selector picks: the hook
   * sees the rule's objects in a picked namespace, and a Namespace only where a rule asks
   * for it (the rules are asked again, only when a Namespace was read).
   */
  async shown(parent, related) {
    if (!this.customize || !related.some(isNamespace)) return related;
    const rules = await this.rules(parent);
    if (!rules.some((r) => r.namespaceSelector !== undefined && r.namespaceSelector !== null)) return related;
    const namespaces = new Map(related.filter(isNamespace).map((o) => [o.metadata?.name, o]));
    return related.filter((o) => rules.some((r) => this.selectsRelated(r, o, namespaces, parent)));
  }

  /** Whether `rule` selects related `object`, as Metacontroller matches one. */
  selectsRelated(rule, object, namespaces, parent) {
    const kind = this.kindOf(rule);
    if (!isKind(kind, object)) return false;
    const meta = object.metadata ?? {};
    const labels = meta.labels ?? {};
    if (rule.namespaceSelector !== undefined && rule.namespaceSelector !== null) {
      const ns = namespaces.get(meta.namespace);
      return ns !== undefined && selects(rule.namespaceSelector, ns.metadata?.labels ?? {}) && selects(rule.labelSelector, labels);
    }
    if (rule.names?.length ? !rule.names.includes(meta.name) : !selects(rule.labelSelector, labels)) return false;
    const where = rule.namespace || this.everyNamespace(parent);
    if (!kind.namespaced || where === '*') return true;
    return meta.namespace === (where ?? parent?.metadata?.namespace);
  }

  async reconcile(parent, ctx) {
    const hook = ctx.finalizing && this.finalize ? this.finalize : this.sync;
    const answer = await hook(await this.request(parent, ctx));
    return this.response(answer ?? {}, parent, ctx.finalizing);
  }

  /** Capstan's response for a hook's `answer`. */
  response(answer, parent, finalizing) {
    const out = new Response();
    for (const child of answer[this.constructor.CHILDREN_FIELD] ?? []) out.child(this.placed(child, parent));
    if (answer.status !== undefined && answer.status !== null) {
      const status = this.statusSchema ? prune(this.status(answer.status, parent), this.statusSchema) : this.status(answer.status, parent);
      // Nothing the parent's schema holds: no status to write.
      if (!this.statusSchema || Object.keys(status).length) out.withStatus(status);
    }
    // The controller's resyncPeriodSeconds is the host's `resync`, set where it runs.
    if (answer.resyncAfterSeconds) out.requeueAfter(Math.round(Number(answer.resyncAfterSeconds) * 1000));
    if (finalizing && answer.finalized) out.finalize();
    return out;
  }

  /** The status to write: the hook's, with the parent's `observedGeneration`. */
  status(status, parent) {
    const generation = parent?.metadata?.generation;
    return generation ? { ...status, observedGeneration: generation } : { ...status };
  }

  /** `child` with the parent's namespace when it is of a namespaced kind and names none. */
  placed(child, parent) {
    const ns = parent?.metadata?.namespace;
    const kind = this.declared.children.find((k) => isKind(k, child));
    if (!ns || child?.metadata?.namespace || (kind && !kind.namespaced)) return child;
    return { ...child, metadata: { ...child.metadata, namespace: ns } };
  }
}

/**
 * A DecoratorController's hooks as a plugin: the target is the parent (`object` in the
 * hooks' requests), its attachments the children. `parentSelector` and
 * `annotationSelector` are its resource rule's: a target they do not select is finalized,
 * as Metacontroller finalizes one that stops matching (the finalize hook, if any, cleans
 * up; its `finalized` lets the target go).
 * The hooks' `labels` and `annotations` set and remove the target's own.
 */
export class Decorator extends Composite {
  static PARENT_FIELD = 'object';
  static CHILDREN_FIELD = 'attachments';

  constructor({ parentSelector, annotationSelector, ...rest }) {
    super(rest);
    this.parentSelector = parentSelector;
    this.annotationSelector = annotationSelector;
  }

  selected(parent) {
    const meta = parent?.metadata ?? {};
    return selects(this.parentSelector, meta.labels ?? {}) && selects(this.annotationSelector, meta.annotations ?? {});
  }

  async related(parent, ctx) {
    return this.selected(parent) ? super.related(parent, ctx) : [];
  }

  async reconcile(parent, ctx) {
    if (this.selected(parent)) return super.reconcile(parent, ctx);
    // As under Metacontroller, a target the rule no longer selects is finalized: the
    // finalize hook cleans its attachments up, and its answer lets the finalizer go;
    // without one, nothing is held for it.
    if (!this.finalize) return new Response().finalize();
    const answer = await this.finalize({ ...(await this.request(parent, ctx)), finalizing: true });
    return this.response(answer ?? {}, parent, true);
  }

  /** As Metacontroller: the hook's `labels` and `annotations` set the target's (a null
   * value removes one), and leave its others as they are. */
  response(answer, parent, finalizing) {
    const out = super.response(answer, parent, finalizing);
    for (const [field, set, remove] of [['labels', 'parentLabel', 'removeParentLabel'], ['annotations', 'parentAnnotation', 'removeParentAnnotation']]) {
      for (const [key, value] of Object.entries(answer[field] ?? {})) {
        if (value === null || value === undefined) out[remove](key);
        else out[set](key, value);
      }
    }
    return out;
  }

  // The target's own controller keeps its observedGeneration; the hook's fields only.
  status(status) {
    return { ...status };
  }
}
