import assert from 'node:assert/strict';
import { test } from 'node:test';

import { SettingsError, defineSettings } from '../src/index.js';
import { check } from '../src/settings.js';

const greeter = defineSettings({
  schema: {
    title: 'GreeterSettings',
    type: 'object',
    properties: {
      salutation: { type: 'string', default: 'hello' },
      times: { type: ['integer', 'null'], format: 'int32' },
      tags: { type: 'array', items: { type: 'string' } },
      mode: { type: 'string', enum: ['loud', 'quiet'] },
    },
    additionalProperties: false,
  },
  validate: (s) => (s.salutation.trim() === '' ? 'salutation must not be empty' : undefined),
});

const refusal = (settings, declared = greeter) => {
  try {
    check('greeter', declared, settings);
    return undefined;
  } catch (e) {
    assert.ok(e instanceof SettingsError, e);
    return e.message;
  }
};

test('defaults are filled in; empty text and null are {}', () => {
  assert.deepEqual(check('greeter', greeter, ''), { salutation: 'hello' });
  assert.deepEqual(check('greeter', greeter, 'null'), { salutation: 'hello' });
  assert.deepEqual(check('greeter', greeter, '{"times": 2}'), { salutation: 'hello', times: 2 });
});

test('refusals read as the Rust SDK words them', () => {
  assert.equal(refusal({ times: 'x' }), 'times: invalid type: string "x", expected i32');
  assert.equal(refusal({ times: 1.5 }), 'times: invalid type: floating point `1.5`, expected i32');
  assert.equal(refusal({ times: 2 ** 31 }), 'times: invalid value: integer `2147483648`, expected i32');
  assert.equal(refusal({ salutation: null }), 'salutation: invalid type: null, expected a string');
  assert.equal(refusal({ tags: ['a', 1] }), 'tags.1: invalid type: integer `1`, expected a string');
  assert.equal(refusal({ mode: 'shout' }), 'mode: unknown variant `shout`, expected one of `loud`, `quiet`');
  assert.equal(refusal({ salutatoin: 'x' }), 'unknown field `salutatoin`, expected one of `salutation`, `times`, `tags`, `mode`');
  assert.equal(refusal([]), 'invalid type: sequence, expected struct GreeterSettings');
  assert.match(refusal('{'), /^settings are not JSON: /);
  assert.equal(refusal({ salutation: ' ' }), 'salutation must not be empty');
});

test('a plugin that declares no settings takes only {}', () => {
  assert.equal(refusal({}, null), undefined);
  assert.equal(refusal({ x: 1, y: 2 }, null), 'plugin greeter takes no settings (got x, y)');
  assert.equal(refusal('[1]', null), 'plugin greeter takes no settings (got [1])');
});
