// Kubernetes-style status conditions, with the Rust SDK's semantics
// (sdk/src/conditions.rs): a list keyed by `type`; setting one always updates its
// reason, message and observedGeneration, but its lastTransitionTime only when its status
// changes (or it is new), so a condition rewritten unchanged keeps its time. The time is
// the host's clock (`ctx.now`), never the plugin's.

import { formatTime, parseTime } from './time.js';

/** The type of the condition that says the object is fully reconciled and working. */
export const READY = 'Ready';

/** @param {boolean | 'True' | 'False' | 'Unknown'} status */
function statusText(status) {
  if (status === true) return 'True';
  if (status === false) return 'False';
  if (status === 'True' || status === 'False' || status === 'Unknown') return status;
  throw new TypeError(`condition status must be a boolean, "True", "False" or "Unknown", got ${JSON.stringify(status)}`);
}

function timeText(time) {
  if (time instanceof Date) return formatTime(time);
  const parsed = parseTime(time);
  if (!parsed) throw new TypeError(`not an RFC 3339 time: ${JSON.stringify(time)}`);
  return formatTime(parsed);
}

/** A condition as the Rust SDK writes one back: its fields only, its time in UTC seconds. */
function normalized(c) {
  const out = {
    type: String(c.type ?? ''),
    status: String(c.status ?? ''),
    reason: String(c.reason ?? ''),
    message: String(c.message ?? ''),
  };
  if (typeof c.observedGeneration === 'number') out.observedGeneration = c.observedGeneration;
  const time = parseTime(c.lastTransitionTime);
  out.lastTransitionTime = time ? formatTime(time) : String(c.lastTransitionTime ?? '');
  return out;
}

/** The conditions of one status being written: the previous ones, updated in place. */
export class Conditions {
  /**
   * @param {object[] | undefined} previous the conditions the parent's status holds now
   * @param {number | undefined} generation the parent's `metadata.generation`
   * @param {Date | string} now usually `ctx.now`
   */
  constructor(previous, generation, now) {
    this.list = [];
    if (Array.isArray(previous)) for (let i = 0; i < previous.length; i++) this.list.push(normalized(previous[i]));
    this.generation = typeof generation === 'number' ? generation : undefined;
    this.now = timeText(now);
  }

  /** Set the condition of `type`; its transition time changes only with its status. */
  set(type, status, reason, message = '') {
    const condition = {
      type,
      status: statusText(status),
      reason,
      message: String(message),
      lastTransitionTime: this.now,
    };
    if (this.generation !== undefined) condition.observedGeneration = this.generation;
    let i = 0;
    while (i < this.list.length && this.list[i].type !== type) i++;
    if (i === this.list.length) {
      this.list.push(condition);
    } else {
      if (this.list[i].status === condition.status) {
        condition.lastTransitionTime = this.list[i].lastTransitionTime;
      }
      this.list[i] = condition;
    }
    return this;
  }

  /** Set the `Ready` condition. */
  ready(status, reason, message = '') {
    return this.set(READY, status, reason, message);
  }

  /** The condition of `type`, if set. */
  get(type) {
    return find(this.list, type);
  }

  /** The conditions, to put into the status. */
  toArray() {
    const out = [];
    for (let i = 0; i < this.list.length; i++) out.push({ ...this.list[i] });
    return out;
  }
}

/** The condition of `type` in `conditions`, if any. */
export function find(conditions, type) {
  if (!Array.isArray(conditions)) return undefined;
  for (let i = 0; i < conditions.length; i++) {
    const c = conditions[i];
    if (c && c.type === type) return c;
  }
  return undefined;
}

/** JSON Schema of a list of conditions as Kubernetes' own types declare it. */
export function schema() {
  return {
    description: 'The object\'s state as Kubernetes-style conditions, keyed by type.',
    type: 'array',
    'x-kubernetes-list-type': 'map',
    'x-kubernetes-list-map-keys': ['type'],
    items: {
      type: 'object',
      required: ['type', 'status', 'lastTransitionTime', 'reason', 'message'],
      properties: {
        type: { description: 'Condition type in CamelCase, e.g. Ready.', type: 'string', maxLength: 316 },
        status: { type: 'string', enum: ['True', 'False', 'Unknown'] },
        observedGeneration: { description: 'The metadata.generation the condition describes.', type: 'integer', format: 'int64', minimum: 0 },
        lastTransitionTime: { description: 'When status last changed.', type: 'string', format: 'date-time' },
        reason: { description: 'Why, in UpperCamelCase.', type: 'string', maxLength: 1024, minLength: 1 },
        message: { description: 'Why, for humans.', type: 'string', maxLength: 32768 },
      },
    },
  };
}
