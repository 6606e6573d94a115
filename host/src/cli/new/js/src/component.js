// The component's entry: the reconciler behind the WIT `plugin` export. Kept apart from
// src/{{name}}.js because the host's interface it pulls in exists only inside the component.
import { exportPlugin } from '@capstan/sdk/guest';

import { reconciler } from './{{name}}.js';

// Reconciled once while the component is built (and its answer dropped), so a fresh
// instance starts with the reconciler's code compiled: list a typical parent or two.
const sample = {
  apiVersion: 'example.com/v1alpha1',
  kind: '{{Kind}}',
  metadata: { name: 'warm-up', namespace: 'default', generation: 1 },
  spec: { greeting: 'hello' },
};

export const plugin = exportPlugin(reconciler, { warmUp: [{ parent: sample }] });
