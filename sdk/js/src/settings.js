// The operator's settings: one JSON object per plugin, checked once when the host loads
// the plugin (`validate-settings`) and read by every `related` and `reconcile` call.
//
// A plugin declares them as a JSON Schema (what `capstan inspect` shows) plus an optional
// `validate` for what a schema cannot say. The schema is also what checks and fills them
// in here, for the subset of JSON Schema that settings need: type (one or a list),
// properties, additionalProperties: false, required, default, enum, minimum, maximum,
// minLength, maxLength, pattern, items and the integer formats int32/int64/uint32/uint64.
// Messages read like the Rust SDK's (serde's), e.g.
// `backoffLimit: invalid type: string "three", expected i32`, so the operator sees the same
// refusal from either implementation of a plugin.

/**
 * Declare a settings type.
 * @param {{schema: object, validate?: (settings: object) => string | undefined | void}} declaration
 */
export function defineSettings({ schema, validate = undefined }) {
  if (schema === null || typeof schema !== 'object' || Array.isArray(schema)) {
    throw new TypeError('defineSettings: schema must be a JSON Schema object');
  }
  return Object.freeze({ schema, validate });
}

/** Settings text (empty or `null` reads as `{}`, as the host sends none) as a value. */
export function parseText(text) {
  const trimmed = (text ?? '').trim();
  if (trimmed === '' || trimmed === 'null') return {};
  try {
    return JSON.parse(trimmed);
  } catch (e) {
    throw new SettingsError(`settings are not JSON: ${e.message}`);
  }
}

export class SettingsError extends Error {
  constructor(message) {
    super(message);
    this.name = 'SettingsError';
  }
}

/**
 * The settings as `declared` reads them: checked against its schema, defaults filled in,
 * then its `validate`. Throws SettingsError with the one-line message the host refuses the
 * plugin with.
 * @param {string} plugin the plugin's name, for "takes no settings"
 * @param {{schema: object, validate?: Function} | undefined} declared
 * @param {string | object} settings JSON text or a parsed value
 */
export function check(plugin, declared, settings) {
  const value = typeof settings === 'string' ? parseText(settings) : settings ?? {};
  if (!declared) {
    if (isObject(value) && Object.keys(value).length === 0) return {};
    const got = isObject(value) ? Object.keys(value).join(', ') : JSON.stringify(value);
    throw new SettingsError(`plugin ${plugin} takes no settings (got ${got})`);
  }
  const typed = conform(declared.schema, value, []);
  if (declared.validate) {
    const problem = declared.validate(typed);
    if (typeof problem === 'string' && problem !== '') throw new SettingsError(problem);
  }
  return typed;
}

function isObject(v) {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

function refuse(path, message) {
  throw new SettingsError(path.length ? `${path.join('.')}: ${message}` : message);
}

/** Checked `value` against `schema`, with defaults filled in (a copy; input untouched). */
function conform(schema, value, path) {
  if (schema === true || schema === undefined) return value;
  if (schema === false) refuse(path, 'no value is allowed here');
  const types = schema.type === undefined ? [] : [].concat(schema.type);
  if (types.length && !types.some((t) => hasType(t, schema, value))) {
    if (types.includes('integer') && typeof value === 'number' && Number.isInteger(value)) {
      refuse(path, `invalid value: integer \`${value}\`, expected ${expected(schema)}`);
    }
    refuse(path, `invalid type: ${unexpected(value)}, expected ${expected(schema)}`);
  }
  if (schema.enum && !schema.enum.some((e) => JSON.stringify(e) === JSON.stringify(value))) {
    const variants = schema.enum.map((e) => `\`${typeof e === 'string' ? e : JSON.stringify(e)}\``);
    refuse(path, `unknown variant ${describe(value)}, expected ${oneOf(variants)}`);
  }
  if (typeof value === 'number') {
    if (schema.minimum !== undefined && value < schema.minimum) {
      refuse(path, `must be at least ${schema.minimum}, got ${value}`);
    }
    if (schema.maximum !== undefined && value > schema.maximum) {
      refuse(path, `must be at most ${schema.maximum}, got ${value}`);
    }
  }
  if (typeof value === 'string') {
    const length = [...value].length;
    if (schema.minLength !== undefined && length < schema.minLength) {
      refuse(path, `must be at least ${schema.minLength} characters long, got ${JSON.stringify(value)}`);
    }
    if (schema.maxLength !== undefined && length > schema.maxLength) {
      refuse(path, `must be at most ${schema.maxLength} characters long`);
    }
    if (schema.pattern !== undefined && !new RegExp(schema.pattern, 'u').test(value)) {
      refuse(path, `${JSON.stringify(value)} does not match ${schema.pattern}`);
    }
  }
  if (Array.isArray(value) && schema.items !== undefined) {
    return value.map((item, i) => conform(schema.items, item, [...path, String(i)]));
  }
  if (isObject(value) && (schema.properties || schema.additionalProperties !== undefined)) {
    const properties = schema.properties ?? {};
    const out = {};
    for (const [key, item] of Object.entries(value)) {
      if (Object.hasOwn(properties, key)) {
        out[key] = conform(properties[key], item, [...path, key]);
      } else if (schema.additionalProperties === false) {
        const names = Object.keys(properties).map((k) => `\`${k}\``);
        refuse(path, `unknown field \`${key}\`, ${names.length ? `expected ${oneOf(names)}` : 'there are no fields'}`);
      } else {
        out[key] = conform(schema.additionalProperties, item, [...path, key]);
      }
    }
    for (const key of schema.required ?? []) {
      if (!Object.hasOwn(out, key)) refuse(path, `missing field \`${key}\``);
    }
    for (const [key, property] of Object.entries(properties)) {
      if (!Object.hasOwn(out, key) && property && property.default !== undefined) {
        out[key] = structuredCloneJson(property.default);
      }
    }
    return out;
  }
  return value;
}

function structuredCloneJson(v) {
  return v === undefined ? v : JSON.parse(JSON.stringify(v));
}

const INTEGER_RANGES = {
  int32: [-(2 ** 31), 2 ** 31 - 1],
  uint32: [0, 2 ** 32 - 1],
  int64: [Number.MIN_SAFE_INTEGER, Number.MAX_SAFE_INTEGER],
  uint64: [0, Number.MAX_SAFE_INTEGER],
};

function hasType(type, schema, value) {
  switch (type) {
    case 'null':
      return value === null;
    case 'boolean':
      return typeof value === 'boolean';
    case 'string':
      return typeof value === 'string';
    case 'number':
      return typeof value === 'number';
    case 'integer': {
      if (typeof value !== 'number' || !Number.isInteger(value)) return false;
      const [lo, hi] = INTEGER_RANGES[schema.format] ?? INTEGER_RANGES.int64;
      return value >= lo && value <= hi;
    }
    case 'array':
      return Array.isArray(value);
    case 'object':
      return isObject(value);
    default:
      return true;
  }
}

/** What serde says it expected, from the schema. */
function expected(schema) {
  const types = [].concat(schema.type).filter((t) => t !== 'null');
  const names = {
    int32: 'i32',
    int64: 'i64',
    uint32: 'u32',
    uint64: 'u64',
  };
  const one = (t) => {
    switch (t) {
      case 'integer':
        return names[schema.format] ?? 'i64';
      case 'number':
        return 'f64';
      case 'string':
        return 'a string';
      case 'boolean':
        return 'a boolean';
      case 'array':
        return 'a sequence';
      case 'object':
        return schema.title ? `struct ${schema.title}` : 'a map';
      default:
        return t;
    }
  };
  return types.map(one).join(' or ') || 'null';
}

/** How serde names a value it did not expect. */
function unexpected(value) {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'sequence';
  switch (typeof value) {
    case 'string':
      return `string ${JSON.stringify(value)}`;
    case 'boolean':
      return `boolean \`${value}\``;
    case 'number':
      return Number.isInteger(value) ? `integer \`${value}\`` : `floating point \`${value}\``;
    default:
      return 'map';
  }
}

function describe(value) {
  return typeof value === 'string' ? `\`${value}\`` : unexpected(value);
}

function oneOf(names) {
  return names.length === 1 ? names[0] : `one of ${names.join(', ')}`;
}

/** `value` with it and everything in it frozen; returns it. */
export function freezeDeep(value) {
  if (value !== null && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const key of Object.keys(value)) freezeDeep(value[key]);
  }
  return value;
}
