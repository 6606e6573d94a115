// Why a reconcile produced no response, with the Rust SDK's two meanings: `retry` for
// what may pass by itself (the host retries, with backoff or after `afterMs`), `fatal` for
// what only a change to the object can fix (the host records a Warning and waits).

export class ReconcileError extends Error {
  /**
   * @param {'retry' | 'fatal'} kind
   * @param {string} message
   * @param {number | undefined} afterMs
   */
  constructor(kind, message, afterMs = undefined) {
    super(message);
    this.name = 'ReconcileError';
    this.kind = kind;
    this.afterMs = afterMs;
  }

  get isFatal() {
    return this.kind === 'fatal';
  }

  get isRetry() {
    return this.kind === 'retry';
  }

  toString() {
    if (this.kind === 'fatal') return `fatal: ${this.message}`;
    return this.afterMs === undefined
      ? `retry: ${this.message}`
      : `retry after ${this.afterMs}ms: ${this.message}`;
  }
}

/** A failure that retrying cannot fix until the object changes. */
export function fatal(message) {
  return new ReconcileError('fatal', String(message));
}

/** A transient failure worth retrying, with the host's exponential backoff. */
export function retry(message) {
  return new ReconcileError('retry', String(message));
}

/** A transient failure worth retrying after `afterMs` milliseconds. */
export function retryAfter(message, afterMs) {
  if (!Number.isInteger(afterMs) || afterMs < 0) {
    throw new TypeError(`retryAfter: afterMs must be a whole number of milliseconds, got ${afterMs}`);
  }
  return new ReconcileError('retry', String(message), afterMs);
}
