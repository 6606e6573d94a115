// The {{Kind}} reconciler: a {{Kind}} with `spec.greeting` becomes a ConfigMap holding it.
// Plain JavaScript on plain JSON objects: it runs under node (`npm test`) as it runs in the
// component (src/component.js).

import { Conditions, Event, Metadata, Response, conditions, fatal, kindRef, kinds, object } from '@capstan/sdk';

/** The plugin's version, as package.json gives it. */
export const VERSION = '0.1.0';

/** What the plugin reconciles: the {{Kind}} kind crd.yaml defines. */
export const PARENT = kindRef({
  group: 'example.com',
  version: 'v1alpha1',
  kind: '{{Kind}}',
  plural: '{{plural}}',
  namespaced: true,
});

export const reconciler = {
  parent: PARENT,

  metadata() {
    return new Metadata('{{name}}', VERSION).child(kinds.ConfigMap);
  },

  reconcile(parent, ctx) {
    const { name, namespace, generation } = parent.metadata ?? {};
    if (typeof name !== 'string') throw fatal('{{Kind}} has no metadata.name');
    const greeting = parent.spec?.greeting;
    if (typeof greeting !== 'string') throw fatal('spec.greeting must be a string');
    if (greeting.trim() === '') throw fatal('spec.greeting is empty');

    const metadata = { name: `${name}-greeting` };
    if (namespace != null) metadata.namespace = namespace;
    const configMap = object(kinds.ConfigMap, { metadata, data: { greeting } });

    const previous = parent.status?.conditions;
    const wasReady = conditions.find(previous, conditions.READY)?.status === 'True';
    const conds = new Conditions(previous, generation, ctx.now);
    conds.ready(true, 'Greeted', 'the ConfigMap holds the greeting');
    const status = { conditions: conds.toArray() };
    if (typeof generation === 'number') status.observedGeneration = generation;

    const response = new Response().child(configMap).withStatus(status);
    if (!wasReady) response.event(Event.normal('Greeted', `ConfigMap ${name}-greeting made`));
    return response;
  },
};
