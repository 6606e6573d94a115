"""Metacontroller's hook contract on Capstan's: a CompositeController's or a
DecoratorController's ``sync``, ``finalize`` and ``customize`` hooks run as a plugin's
``reconcile`` and ``related``.

A hook is anything that maps a request's JSON to a response's JSON; a script written for
``http.server`` becomes one with :func:`webhook`. :class:`Composite` (and
:class:`Decorator`, whose parent is ``object`` and children ``attachments``) builds each hook's
request as Metacontroller would — the ``controller`` object, the ``parent``, the
``children`` and ``related`` object maps keyed by ``Kind.apiVersion`` and then by name
(hook version ``v1``) or ``namespace/name`` (``v2``), ``finalizing`` — and turns the
response into Capstan's: the children applied (namespaced ones without a namespace in
the parent's), the status as the hook returns it with ``observedGeneration``,
``resyncAfterSeconds`` as a requeue, ``finalized`` as the finalizer's release.

The kinds are the plugin's declaration (its :class:`Metadata`): Metacontroller names
resources by plural, and a ``customize`` rule for a resource the plugin does not
declare related is refused as the plugin's error, naming it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from .context import Context
from .errors import Fatal, Retry
from .kinds import KindRef
from .metadata import Metadata
from .objects import namespace as namespace_of
from .reconciler import Reconciler
from .related import Related
from .response import Response

Hook = Callable[[dict[str, Any]], dict[str, Any]]
"""A hook: a request's JSON in, its response's JSON out."""

VERSIONS = ("v1", "v2")
"""The hook versions Metacontroller defines: how the object maps are keyed."""


def webhook(hook: Any, url_path: str) -> Hook:
    """A loaded ``http.server`` script (:func:`capstan_sdk.http_hook.load`) as a hook
    served at ``url_path``: a status other than 2xx is an error to retry, as
    Metacontroller retries a failed webhook."""

    def call(request: dict[str, Any]) -> dict[str, Any]:
        answer = hook.post(url_path, json.dumps(request).encode())
        if not 200 <= answer.status < 300:
            text = answer.body.decode(errors="replace")[:200]
            raise Retry(f"{url_path} answered {answer.status}: {text}")
        try:
            value = json.loads(answer.body or b"{}")
        except ValueError as e:
            raise Retry(f"{url_path} answered with JSON that does not parse: {e}") from None
        if not isinstance(value, dict):
            raise Retry(f"{url_path} answered {type(value).__name__}, not an object")
        return value

    return call


def kind_key(kind: KindRef) -> str:
    """``Kind.apiVersion``, the key of a kind's map: ``Pod.v1``, ``StatefulSet.apps/v1``."""
    return f"{kind.kind}.{kind.api_version}"


def object_key(obj: Mapping[str, Any], parent_namespaced: bool, version: str) -> str:
    """An object's key in its kind's map. ``v2``: ``namespace/name`` for a namespaced
    object, its name otherwise. ``v1``: the name when the object and the parent have one
    scope, ``namespace/name`` for a namespaced object of a cluster-scoped parent."""
    meta = obj.get("metadata") or {}
    name, ns = meta.get("name", ""), meta.get("namespace")
    if not ns or (version == "v1" and parent_namespaced):
        return name
    return f"{ns}/{name}"


def object_map(
    kinds: Iterable[KindRef], objects: list[dict[str, Any]], parent: Mapping[str, Any], version: str
) -> dict[str, dict[str, Any]]:
    """Every kind's map (an empty one for a kind with no objects), as Metacontroller sends them."""
    parent_namespaced = bool(namespace_of(parent))
    out: dict[str, dict[str, Any]] = {}
    for kind in kinds:
        out[kind_key(kind)] = {
            object_key(o, parent_namespaced, version): o for o in objects if kind.matches(o)
        }
    return out


def label_selector(selector: Mapping[str, Any] | None) -> str:
    """A ``metav1.LabelSelector`` as selector text: ``app=web,tier in (a,b),!legacy``."""
    if not selector:
        return ""
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key", ""), expr.get("operator", ""), expr.get("values") or []
        if op == "In":
            parts.append(f"{key} in ({','.join(values)})")
        elif op == "NotIn":
            parts.append(f"{key} notin ({','.join(values)})")
        elif op == "Exists":
            parts.append(key)
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
        else:
            raise Fatal(f"label selector: unknown operator {op!r} for key {key!r}")
    return ",".join(parts)


def selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """Whether ``labels`` match a ``metav1.LabelSelector`` (none or empty matches all)."""
    if not selector:
        return True
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key", ""), expr.get("operator", ""), expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise Fatal(f"label selector: unknown operator {op!r} for key {key!r}")
    return True


def _is_namespace(obj: Mapping[str, Any]) -> bool:
    return obj.get("apiVersion") == "v1" and obj.get("kind") == "Namespace"


def prune(value: Any, schema: Mapping[str, Any]) -> Any:
    """``value`` as the API server stores it under a structural ``schema``: the fields the
    schema does not declare dropped, unless it preserves unknown fields."""
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        keep = schema.get("x-kubernetes-preserve-unknown-fields") is True or extra is True
        out: dict[str, Any] = {}
        for key, item in value.items():
            if key in props:
                out[key] = prune(item, props[key])
            elif isinstance(extra, dict):
                out[key] = prune(item, extra)
            elif keep:
                out[key] = item
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [prune(item, schema["items"]) for item in value]
    return value


@dataclass
class Composite(Reconciler):
    """A CompositeController's hooks as a plugin.

    ``controller`` is the CompositeController object as Metacontroller would send it;
    ``metadata`` declares its parent, child and related kinds (and a finalizer when there
    is a ``finalize`` hook). ``version`` is the hooks' (``spec.hooks.sync.version``).
    """

    PARENT_FIELD = "parent"
    CHILDREN_FIELD = "children"

    controller: dict[str, Any]
    declared: Metadata
    sync: Hook
    finalize: Hook | None = None
    customize: Hook | None = None
    version: str = "v1"
    status_schema: dict[str, Any] | None = None
    """The parent's status schema (its CRD's): the status written is pruned to it, as the
    API server prunes Metacontroller's status update (an applied status with an undeclared
    field is refused instead). ``None`` writes the status unpruned."""

    def __post_init__(self) -> None:
        if self.version not in VERSIONS:
            raise ValueError(f"hook version {self.version!r}: Metacontroller has {', '.join(VERSIONS)}")

    def metadata(self) -> Metadata:
        return self.declared

    def related(self, parent: dict[str, Any], ctx: Context) -> list[Related]:
        if self.customize is None:
            return []
        return [q for rule in self._rules(parent) for q in self._queries(rule, parent)]

    def _rules(self, parent: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        """The customize hook's ``relatedResources`` for ``parent``."""
        assert self.customize is not None
        answer = self.customize({"controller": self.controller, self.PARENT_FIELD: parent})
        return list(answer.get("relatedResources") or [])

    def _kind(self, rule: Mapping[str, Any]) -> KindRef:
        api_version, resource = rule.get("apiVersion", ""), rule.get("resource", "")
        kind = next(
            (k for k in self.declared.related_kinds if k.api_version == api_version and k.plural == resource),
            None,
        )
        if kind is None:
            raise Fatal(f"customize: {resource} ({api_version}) is not declared related")
        return kind

    def _queries(self, rule: Mapping[str, Any], parent: Mapping[str, Any]) -> list[Related]:
        """A rule's queries: one, or for a ``namespaceSelector`` two — the Namespaces it
        selects, and its objects in every namespace the parent may read (the hook is shown
        those in a selected namespace, see :meth:`_shown`)."""
        kind = self._kind(rule)
        if rule.get("namespaceSelector") is None:
            return [self._query(kind, rule, parent)]
        self._check_namespace_selector(kind, rule, parent)
        namespaces = self._namespace_kind(rule)
        return [
            Related.labelled(namespaces, label_selector(rule["namespaceSelector"])),
            Related.labelled(kind, label_selector(rule.get("labelSelector"))).in_namespace("*"),
        ]

    def _check_namespace_selector(self, kind: KindRef, rule: Mapping[str, Any], parent: Mapping[str, Any]) -> None:
        """Metacontroller's rules for a ``namespaceSelector``, with its reasons."""
        what = f"customize: {rule.get('resource', '')} ({rule.get('apiVersion', '')})"
        if rule.get("names"):
            raise Fatal(f"{what}: a rule cannot have both names and a namespaceSelector")
        if rule.get("namespace"):
            raise Fatal(f"{what}: a rule cannot have both a namespace and a namespaceSelector")
        if self._every_namespace(parent) is None:
            raise Fatal(f"{what}: a namespaceSelector cannot be used by a namespaced parent in a v1 hook")
        if not kind.namespaced:
            raise Fatal(f"{what}: a namespaceSelector is only for namespaced resources")

    def _namespace_kind(self, rule: Mapping[str, Any]) -> KindRef:
        kind = next((k for k in self.declared.related_kinds if k.api_version == "v1" and k.kind == "Namespace"), None)
        if kind is None:
            what = f"customize: {rule.get('resource', '')} ({rule.get('apiVersion', '')})"
            raise Fatal(f"{what}: a namespaceSelector reads the Namespaces it selects; declare v1 namespaces related")
        return kind

    def _query(self, kind: KindRef, rule: Mapping[str, Any], parent: Mapping[str, Any]) -> Related:
        names = rule.get("names")
        query = Related.named(kind, names) if names else Related.labelled(kind, label_selector(rule.get("labelSelector")))
        ns = rule.get("namespace") or self._every_namespace(parent)
        return query.in_namespace(ns) if ns else query

    def _every_namespace(self, parent: Mapping[str, Any]) -> str | None:
        """Where a rule naming no namespace reads: a v1 hook's namespaced parent its own
        (none: the default); otherwise, as Metacontroller, every namespace ("*": every one
        the operator lets the parent read)."""
        if self.version == "v1" and (parent.get("metadata") or {}).get("namespace"):
            return None
        return "*"

    def request(self, parent: dict[str, Any], ctx: Context) -> dict[str, Any]:
        """The hook request for ``parent``, as Metacontroller sends it."""
        return {
            "controller": self.controller,
            self.PARENT_FIELD: parent,
            self.CHILDREN_FIELD: object_map(self.declared.children, ctx.children, parent, self.version),
            "related": object_map(self.declared.related_kinds, self._shown(parent, ctx.related), parent, self.version),
            "finalizing": ctx.finalizing,
        }

    def _shown(self, parent: Mapping[str, Any], related: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The related objects the hook is shown. Under a ``namespaceSelector`` rule the host
        read the rule's kind in every namespace and the Namespaces the selector picks: the
        hook sees the rule's objects in a picked namespace, and a Namespace only where a
        rule asks for it (the rules are asked again, only when a Namespace was read)."""
        if self.customize is None or not any(_is_namespace(o) for o in related):
            return related
        rules = self._rules(parent)
        if not any(r.get("namespaceSelector") is not None for r in rules):
            return related
        namespaces = {(o.get("metadata") or {}).get("name"): o for o in related if _is_namespace(o)}
        return [o for o in related if any(self._selects(r, o, namespaces, parent) for r in rules)]

    def _selects(
        self, rule: Mapping[str, Any], obj: Mapping[str, Any], namespaces: Mapping[str, Any], parent: Mapping[str, Any]
    ) -> bool:
        """Whether ``rule`` selects ``obj``, as Metacontroller matches a related object."""
        kind = self._kind(rule)
        if not kind.matches(obj):
            return False
        meta = obj.get("metadata") or {}
        labels = meta.get("labels") or {}
        if rule.get("namespaceSelector") is not None:
            ns = namespaces.get(meta.get("namespace"))
            ns_labels = ((ns or {}).get("metadata") or {}).get("labels") or {}
            return ns is not None and selects(rule["namespaceSelector"], ns_labels) and selects(rule.get("labelSelector"), labels)
        names = rule.get("names")
        if names and meta.get("name") not in names:
            return False
        if not names and not selects(rule.get("labelSelector"), labels):
            return False
        where = rule.get("namespace") or self._every_namespace(parent)
        if not kind.namespaced or where == "*":
            return True
        return meta.get("namespace") == (where or namespace_of(parent))

    def reconcile(self, parent: dict[str, Any], ctx: Context) -> Response:
        hook = self.finalize if ctx.finalizing and self.finalize is not None else self.sync
        answer = hook(self.request(parent, ctx))
        return self.response(answer, parent, ctx.finalizing)

    def response(self, answer: Mapping[str, Any], parent: Mapping[str, Any], finalizing: bool) -> Response:
        """Capstan's response for a hook's ``answer``."""
        out = Response()
        for child in answer.get(self.CHILDREN_FIELD) or []:
            out = out.with_child(self._placed(child, parent))
        status = answer.get("status")
        if status is not None:
            status = self._status(status, parent)
            if self.status_schema is not None:
                status = prune(status, self.status_schema)
            # Nothing the parent's schema holds: no status to write.
            if status or self.status_schema is None:
                out = out.with_status(status)
        # The controller's resyncPeriodSeconds is the host's `resync`, set where it runs.
        resync = answer.get("resyncAfterSeconds")
        if resync:
            out = out.with_requeue_after(float(resync))
        if finalizing and answer.get("finalized"):
            out = out.with_finalized()
        return out

    def _status(self, status: Mapping[str, Any], parent: Mapping[str, Any]) -> dict[str, Any]:
        """The status to write: the hook's, with the parent's ``observedGeneration``."""
        generation = (parent.get("metadata") or {}).get("generation")
        return {**status, "observedGeneration": generation} if generation else dict(status)

    def _placed(self, child: Mapping[str, Any], parent: Mapping[str, Any]) -> dict[str, Any]:
        """``child`` with the parent's namespace when it is of a namespaced kind and names none."""
        out = dict(child)
        meta = dict(out.get("metadata") or {})
        ns = namespace_of(parent)
        kind = next((k for k in self.declared.children if k.matches(child)), None)
        if ns and not meta.get("namespace") and (kind is None or kind.namespaced):
            meta["namespace"] = ns
        out["metadata"] = meta
        return out


@dataclass
class Decorator(Composite):
    """A DecoratorController's hooks as a plugin: the target is the parent (``object`` in
    the hooks' requests), its attachments the children.

    ``parent_selector`` is the resource rule's ``labelSelector`` and
    ``annotation_selector`` its ``annotationSelector``: a target they do not select is
    finalized, as Metacontroller finalizes one that stops matching (the finalize hook, if
    any, cleans up; its ``finalized`` lets the target go). The hooks' ``labels`` and
    ``annotations`` set and remove the target's own.
    """

    PARENT_FIELD = "object"
    CHILDREN_FIELD = "attachments"

    parent_selector: dict[str, Any] | None = None
    annotation_selector: dict[str, Any] | None = None

    def _selected(self, parent: Mapping[str, Any]) -> bool:
        meta = parent.get("metadata") or {}
        return selects(self.parent_selector, meta.get("labels") or {}) and selects(
            self.annotation_selector, meta.get("annotations") or {}
        )

    def related(self, parent: dict[str, Any], ctx: Context) -> list[Related]:
        return super().related(parent, ctx) if self._selected(parent) else []

    def reconcile(self, parent: dict[str, Any], ctx: Context) -> Response:
        if self._selected(parent):
            return super().reconcile(parent, ctx)
        # As under Metacontroller, a target the rule no longer selects is finalized: the
        # finalize hook cleans its attachments up, and its answer lets the finalizer go;
        # without one, nothing is held for it.
        if self.finalize is None:
            return Response().with_finalized()
        request = self.request(parent, ctx)
        request["finalizing"] = True
        return self.response(self.finalize(request) or {}, parent, True)

    def response(self, answer: Mapping[str, Any], parent: Mapping[str, Any], finalizing: bool) -> Response:
        """As Metacontroller: the hook's ``labels`` and ``annotations`` set the target's (a
        null value removes one) and leave its others as they are."""
        out = super().response(answer, parent, finalizing)
        for key, value in (answer.get("labels") or {}).items():
            out.with_parent_label(key, None if value is None else str(value))
        for key, value in (answer.get("annotations") or {}).items():
            out.with_parent_annotation(key, None if value is None else str(value))
        return out

    def _status(self, status: Mapping[str, Any], parent: Mapping[str, Any]) -> dict[str, Any]:
        # The target's own controller keeps its observedGeneration; the hook's fields only.
        return dict(status)
