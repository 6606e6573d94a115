// Echo → Job, in JavaScript: the same plugin as the Rust Echo (plugins/echo), so the same
// metadata name, the same Jobs (names and hashes included) and the same golden outputs
// (tests/golden/echo). Each Echo becomes one Job that runs `echo <message>`; the message
// is `spec.message`, or a key of a ConfigMap in the Echo's namespace
// (`spec.messageFrom.configMapKeyRef`), a related kind, so editing that ConfigMap
// reconciles the Echo again.
//
// The Job's name carries a hash of its pod template's inputs (message and image): Job
// templates are immutable, so a changed message yields a new Job and the host prunes the
// old one.

import {
  Conditions,
  Event,
  Metadata,
  Related,
  Response,
  conditions,
  defineSettings,
  fatal,
  kindRef,
  kinds,
  names,
} from '@capstan/sdk';

export const VERSION = '0.1.0';
/** Image the Job runs unless the settings name another; pinned so a reconcile is reproducible. */
export const IMAGE = 'busybox:1.37.0';
/** Retries of a failed echo before the Job is marked Failed, unless the settings say. */
export const BACKOFF_LIMIT = 2;
/** Reason of the Warning event and the Ready condition when the message's source is missing. */
export const MESSAGE_SOURCE_MISSING = 'MessageSourceMissing';
/** Kubernetes caps Job names at 63 characters (they become a Pod label value). */
const MAX_JOB_NAME = 63;

export const ECHO = kindRef({ group: 'capstan.dev', version: 'v1alpha1', kind: 'Echo', plural: 'echoes', namespaced: true });

/** The Rust Echo's settings, with the schema its `capstan inspect` shows. */
export const settings = defineSettings({
  schema: {
    $schema: 'https://json-schema.org/draft/2020-12/schema',
    title: 'EchoSettings',
    description: "Echo's settings.",
    type: 'object',
    properties: {
      image: {
        description: "Image of the Job's container; it must provide `echo`.",
        type: 'string',
        default: IMAGE,
      },
      backoffLimit: {
        description: 'Retries of a failed echo before the Job is marked Failed (default 2).',
        type: ['integer', 'null'],
        format: 'int32',
      },
      ttlSecondsAfterFinished: {
        description: 'Delete a finished Job this many seconds after it finished (default: keep it).',
        type: ['integer', 'null'],
        format: 'int32',
      },
    },
    additionalProperties: false,
  },
  validate(s) {
    if (s.image.trim() === '' || /\s/u.test(s.image)) {
      return `image ${names.debugString(s.image)} is not an image reference`;
    }
    for (const name of ['backoffLimit', 'ttlSecondsAfterFinished']) {
      const v = s[name];
      if (typeof v === 'number' && v < 0) return `${name} must be at least 0, got ${v}`;
    }
    return undefined;
  },
});

/** Lifecycle of the Echo's Job. */
export const Phase = Object.freeze({
  Pending: 'Pending',
  Running: 'Running',
  Succeeded: 'Succeeded',
  Failed: 'Failed',
});

export const reconciler = {
  parent: ECHO,

  metadata() {
    return new Metadata('echo', VERSION).child(kinds.Job).relatedKind(kinds.ConfigMap).settings(settings);
  },

  related(echo) {
    // An invalid name is never asked for (the host would refuse the query): reconcile
    // reports it as the spec's error instead.
    const name = echo?.spec?.messageFrom?.configMapKeyRef?.name;
    if (typeof name !== 'string' || names.dns1123Subdomain(name) !== undefined) return [];
    return [Related.named(kinds.ConfigMap, [name])];
  },

  reconcile(echo, ctx) {
    const found = message(echo, ctx);
    if ('missing' in found) return missingSource(echo, ctx, found.missing);
    const job = desiredJob(echo, found.text, ctx.settings);
    const jobName = job.metadata.name;
    const observed = ctx.child(kinds.Job, jobName);
    const phase = observed ? phaseOf(observed.status ?? {}) : Phase.Pending;
    const described = `Job ${jobName} is ${phase}`;

    const conds = conditionsOf(echo, ctx);
    conds.ready(phase === Phase.Succeeded, `Job${phase}`, described);
    const response = new Response().child(job).withStatus(
      status({ jobName, phase, observedGeneration: generationOf(echo), conditions: conds.toArray() }),
    );
    if (echo?.status?.phase !== phase) {
      response.event(
        phase === Phase.Failed ? Event.warning('JobFailed', described) : Event.normal(`Job${phase}`, described),
      );
    }
    return response;
  },
};

/**
 * The message to echo: `{text}`, `{missing: why}` when its ConfigMap or key is missing
 * (which may change without the Echo changing); throws fatal for a spec that can never work.
 */
function message(echo, ctx) {
  const spec = echo?.spec ?? {};
  const text = spec.message ?? undefined;
  const from = spec.messageFrom ?? undefined;
  if (text !== undefined && from !== undefined) {
    throw fatal('spec.message and spec.messageFrom are both set: give one');
  }
  if (text !== undefined) {
    if (typeof text !== 'string') throw fatal('spec.message must be a string');
    if (text.trim() === '') throw fatal('spec.message is empty: nothing to echo');
    return { text };
  }
  if (from === undefined) {
    throw fatal('neither spec.message nor spec.messageFrom is set: nothing to echo');
  }
  const ref = from.configMapKeyRef ?? {};
  const name = typeof ref.name === 'string' ? ref.name : '';
  const invalid = names.dns1123Subdomain(name);
  if (invalid !== undefined) throw fatal(`spec.messageFrom.configMapKeyRef.name ${invalid}`);
  const namespace = echo?.metadata?.namespace ?? 'default';
  const configMap = ctx.relatedOf(kinds.ConfigMap).find((c) => c?.metadata?.name === name);
  if (!configMap) return { missing: `ConfigMap ${namespace}/${name} not found` };
  const data = configMap.data ?? {};
  if (!Object.hasOwn(data, ref.key)) {
    return { missing: `ConfigMap ${namespace}/${name} has no key ${names.debugString(ref.key ?? '')}` };
  }
  return { text: data[ref.key] };
}

/** No message to echo: no Job (so an old one is pruned), Ready False with the reason, and
 * a Warning the first time this reason is reported. */
function missingSource(echo, ctx, why) {
  const previous = conditions.find(echo?.status?.conditions, conditions.READY);
  const reported = previous?.reason === MESSAGE_SOURCE_MISSING && previous?.message === why;
  const conds = conditionsOf(echo, ctx);
  conds.ready(false, MESSAGE_SOURCE_MISSING, why);
  const response = new Response().withStatus(
    status({ phase: Phase.Pending, observedGeneration: generationOf(echo), conditions: conds.toArray() }),
  );
  if (!reported) response.event(Event.warning(MESSAGE_SOURCE_MISSING, `${why}: no Job until it exists`));
  return response;
}

/** EchoStatus as the Rust type serializes it: absent fields left out. */
function status({ jobName, phase, observedGeneration, conditions: list }) {
  const out = {};
  if (jobName !== undefined) out.jobName = jobName;
  out.phase = phase;
  if (observedGeneration !== undefined) out.observedGeneration = observedGeneration;
  if (list.length) out.conditions = list;
  return out;
}

function generationOf(echo) {
  const g = echo?.metadata?.generation;
  return typeof g === 'number' ? g : undefined;
}

/** The Echo's conditions as last written, to update for this reconcile. */
function conditionsOf(echo, ctx) {
  return new Conditions(echo?.status?.conditions, generationOf(echo), ctx.now);
}

/** The one Job an Echo wants for `text`: in the Echo's namespace, named for the Echo and
 * what its pod template holds. */
export function desiredJob(echo, text, s) {
  const name = echo?.metadata?.name;
  if (typeof name !== 'string') throw fatal('Echo has no metadata.name');
  // The bytes the Rust Echo hashes: serde_json of `{"message": …}`, plus `"image"` only
  // for another image than the default, so Jobs keep their names across implementations.
  const hash = specHashOf(JSON.stringify({ message: text, image: s.image !== IMAGE ? s.image : undefined }));
  const room = MAX_JOB_NAME - hash.length - 1;
  // Cut by code points; a name no longer than that in UTF-16 units needs no cutting.
  const cut = name.length <= room ? name : [...name].slice(0, room).join('');
  const prefix = cut.replace(/[-.]+$/, '');
  const metadata = {
    labels: { 'app.kubernetes.io/managed-by': 'capstan', 'capstan.dev/plugin': 'echo' },
    name: `${prefix}-${hash}`,
  };
  if (echo.metadata.namespace != null) metadata.namespace = echo.metadata.namespace;
  const spec = {
    backoffLimit: s.backoffLimit ?? BACKOFF_LIMIT,
    template: {
      spec: {
        containers: [{ command: ['echo', text], image: s.image, name: 'echo' }],
        restartPolicy: 'Never',
      },
    },
  };
  if (s.ttlSecondsAfterFinished != null) spec.ttlSecondsAfterFinished = s.ttlSecondsAfterFinished;
  return { apiVersion: 'batch/v1', kind: 'Job', metadata, spec };
}

/** Phase of an observed Job from its conditions and counters. */
export function phaseOf(jobStatus) {
  const holds = (type) =>
    (Array.isArray(jobStatus.conditions) ? jobStatus.conditions : []).some((c) => c?.type === type && c?.status === 'True');
  if (holds('Complete')) return Phase.Succeeded;
  if (holds('Failed')) return Phase.Failed;
  if ((jobStatus.active ?? 0) > 0 || jobStatus.startTime != null) return Phase.Running;
  return Phase.Pending;
}

const encoder = new TextEncoder();

/** specHash, remembering the last answer: an Echo is reconciled again and again. */
let lastHashed;
let lastHash;
function specHashOf(text) {
  if (text !== lastHashed) {
    lastHash = specHash(text);
    lastHashed = text;
  }
  return lastHash;
}

/**
 * 8 hex digits of 64-bit FNV-1a over the UTF-8 of `text`, folded to 32 bits (high ^ low):
 * the Rust Echo's `spec_hash`. The 64-bit product is kept as two 32-bit halves, since a
 * double cannot hold it and BigInt is slower for no gain.
 */
export function specHash(text) {
  let hi = 0xcbf29ce4;
  let lo = 0x84222325;
  const bytes = encoder.encode(text);
  for (let i = 0; i < bytes.length; i++) {
    lo ^= bytes[i];
    // × 0x100000001b3 = × 0x1b3 + (× 1 << 40); the shifted part lands in the high half only.
    const loProduct = (lo >>> 0) * 0x1b3;
    const carry = (loProduct / 0x100000000) >>> 0; // < 0x1b3, so the cut is a floor
    hi = ((hi >>> 0) * 0x1b3 + carry + ((lo << 8) >>> 0)) >>> 0;
    lo = loProduct >>> 0;
  }
  return ((hi ^ lo) >>> 0).toString(16).padStart(8, '0');
}
