// The package ships the WIT it implements (wit/reconciler.wit), so a plugin project builds
// its component from node_modules/@capstan/sdk/wit. The copy is committed; in a Capstan
// checkout it must equal the contract's wit/reconciler.wit (`npm run wit:sync` updates it).
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { test } from 'node:test';

import { WIT_PACKAGE } from '../src/index.js';

const shipped = new URL('../wit/reconciler.wit', import.meta.url);
const contract = new URL('../../../wit/reconciler.wit', import.meta.url);

test('the shipped WIT declares the package the SDK implements', () => {
  assert.match(readFileSync(shipped, 'utf8'), new RegExp(`^package ${WIT_PACKAGE.replace(/[.]/g, '\\.')};$`, 'm'));
});

test("the shipped WIT is the checkout's contract", { skip: !existsSync(contract) && 'not in a Capstan checkout' }, () => {
  assert.equal(
    readFileSync(shipped, 'utf8'),
    readFileSync(contract, 'utf8'),
    'sdk/js/wit/reconciler.wit is stale: run `npm run wit:sync` in sdk/js',
  );
});

test('npm packs the WIT', () => {
  const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
  assert.ok(pkg.files.includes('wit'), 'package.json `files` must list wit');
});
