// Bundles the component entry and the SDK into one ES module for componentize-js, which
// resolves no packages itself. `@capstan/sdk` comes from CAPSTAN_SDK_JS (set by build.sh):
// the SDK has no runtime dependencies, so a checkout of sdk/js is all it needs.
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const sdk = process.env.CAPSTAN_SDK_JS;
if (!sdk) throw new Error('CAPSTAN_SDK_JS must name the SDK directory (build.sh sets it)');
const { capstanSdk } = await import(pathToFileURL(join(sdk, 'src/rolldown.js')).href);

export default {
  input: 'component.js',
  // The host's interface is the component's import, wired by componentize-js.
  external: [/^capstan:/],
  plugins: [capstanSdk(sdk)],
  platform: 'neutral',
  output: { file: 'build/echo-js.bundle.js', format: 'esm', codeSplitting: false },
};
