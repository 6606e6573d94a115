/// <reference path="./capstan-reconciler-types.d.ts" />
declare module 'capstan:reconciler/host@0.3.0' {
  /**
   * Write a log line; the host emits it through `tracing` with the plugin name and the
   * key of the object being reconciled.
   */
  export function log(level: Level, message: string): void;
  export type Level = import('capstan:reconciler/types@0.3.0').Level;
}
