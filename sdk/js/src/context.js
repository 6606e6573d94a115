// What a reconcile gets besides the parent: the observed children, the related objects
// its queries selected, the operator's settings and the host's clock. Objects are plain
// JSON values; `childrenOf(kind)` and `relatedOf(kind)` are the typed views by kind.

import { fatal } from './errors.js';
import { isKind, ofKind } from './kinds.js';
import { formatTime } from './time.js';

export class Context {
  /**
   * @param {{children?: object[], related?: object[], settings?: object, now?: Date,
   *   nowText?: string, finalizing?: boolean}} fields
   */
  constructor({ children = [], related = [], settings = {}, now = new Date(0), nowText = undefined, finalizing = false } = {}) {
    this.children = children;
    this.related = related;
    this.settings = settings;
    /** The host's clock when it dispatched this reconcile (the Unix epoch in `related`). */
    this.now = now;
    /** `now` as the host sent it (RFC 3339, UTC). */
    this.nowText = nowText ?? formatTime(now);
    /** True when the parent is being deleted and the plugin's finalizer is still on it. */
    this.finalizing = finalizing;
  }

  /** The observed children of `kind`, e.g. `ctx.childrenOf(Job)`. */
  childrenOf(kind) {
    return ofKind(kind, this.children);
  }

  /** The related objects of `kind` the parent's queries selected that exist. */
  relatedOf(kind) {
    return ofKind(kind, this.related);
  }

  /** The observed child of `kind` named `name`, if any. */
  child(kind, name) {
    const children = this.children;
    for (let i = 0; i < children.length; i++) {
      const c = children[i];
      if (isKind(kind, c) && c?.metadata?.name === name) return c;
    }
    return undefined;
  }
}

/** JSON text as a value, or a fatal error naming `what`. */
export function parseJson(what, text) {
  try {
    return JSON.parse(text);
  } catch (e) {
    throw fatal(`${what} is not JSON: ${e.message}`);
  }
}
