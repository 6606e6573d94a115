"""Write Capstan reconcile plugins in Python.

A plugin is a pure function from a parent object and the children it controls to the
children that should exist, plus status, events and a requeue hint; the Capstan host does
all API I/O. Build it into a WebAssembly component implementing
``capstan:reconciler@0.3.0`` with componentize-py, through :mod:`capstan_sdk.wit`.

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

__version__ = "0.1.0"
"""This SDK's version: the same for the Rust, Python and JavaScript SDKs."""

WIT_PACKAGE = "capstan:reconciler@0.3.0"
"""The WIT package this SDK implements."""


def wit_dir() -> str:
    """The directory of the WIT this SDK implements (:data:`WIT_PACKAGE`), shipped in the
    package, for componentize-py's ``-d``: a plugin builds against the WIT of the SDK it
    uses, wherever that is installed."""
    import os

    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "wit")

__all__ = [
    "WIT_PACKAGE",
    "__version__",
    "wit_dir",
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
