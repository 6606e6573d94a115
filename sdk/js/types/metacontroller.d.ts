import type { Context, KindRef, KubeObject, Metadata, Reconciler, Related, Response } from './index.js';

/** A hook: a request's JSON in, (a promise of) its response's JSON out. */
export type Hook = (request: object) => object | Promise<object>;

/** The hook versions Metacontroller defines: how the object maps are keyed. */
export declare const VERSIONS: readonly ['v1', 'v2'];

/** A fission-style function (`async function (context)`) as a hook served at `urlPath`. */
export declare function fission(
  fn: (context: { request: { body: object } }) => Promise<{ status?: number; headers?: object; body?: unknown }>,
  urlPath: string,
): Hook;

/** `Kind.apiVersion`, the key of a kind's map: `Pod.v1`, `StatefulSet.apps/v1`. */
export declare function kindKey(kind: KindRef): string;
/** An object's key in its kind's map, by hook version. */
export declare function objectKey(object: KubeObject, parentNamespaced: boolean, version: string): string;
/** Every kind's map, as Metacontroller sends them. */
export declare function objectMap(
  kinds: readonly KindRef[],
  objects: KubeObject[],
  parent: KubeObject,
  version: string,
): Record<string, Record<string, KubeObject>>;
/** A `metav1.LabelSelector` as selector text. */
export declare function labelSelector(selector?: object | null): string;
/** Whether `labels` match a `metav1.LabelSelector` (none or empty matches all). */
export declare function selects(selector: object | null | undefined, labels?: Record<string, string>): boolean;

/** What a Composite is made of. */
export interface CompositeOptions {
  controller: object;
  metadata: Metadata;
  parent: KindRef;
  sync: Hook;
  finalize?: Hook;
  customize?: Hook;
  version?: 'v1' | 'v2';
  /** The parent's status schema (its CRD's): the status written is pruned to it. */
  statusSchema?: object;
}

/** `value` as the API server stores it under a structural `schema`. */
export declare function prune(value: unknown, schema: object): unknown;

/** A CompositeController's hooks as a plugin. */
export declare class Composite implements Reconciler {
  constructor(options: CompositeOptions);
  readonly parent: KindRef;
  metadata(): Metadata;
  related(parent: KubeObject, ctx: Context): Promise<Related[]>;
  /** The hook request for `parent`, as Metacontroller sends it. */
  request(parent: KubeObject, ctx: Context): Promise<object>;
  reconcile(parent: KubeObject, ctx: Context): Promise<Response>;
  response(answer: object, parent: KubeObject, finalizing: boolean): Response;
}

/** A DecoratorController's hooks as a plugin: the target is the parent, attachments the children. */
export declare class Decorator extends Composite {
  constructor(options: CompositeOptions & { parentSelector?: object | null; annotationSelector?: object | null });
  selected(parent: KubeObject): boolean;
}
