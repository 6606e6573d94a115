/// <reference path="./capstan-reconciler-types.d.ts" />
declare module 'capstan:reconciler/plugin@0.3.0' {
  /**
   * Describe the plugin. Called once at load; must not depend on any input.
   */
  export function metadata(): PluginMetadata;
  /**
   * Check the operator's settings (a JSON object, `{}` when none) once at load, and on
   * every reload. An error refuses the plugin with this message, which should say
   * which setting is wrong and why, on one line.
   */
  export function validateSettings(settings: Json): void;
  /**
   * Which related objects this parent needs. Called before `reconcile` whenever the
   * parent changes; never called when `related` is empty in the metadata.
   */
  export function related(parent: Json, settings: Json): Array<RelatedQuery>;
  /**
   * Compute the desired state for one parent object. Each call runs in a fresh
   * instance, so nothing carries over between calls (unless the operator sets the
   * plugin's `reuseInstances` limit).
   */
  export function reconcile(request: Request): Response;
  export type Json = import('capstan:reconciler/types@0.3.0').Json;
  export type PluginMetadata = import('capstan:reconciler/types@0.3.0').PluginMetadata;
  export type RelatedQuery = import('capstan:reconciler/types@0.3.0').RelatedQuery;
  export type Request = import('capstan:reconciler/types@0.3.0').Request;
  export type Response = import('capstan:reconciler/types@0.3.0').Response;
  export type ReconcileError = import('capstan:reconciler/types@0.3.0').ReconcileError;
}
