"""The reconcile logic, natively: `python -m pytest`, no Wasm."""

import tomllib
from pathlib import Path

import pytest
import yaml

from capstan_sdk import Fatal, conditions
from capstan_sdk.kinds import CONFIG_MAP
from capstan_sdk.testing import Fixture, load_documents, run_case

import {{crate}}
from {{crate}} import {{Kind}}Reconciler

PROJECT = Path(__file__).resolve().parent.parent
R = {{Kind}}Reconciler()


def new():
    return Fixture.load(PROJECT / "fixtures" / "{{name}}.yaml")


def test_a_new_{{crate}}_wants_a_config_map_with_its_greeting():
    r = new().reconcile(R)
    maps = r.children_of(CONFIG_MAP)
    assert len(maps) == 1
    assert maps[0]["metadata"] == {"name": "hello-greeting", "namespace": "demo"}
    assert maps[0]["data"] == {"greeting": "hello"}
    ready = conditions.find(r.status["conditions"], conditions.READY)
    assert (ready.status, ready.reason) == ("True", "Greeted")
    assert r.status["observedGeneration"] == 1
    assert len(r.events) == 1, "one event the first time"


def test_once_ready_it_records_no_more_events():
    first = new().reconcile(R)
    parent = load_documents(PROJECT / "fixtures" / "{{name}}.yaml")[0]
    parent["status"] = first.status
    again = Fixture(parent).now("2026-02-01T00:00:00Z").reconcile(R)
    assert again.events == []
    assert again.status == first.status, "Ready keeps the time it became True"


def test_an_empty_greeting_is_fatal():
    parent = {
        "apiVersion": "example.com/v1alpha1",
        "kind": "{{Kind}}",
        "metadata": {"name": "x", "namespace": "demo", "generation": 1},
        "spec": {"greeting": " "},
    }
    with pytest.raises(Fatal, match="spec.greeting is empty"):
        Fixture(parent).reconcile(R)


def cases():
    project = tomllib.loads((PROJECT / "capstan.toml").read_text())
    return [pytest.param(c, id=c["name"]) for c in project.get("case", [])]


@pytest.mark.parametrize("case", cases())
def test_the_golden_cases_pass_natively(case):
    # What `capstan test` checks against the built component, here without Wasm.
    assert run_case(R, case, PROJECT) == load_documents(PROJECT / case["expect"])[0]


def test_crd_yaml_defines_the_plugins_kind():
    crd = yaml.safe_load((PROJECT / "crd.yaml").read_text())
    kind = {{crate}}.KIND
    assert crd["metadata"]["name"] == f"{kind.plural}.{kind.group}"
    assert (crd["spec"]["group"], crd["spec"]["names"]["kind"], crd["spec"]["names"]["plural"]) == (
        kind.group,
        kind.kind,
        kind.plural,
    )
    assert crd["spec"]["scope"] == ("Namespaced" if kind.namespaced else "Cluster")
    assert [v["name"] for v in crd["spec"]["versions"]] == [kind.version]
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["required"] == ["greeting"] and spec["properties"]["greeting"]["type"] == "string"
    status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    assert status["properties"]["conditions"]["items"] == conditions.SCHEMA["items"]
