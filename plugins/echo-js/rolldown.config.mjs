// Bundles the component entry and the SDK into one ES module for componentize-js, which
// resolves no packages itself. `@capstan/sdk` comes from CAPSTAN_SDK_JS (set by build.sh):
// the SDK has no runtime dependencies, so a checkout of sdk/js is all it needs.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

const sdk = process.env.CAPSTAN_SDK_JS;
if (!sdk) throw new Error('CAPSTAN_SDK_JS must name the SDK directory (build.sh sets it)');
const exportsMap = JSON.parse(readFileSync(join(sdk, 'package.json'), 'utf8')).exports;

const capstanSdk = {
  name: 'capstan-sdk',
  resolveId(id) {
    if (id !== '@capstan/sdk' && !id.startsWith('@capstan/sdk/')) return null;
    const entry = exportsMap['.' + id.slice('@capstan/sdk'.length)];
    if (!entry?.default) throw new Error(`${id}: not an entry of @capstan/sdk`);
    return join(sdk, entry.default);
  },
};

export default {
  input: 'component.js',
  // The host's interface is the component's import, wired by componentize-js.
  external: [/^capstan:/],
  plugins: [capstanSdk],
  platform: 'neutral',
  output: { file: 'build/echo-js.bundle.js', format: 'esm', codeSplitting: false },
};
