"""The Wasm entry module componentize-py builds (build.sh): only here are the generated
bindings, and so capstan_sdk.wit, importable. The plugin is in {{crate}}.py, which the
tests import natively."""

from capstan_sdk.wit import export

from {{crate}} import {{Kind}}Reconciler

Plugin = export({{Kind}}Reconciler())
