"""The desired state a reconcile returns, built fluently."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Mapping

from .errors import _millis
from .kinds import KindRef


class EventType(enum.Enum):
    NORMAL = "Normal"
    """Expected, informational."""
    WARNING = "Warning"
    """Something a human may need to act on."""


@dataclass(frozen=True)
class Event:
    """An event the host records on the parent."""

    type: EventType
    reason: str
    """UpperCamelCase, machine-readable, e.g. ``JobCreated``."""
    message: str

    @staticmethod
    def normal(reason: str, message: str) -> "Event":
        return Event(EventType.NORMAL, reason, message)

    @staticmethod
    def warning(reason: str, message: str) -> "Event":
        return Event(EventType.WARNING, reason, message)


@dataclass
class Response:
    """The full desired state of one parent: the host applies ``children`` (and prunes
    observed children not among them), writes ``status`` unless it is None, records
    ``events`` and, with ``requeue_after``, reconciles again after that long.

    Build it with keywords, or chain the ``with_`` methods (each returns the response)::

        return Response().with_child(job).with_status({"phase": "Pending"}).with_event(Event.normal(...))

    ``Response()`` has no children, so every observed child is pruned, and leaves the
    status untouched.
    """

    children: list[dict[str, Any]] = field(default_factory=list)
    status: dict[str, Any] | None = None
    events: list[Event] = field(default_factory=list)
    requeue_after: timedelta | None = None
    finalized: bool = False
    #: Labels of the parent itself to set, or to remove (None).
    parent_labels: dict[str, str | None] = field(default_factory=dict)
    #: Annotations of the parent itself to set, or to remove (None).
    parent_annotations: dict[str, str | None] = field(default_factory=dict)

    def with_child(self, obj: Mapping[str, Any]) -> "Response":
        """Add a desired child: a dict with ``apiVersion``, ``kind`` and ``metadata.name``."""
        self.children.append(dict(obj))
        return self

    def with_status(self, status: Mapping[str, Any]) -> "Response":
        """Set the parent's new ``status`` (a JSON object)."""
        self.status = dict(status)
        return self

    def with_event(self, event: Event) -> "Response":
        """Record an event on the parent."""
        self.events.append(event)
        return self

    def with_requeue_after(self, after: timedelta | float) -> "Response":
        """Reconcile again after ``after`` (a timedelta, or seconds) even if nothing changes."""
        self.requeue_after = after if isinstance(after, timedelta) else timedelta(seconds=after)
        return self

    def with_finalized(self) -> "Response":
        """Cleanup is complete; the host may remove the finalizer. On a live parent with no
        children: the plugin holds nothing for it (the host takes its finalizer off)."""
        self.finalized = True
        return self

    def with_parent_label(self, key: str, value: str | None) -> "Response":
        """Set label ``key`` of the parent itself to ``value`` (None removes it); its other
        labels stay as they are."""
        self.parent_labels[key] = value
        return self

    def with_parent_annotation(self, key: str, value: str | None) -> "Response":
        """Set annotation ``key`` of the parent itself to ``value`` (None removes it)."""
        self.parent_annotations[key] = value
        return self

    @property
    def requeue_after_ms(self) -> int | None:
        return None if self.requeue_after is None else max(0, _millis(self.requeue_after))

    def children_of(self, kind: KindRef) -> list[dict[str, Any]]:
        """The desired children of ``kind``, for assertions in tests."""
        return [c for c in self.children if kind.matches(c)]

    def to_json(self) -> dict[str, Any]:
        """The response as ``capstan test`` prints it (status, events, requeueAfterMs and
        finalized only when set), for comparisons with golden files."""
        out: dict[str, Any] = {"children": list(self.children)}
        if self.status is not None:
            out["status"] = self.status
        if self.requeue_after is not None:
            out["requeueAfterMs"] = self.requeue_after_ms
        if self.events:
            out["events"] = [{"type": e.type.value, "reason": e.reason, "message": e.message} for e in self.events]
        if self.finalized:
            out["finalized"] = True
        parent = {
            field: dict(sorted(entries.items()))
            for field, entries in (("labels", self.parent_labels), ("annotations", self.parent_annotations))
            if entries
        }
        if parent:
            out["parentMetadata"] = parent
        return out
