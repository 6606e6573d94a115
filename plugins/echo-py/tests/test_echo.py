"""Echo's reconcile logic, run natively through capstan_sdk.testing on the same fixtures
the Rust Echo's tests and the shared golden cases use."""

import os
import tomllib
from pathlib import Path

import pytest
import yaml

from capstan_sdk import Fatal, conditions
from capstan_sdk.kinds import JOB
from capstan_sdk.response import EventType
from capstan_sdk.testing import DEFAULT_NOW, Fixture, load_documents, run_case, validate_settings

import echo
from echo import EchoReconciler

ROOT = Path(__file__).resolve().parents[3]
# The Rust Echo's fixtures and the shared golden cases; outside a Capstan checkout, point
# these at copies.
FIXTURES = Path(os.environ.get("ECHO_FIXTURES", ROOT / "plugins" / "echo" / "fixtures"))
FIXTURES_02 = Path(os.environ.get("ECHO_FIXTURES_02", ROOT / "tests" / "fixtures" / "echo-0.2"))
CASES = Path(os.environ.get("ECHO_CASES", ROOT / "tests" / "golden" / "echo" / "cases.toml"))

R = EchoReconciler()


def run(parent, *children):
    f = Fixture.load(FIXTURES / parent)
    for c in children:
        f.children_file(FIXTURES / c)
    return f.reconcile(R)


def ready(r):
    return conditions.find(r.status["conditions"], conditions.READY)


def the_job(r):
    jobs = r.children_of(JOB)
    assert len(jobs) == 1
    return jobs[0]


def golden_cases():
    cases = tomllib.loads(CASES.read_text())["case"]
    return [pytest.param(c, id=c["name"]) for c in cases]


@pytest.mark.parametrize("case", golden_cases())
def test_golden_cases_match(case):
    # The same cases `capstan test` runs against the Wasm build, natively; compared as
    # data, as `capstan test --expect` compares them.
    expected = load_documents(CASES.parent / case["expect"])[0]
    assert run_case(R, case, CASES.parent) == expected


def test_new_echo_wants_one_job_in_its_namespace_running_echo():
    r = run("echo.yaml")
    job = the_job(r)
    assert job["metadata"]["namespace"] == "demo"
    assert job["metadata"]["name"].startswith("hello-")
    assert job["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "capstan", "capstan.dev/plugin": "echo"}
    spec = job["spec"]
    assert spec["backoffLimit"] == echo.BACKOFF_LIMIT
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["containers"][0]["command"] == ["echo", "hello, world"]
    assert pod["containers"][0]["image"] == echo.IMAGE == "busybox:1.37.0"
    assert "ttlSecondsAfterFinished" not in spec, "only when the settings give one"
    assert r.status["phase"] == "Pending"
    assert r.status["observedGeneration"] == 1
    assert r.status["jobName"] == job["metadata"]["name"]
    c = ready(r)
    assert (c.status, c.reason, c.observed_generation) == ("False", "JobPending", 1)


def test_without_settings_the_job_is_the_one_echo_always_made():
    r = run("echo.yaml")
    assert the_job(r)["metadata"]["name"] == "hello-913fa3ac"
    explicit = Fixture.load(FIXTURES / "echo.yaml").settings("{image: busybox:1.37.0}").reconcile(R)
    assert explicit.children == r.children


def test_settings_shape_the_job():
    def job_with(settings):
        return the_job(Fixture.load(FIXTURES / "echo.yaml").settings(settings).reconcile(R))

    job = job_with((FIXTURES / "settings.yaml").read_text())
    spec = job["spec"]
    assert (spec["backoffLimit"], spec["ttlSecondsAfterFinished"]) == (5, 600)
    assert spec["template"]["spec"]["containers"][0]["image"] == "registry.example.com/tools/busybox:1.37"
    # Another image is another (immutable) pod template: another Job. The retry and
    # cleanup knobs are mutable, so the Job keeps its name and is updated in place.
    assert job["metadata"]["name"] != "hello-913fa3ac"
    assert job_with("{backoffLimit: 0, ttlSecondsAfterFinished: 0}")["metadata"]["name"] == "hello-913fa3ac"


def test_invalid_settings_are_refused_naming_the_setting():
    assert validate_settings(R, {"backoffLimit": -1}) == "backoffLimit must be at least 0, got -1"
    assert validate_settings(R, {"ttlSecondsAfterFinished": -5}) == "ttlSecondsAfterFinished must be at least 0, got -5"
    assert validate_settings(R, {"backoffLimit": "three"}) == 'backoffLimit: invalid type: string "three", expected i32'
    assert validate_settings(R, {"imag": "x"}).startswith("unknown field `imag`")
    assert "not an image reference" in validate_settings(R, {"image": "two words"})
    assert validate_settings(R, {}) is None
    assert validate_settings(R, yaml.safe_load((FIXTURES_02 / "settings-invalid.yaml").read_text())) is not None
    with pytest.raises(AssertionError, match="backoffLimit must be at least 0, got -1"):
        Fixture.load(FIXTURES / "echo.yaml").settings("backoffLimit: -1").reconcile(R)


def test_the_settings_schema_is_the_rust_echos():
    schema = R.metadata().settings_schema
    assert schema["title"] == "EchoSettings"
    assert schema["additionalProperties"] is False
    assert schema["properties"]["image"]["default"] == "busybox:1.37.0"
    assert schema["properties"]["backoffLimit"]["type"] == ["integer", "null"]
    assert schema["properties"]["backoffLimit"]["format"] == "int32"


def from_config_maps(related):
    return Fixture.load(FIXTURES_02 / "echo-message-from.yaml").related(related).now("2026-11-24T09:30:00Z")


def test_message_from_reads_the_key_of_the_config_map_in_the_echos_namespace():
    f = from_config_maps((FIXTURES_02 / "configmaps.yaml").read_text())
    queries = f.related_queries(R)
    assert len(queries) == 1
    assert (queries[0].kind, queries[0].namespace, queries[0].names) == ("ConfigMap", None, ("greetings",))
    r = f.reconcile(R)
    job = the_job(r)
    assert job["spec"]["template"]["spec"]["containers"][0]["command"] == ["echo", "good morning"]
    assert job["metadata"]["name"].startswith("greeting-")
    assert (r.status["phase"], r.status["observedGeneration"]) == ("Pending", 3)
    assert r.status["jobName"] == job["metadata"]["name"]


def test_editing_the_config_map_runs_a_new_job():
    def job_for(text):
        cm = f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: greetings, namespace: demo}}\ndata: {{morning: {text}}}"
        return the_job(from_config_maps(cm).reconcile(R))["metadata"]["name"]

    assert job_for("good morning") != job_for("good morning again")
    assert job_for("good morning") == job_for("good morning")


def test_a_missing_config_map_warns_wants_no_job_and_says_why():
    r = from_config_maps("").reconcile(R)
    assert r.children == [], "no Job, so an old one is pruned"
    assert len(r.events) == 1
    e = r.events[0]
    assert (e.type, e.reason) == (EventType.WARNING, echo.MESSAGE_SOURCE_MISSING)
    assert "ConfigMap demo/greetings not found" in e.message
    assert "jobName" not in r.status and r.status["phase"] == "Pending"
    c = ready(r)
    assert (c.status, c.reason, c.message) == ("False", "MessageSourceMissing", "ConfigMap demo/greetings not found")
    assert c.observed_generation == 3
    assert r.status["conditions"][0]["lastTransitionTime"] == "2026-11-24T09:30:00Z"

    # Reported once: the next reconcile, with that status, warns no more.
    parent = load_documents(FIXTURES_02 / "echo-message-from.yaml")[0]
    parent["status"] = r.status
    again = Fixture(parent).now("2026-11-24T10:00:00Z").reconcile(R)
    assert again.events == []
    assert again.status["conditions"][0]["lastTransitionTime"] == "2026-11-24T09:30:00Z", "status unchanged"


def test_a_missing_key_is_missing_too():
    cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: greetings, namespace: demo}\ndata: {evening: good evening}"
    r = from_config_maps(cm).reconcile(R)
    assert r.children == []
    assert r.events[0].reason == "MessageSourceMissing"
    assert ready(r).message == 'ConfigMap demo/greetings has no key "morning"'


def test_message_and_message_from_are_exclusive():
    both = (
        "apiVersion: capstan.dev/v1alpha1\nkind: Echo\nmetadata: {name: both, namespace: d}\n"
        "spec: {message: hi, messageFrom: {configMapKeyRef: {name: c, key: k}}}"
    )
    with pytest.raises(Fatal, match="both set"):
        Fixture.parse(both).reconcile(R)
    neither = "apiVersion: capstan.dev/v1alpha1\nkind: Echo\nmetadata: {name: neither, namespace: d}\nspec: {}"
    with pytest.raises(Fatal, match="nothing to echo"):
        Fixture.parse(neither).reconcile(R)


def test_ready_changes_with_the_job_stamped_with_the_hosts_clock():
    now = "2026-11-24T09:30:00Z"
    # Still succeeded: the condition keeps the time it became True.
    r = Fixture.load(FIXTURES / "echo-ready.yaml").children_file(FIXTURES / "job-succeeded.yaml").now(now).reconcile(R)
    kept = r.status["conditions"][0]
    assert (kept["status"], kept["reason"], kept["lastTransitionTime"]) == ("True", "JobSucceeded", "2026-11-23T09:00:03Z")
    # The Job failed since: Ready flips to False, now.
    r = Fixture.load(FIXTURES / "echo-ready.yaml").children_file(FIXTURES / "job-failed.yaml").now(now).reconcile(R)
    flipped = r.status["conditions"][0]
    assert (flipped["status"], flipped["reason"], flipped["lastTransitionTime"]) == ("False", "JobFailed", now)
    # Without a clock set, the fixture's fixed one.
    assert run("echo.yaml").status["conditions"][0]["lastTransitionTime"] == DEFAULT_NOW


@pytest.mark.parametrize(
    "child, phase, event",
    [
        ("job-running.yaml", "Running", EventType.NORMAL),
        ("job-succeeded.yaml", "Succeeded", EventType.NORMAL),
        ("job-failed.yaml", "Failed", EventType.WARNING),
    ],
)
def test_phase_follows_the_observed_job(child, phase, event):
    r = run("echo.yaml", child)
    assert r.status["phase"] == phase
    assert [e.type for e in r.events] == [event], "one event on a phase change"


def test_unchanged_phase_records_no_event():
    r = run("echo-running.yaml", "job-running.yaml")
    assert r.status["phase"] == "Running"
    assert r.events == []


def test_changed_message_wants_a_new_job_and_drops_the_old_one():
    old = the_job(run("echo.yaml"))
    r = run("echo-changed.yaml", "job-succeeded.yaml")
    new = the_job(r)  # only the new Job is desired, so the host prunes the old one
    assert new["metadata"]["name"] != old["metadata"]["name"]
    assert r.status["phase"] == "Pending", "the old Job's success does not count"
    assert r.status["observedGeneration"] == 2


def test_empty_message_is_fatal_and_wants_no_job():
    with pytest.raises(Fatal, match=r"spec\.message"):
        run("echo-empty.yaml")


def test_long_names_still_give_valid_job_names():
    text = f"apiVersion: capstan.dev/v1alpha1\nkind: Echo\nmetadata: {{name: {'a' * 250}, namespace: d}}\nspec: {{message: hi}}"
    name = the_job(Fixture.parse(text).reconcile(R))["metadata"]["name"]
    assert len(name) <= 63


def test_an_invalid_config_map_name_is_never_asked_for_and_is_the_specs_error():
    text = (
        "apiVersion: capstan.dev/v1alpha1\nkind: Echo\nmetadata: {name: bad, namespace: d}\n"
        "spec: {messageFrom: {configMapKeyRef: {name: Greetings/x, key: k}}}"
    )
    f = Fixture.parse(text)
    assert f.related_queries(R) == []
    with pytest.raises(Fatal) as e:
        f.reconcile(R)
    assert e.value.message.startswith('spec.messageFrom.configMapKeyRef.name "Greetings/x"')


def test_the_hash_is_the_rust_echos():
    assert echo.spec_hash(b'{"message":"hello, world"}') == "913fa3ac"
