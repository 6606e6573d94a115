// Kinds as the WIT's kind-ref records: plain objects, so a plugin can declare any kind
// without a type for it.

/** @param {{group?: string, version: string, kind: string, plural: string, namespaced: boolean}} k */
export function kindRef({ group = '', version, kind, plural, namespaced }) {
  const fields = { version, kind, plural };
  for (const field in fields) {
    const value = fields[field];
    if (typeof value !== 'string' || value === '') {
      throw new TypeError(`kind ${kind ?? '?'}: ${field} must be a non-empty string`);
    }
  }
  if (typeof namespaced !== 'boolean') {
    throw new TypeError(`kind ${kind}: namespaced must be true or false`);
  }
  return Object.freeze({ group, version, kind, plural, namespaced });
}

/** `group/version`, or `version` alone for the core group, as in `apiVersion`. */
export function apiVersion(kind) {
  return kind.group ? `${kind.group}/${kind.version}` : kind.version;
}

/** True when an object's `apiVersion` and `kind` name `kind`. */
export function isKind(kind, object) {
  if (object === null || typeof object !== 'object' || object.kind !== kind.kind) return false;
  const av = typeof object.apiVersion === 'string' ? object.apiVersion : '';
  const slash = av.indexOf('/');
  return slash < 0
    ? kind.group === '' && av === kind.version
    : av.slice(0, slash) === kind.group && av.slice(slash + 1) === kind.version;
}

/** The objects among `objects` of `kind`. */
export function ofKind(kind, objects) {
  const out = [];
  for (let i = 0; i < objects.length; i++) if (isKind(kind, objects[i])) out.push(objects[i]);
  return out;
}

/** A new object of `kind`: `apiVersion`, `kind` and these fields. */
export function object(kind, fields = {}) {
  return { apiVersion: apiVersion(kind), kind: kind.kind, ...fields };
}

// The kinds plugins most often touch, so they need not be spelled out.
export const ConfigMap = kindRef({ version: 'v1', kind: 'ConfigMap', plural: 'configmaps', namespaced: true });
export const Secret = kindRef({ version: 'v1', kind: 'Secret', plural: 'secrets', namespaced: true });
export const Service = kindRef({ version: 'v1', kind: 'Service', plural: 'services', namespaced: true });
export const ServiceAccount = kindRef({ version: 'v1', kind: 'ServiceAccount', plural: 'serviceaccounts', namespaced: true });
export const Namespace = kindRef({ version: 'v1', kind: 'Namespace', plural: 'namespaces', namespaced: false });
export const Pod = kindRef({ version: 'v1', kind: 'Pod', plural: 'pods', namespaced: true });
export const Job = kindRef({ group: 'batch', version: 'v1', kind: 'Job', plural: 'jobs', namespaced: true });
export const CronJob = kindRef({ group: 'batch', version: 'v1', kind: 'CronJob', plural: 'cronjobs', namespaced: true });
export const Deployment = kindRef({ group: 'apps', version: 'v1', kind: 'Deployment', plural: 'deployments', namespaced: true });
export const StatefulSet = kindRef({ group: 'apps', version: 'v1', kind: 'StatefulSet', plural: 'statefulsets', namespaced: true });
