// The component's entry: the Echo reconciler behind the WIT `plugin` export. Kept apart
// from echo.js because the host's import it pulls in exists only inside the component.
import { exportPlugin } from '@capstan/sdk/guest';

import { reconciler } from './echo.js';

export const plugin = exportPlugin(reconciler);
