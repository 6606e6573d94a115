// The reconcile logic, natively: `npm test`, no Wasm. The SDK's Fixture runs the
// reconciler through the same calls the component exports and checks its answer with the
// host's rules.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { ReconcileError, conditions, kinds } from '@capstan/sdk';
import { Fixture, loadDocuments } from '@capstan/sdk/testing';

import { reconciler } from '../src/{{name}}.js';

const path = (name) => fileURLToPath(new URL(`../${name}`, import.meta.url));

test('a new {{Kind}} wants a ConfigMap with its greeting', () => {
  const response = Fixture.load(path('fixtures/{{name}}.yaml')).reconcile(reconciler);
  const maps = response.children.filter((c) => c.kind === kinds.ConfigMap.kind);
  assert.equal(maps.length, 1);
  assert.deepEqual(maps[0].data, { greeting: 'hello' });
  assert.equal(conditions.find(response.status.conditions, conditions.READY).status, 'True');
  assert.equal(response.events.length, 1, 'one event the first time');
});

test('a {{Kind}} already ready gets no event', () => {
  const first = Fixture.load(path('fixtures/{{name}}.yaml')).reconcile(reconciler);
  const [parent] = loadDocuments(path('fixtures/{{name}}.yaml'));
  const again = new Fixture({ ...parent, status: first.status }).reconcile(reconciler);
  assert.deepEqual(again.events, []);
  assert.deepEqual(again.status, first.status);
});

test('an empty greeting is fatal', () => {
  const parent = {
    apiVersion: 'example.com/v1alpha1',
    kind: '{{Kind}}',
    metadata: { name: 'x', namespace: 'demo', generation: 1 },
    spec: { greeting: ' ' },
  };
  assert.throws(
    () => new Fixture(parent).reconcile(reconciler),
    (e) => e instanceof ReconcileError && e.isFatal && e.message.includes('spec.greeting is empty'),
  );
});

test('the golden case `new` (capstan.toml), natively', () => {
  const [expected] = loadDocuments(path('golden/new.yaml'));
  assert.deepEqual(Fixture.load(path('fixtures/{{name}}.yaml')).outcome(reconciler), expected);
});
