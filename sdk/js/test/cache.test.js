// What run.js keeps between calls (a reused instance keeps module state): the reconciler's
// Metadata, and its settings by their text. A call must answer as if nothing were kept.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Metadata, defineSettings, formatTime, kindRef, parseTime } from '../src/index.js';
import * as run from '../src/run.js';

const Thing = kindRef({ group: 'example.com', version: 'v1', kind: 'Thing', plural: 'things', namespaced: true });
let metadataCalls = 0;
const reconciler = {
  parent: Thing,
  metadata() {
    metadataCalls++;
    return new Metadata('thing', '0.1.0').settings(
      defineSettings({
        schema: { type: 'object', properties: { size: { type: 'integer', default: 1 } }, additionalProperties: false },
        validate: (s) => (s.size > 9 ? 'size is at most 9' : undefined),
      }),
    );
  },
  reconcile: (parent, ctx) => {
    seen.push(ctx.settings);
    return { children: [], events: [], status: undefined, finalized: false };
  },
};
const seen = [];
const request = (settings) => ({ parent: '{"metadata":{"name":"a"}}', children: [], related: [], settings, now: '2026-01-01T00:00:00Z', finalizing: false });

test('metadata() is asked once per reconciler', () => {
  run.metadata(reconciler);
  run.reconcile(reconciler, request('{}'));
  run.reconcile(reconciler, request('{}'));
  assert.equal(metadataCalls, 1);
});

test('settings are checked once per text, shared frozen, and checked again when the text changes', () => {
  seen.length = 0;
  run.reconcile(reconciler, request('{"size": 2}'));
  run.reconcile(reconciler, request('{"size": 2}'));
  assert.equal(seen[0], seen[1]);
  assert.deepEqual(seen[0], { size: 2 });
  assert.ok(Object.isFrozen(seen[0]));
  assert.equal(run.validateSettings(reconciler, '{"size": 10}'), 'size is at most 9');
  assert.equal(run.validateSettings(reconciler, '{"size": 10}'), 'size is at most 9', 'a kept refusal is the same');
  assert.deepEqual(run.reconcile(reconciler, request('{"size": 10}')), { err: { tag: 'fatal', val: 'settings: size is at most 9' } });
  run.reconcile(reconciler, request(''));
  assert.deepEqual(seen.at(-1), { size: 1 });
});

test('times parse and print as before', () => {
  const cases = {
    '2026-11-24T09:30:00Z': '2026-11-24T09:30:00Z',
    '2026-11-24T09:30:00.123456789Z': '2026-11-24T09:30:00Z',
    '2026-11-24t09:30:00+02:30': '2026-11-24T07:00:00Z',
    '2026-01-01 00:00:00-01:00': '2026-01-01T01:00:00Z',
  };
  for (const [text, printed] of Object.entries(cases)) assert.equal(formatTime(parseTime(text)), printed, text);
  assert.equal(parseTime('2026-02-31T00:00:00Z'), undefined);
  assert.equal(parseTime('2026-11-24T09:30:00'), undefined);
  assert.equal(parseTime('2026-11-24T09:30:00.5Z').getUTCMilliseconds(), 500);
});
