// @capstan/sdk/metacontroller: Metacontroller's hook requests and responses over Capstan's,
// and fission-style async functions run through the component's own call path.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Context, Metadata, ReconcileError, kindRef, kinds, object } from '../src/index.js';
import { Composite, Decorator, fission, labelSelector, objectKey, selects } from '../src/metacontroller.js';
import * as run from '../src/run.js';
import { Fixture, outcomeOf } from '../src/testing.js';

const Team = kindRef({ group: 'example.com', version: 'v1', kind: 'Team', plural: 'teams', namespaced: true });
const Region = kindRef({ group: 'example.com', version: 'v1', kind: 'Region', plural: 'regions', namespaced: false });
const Role = kindRef({ group: 'rbac.authorization.k8s.io', version: 'v1', kind: 'ClusterRole', plural: 'clusterroles', namespaced: false });

const obj = (kind, name, namespace, rest = {}) => object(kind, { metadata: namespace ? { name, namespace } : { name }, ...rest });
const team = (generation = 3) => object(Team, { metadata: { name: 'a', namespace: 'ns1', generation } });

/** A hook that keeps each request and answers `answer`, asynchronously as fission's do. */
function recorder(answer = {}) {
  const seen = [];
  const hook = async (request) => {
    seen.push(request);
    await Promise.resolve();
    return answer;
  };
  return { hook, seen };
}

function composite(sync, { version = 'v1', parent = Team, ...rest } = {}) {
  const metadata = new Metadata('teams', '0.1.0').child(kinds.ConfigMap).child(Role).relatedKind(kinds.Secret);
  return new Composite({ controller: { metadata: { name: 'teams' } }, metadata, parent, sync, version, ...rest });
}

test('v1 keys a namespaced parent’s children by name and lists every child kind', async () => {
  const { hook, seen } = recorder();
  const ctx = new Context({ children: [obj(kinds.ConfigMap, 'one', 'ns1')], related: [obj(kinds.Secret, 's', 'ns1')] });
  await composite(hook).reconcile(team(), ctx);
  assert.deepEqual(seen[0].children, {
    'ConfigMap.v1': { one: obj(kinds.ConfigMap, 'one', 'ns1') },
    'ClusterRole.rbac.authorization.k8s.io/v1': {},
  });
  assert.deepEqual(Object.keys(seen[0].related['Secret.v1']), ['s']);
  assert.deepEqual(seen[0].controller, { metadata: { name: 'teams' } });
  assert.equal(seen[0].finalizing, false);
});

test('v2 keys namespaced objects by namespace/name; v1 does so for a cluster-scoped parent', async () => {
  const { hook, seen } = recorder();
  await composite(hook, { version: 'v2' }).reconcile(team(), new Context({ children: [obj(kinds.ConfigMap, 'one', 'ns1'), obj(Role, 'reader')] }));
  assert.deepEqual(Object.keys(seen[0].children['ConfigMap.v1']), ['ns1/one']);
  assert.deepEqual(Object.keys(seen[0].children['ClusterRole.rbac.authorization.k8s.io/v1']), ['reader']);
  assert.equal(objectKey(obj(kinds.ConfigMap, 'one', 'ns1'), false, 'v1'), 'ns1/one');
  assert.equal(objectKey(obj(kinds.ConfigMap, 'one', 'ns1'), true, 'v1'), 'one');
  const region = recorder();
  await composite(region.hook, { parent: Region }).reconcile(obj(Region, 'eu'), new Context({ children: [obj(kinds.ConfigMap, 'one', 'ns1')] }));
  assert.deepEqual(Object.keys(region.seen[0].children['ConfigMap.v1']), ['ns1/one']);
});

test('the answer becomes Capstan’s response', async () => {
  const { hook } = recorder({
    status: { ready: 1 },
    children: [obj(kinds.ConfigMap, 'made'), obj(Role, 'reader'), obj(kinds.ConfigMap, 'there', 'other')],
    resyncAfterSeconds: 1.5,
  });
  const response = await composite(hook).reconcile(team(7), new Context());
  // Namespaced children without a namespace go to the parent's; cluster-scoped ones stay so.
  assert.deepEqual(
    response.children.map((c) => [c.metadata.name, c.metadata.namespace]),
    [['made', 'ns1'], ['reader', undefined], ['there', 'other']],
  );
  assert.deepEqual(response.status, { ready: 1, observedGeneration: 7 });
  assert.equal(response.requeueAfterMs, 1500);
  assert.equal(response.finalized, false);
  const status = { ready: 1, new: 2, rs: { replicas: 3, terminating: 0 }, list: [{ a: 1, b: 2 }] };
  const statusSchema = {
    type: 'object',
    properties: {
      ready: { type: 'integer' },
      rs: { type: 'object', properties: { replicas: { type: 'integer' } } },
      list: { type: 'array', items: { type: 'object', properties: { a: { type: 'integer' } } } },
    },
  };
  const pruned = await composite(recorder({ status }).hook, { statusSchema }).reconcile(team(7), new Context());
  assert.deepEqual(pruned.status, { ready: 1, rs: { replicas: 3 }, list: [{ a: 1 }] }, 'pruned to the schema, as an update is');
  const kept = await composite(recorder({ status }).hook, { statusSchema: { 'x-kubernetes-preserve-unknown-fields': true } }).reconcile(team(7), new Context());
  assert.deepEqual(kept.status, { ...status, observedGeneration: 7 });
  const none = await composite(recorder({ status }).hook, { statusSchema: { type: 'object' } }).reconcile(team(7), new Context());
  assert.equal(none.status, undefined, 'a schema that holds none of it: no status written');
  const quiet = await composite(recorder({ children: [] }).hook).reconcile(team(), new Context());
  assert.equal(quiet.status, undefined);
  assert.equal(quiet.requeueAfterMs, undefined);
});

test('finalizing calls the finalize hook, whose finalized releases the parent', async () => {
  const sync = recorder({ finalized: true });
  const finalize = recorder({ children: [], finalized: true });
  const plugin = composite(sync.hook, { finalize: finalize.hook });
  assert.equal((await plugin.reconcile(team(), new Context())).finalized, false);
  assert.equal((await plugin.reconcile(team(), new Context({ finalizing: true }))).finalized, true);
  assert.equal(sync.seen.length, 1);
  assert.equal(finalize.seen[0].finalizing, true);
});

test('customize rules become related queries of declared kinds; others are the plugin’s error', async () => {
  const customize = recorder({
    relatedResources: [
      { apiVersion: 'v1', resource: 'secrets', labelSelector: { matchLabels: { app: 'web' } } },
      { apiVersion: 'v1', resource: 'secrets', names: ['tls', 'ca'], namespace: 'certs' },
    ],
  });
  const queries = await composite(recorder().hook, { customize: customize.hook }).related(team(), new Context());
  assert.deepEqual(customize.seen[0], { controller: { metadata: { name: 'teams' } }, parent: team() });
  assert.deepEqual([queries[0].kind, queries[0].selector, queries[0].namespace], ['Secret', { labels: 'app=web' }, undefined]);
  assert.deepEqual([queries[1].selector, queries[1].namespace], [{ names: ['tls', 'ca'] }, 'certs']);
  const undeclared = recorder({ relatedResources: [{ apiVersion: 'v1', resource: 'pods' }] });
  await assert.rejects(composite(recorder().hook, { customize: undeclared.hook }).related(team(), new Context()), /pods \(v1\) is not declared related/);
});

/** A v2 controller of Regions whose customize answers one rule for Secrets. */
function byNamespaces(sync, rule, related = [kinds.Secret, kinds.Namespace]) {
  const metadata = new Metadata('teams', '0.1.0');
  for (const kind of related) metadata.relatedKind(kind);
  const customize = recorder({ relatedResources: [{ apiVersion: 'v1', resource: 'secrets', ...rule }] });
  return new Composite({ controller: {}, metadata, parent: Region, sync, version: 'v2', customize: customize.hook });
}

const namespace = (name, labels) => object(kinds.Namespace, { metadata: { name, labels } });

test('a namespaceSelector reads the namespaces it picks and its kind in every namespace', async () => {
  const { hook, seen } = recorder();
  const plugin = byNamespaces(hook, { namespaceSelector: { matchLabels: { team: 'red' } }, labelSelector: { matchLabels: { app: 'web' } } });
  const queries = await plugin.related(obj(Region, 'eu'), new Context());
  assert.deepEqual(
    queries.map((q) => [q.kind, q.selector, q.namespace]),
    [
      ['Namespace', { labels: 'team=red' }, undefined],
      ['Secret', { labels: 'app=web' }, '*'],
    ],
  );
  // The host answers both; the hook sees the rule's objects in a picked namespace alone,
  // and no Namespace, which no rule asked for.
  const web = { app: 'web' };
  const inside = object(kinds.Secret, { metadata: { name: 'in', namespace: 'red', labels: web } });
  const outside = object(kinds.Secret, { metadata: { name: 'out', namespace: 'blue', labels: web } });
  const related = [namespace('red', { team: 'red' }), namespace('blue', { team: 'blue' }), inside, outside];
  await plugin.reconcile(obj(Region, 'eu'), new Context({ related }));
  assert.deepEqual(seen[0].related, { 'Secret.v1': { 'red/in': inside }, 'Namespace.v1': {} });
});

test('a namespaceSelector is refused where Metacontroller refuses it', async () => {
  const region = obj(Region, 'eu');
  const refused = async (plugin, parent, words) => assert.rejects(plugin.related(parent, new Context()), words);
  const sync = recorder().hook;
  await refused(byNamespaces(sync, { namespaceSelector: {}, names: ['tls'] }), region, /both names and a namespaceSelector/);
  await refused(byNamespaces(sync, { namespaceSelector: {}, namespace: 'red' }), region, /both a namespace and a namespaceSelector/);
  await refused(byNamespaces(sync, { namespaceSelector: {} }, [kinds.Secret]), region, /declare v1 namespaces related/);
  const v1 = composite(sync, { customize: recorder({ relatedResources: [{ apiVersion: 'v1', resource: 'secrets', namespaceSelector: {} }] }).hook });
  await refused(v1, team(), /namespaced parent in a v1 hook/);
  const metadata = new Metadata('teams', '0.1.0').relatedKind(Role).relatedKind(kinds.Namespace);
  const roles = recorder({ relatedResources: [{ apiVersion: 'rbac.authorization.k8s.io/v1', resource: 'clusterroles', namespaceSelector: {} }] });
  const plugin = new Composite({ controller: {}, metadata, parent: Region, sync, version: 'v2', customize: roles.hook });
  await refused(plugin, region, /only for namespaced resources/);
});

test('a rule naming no namespace reads every one, but for a v1 hook’s namespaced parent', async () => {
  const rule = { apiVersion: 'v1', resource: 'secrets', labelSelector: { matchLabels: { app: 'web' } } };
  const named = { apiVersion: 'v1', resource: 'secrets', names: ['tls'] };
  const customize = recorder({ relatedResources: [rule, named] });
  const read = async (opts, parent) => (await composite(recorder().hook, { customize: customize.hook, ...opts }).related(parent, new Context())).map((q) => q.namespace);
  assert.deepEqual(await read({}, team()), [undefined, undefined], 'v1: the parent’s own');
  assert.deepEqual(await read({ version: 'v2' }, team()), ['*', '*'], 'v2: every namespace');
  const cluster = { apiVersion: 'example.com/v1', kind: 'Team', metadata: { name: 'a' } };
  assert.deepEqual(await read({}, cluster), ['*', '*'], 'a cluster-scoped parent: every namespace');
});

test('label selectors become selector text and match labels', () => {
  const selector = {
    matchLabels: { tier: 'web', app: 'shop' },
    matchExpressions: [
      { key: 'env', operator: 'In', values: ['a', 'b'] },
      { key: 'zone', operator: 'NotIn', values: ['x'] },
      { key: 'owner', operator: 'Exists' },
      { key: 'legacy', operator: 'DoesNotExist' },
    ],
  };
  assert.equal(labelSelector(selector), 'app=shop,tier=web,env in (a,b),zone notin (x),owner,!legacy');
  assert.equal(labelSelector(undefined), '');
  assert.throws(() => labelSelector({ matchExpressions: [{ key: 'k', operator: 'Near' }] }), /operator "Near"/);
  const labels = { tier: 'web', app: 'shop', env: 'a', owner: 'me' };
  assert.ok(selects(selector, labels));
  assert.ok(!selects(selector, { ...labels, legacy: 'yes' }));
  assert.ok(!selects(selector, { ...labels, zone: 'x' }));
  assert.ok(!selects(selector, { ...labels, env: 'c' }));
  assert.ok(selects(undefined, {}) && selects({}, {}));
});

test('an unknown hook version is refused', () => {
  assert.throws(() => composite(recorder().hook, { version: 'v3' }), /"v3"/);
});

/** Metacontroller's nodejs server's contract: `module.exports = async function (context)`. */
async function counter(context) {
  const body = context.request.body;
  const maps = body.children['ConfigMap.v1'];
  if (body.finalizing) return { status: 500, headers: {}, body: 'no finalize here' };
  return {
    status: 200,
    headers: { 'Content-Type': 'application/json' },
    body: {
      status: { keys: Object.keys(maps).sort() },
      children: [{ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: `${body.parent.metadata.name}-count` }, data: { n: String(Object.keys(maps).length) } }],
    },
  };
}

test('a fission-style function is a hook, through the component’s own call path', async () => {
  const plugin = composite(fission(counter, '/sync'), { version: 'v2' });
  const request = {
    parent: JSON.stringify(team()),
    children: [JSON.stringify(obj(kinds.ConfigMap, 'a-count', 'ns1'))],
    related: [],
    settings: '{}',
    now: '2026-01-01T00:00:00Z',
    finalizing: false,
  };
  const answer = run.reconcile(plugin, request);
  assert.equal(typeof answer.then, 'function', 'an async reconciler answers a promise');
  const { ok } = await answer;
  assert.deepEqual(JSON.parse(ok.status), { keys: ['ns1/a-count'], observedGeneration: 3 });
  assert.deepEqual(JSON.parse(ok.children[0]).metadata, { name: 'a-count', namespace: 'ns1' });
  const { err } = await run.reconcile(plugin, { ...request, finalizing: true });
  assert.equal(err.tag, 'retry');
  assert.match(err.val.message, /\/sync answered 500: no finalize here/);
  const text = fission(async () => ({ status: 200, body: '{"status":{"x":1}}' }), '/s');
  assert.deepEqual(await text({}), { status: { x: 1 } });
  await assert.rejects(fission(async () => ({ status: 200, body: '[1]' }), '/s')({}), (e) => e instanceof ReconcileError && /not an object/.test(e.message));
  await assert.rejects(fission(async () => ({ status: 200, body: '{' }), '/s')({}), /does not parse/);
});

function decorator(sync, rest = {}) {
  const metadata = new Metadata('roles', '0.1.0').child(kinds.ConfigMap);
  return new Decorator({ controller: { metadata: { name: 'roles' } }, metadata, parent: Role, sync, ...rest });
}

test('a decorator’s target is `object`, its children `attachments`; selectors pick targets', async () => {
  const { hook, seen } = recorder({ attachments: [obj(kinds.ConfigMap, 'att', 'ns1')], status: { seen: true } });
  const plugin = decorator(hook, { parentSelector: { matchLabels: { team: 'a' } }, annotationSelector: { matchExpressions: [{ key: 'watch', operator: 'Exists' }] } });
  const role = (labels, annotations) => object(Role, { metadata: { name: 'r', labels, annotations, generation: 2 } });
  const picked = await plugin.reconcile(role({ team: 'a' }, { watch: '' }), new Context());
  assert.deepEqual(Object.keys(seen[0]).sort(), ['attachments', 'controller', 'finalizing', 'object', 'related']);
  assert.deepEqual(picked.children.map((c) => c.metadata.name), ['att']);
  assert.deepEqual(picked.status, { seen: true }, 'the target keeps its own observedGeneration');
  const ignored = await plugin.reconcile(role({ team: 'b' }, { watch: '' }), new Context({ finalizing: true }));
  assert.equal(seen.length, 1);
  assert.deepEqual([ignored.children, ignored.finalized], [[], true]);
  const labelling = decorator(recorder({ labels: { team: 'a', added: 'x', gone: null }, annotations: { note: 'hi' } }).hook);
  const labelled = await labelling.reconcile(role({ team: 'a', gone: 'y' }), new Context());
  assert.deepEqual(labelled.parentLabels, { team: 'a', added: 'x', gone: null });
  assert.deepEqual(labelled.parentAnnotations, { note: 'hi' });
  assert.deepEqual(outcomeOf(labelled).parentMetadata, { labels: { added: 'x', gone: null, team: 'a' }, annotations: { note: 'hi' } });
});

test('a target the rule no longer selects is finalized, as Metacontroller finalizes it', async () => {
  const sync = recorder({ attachments: [obj(kinds.ConfigMap, 'att', 'ns1')] });
  const finalize = async (request) => ({ attachments: [], finalized: Object.keys(request.attachments['ConfigMap.v1']).length === 0 });
  const finalizing = [];
  const plugin = decorator(sync.hook, {
    annotationSelector: { matchExpressions: [{ key: 'watch', operator: 'Exists' }] },
    finalize: async (request) => (finalizing.push(request.finalizing), finalize(request)),
  });
  const role = object(Role, { metadata: { name: 'r', namespace: 'ns1' } });
  const still = await plugin.reconcile(role, new Context({ children: [obj(kinds.ConfigMap, 'att', 'ns1')] }));
  assert.deepEqual([still.children, still.finalized, finalizing], [[], false, [true]], 'attachments go first');
  const gone = await plugin.reconcile(role, new Context());
  assert.deepEqual([gone.children, gone.finalized], [[], true], 'then the target is let go');
  assert.equal(sync.seen.length, 0, 'sync is never called for it');
  const noHook = await decorator(sync.hook, { annotationSelector: { matchLabels: { watch: 'yes' } } }).reconcile(role, new Context());
  assert.deepEqual([noHook.children, noHook.finalized], [[], true], 'without a finalize hook nothing is held');
});

test('the testing fixture runs an async reconciler, related queries and checks included', async () => {
  const customize = recorder({ relatedResources: [{ apiVersion: 'v1', resource: 'secrets', labelSelector: { matchLabels: { app: 'web' } } }] });
  const plugin = composite(fission(counter, '/sync'), { version: 'v2', customize: customize.hook });
  const fixture = new Fixture(team())
    .child(obj(kinds.ConfigMap, 'a-count', 'ns1'))
    .relatedObject(object(kinds.Secret, { metadata: { name: 's', namespace: 'ns1', labels: { app: 'web' } } }));
  const response = fixture.reconcile(plugin);
  assert.equal(typeof response.then, 'function');
  assert.deepEqual((await response).status, { keys: ['ns1/a-count'], observedGeneration: 3 });
  assert.deepEqual(await fixture.outcome(plugin), {
    children: [{ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'a-count', namespace: 'ns1' }, data: { n: '1' } }],
    status: { keys: ['ns1/a-count'], observedGeneration: 3 },
  });
  const failing = composite(fission(async () => ({ status: 500, body: 'down' }), '/sync'));
  assert.deepEqual(await new Fixture(team()).outcome(failing), { error: { retry: '/sync answered 500: down' } });
  await assert.rejects(new Fixture(team()).reconcile(failing), (e) => e instanceof ReconcileError);
});
