"""The Wasm adapter, run natively against componentize-py's generated bindings (plain
Python files): skipped when componentize-py or the WIT cannot be found."""

import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from capstan_sdk import Event, Fatal, Metadata, Reconciler, Related, Response, Retry, kinds, objects

ROOT = Path(__file__).resolve().parents[3]


def componentize_py():
    if os.environ.get("COMPONENTIZE_PY"):
        return os.environ["COMPONENTIZE_PY"]
    found = shutil.which("componentize-py")
    if found:
        return found
    script = ROOT / "scripts" / "toolchain-python.sh"
    if script.exists():
        out = subprocess.run([str(script)], capture_output=True, text=True)
        if out.returncode == 0:
            return out.stdout.strip()
    return None


@pytest.fixture(scope="module")
def wit(tmp_path_factory):
    exe = componentize_py()
    wit_dir = Path(os.environ.get("CAPSTAN_WIT", ROOT / "wit"))
    if not exe or not (wit_dir / "reconciler.wit").exists():
        pytest.skip("componentize-py or the WIT not found (set COMPONENTIZE_PY and CAPSTAN_WIT)")
    out = tmp_path_factory.mktemp("bindings")
    subprocess.run([exe, "-d", str(wit_dir), "-w", "reconciler", "bindings", str(out)], check=True, capture_output=True)
    sys.path.insert(0, str(out))
    logged = []
    host = importlib.import_module("wit_world.imports.host")
    host.log = lambda level, message: logged.append((level.name, message))
    module = importlib.import_module("capstan_sdk.wit")
    yield module, importlib.import_module("wit_world.imports.types"), importlib.import_module("componentize_py_types"), logged
    sys.path.remove(str(out))
    # Other tests must not see the bindings: natively they do not exist.
    for name in [m for m in sys.modules if m == "capstan_sdk.wit" or m.startswith(("wit_world", "componentize_py_types"))]:
        del sys.modules[name]
    from capstan_sdk import log

    log.set_sink(None)


class Greeter(Reconciler):
    def metadata(self):
        return (
            Metadata("greeter", "0.1.0", parent=kinds.KindRef("example.com", "v1", "Greeting", "greetings"))
            .child(kinds.CONFIG_MAP)
            .related(kinds.SECRET)
            .with_finalizer("example.com/cleanup")
        )

    def related(self, parent, ctx):
        return [Related.named(kinds.SECRET, "a"), Related.labelled(kinds.SECRET, "app=web").in_namespace("x")]

    def reconcile(self, parent, ctx):
        mode = objects.spec(parent).get("mode")
        if mode == "retry":
            raise Retry("later", 1.5)
        if mode == "fatal":
            raise Fatal("never")
        if mode == "bug":
            raise KeyError("oops")
        cm = kinds.CONFIG_MAP.new("g", "d")
        cm["data"] = {"text": "héllo"}
        return Response().with_child(cm).with_status({"ok": True}).with_event(Event.warning("Odd", "o")).with_requeue_after(2)


def request(types, mode=None):
    parent = {"apiVersion": "example.com/v1", "kind": "Greeting", "metadata": {"name": "g"}, "spec": {"mode": mode}}
    return types.Request(json.dumps(parent), [], [], "{}", "2026-11-24T09:30:00Z", False)


def test_metadata_and_related_map_to_wit_types(wit):
    module, types, _, _ = wit
    plugin = module.export(Greeter())()
    m = plugin.metadata()
    assert (m.name, m.version, m.finalizer, m.settings_schema) == ("greeter", "0.1.0", "example.com/cleanup", None)
    assert m.parent == types.KindRef("example.com", "v1", "Greeting", "greetings", True)
    assert m.children == [types.KindRef("", "v1", "ConfigMap", "configmaps", True)]
    queries = plugin.related("{}", "{}")
    assert queries[0] == types.RelatedQuery("", "Secret", None, types.Selector_Names(["a"]))
    assert queries[1] == types.RelatedQuery("", "Secret", "x", types.Selector_Labels("app=web"))


def test_reconcile_maps_responses_and_errors(wit):
    module, types, cpt, logged = wit
    plugin = module.export(Greeter())()
    r = plugin.reconcile(request(types))
    assert r.children == ['{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"g","namespace":"d"},"data":{"text":"héllo"}}']
    assert (r.status, r.requeue_after_ms, r.finalized) == ('{"ok":true}', 2000, False)
    assert r.events == [types.Event(types.EventType.WARNING, "Odd", "o")]
    with pytest.raises(cpt.Err) as e:
        plugin.reconcile(request(types, "retry"))
    assert e.value.value == types.ReconcileError_Retry(types.Retry("later", 1500))
    with pytest.raises(cpt.Err) as e:
        plugin.reconcile(request(types, "fatal"))
    assert e.value.value == types.ReconcileError_Fatal("never")
    with pytest.raises(KeyError):
        plugin.reconcile(request(types, "bug"))
    assert logged and logged[-1][0] == "ERROR" and "KeyError" in logged[-1][1]


def test_validate_settings_raises_err_with_the_reason(wit):
    module, _, cpt, _ = wit
    plugin = module.export(Greeter())()
    assert plugin.validate_settings("{}") is None
    with pytest.raises(cpt.Err) as e:
        plugin.validate_settings('{"x": 1}')
    assert e.value.value == "plugin greeter takes no settings (got x)"
