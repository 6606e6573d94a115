"""A reconcile plugin, and the glue that runs it on the host's JSON text.

The glue here is what the Wasm export runs and what ``capstan_sdk.testing`` runs, on
plain Python values, so a native test exercises the same path as the host.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from . import log
from .context import Context, settings_from_text
from .errors import Fatal, ReconcileError
from .metadata import Metadata
from .related import Related
from .response import Response
from .settings import SettingsError, parse_text
from .timefmt import parse_time


class Reconciler:
    """Subclass and implement :meth:`metadata` and :meth:`reconcile` (and :meth:`related`
    when the plugin reads related objects). Objects are plain dicts (see
    :mod:`capstan_sdk.objects`); every method must be deterministic in its inputs."""

    def metadata(self) -> Metadata:
        """Name, version, parent, child and related kinds, settings and finalizer."""
        raise NotImplementedError

    def related(self, parent: dict[str, Any], ctx: Context) -> list[Related]:
        """The related objects this parent needs (of kinds declared related), which
        :meth:`reconcile` reads with ``ctx.related_of``. ``ctx`` holds the settings only.
        None by default."""
        return []

    def reconcile(self, parent: dict[str, Any], ctx: Context) -> Response:
        """The desired state of one parent; raise :class:`~capstan_sdk.Fatal` or
        :class:`~capstan_sdk.Retry` when there is none."""
        raise NotImplementedError


@dataclass
class Request:
    """One reconcile's input as the host sends it: JSON texts and an RFC 3339 time."""

    parent: str
    children: list[str] = field(default_factory=list)
    related: list[str] = field(default_factory=list)
    settings: str = "{}"
    now: str = "1970-01-01T00:00:00Z"
    finalizing: bool = False


def to_json(value: Any) -> str:
    """Compact JSON, non-ASCII as is: what serde_json writes."""
    return _ENCODER.encode(value)


# What json.dumps(value, separators=(",", ":"), ensure_ascii=False) makes afresh on every call.
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def warm(r: Reconciler) -> None:
    """Do once what every call would otherwise do first: derive the settings' schema and
    how to build them, and parse the empty settings (``{}``, what the host sends when the
    operator gives none). The Wasm entry calls this while componentize-py builds the
    component, whose snapshot of the module state every instance then starts from."""
    settings_type = r.metadata().settings_type
    if settings_type is not None:
        settings_type.schema()
        try:
            parse_text(settings_type, "{}", {})
        except SettingsError:
            pass  # required settings: none parse until the operator gives them


def validate_settings(r: Reconciler, settings: str) -> str | None:
    """The ``validate-settings`` export: None, or why the host must refuse the settings."""
    return r.metadata().validate_settings(settings)


def related(r: Reconciler, parent: str, settings: str) -> list[Related]:
    """The ``related`` export."""
    try:
        obj = _parse_parent(parent)
        ctx = Context(raw_settings=settings_from_text(settings), settings_text=settings)
        return list(r.related(obj, ctx))
    except ReconcileError as e:
        # `reconcile` reports the same error as fatal; no queries until it is fixed.
        log.warn(f"no related objects: {e.message}")
        return []


def reconcile(r: Reconciler, request: Request) -> Response:
    """The ``reconcile`` export: a Response, or raises ReconcileError."""
    parent = _parse_parent(request.parent)
    try:
        now = parse_time(request.now)
    except ValueError as e:
        raise Fatal(f"the request's now {request.now!r} is not an RFC 3339 time: {e}") from None
    ctx = Context(
        children=_parse_all("child", request.children),
        related=_parse_all("related object", request.related),
        raw_settings=settings_from_text(request.settings),
        settings_text=request.settings,
        now=now,
        finalizing=request.finalizing,
    )
    response = r.reconcile(parent, ctx)
    if not isinstance(response, Response):
        raise TypeError(f"reconcile returned {type(response).__name__}, not a Response")
    return response


def _parse_parent(text: str) -> dict[str, Any]:
    try:
        parent = json.loads(text)
    except json.JSONDecodeError as e:
        raise Fatal(f"parent is not JSON: {e}") from None
    if not isinstance(parent, dict):
        raise Fatal("parent does not match the plugin's type: not an object")
    return parent


def _parse_all(what: str, texts: list[str]) -> list[dict[str, Any]]:
    out = []
    for t in texts:
        try:
            obj = json.loads(t)
        except json.JSONDecodeError as e:
            raise Fatal(f"{what} is not JSON: {e}") from None
        if not isinstance(obj, dict):
            raise Fatal(f"{what} is not an object")
        out.append(obj)
    return out
