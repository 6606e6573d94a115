// The desired state a reconcile returns, built fluently.

export class Event {
  /**
   * @param {'normal' | 'warning'} type
   * @param {string} reason UpperCamelCase, e.g. `JobCreated`
   * @param {string} message for humans
   */
  constructor(type, reason, message) {
    this.type = type;
    this.reason = reason;
    this.message = message;
  }

  /** An informational event. */
  static normal(reason, message) {
    return new Event('normal', reason, message);
  }

  /** An event a human may need to act on. */
  static warning(reason, message) {
    return new Event('warning', reason, message);
  }
}

/**
 * The full desired state for one parent: the host applies these children, prunes the
 * observed ones not among them, sets the parent's labels and annotations it names, writes
 * the status and records the events.
 */
export class Response {
  constructor() {
    /** @type {object[]} desired children, each with apiVersion and kind */
    this.children = [];
    /** @type {object | undefined} the parent's new status; undefined leaves it untouched */
    this.status = undefined;
    /** @type {number | undefined} */
    this.requeueAfterMs = undefined;
    /** @type {Event[]} */
    this.events = [];
    this.finalized = false;
    /** @type {Record<string, string | null>} labels of the parent itself to set (or remove: null) */
    this.parentLabels = {};
    /** @type {Record<string, string | null>} annotations of the parent itself to set (or remove: null) */
    this.parentAnnotations = {};
  }

  /** Add a desired child (a plain object with apiVersion and kind). */
  child(object) {
    if (object === null || typeof object !== 'object' || Array.isArray(object)) {
      throw new TypeError('Response.child: a child is an object with apiVersion and kind');
    }
    this.children.push(object);
    return this;
  }

  /** Set the parent's status (a plain object). */
  withStatus(status) {
    if (status === null || typeof status !== 'object' || Array.isArray(status)) {
      throw new TypeError('Response.withStatus: the status is an object');
    }
    this.status = status;
    return this;
  }

  /** Reconcile again after `ms` milliseconds even if nothing changes. */
  requeueAfter(ms) {
    if (!Number.isInteger(ms) || ms < 0) throw new TypeError(`Response.requeueAfter: ${ms} is not a whole number of milliseconds`);
    this.requeueAfterMs = ms;
    return this;
  }

  /** Record an event on the parent. */
  event(event) {
    this.events.push(event);
    return this;
  }

  /** Set label `key` of the parent itself to `value`; its other labels stay as they are. */
  parentLabel(key, value) {
    this.parentLabels[key] = String(value);
    return this;
  }

  /** Remove label `key` from the parent itself, if it is there. */
  removeParentLabel(key) {
    this.parentLabels[key] = null;
    return this;
  }

  /** Set annotation `key` of the parent itself to `value`; its other annotations stay. */
  parentAnnotation(key, value) {
    this.parentAnnotations[key] = String(value);
    return this;
  }

  /** Remove annotation `key` from the parent itself, if it is there. */
  removeParentAnnotation(key) {
    this.parentAnnotations[key] = null;
    return this;
  }

  /** Report that finalization is complete; on a live parent with no children, that the
   * plugin holds nothing for it (the host takes its finalizer off). */
  finalize() {
    this.finalized = true;
    return this;
  }
}
