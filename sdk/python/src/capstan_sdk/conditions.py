"""Kubernetes-style status conditions, as ``kubectl wait --for=condition=Ready``, kstatus
and humans read them: a list keyed by ``type``, each with ``status`` "True", "False" or
"Unknown", an UpperCamelCase ``reason``, a ``message``, the ``observedGeneration`` it
describes and ``lastTransitionTime`` -- when ``status`` last changed, not when it was last
written, so a condition rewritten unchanged keeps its time.

The same semantics as the Rust SDK's ``capstan_sdk::conditions``::

    conditions = Conditions(previous, generation(parent), ctx.now)
    conditions.ready(job_done, "JobSucceeded" if job_done else "JobRunning", "...")
    status["conditions"] = conditions.to_list()
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterable, Mapping

from .errors import Fatal
from .timefmt import format_time, parse_time

READY = "Ready"
"""The type of the condition that says the object is fully reconciled and working."""


class Status(enum.Enum):
    """Whether a condition holds, as the API spells it."""

    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"

    @staticmethod
    def of(value: "Status | bool | str") -> "Status":
        if isinstance(value, Status):
            return value
        if isinstance(value, bool):
            return Status.TRUE if value else Status.FALSE
        return Status(value)


@dataclass(frozen=True)
class Condition:
    type: str
    status: str
    reason: str
    message: str
    last_transition_time: datetime
    observed_generation: int | None = None

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> "Condition":
        """A condition as the API holds it; raises ValueError when it is not one (as the
        Rust SDK's typed status would fail to parse)."""
        if not isinstance(d, Mapping):
            raise ValueError("a condition is not an object")
        for key in ("type", "status", "reason", "message", "lastTransitionTime"):
            if not isinstance(d.get(key), str):
                raise ValueError(f"missing or invalid field `{key}`")
        generation = d.get("observedGeneration")
        if generation is not None and (not isinstance(generation, int) or isinstance(generation, bool)):
            raise ValueError("invalid field `observedGeneration`")
        return Condition(
            type=d["type"],
            status=d["status"],
            reason=d["reason"],
            message=d["message"],
            last_transition_time=parse_time(d["lastTransitionTime"]),
            observed_generation=generation,
        )

    def to_dict(self) -> dict[str, Any]:
        """As the API spells it: camelCase, the time in whole seconds, no empty generation."""
        out: dict[str, Any] = {
            "type": self.type,
            "status": self.status,
            "reason": self.reason,
            "message": self.message,
            "lastTransitionTime": format_time(self.last_transition_time),
        }
        if self.observed_generation is not None:
            out["observedGeneration"] = self.observed_generation
        return out


def parse_conditions(previous: Iterable[Mapping[str, Any] | Condition] | None) -> list[Condition]:
    """Conditions from a status' list; an entry that is not a condition is a fatal error."""
    out = []
    for i, c in enumerate(previous or ()):
        if isinstance(c, Condition):
            out.append(c)
            continue
        try:
            out.append(Condition.from_dict(c))
        except ValueError as e:
            raise Fatal(f"parent does not match the plugin's type: status.conditions[{i}]: {e}") from None
    return out


def find(conditions: Iterable[Mapping[str, Any] | Condition] | None, type_: str) -> Condition | None:
    """The condition of ``type_`` in a status' list, if any and well-formed."""
    for c in conditions or ():
        if isinstance(c, Condition):
            if c.type == type_:
                return c
        elif isinstance(c, Mapping) and c.get("type") == type_:
            try:
                return Condition.from_dict(c)
            except ValueError:
                return None
    return None


class Conditions:
    """The conditions of one status being written: the previous ones, updated in place."""

    def __init__(
        self,
        previous: Iterable[Mapping[str, Any] | Condition] | None,
        generation: int | None,
        now: datetime,
    ) -> None:
        """Start from the conditions the parent's status holds now (dicts as the API
        holds them, or :class:`Condition`), for a parent at ``generation`` (its
        ``metadata.generation``), at ``now`` (usually ``ctx.now``)."""
        self._list = parse_conditions(previous)
        self._generation = generation
        self._now = now

    def set(self, type_: str, status: Status | bool | str, reason: str, message: str = "") -> "Conditions":
        """Set the condition of ``type_``: its reason, message and observed generation
        always, its transition time only when its status changes (or it is new)."""
        status_text = Status.of(status).value
        for i, old in enumerate(self._list):
            if old.type == type_:
                since = old.last_transition_time if old.status == status_text else self._now
                self._list[i] = Condition(type_, status_text, reason, message, since, self._generation)
                return self
        self._list.append(Condition(type_, status_text, reason, message, self._now, self._generation))
        return self

    def ready(self, status: Status | bool | str, reason: str, message: str = "") -> "Conditions":
        """Set the ``Ready`` condition."""
        return self.set(READY, status, reason, message)

    def get(self, type_: str) -> Condition | None:
        """The condition of ``type_``, if set."""
        return next((c for c in self._list if c.type == type_), None)

    def __iter__(self):
        return iter(self._list)

    def __len__(self) -> int:
        return len(self._list)

    def to_list(self) -> list[dict[str, Any]]:
        """The conditions, to put into the status."""
        return [c.to_dict() for c in self._list]


SCHEMA: dict[str, Any] = {
    "description": "The object's state as Kubernetes-style conditions, keyed by type.",
    "type": "array",
    "x-kubernetes-list-type": "map",
    "x-kubernetes-list-map-keys": ["type"],
    "items": {
        "type": "object",
        "required": ["type", "status", "lastTransitionTime", "reason", "message"],
        "properties": {
            "type": {"description": "Condition type in CamelCase, e.g. Ready.", "type": "string", "maxLength": 316},
            "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
            "observedGeneration": {"description": "The metadata.generation the condition describes.", "type": "integer", "format": "int64", "minimum": 0},
            "lastTransitionTime": {"description": "When status last changed.", "type": "string", "format": "date-time"},
            "reason": {"description": "Why, in UpperCamelCase.", "type": "string", "maxLength": 1024, "minLength": 1},
            "message": {"description": "Why, for humans.", "type": "string", "maxLength": 32768},
        },
    },
}
"""JSON Schema of a conditions list as Kubernetes declares it, for a CRD's status."""
