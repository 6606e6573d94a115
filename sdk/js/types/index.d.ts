// Hand-written declarations of @capstan/sdk over the WIT's generated ones (types/wit, from
// `jco guest-types`): the SDK's plain objects are what a plugin works with; the WIT records
// are what the adapter (`@capstan/sdk/guest`) maps them to.

/// <reference path="./wit/interfaces/capstan-reconciler-types.d.ts" />
import type * as wit from 'capstan:reconciler/types@0.3.0';

export type { wit };

/** The WIT package this SDK implements. */
export declare const WIT_PACKAGE: 'capstan:reconciler@0.3.0';

/** A Kubernetes object as JSON: `apiVersion`, `kind`, `metadata` and the rest. */
export interface KubeObject {
  apiVersion?: string;
  kind?: string;
  metadata?: ObjectMeta;
  [field: string]: unknown;
}

export interface ObjectMeta {
  name?: string;
  namespace?: string;
  uid?: string;
  generation?: number;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  [field: string]: unknown;
}

/** A served kind, as the WIT's `kind-ref`. */
export type KindRef = Readonly<wit.KindRef>;

/** Checks and freezes a kind; `group` defaults to "" (the core group). */
export declare function kindRef(kind: Omit<wit.KindRef, 'group'> & { group?: string }): KindRef;
/** `group/version`, or `version` for the core group. */
export declare function apiVersion(kind: KindRef): string;
/** True when `object`'s apiVersion and kind name `kind`. */
export declare function isKind(kind: KindRef, object: unknown): object is KubeObject;
/** The objects of `kind` among `objects`. */
export declare function ofKind<T extends KubeObject = KubeObject>(kind: KindRef, objects: readonly unknown[]): T[];
/** A new object of `kind` with these fields. */
export declare function object<T extends object>(kind: KindRef, fields?: T): T & { apiVersion: string; kind: string };

export declare namespace kinds {
  export { kindRef, apiVersion, isKind, ofKind, object };
  export const ConfigMap: KindRef;
  export const Secret: KindRef;
  export const Service: KindRef;
  export const ServiceAccount: KindRef;
  export const Namespace: KindRef;
  export const Pod: KindRef;
  export const Job: KindRef;
  export const CronJob: KindRef;
  export const Deployment: KindRef;
  export const StatefulSet: KindRef;
}

/** Why a reconcile produced no response: `retry` (transient) or `fatal` (until the object changes). */
export declare class ReconcileError extends Error {
  constructor(kind: 'retry' | 'fatal', message: string, afterMs?: number);
  readonly kind: 'retry' | 'fatal';
  /** For `retry`: wait this long; undefined is the host's exponential backoff. */
  readonly afterMs: number | undefined;
  readonly isFatal: boolean;
  readonly isRetry: boolean;
}
export declare function fatal(message: string): ReconcileError;
export declare function retry(message: string): ReconcileError;
export declare function retryAfter(message: string, afterMs: number): ReconcileError;

/** Settings: a JSON Schema (shown by `capstan inspect`, checked here) and checks it cannot express. */
export interface SettingsDeclaration<S = Record<string, unknown>> {
  readonly schema: Record<string, unknown>;
  /** A one-line refusal naming the setting, or nothing when the settings are fine. */
  readonly validate?: (settings: S) => string | undefined | void;
}
export declare function defineSettings<S = Record<string, unknown>>(declaration: SettingsDeclaration<S>): SettingsDeclaration<S>;
export declare class SettingsError extends Error {}

export declare class Metadata {
  constructor(name: string, version: string);
  readonly name: string;
  readonly version: string;
  readonly children: KindRef[];
  readonly related: KindRef[];
  readonly finalizerName: string | undefined;
  /** Declare a child kind the plugin may return. */
  child(kind: KindRef): this;
  /** Declare a kind the plugin reads but never writes. */
  relatedKind(kind: KindRef): this;
  settings(declared: SettingsDeclaration<any>): this;
  finalizer(name: string): this;
  settingsSchema(): Record<string, unknown> | undefined;
  /** The settings as the plugin reads them; throws SettingsError with the host's refusal. */
  validateSettings(settings: string | object): Record<string, unknown>;
}

export declare class Related {
  /** The objects of `kind` with these names (those that exist). */
  static named(kind: KindRef, names: Iterable<string>): Related;
  /** The objects of `kind` whose labels match a label selector (`app=web,tier in (a,b)`). */
  static labelled(kind: KindRef, selector: string): Related;
  /** Read from this namespace instead of the parent's (cluster-scoped parents only). */
  inNamespace(namespace: string): this;
  readonly group: string;
  readonly kind: string;
  readonly namespace: string | undefined;
  readonly selector: { names: string[] } | { labels: string };
}

export declare class Event {
  constructor(type: 'normal' | 'warning', reason: string, message: string);
  static normal(reason: string, message: string): Event;
  static warning(reason: string, message: string): Event;
  readonly type: 'normal' | 'warning';
  readonly reason: string;
  readonly message: string;
}

export declare class Response {
  children: KubeObject[];
  status: Record<string, unknown> | undefined;
  requeueAfterMs: number | undefined;
  events: Event[];
  finalized: boolean;
  /** Labels of the parent itself to set, or remove (null). */
  parentLabels: Record<string, string | null>;
  /** Annotations of the parent itself to set, or remove (null). */
  parentAnnotations: Record<string, string | null>;
  child(object: KubeObject): this;
  withStatus(status: object): this;
  requeueAfter(ms: number): this;
  event(event: Event): this;
  finalize(): this;
  parentLabel(key: string, value: string): this;
  removeParentLabel(key: string): this;
  parentAnnotation(key: string, value: string): this;
  removeParentAnnotation(key: string): this;
}

export declare class Context<S = Record<string, unknown>> {
  constructor(fields?: {
    children?: KubeObject[];
    related?: KubeObject[];
    settings?: S;
    now?: Date;
    nowText?: string;
    finalizing?: boolean;
  });
  /** Observed children (objects of the declared child kinds the parent controls). */
  readonly children: KubeObject[];
  /** The related objects the parent's queries selected, in query order. */
  readonly related: KubeObject[];
  /** The operator's settings, checked against the schema, defaults filled in. */
  readonly settings: S;
  /** The host's clock at dispatch (the Unix epoch in `related`). */
  readonly now: Date;
  /** `now` as the host sent it. */
  readonly nowText: string;
  readonly finalizing: boolean;
  childrenOf<T extends KubeObject = KubeObject>(kind: KindRef): T[];
  relatedOf<T extends KubeObject = KubeObject>(kind: KindRef): T[];
  child<T extends KubeObject = KubeObject>(kind: KindRef, name: string): T | undefined;
}

/** What a plugin implements; `@capstan/sdk/guest` exports it as the WIT `plugin`. */
export interface Reconciler<P extends KubeObject = KubeObject, S = any> {
  /** The kind this plugin reconciles. */
  readonly parent: KindRef;
  metadata(): Metadata;
  /** Which related objects this parent needs; called whenever the parent changes. */
  related?(parent: P, ctx: Context<S>): Related[] | Promise<Related[]>;
  /**
   * The desired state of one parent; throw a ReconcileError to fail. An `async` one's
   * promise is settled inside the component (componentize-js runs its event loop).
   */
  reconcile(parent: P, ctx: Context<S>): Response | Promise<Response>;
}

export interface Condition {
  type: string;
  status: 'True' | 'False' | 'Unknown';
  reason: string;
  message: string;
  observedGeneration?: number;
  lastTransitionTime: string;
}

export declare const READY: 'Ready';

/** Conditions with the Rust SDK's semantics: lastTransitionTime moves only with status. */
export declare class Conditions {
  constructor(previous: readonly Condition[] | undefined, generation: number | undefined, now: Date | string);
  set(type: string, status: boolean | 'True' | 'False' | 'Unknown', reason: string, message?: string): this;
  ready(status: boolean | 'True' | 'False' | 'Unknown', reason: string, message?: string): this;
  get(type: string): Condition | undefined;
  toArray(): Condition[];
}

export declare namespace conditions {
  export { Conditions, READY };
  export function find(conditions: readonly Condition[] | undefined, type: string): Condition | undefined;
  export function schema(): Record<string, unknown>;
}

export declare namespace names {
  /** undefined when valid; else the host's message. */
  export function dns1123Subdomain(name: string): string | undefined;
  export function dns1123Label(name: string): string | undefined;
  /** Rust's `{:?}` of a string. */
  export function debugString(text: string): string;
  export function printable(name: string): string;
}

export type Level = wit.Level;
export declare namespace log {
  export function log(level: Level, message: string): void;
  export function setLogSink(write: (level: Level, message: string) => void): void;
  export function trace(message: string): void;
  export function debug(message: string): void;
  export function info(message: string): void;
  export function warn(message: string): void;
  export function error(message: string): void;
}

export declare function parseTime(text: string): Date | undefined;
export declare function formatTime(date: Date): string;
