"""Kubernetes objects are plain dicts, as JSON decodes them; these read them safely.

Every helper tolerates a missing or mistyped field (it answers None or empty), so a
reconciler reads ``name(parent)`` rather than ``parent["metadata"]["name"]`` and decides
itself what a missing field means.
"""

from __future__ import annotations

from typing import Any, Mapping

Object = dict[str, Any]
"""A Kubernetes object as decoded JSON, including ``apiVersion`` and ``kind``."""


def metadata(obj: Mapping[str, Any]) -> dict[str, Any]:
    """``metadata``, or an empty dict."""
    m = obj.get("metadata")
    return m if isinstance(m, dict) else {}


def name(obj: Mapping[str, Any]) -> str | None:
    """``metadata.name``."""
    return _str(metadata(obj).get("name"))


def namespace(obj: Mapping[str, Any]) -> str | None:
    """``metadata.namespace``."""
    return _str(metadata(obj).get("namespace"))


def uid(obj: Mapping[str, Any]) -> str | None:
    """``metadata.uid``."""
    return _str(metadata(obj).get("uid"))


def generation(obj: Mapping[str, Any]) -> int | None:
    """``metadata.generation``."""
    g = metadata(obj).get("generation")
    return g if isinstance(g, int) and not isinstance(g, bool) else None


def labels(obj: Mapping[str, Any]) -> dict[str, str]:
    """``metadata.labels``, or an empty dict."""
    return _str_map(metadata(obj).get("labels"))


def annotations(obj: Mapping[str, Any]) -> dict[str, str]:
    """``metadata.annotations``, or an empty dict."""
    return _str_map(metadata(obj).get("annotations"))


def spec(obj: Mapping[str, Any]) -> dict[str, Any]:
    """``spec``, or an empty dict."""
    s = obj.get("spec")
    return s if isinstance(s, dict) else {}


def status(obj: Mapping[str, Any]) -> dict[str, Any]:
    """``status``, or an empty dict."""
    s = obj.get("status")
    return s if isinstance(s, dict) else {}


def dig(obj: Any, *path: str | int) -> Any:
    """The value at ``path`` (keys and list indices), or None where any step is missing.

    >>> dig({"spec": {"ports": [{"port": 80}]}}, "spec", "ports", 0, "port")
    80
    """
    for step in path:
        if isinstance(step, int) and isinstance(obj, list) and -len(obj) <= step < len(obj):
            obj = obj[step]
        elif isinstance(step, str) and isinstance(obj, dict):
            obj = obj.get(step)
        else:
            return None
    return obj


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _str_map(v: Any) -> dict[str, str]:
    if not isinstance(v, dict):
        return {}
    return {k: x for k, x in v.items() if isinstance(x, str)}
