"""Write Capstan reconcile plugins in Python.

A plugin is a pure function from a parent object and the children it controls to the
children that should exist, plus status, events and a requeue hint; the Capstan host does
all API I/O. Build it into a WebAssembly component implementing
``capstan:reconciler@0.2.0`` with componentize-py, through :mod:`capstan_sdk.wit`.

Everything but :mod:`capstan_sdk.wit` runs natively under CPython, so plugins are tested
with pytest and :mod:`capstan_sdk.testing`.

::

    from capstan_sdk import Context, Metadata, Reconciler, Response, kinds, objects

    GREETING = kinds.KindRef("example.com", "v1", "Greeting", "greetings")

    class Greeter(Reconciler):
        def metadata(self):
            return Metadata("greeter", "0.1.0", parent=GREETING).child(kinds.CONFIG_MAP)

        def reconcile(self, greeting, ctx):
            cm = kinds.CONFIG_MAP.new(f"{objects.name(greeting)}-greeting", objects.namespace(greeting))
            cm["data"] = {"text": f"hello, {objects.spec(greeting).get('name', '')}"}
            return Response().with_child(cm)
"""

from . import conditions, kinds, log, objects
from .conditions import Condition, Conditions, Status
from .context import Context
from .errors import Fatal, ReconcileError, Retry
from .kinds import KindRef
from .metadata import Metadata
from .reconciler import Reconciler, Request
from .related import Related
from .response import Event, EventType, Response
from .settings import Settings, SettingsError, setting

WIT_PACKAGE = "capstan:reconciler@0.2.0"
"""The WIT package this SDK implements."""

__all__ = [
    "WIT_PACKAGE",
    "Condition",
    "Conditions",
    "Context",
    "Event",
    "EventType",
    "Fatal",
    "KindRef",
    "Metadata",
    "ReconcileError",
    "Reconciler",
    "Related",
    "Request",
    "Response",
    "Retry",
    "Settings",
    "SettingsError",
    "Status",
    "conditions",
    "kinds",
    "log",
    "objects",
    "setting",
]
