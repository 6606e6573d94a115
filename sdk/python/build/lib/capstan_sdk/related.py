"""Related objects: what a plugin reads but never writes, asked for per parent."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterable, Mapping

from .kinds import NAMESPACE, KindRef
from .objects import namespace as namespace_of


@dataclass(frozen=True)
class Related:
    """Which objects of one related kind (declared with ``Metadata.related``) a parent needs.

    Exactly one of ``names`` and ``labels`` is set. A namespaced kind is read from the
    parent's namespace unless ``namespace`` says otherwise (only a cluster-scoped parent
    may).
    """

    group: str
    kind: str
    names: tuple[str, ...] | None = None
    labels: str | None = None
    namespace: str | None = None

    @staticmethod
    def named(kind: KindRef, *names: str | Iterable[str]) -> "Related":
        """The objects of ``kind`` with these names (those that exist)."""
        flat: list[str] = []
        for n in names:
            flat.extend([n] if isinstance(n, str) else n)
        return Related(kind.group, kind.kind, names=tuple(flat))

    @staticmethod
    def labelled(kind: KindRef, selector: str) -> "Related":
        """The objects of ``kind`` whose labels match ``selector`` (``app=web,tier in (a,b)``)."""
        return Related(kind.group, kind.kind, labels=selector)

    @staticmethod
    def parent_namespace(parent: Mapping[str, Any]) -> "Related":
        """The Namespace the parent lives in (needs Namespace declared related)."""
        ns = namespace_of(parent)
        return Related.named(NAMESPACE, *([ns] if ns else []))

    def in_namespace(self, namespace: str) -> "Related":
        """Read from this namespace instead of the parent's."""
        return replace(self, namespace=namespace)
