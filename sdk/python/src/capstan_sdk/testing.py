"""Run a :class:`~capstan_sdk.Reconciler` natively under pytest, from YAML or JSON
fixtures, with no Wasm -- the Python counterpart of the Rust SDK's ``testing`` module::

    from capstan_sdk.testing import Fixture

    r = (Fixture.load("fixtures/echo.yaml")
         .children_file("fixtures/job-running.yaml")
         .now("2026-11-24T09:30:00Z")
         .reconcile(EchoReconciler()))
    assert r.status["phase"] == "Running"

A fixture carries what the host would send: the parent, observed children, the objects
of related kinds that exist (of which the request gets those the plugin's ``related``
queries select, by the host's rules), settings (``{}`` by default; checked with the
plugin's ``validate-settings`` first, as the host does at load) and the clock
(:data:`DEFAULT_NOW` unless set, so a response never depends on the day a test runs).
Everything crosses as JSON text, as it does in the Wasm build.

Responses are checked with a subset of the rules the host applies before writing (the
Rust SDK shares the host's code; these are a port of the common ones): children of
declared kinds only, with valid names, in the parent's namespace (cluster-scoped kinds
and other namespaces only when granted), no owner references, no Capstan labels or
annotation of the plugin's own making, no duplicates, CamelCase event reasons.

:meth:`Fixture.check` raises a :class:`Failure` when the host would refuse something and
the plugin's own :class:`~capstan_sdk.ReconcileError` when it fails;
:meth:`Fixture.reconcile`, for tests of behaviour, turns a :class:`Failure` into an
``AssertionError`` so a test cannot pass on a response the host would not write.

YAML needs PyYAML (the ``testing`` extra); JSON fixtures need nothing. YAML is read as
YAML 1.2 reads it, as the host does: ``yes``/``on`` stay strings, and so do times.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable

from . import reconciler as glue
from .errors import ReconcileError
from .kinds import KindRef
from .metadata import Metadata
from .names import dns1123_label, dns1123_subdomain, printable, rust_debug
from .related import Related
from .response import Response
from .timefmt import format_time_precise, parse_time

DEFAULT_NOW = "2026-01-01T00:00:00Z"
"""The clock of a fixture that sets none, the same as ``capstan test``'s default."""

PLUGIN_LABEL = "capstan.dev/plugin"
MANAGED_BY = ("app.kubernetes.io/managed-by", "capstan")
APPLIED_ANNOTATION = "capstan.dev/applied"


class FixtureError(Exception):
    """A fixture file or text that could not be read."""


class Failure(Exception):
    """The host would refuse something about this reconcile; see the subclasses."""


class SettingsRefused(Failure):
    """``validate-settings`` refused the settings: the host would not load the plugin."""


class RelatedRefused(Failure):
    """The host would refuse the plugin's related queries for this parent."""


class Refused(Failure):
    """The plugin answered, but the host would refuse the response and write nothing of it."""


# --- documents ------------------------------------------------------------------------


def _yaml_loader():
    try:
        import yaml
    except ImportError:
        return None

    class Loader(yaml.SafeLoader):
        pass

    # YAML 1.2 core schema, as the host's parser reads it: only true/false are booleans
    # and times stay strings (PyYAML's 1.1 rules would make `on` True and parse dates).
    Loader.yaml_implicit_resolvers = {
        first: [(tag, rx) for tag, rx in resolvers if tag not in ("tag:yaml.org,2002:bool", "tag:yaml.org,2002:timestamp")]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
    )
    return Loader


def parse_documents(text: str) -> list[Any]:
    """YAML or JSON text holding one or more documents (``---`` separated); empty ones are dropped."""
    loader = _yaml_loader()
    if loader is None:
        try:
            docs = [json.loads(text)] if text.strip() else []
        except json.JSONDecodeError as e:
            raise FixtureError(f"{e} (YAML fixtures need PyYAML: pip install 'capstan-sdk[testing]')") from None
    else:
        import yaml

        try:
            docs = list(yaml.load_all(text, Loader=loader))
        except yaml.YAMLError as e:
            raise FixtureError(" ".join(str(e).split())) from None
    return [d for d in docs if d is not None]


def load_documents(path: str | Path) -> list[Any]:
    """A YAML or JSON file holding one or more documents."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise FixtureError(f"{path}: {e.strerror}") from None
    try:
        return parse_documents(text)
    except FixtureError as e:
        raise FixtureError(f"{path}: {e}") from None


def _one(docs: list[Any], what: str) -> Any:
    if len(docs) != 1:
        raise FixtureError(f"expected one {what} document, found {len(docs)}")
    return docs[0]


# --- the fixture ----------------------------------------------------------------------


@dataclass
class Allowances:
    """The operator's grants a response is checked against (none by default)."""

    cluster_kinds: list[str] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)
    own_namespace: bool = False


class Fixture:
    """One reconcile's input plus the operator's grants; every setter returns the fixture."""

    def __init__(self, parent: dict[str, Any]) -> None:
        self.parent = parent
        self.observed: list[dict[str, Any]] = []
        self.existing: list[dict[str, Any]] = []
        self.settings_json: Any = {}
        self.clock: str = DEFAULT_NOW
        self.is_finalizing = False
        self.allow = Allowances()

    @staticmethod
    def parse(text: str) -> "Fixture":
        """A fixture whose parent is the single document in ``text``."""
        return Fixture(_one(parse_documents(text), "parent"))

    @staticmethod
    def load(path: str | Path) -> "Fixture":
        """A fixture whose parent is the single document in the file at ``path``."""
        try:
            return Fixture(_one(load_documents(path), "parent"))
        except FixtureError as e:
            raise FixtureError(e.args[0] if str(path) in e.args[0] else f"{path}: {e}") from None

    def children(self, text: str) -> "Fixture":
        """Add observed children from YAML/JSON text (one or more documents)."""
        self.observed.extend(parse_documents(text))
        return self

    def children_file(self, *paths: str | Path) -> "Fixture":
        """Add observed children from YAML/JSON files (one or more documents each)."""
        for p in paths:
            self.observed.extend(load_documents(p))
        return self

    def child(self, obj: dict[str, Any]) -> "Fixture":
        self.observed.append(obj)
        return self

    def related(self, text: str) -> "Fixture":
        """Add objects of the plugin's related kinds that exist in the cluster (a
        namespaced one that names no namespace is in ``default``)."""
        self.existing.extend(parse_documents(text))
        return self

    def related_file(self, *paths: str | Path) -> "Fixture":
        for p in paths:
            self.existing.extend(load_documents(p))
        return self

    def related_object(self, obj: dict[str, Any]) -> "Fixture":
        self.existing.append(obj)
        return self

    def settings(self, text: str) -> "Fixture":
        """Use these settings, from YAML/JSON text holding one object."""
        self.settings_json = _one(parse_documents(text), "settings")
        return self

    def settings_file(self, path: str | Path) -> "Fixture":
        self.settings_json = _one(load_documents(path), "settings")
        return self

    def settings_value(self, value: Any) -> "Fixture":
        self.settings_json = value
        return self

    def now(self, now: str | datetime) -> "Fixture":
        """Set the host's clock for this reconcile (:data:`DEFAULT_NOW` otherwise)."""
        self.clock = format_time_precise(now) if isinstance(now, datetime) else format_time_precise(parse_time(now))
        return self

    def finalizing(self) -> "Fixture":
        self.is_finalizing = True
        return self

    def allow_cluster_kind(self, kind: str) -> "Fixture":
        """Let the plugin create cluster-scoped children of this kind (``Kind`` or ``plural.group``)."""
        self.allow.cluster_kinds.append(kind)
        return self

    def allow_namespace(self, namespace: str) -> "Fixture":
        """Let children of a cluster-scoped parent go into (and related objects be read from) this namespace."""
        self.allow.namespaces.append(namespace)
        return self

    def allow_own_namespace(self) -> "Fixture":
        """A plugin of Namespaces may put children into the Namespace it reconciles."""
        self.allow.own_namespace = True
        return self

    # --- running ----------------------------------------------------------------------

    def related_queries(self, reconciler: glue.Reconciler) -> list[Related]:
        """The queries the plugin asks for this parent, as the host receives them."""
        return glue.related(reconciler, glue.to_json(_shown_to_related(self.parent)), glue.to_json(self.settings_json))

    def check(self, reconciler: glue.Reconciler) -> Response:
        """Run the plugin as the host would: settings checked, related objects selected,
        then ``reconcile``, and the response checked. Raises :class:`Failure` for what the
        host would refuse and the plugin's :class:`ReconcileError` when it fails."""
        metadata = reconciler.metadata()
        settings_text = glue.to_json(self.settings_json)
        why = glue.validate_settings(reconciler, settings_text)
        if why is not None:
            raise SettingsRefused(why)
        related: list[dict[str, Any]] = []
        if metadata.related_kinds:
            queries = glue.related(reconciler, glue.to_json(_shown_to_related(self.parent)), settings_text)
            related = _select(metadata, self.parent, queries, self.existing, self.allow)
        request = glue.Request(
            parent=glue.to_json(self.parent),
            children=[glue.to_json(c) for c in self.observed],
            related=[glue.to_json(r) for r in related],
            settings=settings_text,
            now=self.clock,
            finalizing=self.is_finalizing,
        )
        response = glue.reconcile(reconciler, request)
        # Through JSON and back, as the Wasm export sends it: a value JSON cannot carry
        # (a datetime, a set) fails here rather than in the host.
        try:
            response.children = [json.loads(glue.to_json(c)) for c in response.children]
            if response.status is not None:
                response.status = json.loads(glue.to_json(response.status))
        except (TypeError, ValueError) as e:
            raise Refused(f"response is not JSON: {e}") from None
        _check_response(metadata, self.parent, response, self.allow)
        return response

    def reconcile(self, reconciler: glue.Reconciler) -> Response:
        """:meth:`check`, with what the host would refuse failing the test as an
        ``AssertionError``; the plugin's own errors are raised as they are."""
        try:
            return self.check(reconciler)
        except SettingsRefused as e:
            raise AssertionError(f"the host would not load the plugin with these settings: {e}") from None
        except RelatedRefused as e:
            raise AssertionError(f"the host would refuse the plugin's related queries: {e}") from None
        except Refused as e:
            raise AssertionError(f"the host would refuse this response and write nothing of it: {e}") from None


def validate_settings(reconciler: glue.Reconciler, settings: Any) -> str | None:
    """What the ``validate-settings`` export answers for these settings (decoded JSON)."""
    return glue.validate_settings(reconciler, glue.to_json(settings))


def run_case(reconciler: glue.Reconciler, case: dict[str, Any], base: str | Path) -> dict[str, Any]:
    """Run one case of a golden ``cases.toml`` (paths relative to ``base``) and return
    what ``capstan test`` prints for it: the response, or ``{"error": ...}``."""
    base = Path(base)
    f = Fixture.load(base / case["parent"])
    for c in case.get("children", []):
        f.children_file(base / c)
    for r in case.get("related", []):
        f.related_file(base / r)
    if "settings" in case:
        f.settings_file(base / case["settings"])
    if "now" in case:
        f.now(case["now"])
    try:
        return f.reconcile(reconciler).to_json()
    except ReconcileError as e:
        from .errors import Retry

        if isinstance(e, Retry):
            retry: dict[str, Any] = {"message": e.message}
            if e.after_ms is not None:
                retry["afterMs"] = e.after_ms
            return {"error": {"retry": retry}}
        return {"error": {"fatal": e.message}}


# --- the host's rules -----------------------------------------------------------------


def _parent_namespace(metadata: Metadata, parent: dict[str, Any]) -> str | None:
    if not metadata.parent.namespaced:
        return None
    ns = (parent.get("metadata") or {}).get("namespace")
    return ns if isinstance(ns, str) and ns else "default"


def _shown_to_related(parent: Any) -> Any:
    """The parent as the host shows ``related``: without ``status`` and
    ``metadata.resourceVersion`` (which objects it reads follows from what it asks for)."""
    if not isinstance(parent, dict):
        return parent
    shown = {k: v for k, v in parent.items() if k != "status"}
    if isinstance(shown.get("metadata"), dict):
        shown["metadata"] = {k: v for k, v in shown["metadata"].items() if k != "resourceVersion"}
    return shown


ANY_NAMESPACE = "*"
"""The grant of every namespace, and a query for every namespace the parent may read."""


def _readable(kind: KindRef, own: str | None, asked: str | None, allow: Allowances) -> list[str | None]:
    """The namespaces a query for namespaced ``kind`` reads, as the host resolves it:
    ``*`` is every one where the operator grants every one, else the parent's own and
    each granted."""
    every = ANY_NAMESPACE in allow.namespaces
    if asked == ANY_NAMESPACE:
        if every:
            return [ANY_NAMESPACE]
        readable = list(dict.fromkeys([ns for ns in [own, *allow.namespaces] if ns]))
        if not readable:
            raise RelatedRefused(
                f"related query for {kind.kind} in every namespace (\"*\"): a cluster-scoped parent reads none"
                " unless the operator grants them (allowNamespaces)"
            )
        return readable
    if asked is None:
        raise RelatedRefused(f"related query for namespaced {kind.kind} from a cluster-scoped parent must name its namespace")
    bad = dns1123_label(asked)
    if bad:
        raise RelatedRefused(f"related query namespace {bad}")
    if asked != own and asked not in allow.namespaces and not every:
        raise RelatedRefused(
            f"related query for {kind.kind}: namespace {rust_debug(printable(asked))} is not the parent's namespace"
        )
    return [asked]


def _select(
    metadata: Metadata,
    parent: dict[str, Any],
    queries: list[Related],
    candidates: Iterable[dict[str, Any]],
    allow: Allowances,
) -> list[dict[str, Any]]:
    own = _parent_namespace(metadata, parent)
    if own is None and metadata.parent.kind == "Namespace" and not metadata.parent.group:
        own = (parent.get("metadata") or {}).get("name")
    resolved = []
    for q in queries:
        kind = next((k for k in metadata.related_kinds if (k.group, k.kind) == (q.group, q.kind)), None)
        if kind is None:
            what = q.kind if not q.group else f"{q.kind}.{q.group}"
            raise RelatedRefused(f"related query for {printable(what)}: not a declared related kind")
        namespaces: list[str | None] = [None]
        if kind.namespaced:
            namespaces = _readable(kind, own, q.namespace or own, allow)
        selector = None
        if q.names is not None:
            for n in q.names:
                bad = dns1123_subdomain(n)
                if bad:
                    raise RelatedRefused(f"related query for {kind.kind}: {bad}")
        else:
            try:
                selector = LabelSelector.parse(q.labels or "")
            except ValueError as e:
                raise RelatedRefused(str(e)) from None
        resolved.extend((kind, namespace, q.names, selector) for namespace in namespaces)
    out: list[dict[str, Any]] = []
    # Each query's answer in namespace and name order, as the host's.
    def place(c: dict[str, Any]) -> tuple[str, str]:
        meta = c.get("metadata") or {}
        return (meta.get("namespace") or "", meta.get("name") or "")

    ordered = sorted(candidates, key=place)
    for kind, namespace, names, selector in resolved:
        for c in ordered:
            if not kind.matches(c):
                continue
            meta = c.get("metadata") or {}
            ns = (meta.get("namespace") or "default") if kind.namespaced else None
            if ns != namespace and namespace != ANY_NAMESPACE:
                continue
            if names is not None and meta.get("name") not in names:
                continue
            if selector is not None and not selector.matches(meta.get("labels") or {}):
                continue
            if c not in out:
                out.append(copy.deepcopy(c))
    return out


def _check_response(metadata: Metadata, parent: dict[str, Any], r: Response, allow: Allowances) -> None:
    for i, e in enumerate(r.events):
        if not re.fullmatch(r"[A-Z][A-Za-z0-9]{0,127}", e.reason) or not e.reason.isascii():
            raise Refused(
                f"event {i}: reason {rust_debug(printable(e.reason))} is not CamelCase: 1 to 128 ASCII letters "
                "and digits, starting with an upper-case letter (e.g. JobCreated)"
            )
    if r.status is not None and not isinstance(r.status, dict):
        raise Refused("status is not a JSON object")
    own = _parent_namespace(metadata, parent)
    seen = set()
    for i, c in enumerate(r.children):
        meta = c.get("metadata") if isinstance(c.get("metadata"), dict) else {}
        name = meta.get("name") if isinstance(meta.get("name"), str) else ""
        subject = f"child {i} ({c.get('kind', '?')}/{printable(name)})"

        def refuse(why: str) -> Refused:
            return Refused(f"{subject}: {why}")

        kind: KindRef | None = next((k for k in metadata.children if k.matches(c)), None)
        if kind is None:
            raise refuse(f"{printable(str(c.get('apiVersion', '?')))} {c.get('kind', '?')} is not a declared child kind")
        if not name:
            raise refuse("metadata.name is missing")
        bad = dns1123_subdomain(name)
        if bad:
            raise refuse(f"metadata.name {bad}")
        if meta.get("ownerReferences") is not None:
            raise refuse("carries ownerReferences; the host sets the owner")
        for key, allowed in ((MANAGED_BY[0], MANAGED_BY[1]), (PLUGIN_LABEL, metadata.name)):
            v = (meta.get("labels") or {}).get(key)
            if v is not None and v != allowed:
                raise refuse(f"sets label {key}={json.dumps(v)}, which only the host sets")
        if (meta.get("annotations") or {}).get(APPLIED_ANNOTATION) is not None:
            raise refuse(f"sets annotation {APPLIED_ANNOTATION}, which only the host sets")
        ns = meta.get("namespace")
        if not kind.namespaced:
            if kind.kind not in allow.cluster_kinds and f"{kind.plural}.{kind.group}" not in allow.cluster_kinds:
                raise refuse(f"{kind.kind} is cluster-scoped and not allowed")
            if ns is not None:
                raise refuse("a cluster-scoped child has no namespace")
        elif own is not None:
            if ns is not None and ns != own:
                raise refuse(f"namespace {ns} is not the parent's namespace {own}")
            ns = own
        else:
            own_ns = (parent.get("metadata") or {}).get("name") if allow.own_namespace else None
            if ns is None or (ns not in allow.namespaces and ns != own_ns):
                raise refuse(f"namespace {ns} is not allowed for children of this cluster-scoped parent")
        key = (kind, ns, name)
        if key in seen:
            raise refuse("appears twice")
        seen.add(key)
    for what, entries in (("label", r.parent_labels), ("annotation", r.parent_annotations)):
        for key in entries:
            prefix = key.split("/", 1)[0] if "/" in key else ""
            if prefix == "capstan.dev" or prefix.endswith(".capstan.dev"):
                raise Refused(f"parent {what} {json.dumps(key)}: is under capstan.dev/, which only the host sets")


# --- label selectors ------------------------------------------------------------------


class LabelSelector:
    """A Kubernetes label selector (``app=web,tier in (a,b),!legacy``)."""

    _TOKEN = re.compile(r"\s*(?:(\()|(\))|(,)|(!=|==|=|!)|([A-Za-z0-9._/-]+))")

    def __init__(self, requirements: list[tuple[str, str, list[str]]]) -> None:
        self.requirements = requirements

    @staticmethod
    def parse(text: str) -> "LabelSelector":
        reqs: list[tuple[str, str, list[str]]] = []
        tokens = []
        pos = 0
        while pos < len(text):
            m = LabelSelector._TOKEN.match(text, pos)
            if not m or m.end() == pos:
                if text[pos:].strip() == "":
                    break
                raise ValueError(f"label selector {text!r}: unexpected {text[pos:]!r}")
            pos = m.end()
            tokens.append(m.group(0).strip())
        i = 0

        def bad(why: str) -> ValueError:
            return ValueError(f"label selector {text!r}: {why}")

        while i < len(tokens):
            t = tokens[i]
            if t == "!":
                if i + 1 >= len(tokens):
                    raise bad("expected a key after !")
                reqs.append((tokens[i + 1], "!", []))
                i += 2
            elif t in "(),=!=" or not t:
                raise bad(f"unexpected {t!r}")
            else:
                key = t
                op = tokens[i + 1] if i + 1 < len(tokens) else ","
                if op in ("=", "==", "!="):
                    if i + 2 >= len(tokens) or tokens[i + 2] in "(),":
                        value = ""
                        i += 2
                    else:
                        value = tokens[i + 2]
                        i += 3
                    reqs.append((key, "!=" if op == "!=" else "=", [value]))
                elif op in ("in", "notin"):
                    if i + 2 >= len(tokens) or tokens[i + 2] != "(":
                        raise bad(f"expected ( after {op}")
                    j = i + 3
                    values = []
                    while j < len(tokens) and tokens[j] != ")":
                        if tokens[j] != ",":
                            values.append(tokens[j])
                        j += 1
                    if j >= len(tokens):
                        raise bad("missing )")
                    reqs.append((key, op, values))
                    i = j + 1
                elif op == ",":
                    reqs.append((key, "exists", []))
                    i += 1
                else:
                    raise bad(f"unexpected {op!r} after {key}")
            if i < len(tokens):
                if tokens[i] != ",":
                    raise bad(f"expected , got {tokens[i]!r}")
                i += 1
        return LabelSelector(reqs)

    def matches(self, labels: dict[str, Any]) -> bool:
        for key, op, values in self.requirements:
            has = key in labels
            v = labels.get(key)
            if op == "exists":
                ok = has
            elif op == "!":
                ok = not has
            elif op in ("=", "in"):
                ok = has and v in values
            else:
                ok = not has or v not in values
            if not ok:
                return False
        return True
