/// <reference path="./wit/interfaces/capstan-reconciler-plugin.d.ts" />
import type * as plugin from 'capstan:reconciler/plugin@0.2.0';

import type { Reconciler } from './index.js';

/** The WIT export `plugin`, as componentize-js expects it, for `reconciler`. */
export declare function exportPlugin(reconciler: Reconciler<any, any>): {
  metadata: typeof plugin.metadata;
  validateSettings: typeof plugin.validateSettings;
  related: typeof plugin.related;
  reconcile: typeof plugin.reconcile;
};
