// The Rust SDK's conditions semantics (sdk/src/conditions.rs), case by case.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Conditions, conditions } from '../src/index.js';

test('the transition time changes with the status only', () => {
  const earlier = '2026-11-24T09:00:00Z';
  const now = new Date('2026-11-24T09:30:00Z');
  const first = new Conditions([], 1, earlier).ready(false, 'JobPending', 'Job hello-1 has not started').toArray();
  const still = new Conditions(first, 1, now).ready(false, 'JobRunning', 'Job hello-1 is running');
  assert.deepEqual(still.get('Ready'), {
    type: 'Ready',
    status: 'False',
    reason: 'JobRunning',
    message: 'Job hello-1 is running',
    observedGeneration: 1,
    lastTransitionTime: earlier,
  });
  const flipped = new Conditions(first, 1, now).set('Ready', 'True', 'JobSucceeded', 'Job hello-1 completed').get('Ready');
  assert.deepEqual([flipped.status, flipped.lastTransitionTime], ['True', '2026-11-24T09:30:00Z']);
});

test('other conditions are kept and new ones appended', () => {
  const c = new Conditions(undefined, 3, '2026-01-01T00:00:00Z').set('Stalled', false, 'Fine', '').ready('Unknown', 'Waiting', 'w');
  const list = c.toArray();
  assert.deepEqual(list.map((x) => x.type), ['Stalled', 'Ready']);
  const next = new Conditions(list, 4, '2026-01-02T00:00:00Z').ready(true, 'Done', 'd').toArray();
  assert.equal(next.length, 2);
  assert.equal(next[0].observedGeneration, 3, 'untouched');
  assert.equal(next[1].observedGeneration, 4);
  assert.equal(next[1].lastTransitionTime, '2026-01-02T00:00:00Z');
  assert.equal(conditions.find(next, 'Ready').status, 'True');
  assert.equal(conditions.find(next, 'Missing'), undefined);
});

test('times are written as the API spells them: UTC, whole seconds', () => {
  const list = new Conditions([], undefined, '2026-11-24T10:30:00.123456789+01:00').ready(false, 'Pending', 'p').toArray();
  assert.deepEqual(list, [{ type: 'Ready', status: 'False', reason: 'Pending', message: 'p', lastTransitionTime: '2026-11-24T09:30:00Z' }]);
  assert.throws(() => new Conditions([], 1, 'yesterday'), /RFC 3339/);
  assert.throws(() => new Conditions([], 1, '2026-01-01T00:00:00Z').ready('yes', 'R', ''), /status/);
  assert.deepEqual(conditions.schema()['x-kubernetes-list-map-keys'], ['type']);
});
