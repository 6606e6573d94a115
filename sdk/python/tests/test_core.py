"""Kinds, objects, responses, errors and the glue the Wasm export runs."""

import json
from datetime import timedelta

import pytest

from capstan_sdk import (
    Context,
    Event,
    Fatal,
    KindRef,
    Metadata,
    ReconcileError,
    Reconciler,
    Related,
    Request,
    Response,
    Retry,
    kinds,
    objects,
)
from capstan_sdk import reconciler as glue
from capstan_sdk.names import dns1123_subdomain, rust_debug
from capstan_sdk.timefmt import format_time, format_time_precise, parse_time

GREETING = KindRef("example.com", "v1", "Greeting", "greetings")


def test_kinds_match_api_version_and_kind():
    assert kinds.JOB.api_version == "batch/v1"
    assert kinds.CONFIG_MAP.api_version == "v1"
    assert kinds.JOB.matches({"apiVersion": "batch/v1", "kind": "Job"})
    assert not kinds.JOB.matches({"apiVersion": "batch/v2", "kind": "Job"})
    assert not kinds.CONFIG_MAP.matches({"apiVersion": "other/v1", "kind": "ConfigMap"})
    assert not kinds.CONFIG_MAP.matches({"kind": "ConfigMap"})
    assert kinds.CONFIG_MAP.new("a", "b") == {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "b"}}
    assert not kinds.NAMESPACE.namespaced


def test_object_helpers_tolerate_missing_and_mistyped_fields():
    obj = {"metadata": {"name": "a", "generation": 2, "labels": {"x": "y", "n": 1}}, "spec": {"l": [{"v": 1}]}}
    assert (objects.name(obj), objects.namespace(obj), objects.generation(obj)) == ("a", None, 2)
    assert objects.labels(obj) == {"x": "y"}
    assert objects.status(obj) == {}
    assert objects.dig(obj, "spec", "l", 0, "v") == 1
    assert objects.dig(obj, "spec", "l", 3, "v") is None
    assert objects.generation({"metadata": {"generation": True}}) is None
    assert objects.metadata({"metadata": "nope"}) == {}


def test_response_builds_fluently_and_prints_as_capstan_test():
    r = (
        Response()
        .with_child({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}})
        .with_status({"phase": "Done"})
        .with_event(Event.normal("Made", "made a"))
        .with_event(Event.warning("Odd", "odd"))
        .with_requeue_after(timedelta(seconds=1.5))
    )
    assert r.requeue_after_ms == 1500
    assert r.children_of(kinds.CONFIG_MAP)[0]["metadata"]["name"] == "a"
    assert r.to_json() == {
        "children": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}],
        "status": {"phase": "Done"},
        "requeueAfterMs": 1500,
        "events": [
            {"type": "Normal", "reason": "Made", "message": "made a"},
            {"type": "Warning", "reason": "Odd", "message": "odd"},
        ],
    }
    assert Response().with_requeue_after(2).requeue_after == timedelta(seconds=2)
    assert Response().with_finalized().to_json() == {"children": [], "finalized": True}


def test_errors_are_fatal_or_retryable():
    assert isinstance(ReconcileError.fatal("x"), Fatal)
    r = ReconcileError.retry("later", timedelta(seconds=2))
    assert isinstance(r, Retry) and r.after_ms == 2000
    assert Retry("x").after_ms is None
    assert Retry("x", 0.25).after_ms == 250
    assert str(Fatal("bad")) == "fatal: bad"
    assert str(Retry("soon")) == "retry: soon"
    assert Fatal("a") == Fatal("a") != Retry("a")


def test_times_parse_and_print_as_the_host_and_kubernetes_do():
    t = parse_time("2026-11-24T09:30:00.123456789Z")
    assert format_time(t) == "2026-11-24T09:30:00Z"
    assert format_time_precise(t) == "2026-11-24T09:30:00.123456Z"
    assert format_time(parse_time("2026-11-24T10:30:00+01:00")) == "2026-11-24T09:30:00Z"
    with pytest.raises(ValueError):
        parse_time("yesterday")


def test_names_and_messages_as_the_rust_sdk_writes_them():
    assert dns1123_subdomain("a.b-c") is None
    assert dns1123_subdomain("Greetings/x").startswith('"Greetings/x" is not a valid RFC 1123 subdomain')
    assert dns1123_subdomain("a" * 64) is not None
    assert rust_debug('a"b\n') == '"a\\"b\\n"'


class Mirror(Reconciler):
    """Copies its parent's data into its status and reports what it was given."""

    def metadata(self):
        return Metadata("mirror", "0.1.0", parent=kinds.CONFIG_MAP).related(kinds.CONFIG_MAP)

    def related(self, parent, ctx):
        src = objects.dig(parent, "data", "from")
        return [Related.named(kinds.CONFIG_MAP, src)] if src else []

    def reconcile(self, parent, ctx):
        if objects.dig(parent, "data", "fail") == "retry":
            raise Retry("not yet", 3)
        if objects.dig(parent, "data", "fail") == "fatal":
            raise Fatal("never")
        return Response().with_status(
            {"data": parent.get("data"), "now": ctx.now.isoformat(), "children": len(ctx.children), "related": len(ctx.related_of(kinds.CONFIG_MAP))}
        )


def parent(**data):
    return json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "p", "namespace": "d"}, "data": data})


def test_the_glue_runs_a_reconciler_on_the_hosts_json_text():
    r = glue.reconcile(
        Mirror(),
        Request(parent=parent(k="v"), children=['{"kind":"Job"}'], related=['{"apiVersion":"v1","kind":"ConfigMap"}'], now="2026-11-24T09:30:00Z"),
    )
    assert r.status == {"data": {"k": "v"}, "now": "2026-11-24T09:30:00+00:00", "children": 1, "related": 1}
    with pytest.raises(Retry):
        glue.reconcile(Mirror(), Request(parent=parent(fail="retry")))
    with pytest.raises(Fatal, match="parent is not JSON"):
        glue.reconcile(Mirror(), Request(parent="{"))
    with pytest.raises(Fatal, match="not an RFC 3339 time"):
        glue.reconcile(Mirror(), Request(parent=parent(), now="soon"))
    assert glue.related(Mirror(), parent(**{"from": "src"}), "{}") == [Related("", "ConfigMap", names=("src",))]
    assert glue.related(Mirror(), "not json", "{}") == [], "reconcile reports it"


def test_related_queries_build():
    q = Related.labelled(kinds.SECRET, "app=web").in_namespace("other")
    assert (q.group, q.kind, q.labels, q.namespace, q.names) == ("", "Secret", "app=web", "other", None)
    assert Related.named(kinds.CONFIG_MAP, ["a", "b"], "c").names == ("a", "b", "c")
    assert Related.parent_namespace({"metadata": {"namespace": "d"}}).names == ("d",)
    assert Related.parent_namespace({"metadata": {}}).names == ()


def test_context_reads_typed_views():
    ctx = Context(children=[{"apiVersion": "batch/v1", "kind": "Job"}, {"apiVersion": "v1", "kind": "ConfigMap"}])
    assert len(ctx.children_of(kinds.JOB)) == 1
    assert ctx.related_of(kinds.JOB) == []
