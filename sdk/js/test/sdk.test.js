// The builders, errors, the WIT adapter's records and the testing fixtures, on a small
// reconciler of the README's kind.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Event, Metadata, ReconcileError, Related, Response, fatal, kindRef, kinds, names, object, retry, retryAfter } from '../src/index.js';
import * as run from '../src/run.js';
import { Failure, Fixture, labelSelector, outcomeOf } from '../src/testing.js';

const Greeting = kindRef({ group: 'example.com', version: 'v1', kind: 'Greeting', plural: 'greetings', namespaced: true });

/** Greets in a ConfigMap, with words from the ConfigMap its spec names, if any. */
const greeter = {
  parent: Greeting,
  metadata: () => new Metadata('greeter', '0.2.0').child(kinds.ConfigMap).relatedKind(kinds.ConfigMap),
  related: (g) => {
    if (!g.spec.wordsFrom) return [];
    const q = Related.named(kinds.ConfigMap, [g.spec.wordsFrom]);
    return [g.spec.wordsIn ? q.inNamespace(g.spec.wordsIn) : q];
  },
  reconcile(g, ctx) {
    if (g.spec.fail === 'fatal') throw fatal('no');
    if (g.spec.fail === 'retry') throw retryAfter('later', 1500);
    if (g.spec.fail === 'bug') return g.spec.missing.field;
    if (g.spec.fail === 'other-namespace') {
      return new Response().child(object(kinds.ConfigMap, { metadata: { name: 'x', namespace: 'kube-system' } }));
    }
    const words = ctx.relatedOf(kinds.ConfigMap)[0]?.data?.salutation ?? 'hello';
    const cm = object(kinds.ConfigMap, { metadata: { name: `${g.metadata.name}-greeting` }, data: { text: `${words}, ${g.spec.name}` } });
    return new Response()
      .child(cm)
      .withStatus({ greeted: ctx.childrenOf(kinds.ConfigMap).length > 0, at: ctx.nowText })
      .event(Event.normal('Greeted', 'said it'))
      .requeueAfter(60000);
  },
};

const parent = (spec) => ({ apiVersion: 'example.com/v1', kind: 'Greeting', metadata: { name: 'g', namespace: 'demo' }, spec });

test('kinds match apiVersion and kind', () => {
  assert.ok(kinds.Job === kinds.Job);
  const job = object(kinds.Job, {});
  assert.deepEqual(job, { apiVersion: 'batch/v1', kind: 'Job' });
  assert.throws(() => kindRef({ version: 'v1', kind: 'X', namespaced: true }), /plural/);
});

test('the metadata export is the WIT record, settings schema as JSON text', () => {
  const m = run.metadata(greeter);
  assert.equal(m.name, 'greeter');
  assert.deepEqual(m.parent, Greeting);
  assert.equal(m.settingsSchema, undefined);
  assert.equal(run.validateSettings(greeter, '{"a": 1}'), 'plugin greeter takes no settings (got a)');
  assert.equal(run.validateSettings(greeter, '{}'), undefined);
});

test('reconcile records: ok with bigint requeue, err as the WIT variant', () => {
  const request = (spec) => ({ parent: JSON.stringify(parent(spec)), children: [], related: [], settings: '{}', now: '2026-01-01T00:00:00Z', finalizing: false });
  const ok = run.reconcile(greeter, request({ name: 'you' })).ok;
  assert.equal(ok.requeueAfterMs, 60000n);
  assert.deepEqual(ok.events, [{ eventType: 'normal', reason: 'Greeted', message: 'said it' }]);
  assert.equal(JSON.parse(ok.children[0]).data.text, 'hello, you');
  assert.deepEqual(run.reconcile(greeter, request({ fail: 'fatal' })), { err: { tag: 'fatal', val: 'no' } });
  assert.deepEqual(run.reconcile(greeter, request({ fail: 'retry' })), { err: { tag: 'retry', val: { message: 'later', afterMs: 1500n } } });
  assert.match(run.reconcile(greeter, request({ fail: 'bug' })).err.val, /^plugin error: TypeError/);
  const bad = { ...request({}), now: 'soon' };
  assert.deepEqual(run.reconcile(greeter, bad), { err: { tag: 'fatal', val: 'the request\'s now "soon" is not an RFC 3339 time' } });
  assert.deepEqual(run.related(greeter, JSON.stringify(parent({ wordsFrom: 'w' })), '{}'), [
    { group: '', kind: 'ConfigMap', namespace: undefined, selector: { tag: 'names', val: ['w'] } },
  ]);
});

test('errors: fatal and retry as in the Rust SDK', () => {
  assert.equal(fatal('x').toString(), 'fatal: x');
  assert.equal(retry('x').toString(), 'retry: x');
  assert.equal(retryAfter('x', 5).toString(), 'retry after 5ms: x');
  assert.ok(retry('x') instanceof ReconcileError && retry('x').isRetry);
  assert.throws(() => retryAfter('x', -1), TypeError);
});

test('fixtures select related objects by the host rules and check responses', () => {
  const cms = 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: w, namespace: demo}\ndata: {salutation: hi}\n---\n' +
    'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: w, namespace: other}\ndata: {salutation: no}';
  const r = new Fixture(parent({ name: 'you', wordsFrom: 'w' })).related(cms).now('2026-11-24T09:30:00.5Z').reconcile(greeter);
  assert.equal(r.children[0].data.text, 'hi, you');
  assert.deepEqual(r.status, { greeted: false, at: '2026-11-24T09:30:00.5Z' });
  assert.deepEqual(outcomeOf(r).events, [{ type: 'Normal', reason: 'Greeted', message: 'said it' }]);
  assert.equal(outcomeOf(r).requeueAfter, '60000ms');

  assert.throws(() => new Fixture(parent({ fail: 'other-namespace' })).reconcile(greeter),
    (e) => e instanceof Failure && e.kind === 'refused' && /namespace kube-system is not the parent's namespace demo/.test(e.message));
  assert.throws(() => new Fixture(parent({ fail: 'fatal' })).reconcile(greeter), (e) => e instanceof ReconcileError && e.isFatal);
  assert.deepEqual(new Fixture(parent({ fail: 'retry' })).outcome(greeter), { error: { retry: 'later', retryAfter: '1500ms' } });
  assert.throws(() => new Fixture(parent({})).withSettings({ x: 1 }).check(greeter), (e) => e.kind === 'settings');
  assert.throws(() => Fixture.parse('a: 1\n---\nb: 2'), /one parent document/);
});

test('label selectors', () => {
  const m = labelSelector('app=web,tier in (a,b),!legacy,env');
  assert.ok(m({ app: 'web', tier: 'a', env: 'x' }));
  assert.ok(!m({ app: 'web', tier: 'c', env: 'x' }));
  assert.ok(!m({ app: 'web', tier: 'a', env: 'x', legacy: '' }));
  assert.ok(labelSelector('')({}));
  assert.ok(labelSelector('a!=b')({}));
});

test('names are checked with the host messages', () => {
  assert.equal(names.dns1123Subdomain('a.b-c'), undefined);
  assert.equal(
    names.dns1123Subdomain('Greetings/x'),
    '"Greetings/x" is not a valid RFC 1123 subdomain (at most 253 characters: a-z, 0-9, \'-\', \'.\')',
  );
  assert.equal(names.debugString('a"b\\c\n'), '"a\\"b\\\\c\\n"');
  assert.equal(names.printable('é'), '\\u{e9}');
  assert.equal(names.printable('x'.repeat(81)), `${'x'.repeat(80)}…`);
});

test('related is shown the parent without status or version, as the host shows it', () => {
  const statusReader = {
    ...greeter,
    related: (g) => [Related.named(kinds.ConfigMap, [g.status?.phase ?? 'no-status', g.metadata.resourceVersion ?? 'no-version', g.metadata.name])],
  };
  const seen = { ...parent({}), status: { phase: 'Done' } };
  seen.metadata = { ...seen.metadata, resourceVersion: '7' };
  const fixture = new Fixture(seen);
  assert.deepEqual(fixture.relatedQueries(statusReader)[0].selector, { tag: 'names', val: ['no-status', 'no-version', 'g'] });
  assert.deepEqual(fixture.parent.status, { phase: 'Done' }, "the fixture's own parent is left as it was");
});

test('a query for every namespace reads what the parent may read, as the host resolves it', () => {
  const cms = 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: w, namespace: other}\ndata: {salutation: hey}\n---\n' +
    'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: w, namespace: demo}\ndata: {salutation: hi}';
  const words = (f) => f.related(cms).reconcile(greeter).children[0].data.text;
  const every = () => new Fixture(parent({ name: 'you', wordsFrom: 'w', wordsIn: '*' }));
  assert.equal(words(every()), 'hi, you', 'its own namespace alone');
  const read = (f) => f.related(cms).reconcile({ ...greeter, reconcile: (g, ctx) => new Response().withStatus({ read: ctx.relatedOf(kinds.ConfigMap).map((c) => c.metadata.namespace) }) }).status.read;
  assert.deepEqual(read(every().allowNamespace('other')), ['demo', 'other'], 'its own, then each one granted');
  assert.deepEqual(read(every().allowNamespace('*')), ['demo', 'other'], 'every one, in namespace order');
  const cluster = { apiVersion: 'example.com/v1', kind: 'Greeting', metadata: { name: 'g' }, spec: { wordsFrom: 'w', wordsIn: '*' } };
  assert.throws(() => new Fixture(cluster).reconcile({ ...greeter, parent: { ...Greeting, namespaced: false } }), /every namespace/);
});
