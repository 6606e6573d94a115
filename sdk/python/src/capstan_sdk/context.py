"""What the host passes besides the parent: the children it controls, the related
objects it asked for, the operator's settings and the time."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from .errors import Fatal
from .kinds import KindRef
from .settings import Settings, SettingsError, load_json, parse_text
from .timefmt import EPOCH

S = TypeVar("S", bound=Settings)


@dataclass
class Context:
    """Inputs of one reconcile other than the parent itself."""

    children: list[dict[str, Any]] = field(default_factory=list)
    """Every observed child (objects of declared child kinds controlled by the parent)."""
    related: list[dict[str, Any]] = field(default_factory=list)
    """Every related object, in the order of the queries that selected them."""
    raw_settings: dict[str, Any] = field(default_factory=dict)
    """The settings as the host sent them (``{}`` when none)."""
    now: datetime = EPOCH
    """The host's clock when it dispatched this reconcile (aware, UTC). Plugins have no
    clock of their own, so a recorded request replays to the same response; an answer
    that depends on it must ask to be called again (``Response.with_requeue_after``). In
    ``related`` it is the Unix epoch: queries must not depend on time."""
    finalizing: bool = False
    """The parent is being deleted and still carries the plugin's finalizer."""
    settings_text: str | None = field(default=None, repr=False, compare=False)
    """The settings' JSON text as the host sent it, when known: :meth:`settings` checks a
    text once, not on every call."""

    def settings(self, settings_type: type[S]) -> S:
        """The settings as ``settings_type`` (usually the one declared in the metadata).
        The host has already validated them, so an error here is a plugin bug: fatal."""
        try:
            if self.settings_text is None:
                return settings_type.parse(self.raw_settings)
            return parse_text(settings_type, self.settings_text, self.raw_settings)
        except SettingsError as e:
            raise Fatal(f"settings: {e}") from None

    def children_of(self, kind: KindRef) -> list[dict[str, Any]]:
        """The observed children of ``kind``, e.g. ``ctx.children_of(JOB)``."""
        return [c for c in self.children if kind.matches(c)]

    def related_of(self, kind: KindRef) -> list[dict[str, Any]]:
        """The related objects of ``kind`` that the parent's queries selected."""
        return [c for c in self.related if kind.matches(c)]


def settings_from_text(text: str) -> dict[str, Any]:
    value = load_json(text)
    if not isinstance(value, dict):
        raise Fatal(f"settings: invalid type: {type(value).__name__}, expected a map")
    return value
