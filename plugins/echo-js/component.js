// The component's entry: the Echo reconciler behind the WIT `plugin` export. Kept apart
// from echo.js because the host's import it pulls in exists only inside the component.
import { exportPlugin } from '@capstan/sdk/guest';

import { reconciler } from './echo.js';

// Reconciled once while the component is built, so a fresh instance starts with Echo's
// common paths compiled: a new Echo, and one whose Job runs.
const echo = {
  apiVersion: 'capstan.dev/v1alpha1',
  kind: 'Echo',
  metadata: { name: 'warm-up', namespace: 'default', generation: 1 },
  spec: { message: 'warm up' },
};
const job = {
  apiVersion: 'batch/v1',
  kind: 'Job',
  metadata: { name: 'warm-up-0', namespace: 'default' },
  status: { active: 1, conditions: [{ type: 'Complete', status: 'False' }] },
};
const ready = { type: 'Ready', status: 'False', reason: 'JobPending', message: '', lastTransitionTime: '2026-01-01T00:00:00Z' };

export const plugin = exportPlugin(reconciler, {
  warmUp: [{ parent: echo }, { parent: { ...echo, status: { phase: 'Pending', conditions: [ready] } }, children: [job] }],
});
