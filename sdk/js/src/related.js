// Related objects: which objects of a declared related kind one parent needs. A
// namespaced kind is read from the parent's namespace unless `inNamespace` says otherwise,
// which only a cluster-scoped parent may.

export class Related {
  constructor(kind, selector) {
    this.group = kind.group ?? '';
    this.kind = kind.kind;
    this.namespace = undefined;
    /** @type {{names: string[]} | {labels: string}} */
    this.selector = selector;
  }

  /** The objects of `kind` with these names (those that exist). */
  static named(kind, names) {
    return new Related(kind, { names: [...names].map(String) });
  }

  /** The objects of `kind` whose labels match a Kubernetes label selector. */
  static labelled(kind, selector) {
    return new Related(kind, { labels: String(selector) });
  }

  /** Read from this namespace instead of the parent's. */
  inNamespace(namespace) {
    this.namespace = namespace;
    return this;
  }
}
