// The component's entry: the reconciler behind the WIT `plugin` export. Kept apart from
// src/{{name}}.js because the host's interface it pulls in exists only inside the component.
import { exportPlugin } from '@capstan/sdk/guest';

import { reconciler } from './{{name}}.js';

export const plugin = exportPlugin(reconciler);
