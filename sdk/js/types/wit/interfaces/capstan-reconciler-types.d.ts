declare module 'capstan:reconciler/types@0.3.0' {
  /**
   * A Kubernetes object serialized as one JSON document, including `apiVersion` and `kind`.
   */
  export type Json = string;
  /**
   * Identifies a served API kind, as API discovery reports it.
   */
  export interface KindRef {
    /**
     * API group; empty for the core group (e.g. "" for ConfigMap, "batch" for Job).
     */
    group: string,
    /**
     * API version within the group (e.g. "v1", "v1alpha1").
     */
    version: string,
    /**
     * Kind in CamelCase (e.g. "Job").
     */
    kind: string,
    /**
     * Lower-case plural resource name used in URLs (e.g. "jobs").
     */
    plural: string,
    /**
     * True when objects of this kind live in a namespace.
     */
    namespaced: boolean,
  }
  /**
   * What a plugin is and what it may touch; read once when the plugin is loaded.
   */
  export interface PluginMetadata {
    /**
     * Plugin name, unique within one host; used in logs, metrics, field manager
     * (`capstan/<name>`) and the `capstan.dev/plugin` label of its children.
     */
    name: string,
    /**
     * Plugin version (semver recommended), shown by `capstan inspect` and in logs.
     */
    version: string,
    /**
     * The kind this plugin reconciles; every object of it is passed to `reconcile`.
     */
    parent: KindRef,
    /**
     * Every kind the plugin may return as a child. The host refuses a response that
     * holds a child of any other kind, and derives watches and RBAC from this list.
     */
    children: Array<KindRef>,
    /**
     * Kinds the plugin reads but never writes. The host watches them (in the scope it
     * watches parents) and passes each parent the objects `related` selects for it;
     * a change to one of those objects reconciles that parent again. Secret needs the
     * operator's grant.
     */
    related: Array<KindRef>,
    /**
     * JSON Schema of the plugin's settings, if it takes any; shown by
     * `capstan inspect` so installers can check and document their settings.
     */
    settingsSchema?: Json,
    /**
     * A finalizer the host adds to each parent; when set, deletion of a parent waits
     * until `reconcile` with `finalizing = true` answers `finalized = true`.
     */
    finalizer?: string,
  }
  /**
   * How a query picks objects.
   */
  export type Selector = SelectorNames | SelectorLabels;
  /**
   * The objects with these names (those that exist).
   */
  export interface SelectorNames {
    tag: 'names',
    val: Array<string>,
  }
  /**
   * The objects whose labels match, in Kubernetes label-selector syntax
   * (e.g. "app=web,tier in (a,b),!legacy").
   */
  export interface SelectorLabels {
    tag: 'labels',
    val: string,
  }
  /**
   * Which objects of one related kind a parent needs.
   */
  export interface RelatedQuery {
    /**
     * API group of a kind declared in `related` ("" for the core group).
     */
    group: string,
    /**
     * Kind of a kind declared in `related`.
     */
    kind: string,
    /**
     * Namespace to read a namespaced kind from; none is the parent's own, "*" every
     * namespace the parent may read. A parent reads its own namespace and those the
     * operator grants it (`allowNamespaces`). Ignored for cluster-scoped kinds.
     */
    namespace?: string,
    /**
     * Which objects of that kind and namespace.
     */
    selector: Selector,
  }
  /**
   * The input to one reconcile.
   */
  export interface Request {
    /**
     * The parent object as last observed by the host.
     */
    parent: Json,
    /**
     * Observed objects of the declared child kinds whose controller owner
     * reference points at the parent.
     */
    children: Array<Json>,
    /**
     * The objects the plugin's `related` queries selected for this parent, in the
     * order of the queries; a named object that does not exist is simply absent.
     */
    related: Array<Json>,
    /**
     * The plugin's settings as the operator configured them (a JSON object, `{}`
     * when none), already accepted by `validate-settings`.
     */
    settings: Json,
    /**
     * The host's clock when the reconcile was dispatched, RFC 3339 in UTC
     * (e.g. "2026-11-24T09:30:00.123Z"). The plugin's own clocks stay fixed, so a
     * recorded request replays to the same response. An answer that depends on the
     * time must say when it changes with `requeue-after-ms`: a resync that finds
     * every other field as it was at a reconcile that changed nothing, recorded no
     * event and asked for no requeue keeps that answer without asking again.
     */
    now: string,
    /**
     * True when the parent has a deletion timestamp and still carries this
     * plugin's finalizer: clean up, then answer `finalized = true`.
     */
    finalizing: boolean,
  }
  /**
   * Severity of an event recorded on the parent.
   * # Variants
   * 
   * ## `"normal"`
   * 
   * Expected, informational (events.k8s.io type "Normal").
   * ## `"warning"`
   * 
   * Something a human may need to act on (type "Warning").
   */
  export type EventType = 'normal' | 'warning';
  /**
   * An event the host records on the parent object.
   */
  export interface Event {
    /**
     * Normal or Warning.
     */
    eventType: EventType,
    /**
     * Short UpperCamelCase machine-readable reason (e.g. "JobCreated").
     */
    reason: string,
    /**
     * Human-readable description.
     */
    message: string,
  }
  /**
   * One label or annotation of the parent, set or removed.
   */
  export interface MetadataEntry {
    /**
     * The key, as Kubernetes writes it (e.g. "example.com/tier").
     */
    key: string,
    /**
     * The value to set; none removes the key.
     */
    value?: string,
  }
  /**
   * The outcome of a successful reconcile.
   */
  export interface Response {
    /**
     * The full desired set of children. The host server-side applies each one
     * (adding the controller owner reference and Capstan's labels) and deletes
     * observed children that are not in this list.
     */
    children: Array<Json>,
    /**
     * The parent's new `status`, as a JSON object; none leaves status untouched.
     */
    status?: Json,
    /**
     * Reconcile this parent again after this many milliseconds even if nothing changes.
     */
    requeueAfterMs?: bigint,
    /**
     * Events to record on the parent.
     */
    events: Array<Event>,
    /**
     * When the request was `finalizing`: cleanup is complete and the host may remove
     * the finalizer. On a parent not being deleted, with no children: the plugin
     * holds nothing for it (a decorator's target it no longer selects, say), so the
     * host takes its finalizer off, and puts it on again before it makes a child.
     */
    finalized: boolean,
    /**
     * Labels of the parent itself to set or remove; the parent's other labels are left
     * as they are. The host refuses a key or value the API server would refuse, and
     * keys under `capstan.dev/`, which are its own.
     */
    parentLabels: Array<MetadataEntry>,
    /**
     * Annotations of the parent itself to set or remove, under the same rules.
     */
    parentAnnotations: Array<MetadataEntry>,
  }
  /**
   * A transient failure and when to try again.
   */
  export interface Retry {
    /**
     * What went wrong, for logs and events.
     */
    message: string,
    /**
     * Wait this long before retrying; none is per-object exponential backoff. The
     * host caps it (five minutes).
     */
    afterMs?: bigint,
  }
  /**
   * Why a reconcile did not produce a response.
   */
  export type ReconcileError = ReconcileErrorRetry | ReconcileErrorFatal;
  /**
   * A transient problem: the host retries.
   */
  export interface ReconcileErrorRetry {
    tag: 'retry',
    val: Retry,
  }
  /**
   * A permanent problem with this object as it is (e.g. invalid spec): the host
   * records a Warning event and waits until the object changes.
   */
  export interface ReconcileErrorFatal {
    tag: 'fatal',
    val: string,
  }
  /**
   * Severity of a log line.
   * # Variants
   * 
   * ## `"trace"`
   * 
   * ## `"debug"`
   * 
   * ## `"info"`
   * 
   * ## `"warn"`
   * 
   * ## `"error"`
   */
  export type Level = 'trace' | 'debug' | 'info' | 'warn' | 'error';
}
