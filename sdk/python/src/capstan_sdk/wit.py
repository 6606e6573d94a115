"""The Wasm side: maps componentize-py's bindings of ``capstan:reconciler@0.3.0`` to and
from the SDK's plain types. Only the plugin's Wasm entry module imports this, since the
``wit_world`` package exists only when componentize-py builds the component::

    # app.py, the module componentize-py is pointed at
    from capstan_sdk.wit import export
    from echo import EchoReconciler

    Plugin = export(EchoReconciler())
"""

from __future__ import annotations

import traceback

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import host
from wit_world.imports import types as wit

from . import log
from . import reconciler as glue
from .errors import Fatal, ReconcileError, Retry
from .kinds import KindRef
from .reconciler import Reconciler, to_json
from .response import EventType

_EVENT_TYPES = {EventType.NORMAL: wit.EventType.NORMAL, EventType.WARNING: wit.EventType.WARNING}


def _host_log(level: int, message: str) -> None:
    host.log(wit.Level(level), message)


def _kind(k: KindRef) -> wit.KindRef:
    return wit.KindRef(k.group, k.version, k.kind, k.plural, k.namespaced)


def export(reconciler: Reconciler) -> type:
    """The class componentize-py exports as ``capstan:reconciler/plugin``; bind it to the
    name ``Plugin`` in the entry module."""
    log.set_sink(_host_log)
    glue.warm(reconciler)

    class Plugin(exports.Plugin):
        def metadata(self) -> wit.PluginMetadata:
            m = reconciler.metadata()
            return wit.PluginMetadata(
                name=m.name,
                version=m.version,
                parent=_kind(m.parent),
                children=[_kind(k) for k in m.children],
                related=[_kind(k) for k in m.related_kinds],
                settings_schema=m.settings_schema_json(),
                finalizer=m.finalizer,
            )

        def validate_settings(self, settings: str) -> None:
            why = glue.validate_settings(reconciler, settings)
            if why is not None:
                raise Err(why)

        def related(self, parent: str, settings: str) -> list[wit.RelatedQuery]:
            out = []
            for q in glue.related(reconciler, parent, settings):
                selector = (
                    wit.Selector_Names(list(q.names)) if q.names is not None else wit.Selector_Labels(q.labels or "")
                )
                out.append(wit.RelatedQuery(q.group, q.kind, q.namespace, selector))
            return out

        def reconcile(self, request: wit.Request) -> wit.Response:
            plain = glue.Request(
                parent=request.parent,
                children=request.children,
                related=request.related,
                settings=request.settings,
                now=request.now,
                finalizing=request.finalizing,
            )
            try:
                r = glue.reconcile(reconciler, plain)
            except Retry as e:
                raise Err(wit.ReconcileError_Retry(wit.Retry(e.message, e.after_ms)))
            except ReconcileError as e:
                raise Err(wit.ReconcileError_Fatal(e.message))
            except Exception:
                # A bug in the plugin traps, as a Rust panic does; the host logs the trap,
                # so the traceback goes with it.
                log.error(traceback.format_exc())
                raise
            return wit.Response(
                children=[to_json(c) for c in r.children],
                status=None if r.status is None else to_json(r.status),
                requeue_after_ms=r.requeue_after_ms,
                events=[wit.Event(_EVENT_TYPES[e.type], e.reason, e.message) for e in r.events],
                finalized=r.finalized,
                parent_labels=[wit.MetadataEntry(k, v) for k, v in sorted(r.parent_labels.items())],
                parent_annotations=[wit.MetadataEntry(k, v) for k, v in sorted(r.parent_annotations.items())],
            )

    return Plugin


__all__ = ["export", "Fatal"]
