// Echo's behaviour, natively (no Wasm) through the SDK's testing fixtures, on the fixtures
// the Rust Echo's tests and the shared golden cases use.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { ReconcileError, conditions, kinds } from '@capstan/sdk';
import { DEFAULT_NOW, Failure, Fixture, caseFixture, loadCases, loadDocuments, validateSettings } from '@capstan/sdk/testing';

import { BACKOFF_LIMIT, IMAGE, MESSAGE_SOURCE_MISSING, VERSION, reconciler, specHash } from '../echo.js';

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, '..', '..', '..');
const fixture = (name) => join(root, 'plugins', 'echo', 'fixtures', name);
const fixture02 = (name) => join(root, 'tests', 'fixtures', 'echo-0.2', name);

function run(parent, children = []) {
  const f = Fixture.load(fixture(parent));
  for (const c of children) f.childrenFile(fixture(c));
  return f.reconcile(reconciler);
}

const jobs = (r) => r.children.filter((c) => c.kind === 'Job');
const ready = (r) => conditions.find(r.status.conditions, 'Ready');

describe('golden cases (tests/golden/echo/cases.toml)', () => {
  const cases = loadCases(join(root, 'tests', 'golden', 'echo', 'cases.toml'));
  test('all nine are there', () => assert.equal(cases.length, 9));
  for (const c of cases) {
    test(c.name, () => {
      const [expected] = loadDocuments(c.expect);
      assert.deepEqual(caseFixture(c).outcome(reconciler), expected);
    });
  }
});

test('a new Echo wants one Job in its namespace running echo', () => {
  const r = run('echo.yaml');
  const [job, ...rest] = jobs(r);
  assert.equal(rest.length, 0);
  assert.equal(job.metadata.namespace, 'demo');
  assert.equal(job.metadata.name, 'hello-913fa3ac', "the Rust Echo's name, hash included");
  assert.deepEqual(job.metadata.labels, { 'app.kubernetes.io/managed-by': 'capstan', 'capstan.dev/plugin': 'echo' });
  assert.equal(job.spec.backoffLimit, BACKOFF_LIMIT);
  assert.equal(job.spec.ttlSecondsAfterFinished, undefined, 'only when the settings give one');
  const pod = job.spec.template.spec;
  assert.equal(pod.restartPolicy, 'Never');
  assert.deepEqual(pod.containers[0].command, ['echo', 'hello, world']);
  assert.equal(pod.containers[0].image, IMAGE);
  assert.deepEqual(
    { phase: r.status.phase, observedGeneration: r.status.observedGeneration, jobName: r.status.jobName },
    { phase: 'Pending', observedGeneration: 1, jobName: job.metadata.name },
  );
  const c = ready(r);
  assert.deepEqual([c.status, c.reason, c.observedGeneration], ['False', 'JobPending', 1]);
  assert.equal(c.lastTransitionTime, DEFAULT_NOW);
});

test('the hash is the Rust Echo spec_hash (FNV-1a 64 folded to 32 bits)', () => {
  assert.equal(specHash('{"message":"hello, world"}'), '913fa3ac');
  assert.equal(specHash(''), ((0xcbf29ce4 ^ 0x84222325) >>> 0).toString(16));
  // Multi-byte UTF-8 and escapes hash as serde_json writes them.
  assert.match(specHash(JSON.stringify({ message: 'grüße "\n"' })), /^[0-9a-f]{8}$/);
});

test('the default image explicitly given makes the same Job', () => {
  const plain = run('echo.yaml');
  const explicit = Fixture.load(fixture('echo.yaml')).settings('{image: busybox:1.37.0}').reconcile(reconciler);
  assert.deepEqual(explicit.children, plain.children);
});

test('settings shape the Job; only the image renames it', () => {
  const withSettings = (text) => jobs(Fixture.load(fixture('echo.yaml')).settings(text).reconcile(reconciler))[0];
  const job = withSettings(readFileSync(fixture('settings.yaml'), 'utf8'));
  assert.equal(job.spec.backoffLimit, 5);
  assert.equal(job.spec.ttlSecondsAfterFinished, 600);
  assert.equal(job.spec.template.spec.containers[0].image, 'registry.example.com/tools/busybox:1.37');
  assert.notEqual(job.metadata.name, 'hello-913fa3ac');
  assert.equal(withSettings('{backoffLimit: 0, ttlSecondsAfterFinished: 0}').metadata.name, 'hello-913fa3ac');
});

test('invalid settings are refused naming the setting, as the Rust Echo words it', () => {
  const refused = (s) => validateSettings(reconciler, s);
  assert.equal(refused({ backoffLimit: -1 }), 'backoffLimit must be at least 0, got -1');
  assert.equal(refused({ ttlSecondsAfterFinished: -5 }), 'ttlSecondsAfterFinished must be at least 0, got -5');
  assert.equal(refused({ backoffLimit: 'three' }), 'backoffLimit: invalid type: string "three", expected i32');
  assert.equal(refused({ backoffLimit: 3000000000 }), 'backoffLimit: invalid value: integer `3000000000`, expected i32');
  assert.equal(refused({ imag: 'x' }), 'unknown field `imag`, expected one of `image`, `backoffLimit`, `ttlSecondsAfterFinished`');
  assert.match(refused({ image: 'two words' }), /not an image reference/);
  assert.equal(refused({}), undefined);
  assert.equal(refused({ backoffLimit: null }), undefined);
  const f = Fixture.load(fixture('echo.yaml')).settingsFile(fixture02('settings-invalid.yaml'));
  assert.throws(() => f.check(reconciler), (e) => e instanceof Failure && e.message === 'invalid settings: backoffLimit must be at least 0, got -1');
});

function fromConfigMaps(related) {
  return Fixture.load(fixture02('echo-message-from.yaml')).related(related).now('2026-11-24T09:30:00Z');
}

test("messageFrom reads the key of the ConfigMap in the Echo's namespace", () => {
  const f = fromConfigMaps(readFileSync(fixture02('configmaps.yaml'), 'utf8'));
  assert.deepEqual(f.relatedQueries(reconciler), [
    { group: '', kind: 'ConfigMap', namespace: undefined, selector: { tag: 'names', val: ['greetings'] } },
  ]);
  const r = f.reconcile(reconciler);
  const [job] = jobs(r);
  assert.deepEqual(job.spec.template.spec.containers[0].command, ['echo', 'good morning']);
  assert.match(job.metadata.name, /^greeting-/);
  assert.deepEqual([r.status.phase, r.status.observedGeneration, r.status.jobName], ['Pending', 3, job.metadata.name]);
});

test('editing the ConfigMap runs a new Job', () => {
  const jobFor = (text) =>
    jobs(
      fromConfigMaps(`apiVersion: v1\nkind: ConfigMap\nmetadata: {name: greetings, namespace: demo}\ndata: {morning: ${text}}`).reconcile(
        reconciler,
      ),
    )[0].metadata.name;
  assert.notEqual(jobFor('good morning'), jobFor('good morning again'));
  assert.equal(jobFor('good morning'), jobFor('good morning'));
});

test('a missing ConfigMap warns once, wants no Job and says why', () => {
  const r = fromConfigMaps('').reconcile(reconciler);
  assert.deepEqual(r.children, [], 'no Job, so an old one is pruned');
  assert.equal(r.events.length, 1);
  assert.deepEqual([r.events[0].type, r.events[0].reason], ['warning', MESSAGE_SOURCE_MISSING]);
  assert.match(r.events[0].message, /ConfigMap demo\/greetings not found/);
  assert.equal(r.status.jobName, undefined);
  const c = ready(r);
  assert.deepEqual(
    [c.status, c.reason, c.message, c.observedGeneration, c.lastTransitionTime],
    ['False', 'MessageSourceMissing', 'ConfigMap demo/greetings not found', 3, '2026-11-24T09:30:00Z'],
  );
  // Reported once: with that status, the next reconcile warns no more.
  const [parent] = loadDocuments(fixture02('echo-message-from.yaml'));
  parent.status = r.status;
  const again = new Fixture(parent).now('2026-11-24T10:00:00Z').reconcile(reconciler);
  assert.deepEqual(again.events, []);
  assert.equal(ready(again).lastTransitionTime, '2026-11-24T09:30:00Z', 'status unchanged');
});

test('a missing key is missing too', () => {
  const cm = 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: greetings, namespace: demo}\ndata: {evening: good evening}';
  const r = fromConfigMaps(cm).reconcile(reconciler);
  assert.deepEqual(r.children, []);
  assert.equal(r.events[0].reason, 'MessageSourceMissing');
  assert.equal(ready(r).message, 'ConfigMap demo/greetings has no key "morning"');
});

test('message and messageFrom are exclusive, and one is needed', () => {
  const both =
    'apiVersion: capstan.dev/v1alpha1\nkind: Echo\nmetadata: {name: both, namespace: d}\nspec: {message: hi, messageFrom: {configMapKeyRef: {name: c, key: k}}}';
  assert.throws(() => Fixture.parse(both).reconcile(reconciler), (e) => e instanceof ReconcileError && e.isFatal && /both set/.test(e.message));
  const neither = 'apiVersion: capstan.dev/v1alpha1\nkind: Echo\nmetadata: {name: neither, namespace: d}\nspec: {}';
  assert.throws(() => Fixture.parse(neither).reconcile(reconciler), (e) => e.isFatal && /nothing to echo/.test(e.message));
});

test("Ready follows the Job, stamped with the host's clock only when it flips", () => {
  const now = '2026-11-24T09:30:00Z';
  const kept = ready(Fixture.load(fixture('echo-ready.yaml')).childrenFile(fixture('job-succeeded.yaml')).now(now).reconcile(reconciler));
  assert.deepEqual([kept.status, kept.reason, kept.lastTransitionTime], ['True', 'JobSucceeded', '2026-11-23T09:00:03Z']);
  const flipped = ready(Fixture.load(fixture('echo-ready.yaml')).childrenFile(fixture('job-failed.yaml')).now(now).reconcile(reconciler));
  assert.deepEqual([flipped.status, flipped.reason, flipped.lastTransitionTime], ['False', 'JobFailed', now]);
});

test('the phase follows the observed Job, with one event per change', () => {
  for (const [child, phase, type] of [
    ['job-running.yaml', 'Running', 'normal'],
    ['job-succeeded.yaml', 'Succeeded', 'normal'],
    ['job-failed.yaml', 'Failed', 'warning'],
  ]) {
    const r = run('echo.yaml', [child]);
    assert.equal(r.status.phase, phase, child);
    assert.equal(r.events.length, 1, child);
    assert.equal(r.events[0].type, type, child);
  }
  const unchanged = run('echo-running.yaml', ['job-running.yaml']);
  assert.equal(unchanged.status.phase, 'Running');
  assert.deepEqual(unchanged.events, [], 'no event without a phase change');
});

test('a changed message wants a new Job; the old one succeeding does not count', () => {
  const old = jobs(run('echo.yaml'))[0];
  const r = run('echo-changed.yaml', ['job-succeeded.yaml']);
  assert.equal(jobs(r).length, 1, 'only the new Job, so the host prunes the old one');
  assert.notEqual(jobs(r)[0].metadata.name, old.metadata.name);
  assert.deepEqual([r.status.phase, r.status.observedGeneration], ['Pending', 2]);
});

test('an empty message is fatal', () => {
  assert.throws(() => run('echo-empty.yaml'), (e) => e instanceof ReconcileError && e.kind === 'fatal' && e.message === 'spec.message is empty: nothing to echo');
});

test('long names still give valid Job names', () => {
  const yaml = `apiVersion: capstan.dev/v1alpha1\nkind: Echo\nmetadata: {name: ${'a'.repeat(250)}, namespace: d}\nspec: {message: hi}`;
  const name = jobs(Fixture.parse(yaml).reconcile(reconciler))[0].metadata.name;
  assert.ok(name.length <= 63, name);
});

test("an invalid ConfigMap name is never asked for and is the spec's error", () => {
  const text =
    'apiVersion: capstan.dev/v1alpha1\nkind: Echo\nmetadata: {name: bad, namespace: d}\nspec: {messageFrom: {configMapKeyRef: {name: Greetings/x, key: k}}}';
  const f = Fixture.parse(text);
  assert.deepEqual(f.relatedQueries(reconciler), []);
  assert.throws(
    () => f.reconcile(reconciler),
    (e) => e.isFatal && e.message.startsWith('spec.messageFrom.configMapKeyRef.name "Greetings/x" is not a valid RFC 1123 subdomain'),
  );
});

test('metadata: the name the golden files carry, the version of package.json', () => {
  const m = reconciler.metadata();
  assert.equal(m.name, 'echo');
  const pkg = JSON.parse(readFileSync(join(here, '..', 'package.json'), 'utf8'));
  assert.equal(VERSION, pkg.version);
  assert.deepEqual(m.children, [kinds.Job]);
  assert.deepEqual(m.related, [kinds.ConfigMap]);
});
