"""The Wasm entry module componentize-py builds: only here are the generated bindings
(and so capstan_sdk.wit) importable. The plugin itself is in echo.py, which tests import."""

from capstan_sdk.wit import export
from echo import EchoReconciler

Plugin = export(EchoReconciler())
