import type { KubeObject, ReconcileError, Reconciler, Response } from './index.js';

export declare const DEFAULT_NOW: '2026-01-01T00:00:00Z';

export declare function parseDocuments(text: string): unknown[];
export declare function loadDocuments(path: string): unknown[];
export declare class FixtureError extends Error {}

/** Why `Fixture.check` has no response. */
export declare class Failure extends Error {
  readonly kind: 'settings' | 'related' | 'plugin' | 'refused';
  /** For `plugin`: the reconciler's error. */
  readonly error: ReconcileError | undefined;
}

/** One reconcile's input, run natively through the same calls as the component. */
export declare class Fixture {
  constructor(parent: KubeObject);
  static parse(text: string): Fixture;
  static load(path: string): Fixture;
  children(text: string): this;
  childrenFile(path: string): this;
  child(object: KubeObject): this;
  related(text: string): this;
  relatedFile(path: string): this;
  relatedObject(object: KubeObject): this;
  settings(text: string): this;
  settingsFile(path: string): this;
  withSettings(value: object): this;
  now(time: Date | string): this;
  finalizing(): this;
  allowNamespace(namespace: string): this;
  relatedQueries(reconciler: Reconciler<any, any>): Array<{ group: string; kind: string; namespace?: string; selector: { tag: 'names'; val: string[] } | { tag: 'labels'; val: string } }>;
  /** The Response, or throws a Failure (a promise of either for an `async` reconciler). */
  check(reconciler: Reconciler<any, any>): Response | Promise<Response>;
  /**
   * The Response, or throws the reconciler's ReconcileError; anything the host refuses
   * throws a Failure (a promise of either for an `async` reconciler).
   */
  reconcile(reconciler: Reconciler<any, any>): Response | Promise<Response>;
  /** The outcome as `capstan test` prints it, to compare with golden files (a promise for an `async` reconciler). */
  outcome(reconciler: Reconciler<any, any>): Record<string, unknown> | Promise<Record<string, unknown>>;
}

export declare function outcomeOf(response: Response): Record<string, unknown>;
export declare function validateSettings(reconciler: Reconciler<any, any>, settings: object): string | undefined;

export interface GoldenCase {
  name: string;
  parent: string;
  children?: string[];
  related?: string[];
  settings?: string;
  now?: string;
  expect: string;
}
export declare function loadCases(path: string): GoldenCase[];
export declare function caseFixture(c: GoldenCase): Fixture;
export declare function labelSelector(text: string): (labels: Record<string, string>) => boolean;
