"""The Rust SDK's conditions semantics (sdk/src/conditions.rs), case by case."""

from datetime import datetime, timezone

import pytest

from capstan_sdk import Conditions, Fatal, Status, conditions
from capstan_sdk.timefmt import parse_time


def at(text):
    return parse_time(text)


def test_transition_time_changes_only_with_status():
    earlier, now = at("2026-11-24T09:00:00Z"), at("2026-11-24T09:30:00Z")
    c = Conditions([], 1, earlier)
    c.ready(False, "JobPending", "Job hello-1 has not started")
    previous = c.to_list()

    # Still not ready: reason and message change, the transition time does not.
    c = Conditions(previous, 1, now)
    c.ready(False, "JobRunning", "Job hello-1 is running")
    r = c.get("Ready")
    assert r.reason == "JobRunning"
    assert r.last_transition_time == earlier

    # Ready at last: the status flips, so the time is now.
    c = Conditions(previous, 1, now)
    c.set("Ready", Status.TRUE, "JobSucceeded", "Job hello-1 completed")
    r = c.get("Ready")
    assert (r.status, r.last_transition_time, r.observed_generation) == ("True", now, 1)


def test_other_conditions_are_kept_and_new_ones_appended():
    c = Conditions([], 3, at("2026-01-01T00:00:00Z"))
    c.set("Stalled", Status.FALSE, "Fine", "").ready(Status.UNKNOWN, "Waiting", "w")
    listed = c.to_list()
    assert [x["type"] for x in listed] == ["Stalled", "Ready"]
    c = Conditions(listed, 4, at("2026-01-02T00:00:00Z"))
    c.ready(True, "Done", "d")
    listed = c.to_list()
    assert len(listed) == 2
    assert listed[0]["observedGeneration"] == 3, "untouched"
    assert listed[1]["observedGeneration"] == 4
    assert listed[1]["lastTransitionTime"] == "2026-01-02T00:00:00Z"
    assert conditions.find(listed, "Ready").status == "True"
    assert conditions.find(listed, "Missing") is None


def test_conditions_serialize_as_the_api_spells_them():
    c = Conditions(None, None, at("2026-11-24T09:30:00.123Z"))
    c.ready(False, "Pending", "p")
    assert c.to_list() == [
        {"type": "Ready", "status": "False", "reason": "Pending", "message": "p", "lastTransitionTime": "2026-11-24T09:30:00Z"}
    ]
    assert conditions.SCHEMA["x-kubernetes-list-map-keys"] == ["type"]


def test_an_unchanged_condition_keeps_its_time_even_when_written_with_an_offset():
    previous = [{"type": "Ready", "status": "True", "reason": "A", "message": "", "lastTransitionTime": "2026-11-24T10:30:00+01:00"}]
    c = Conditions(previous, None, datetime(2027, 1, 1, tzinfo=timezone.utc))
    c.ready(True, "B")
    assert c.to_list()[0]["lastTransitionTime"] == "2026-11-24T09:30:00Z"


def test_a_malformed_previous_condition_is_fatal_as_an_unparsable_status_is():
    with pytest.raises(Fatal, match="status.conditions\\[0\\]"):
        Conditions([{"type": "Ready"}], 1, at("2026-01-01T00:00:00Z"))


def test_status_from_bool_and_text():
    assert Status.of(True) is Status.TRUE
    assert Status.of(False) is Status.FALSE
    assert Status.of("Unknown") is Status.UNKNOWN
