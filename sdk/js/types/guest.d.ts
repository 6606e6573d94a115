/// <reference path="./wit/interfaces/capstan-reconciler-plugin.d.ts" />
import type * as plugin from 'capstan:reconciler/plugin@0.3.0';

import type { Reconciler } from './index.js';

/** A sample request to reconcile while the component is built (`exportPlugin`'s `warmUp`). */
export interface WarmUpSample {
  parent: object;
  children?: object[];
  related?: object[];
  settings?: object;
  /** RFC 3339; 2026-01-01T00:00:00Z by default. */
  now?: string;
  finalizing?: boolean;
}

/**
 * The WIT export `plugin`, as componentize-js expects it, for `reconciler`. `warmUp`
 * samples are reconciled once while the component is built, so a fresh instance starts
 * with their code compiled.
 */
export declare function exportPlugin(
  reconciler: Reconciler<any, any>,
  options?: { warmUp?: WarmUpSample[] },
): {
  metadata: typeof plugin.metadata;
  validateSettings: typeof plugin.validateSettings;
  related: typeof plugin.related;
  reconcile: typeof plugin.reconcile;
};
