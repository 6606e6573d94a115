"""The {{Kind}} reconciler: a {{Kind}} with ``spec.greeting`` becomes a ConfigMap holding it.

Runs natively (``python -m pytest``) and in the Wasm component app.py exports.
"""

from __future__ import annotations

from typing import Any

from capstan_sdk import Conditions, Context, Event, Fatal, KindRef, Metadata, Reconciler, Response, conditions, objects
from capstan_sdk.kinds import CONFIG_MAP

VERSION = "0.1.0"
KIND = KindRef("example.com", "v1alpha1", "{{Kind}}", "{{plural}}", namespaced=True)
"""The parent kind, as crd.yaml defines it."""


class {{Kind}}Reconciler(Reconciler):
    def metadata(self) -> Metadata:
        return Metadata("{{name}}", VERSION, parent=KIND).child(CONFIG_MAP)

    def reconcile(self, parent: dict[str, Any], ctx: Context) -> Response:
        name = objects.name(parent)
        if name is None:
            raise Fatal("{{Kind}} has no metadata.name")
        greeting = objects.spec(parent).get("greeting")
        if not isinstance(greeting, str):
            raise Fatal("parent does not match the plugin's type: spec.greeting: expected a string")
        if not greeting.strip():
            raise Fatal("spec.greeting is empty")

        config_map = CONFIG_MAP.new(f"{name}-greeting", objects.namespace(parent))
        config_map["data"] = {"greeting": greeting}

        previous = objects.status(parent).get("conditions")
        before = conditions.find(previous, conditions.READY)
        was_ready = before is not None and before.status == "True"
        conds = Conditions(previous, objects.generation(parent), ctx.now)
        conds.ready(True, "Greeted", "the ConfigMap holds the greeting")

        response = Response().with_child(config_map).with_status(status(parent, conds))
        if not was_ready:
            response.with_event(Event.normal("Greeted", f"ConfigMap {name}-greeting made"))
        return response


def status(parent: dict[str, Any], conds: Conditions) -> dict[str, Any]:
    """The {{Kind}}'s status (crd.yaml's status schema): fields without a value left out."""
    out: dict[str, Any] = {}
    generation = objects.generation(parent)
    if generation is not None:
        out["observedGeneration"] = generation
    if len(conds):
        out["conditions"] = conds.to_list()
    return out
