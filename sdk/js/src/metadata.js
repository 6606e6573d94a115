// What a plugin declares about itself: name, version, the kinds it writes and reads,
// its settings and finalizer. The parent kind is the reconciler's `parent`, as the Rust
// SDK takes it from `Reconciler::Parent`.

import { kindRef } from './kinds.js';
import { check } from './settings.js';

export class Metadata {
  /**
   * @param {string} name plugin name, unique within one host
   * @param {string} version plugin version, semver recommended
   */
  constructor(name, version) {
    if (typeof name !== 'string' || name === '') throw new TypeError('Metadata: name must be a non-empty string');
    if (typeof version !== 'string' || version === '') throw new TypeError('Metadata: version must be a non-empty string');
    this.name = name;
    this.version = version;
    this.children = [];
    this.related = [];
    this.settingsDeclared = undefined;
    this.finalizerName = undefined;
  }

  /** Declare that the plugin may return children of `kind`. */
  child(kind) {
    this.children.push(kindRef(kind));
    return this;
  }

  /** Declare that the plugin reads objects of `kind` (never writes them). */
  relatedKind(kind) {
    this.related.push(kindRef(kind));
    return this;
  }

  /** Declare the plugin's settings (from `defineSettings`). */
  settings(declared) {
    this.settingsDeclared = declared;
    return this;
  }

  /** Ask the host to hold deletion of each parent until the plugin reports `finalized`. */
  finalizer(name) {
    this.finalizerName = name;
    return this;
  }

  /** JSON Schema of the declared settings, if any. */
  settingsSchema() {
    return this.settingsDeclared?.schema;
  }

  /** Check settings as the `validate-settings` export does; throws SettingsError. */
  validateSettings(settings) {
    return check(this.name, this.settingsDeclared, settings);
  }
}
