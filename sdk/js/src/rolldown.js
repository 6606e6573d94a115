// A rolldown plugin that resolves `@capstan/sdk` and its entries to an SDK directory, for
// builds that bundle a plugin without `npm install` (componentize-js resolves no packages
// itself): a plugin in Capstan's repository, or a project `capstan import` made against
// the SDK the `capstan` binary carries. Runs under node, at build time only.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

/** The rolldown plugin resolving `@capstan/sdk[/ENTRY]` to the SDK in `sdk`. */
export function capstanSdk(sdk) {
  const exportsMap = JSON.parse(readFileSync(join(sdk, 'package.json'), 'utf8')).exports;
  return {
    name: 'capstan-sdk',
    resolveId(id) {
      if (id !== '@capstan/sdk' && !id.startsWith('@capstan/sdk/')) return null;
      const entry = exportsMap['.' + id.slice('@capstan/sdk'.length)];
      if (!entry?.default) throw new Error(`${id}: not an entry of @capstan/sdk`);
      return join(sdk, entry.default);
    },
  };
}
