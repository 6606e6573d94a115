// Write Capstan reconcile plugins in JavaScript: the same concepts as the Rust SDK, on
// plain JSON objects. Everything here runs under node as well as in the component, so
// plugins are unit-tested natively (`@capstan/sdk/testing`); `@capstan/sdk/guest` is the
// component's adapter.

export * as conditions from './conditions.js';
export { Conditions, READY } from './conditions.js';
export { Context } from './context.js';
export { ReconcileError, fatal, retry, retryAfter } from './errors.js';
export * as kinds from './kinds.js';
export { apiVersion, isKind, kindRef, object, ofKind } from './kinds.js';
export * as log from './log.js';
export { Metadata } from './metadata.js';
export * as names from './names.js';
export { Related } from './related.js';
export { Event, Response } from './response.js';
export { SettingsError, defineSettings } from './settings.js';
export { formatTime, parseTime } from './time.js';

/** The WIT package this SDK implements. */
export const WIT_PACKAGE = 'capstan:reconciler@0.3.0';
