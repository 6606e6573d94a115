"""capstan_sdk.testing: fixtures, related selection and the host's checks."""

import pytest

from capstan_sdk import Fatal, KindRef, Metadata, Reconciler, Related, Response, Settings, kinds, objects, setting
from capstan_sdk.testing import (
    DEFAULT_NOW,
    Fixture,
    FixtureError,
    LabelSelector,
    Refused,
    RelatedRefused,
    SettingsRefused,
    parse_documents,
    validate_settings,
)
from dataclasses import dataclass


class Scripted(Reconciler):
    """Returns the children its parent's `children` annotation holds (as YAML)."""

    def metadata(self):
        return Metadata("scripted", "0.1.0", parent=kinds.SERVICE).child(kinds.CONFIG_MAP)

    def reconcile(self, parent, ctx):
        fail = objects.annotations(parent).get("fail")
        if fail:
            raise Fatal(fail)
        r = Response()
        for c in parse_documents(objects.annotations(parent).get("children", "")):
            r.children.extend(c)
        return r


def returning(children, namespace="demo"):
    import json

    return Fixture(
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "p", "namespace": namespace, "annotations": {"children": json.dumps(children)}}}
    )


def cm(name, namespace=None, **meta):
    m = {"name": name, **meta}
    if namespace:
        m["namespace"] = namespace
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": m}


def test_an_undeclared_kind_is_refused_as_the_host_refuses_it():
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}
    with pytest.raises(Refused) as e:
        returning([cm("a"), secret]).check(Scripted())
    assert str(e.value) == "child 1 (Secret/s): v1 Secret is not a declared child kind"


def test_reconcile_fails_the_test_on_a_refused_response():
    with pytest.raises(AssertionError, match="namespace kube-system is not the parent's namespace demo"):
        returning([cm("a", "kube-system")]).reconcile(Scripted())


@pytest.mark.parametrize(
    "child, reason",
    [
        (cm("x?dryRun=All"), "RFC 1123 subdomain"),
        (cm("a", ownerReferences=[{"uid": "x"}]), "ownerReferences"),
        (cm("a", labels={"capstan.dev/plugin": "other"}), "capstan.dev/plugin"),
        (cm(""), "metadata.name is missing"),
    ],
)
def test_names_labels_and_owners_are_checked(child, reason):
    with pytest.raises(Refused, match=reason):
        returning([child]).check(Scripted())


def test_duplicates_are_refused_and_valid_responses_pass_unchanged():
    with pytest.raises(Refused, match="twice"):
        returning([cm("a"), cm("a", "demo")]).check(Scripted())
    r = returning([cm("a"), cm("b", "demo")]).check(Scripted())
    assert r.children[0] == cm("a"), "nothing filled in"
    with pytest.raises(Fatal, match="broken"):
        f = returning([])
        f.parent["metadata"]["annotations"]["fail"] = "broken"
        f.reconcile(Scripted())


class Reader(Reconciler):
    """Reads the ConfigMaps its parent's data names, or those the settings' selector picks."""

    @dataclass
    class ReaderSettings(Settings):
        selector: str | None = setting(None)

    def metadata(self):
        return Metadata("reader", "0.1.0", parent=kinds.CONFIG_MAP).related(kinds.CONFIG_MAP).settings(Reader.ReaderSettings)

    def related(self, parent, ctx):
        data = parent.get("data") or {}
        q = Related.named(kinds.CONFIG_MAP, [n for n in data.get("names", "").split(",") if n])
        if "from" in data:
            q = q.in_namespace(data["from"])
        out = [q]
        selector = ctx.settings(Reader.ReaderSettings).selector
        if selector:
            out.append(Related.labelled(kinds.CONFIG_MAP, selector))
        return out

    def reconcile(self, parent, ctx):
        return Response().with_status({"read": [objects.name(c) for c in ctx.related_of(kinds.CONFIG_MAP)], "now": ctx.now.isoformat()})


def reader(**data):
    f = Fixture({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "p", "namespace": "demo"}, "data": data})
    for name, ns, app in (("a", "demo", "web"), ("b", "demo", "db"), ("c", "other", "web")):
        f.related_object(cm(name, ns, labels={"app": app}))
    return f.related("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: d, labels: {app: web}}")


def test_related_objects_are_selected_by_the_plugins_queries_with_the_hosts_rules():
    assert reader(names="b,a,zz").check(Reader()).status["read"] == ["a", "b"]
    by_label = reader(names="b").settings("selector: app=web")
    assert by_label.check(Reader()).status["read"] == ["b", "a"], "in query order, only the parent's namespace"
    in_default = reader(names="d")
    in_default.parent["metadata"]["namespace"] = "default"
    assert in_default.check(Reader()).status["read"] == ["d"]
    with pytest.raises(RelatedRefused, match="not the parent's namespace"):
        reader(names="c", **{"from": "other"}).check(Reader())
    assert reader(names="c", **{"from": "other"}).allow_namespace("other").check(Reader()).status["read"] == ["c"]
    with pytest.raises(RelatedRefused, match="label selector"):
        reader().settings("selector: 'app in (web'").check(Reader())
    assert len(reader(names="a").related_queries(Reader())) == 1


def test_a_query_for_every_namespace_reads_what_the_parent_may_read():
    every = {"names": "a,c", "from": "*"}
    assert reader(**every).check(Reader()).status["read"] == ["a"], "its own namespace alone"
    assert reader(**every).allow_namespace("other").check(Reader()).status["read"] == ["a", "c"]
    assert reader(**every).allow_namespace("*").check(Reader()).status["read"] == ["a", "c"]
    assert reader(names="c", **{"from": "other"}).allow_namespace("*").check(Reader()).status["read"] == ["c"]


def test_settings_are_validated_as_the_host_validates_them_at_load():
    with pytest.raises(SettingsRefused, match="unknown field `selectr`"):
        reader().settings_value({"selectr": "x"}).check(Reader())
    with pytest.raises(SettingsRefused, match="plugin scripted takes no settings"):
        returning([]).settings("{x: 1}").check(Scripted())
    with pytest.raises(AssertionError, match="would not load the plugin"):
        returning([]).settings("{x: 1}").reconcile(Scripted())
    assert validate_settings(Reader(), {"selector": "a=b"}) is None
    with pytest.raises(FixtureError, match="expected one settings document"):
        Fixture.parse("a: 1").settings("a: 1\n---\nb: 2")


def test_the_clock_is_fixed_unless_the_fixture_sets_it():
    assert reader().check(Reader()).status["now"] == "2026-01-01T00:00:00+00:00"
    assert DEFAULT_NOW == "2026-01-01T00:00:00Z"
    later = reader().now("2026-11-24T09:30:00.5Z").check(Reader())
    assert later.status["now"] == "2026-11-24T09:30:00.500000+00:00"


def test_yaml_is_read_as_yaml_1_2():
    (doc,) = parse_documents("a: on\nb: yes\nc: true\nt: 2026-01-01T00:00:00Z\nn: 3")
    assert doc == {"a": "on", "b": "yes", "c": True, "t": "2026-01-01T00:00:00Z", "n": 3}
    assert parse_documents("---\n---\na: 1\n") == [{"a": 1}]


def test_a_response_json_cannot_carry_is_refused():
    class Timely(Scripted):
        def reconcile(self, parent, ctx):
            return Response().with_status({"at": ctx.now})

    with pytest.raises(Refused, match="not JSON"):
        returning([]).check(Timely())


def test_event_reasons_must_be_camel_case():
    from capstan_sdk import Event

    class Noisy(Scripted):
        def reconcile(self, parent, ctx):
            return Response().with_event(Event.normal("job created", "x"))

    with pytest.raises(Refused, match="event 0: reason"):
        returning([]).check(Noisy())


def test_label_selectors():
    s = LabelSelector.parse("app=web,tier in (a,b),!legacy,env!=prod,has")
    assert s.matches({"app": "web", "tier": "a", "has": ""})
    assert not s.matches({"app": "web", "tier": "a", "has": "", "legacy": "1"})
    assert not s.matches({"app": "web", "tier": "c", "has": ""})
    assert not s.matches({"app": "web", "tier": "a", "has": "", "env": "prod"})
    assert LabelSelector.parse("").matches({})
    assert LabelSelector.parse("x notin (a)").matches({"x": "b"})


class StatusReader(Reconciler):
    """Names in its queries whatever status and version ``related`` is shown."""

    def metadata(self):
        return Metadata("status-reader", "0.1.0", parent=kinds.CONFIG_MAP).related(kinds.CONFIG_MAP)

    def related(self, parent, ctx):
        seen = [str((parent.get("status") or {}).get("phase", "no-status")), parent["metadata"].get("resourceVersion", "no-version")]
        return [Related.named(kinds.CONFIG_MAP, seen + [parent["metadata"]["name"]])]

    def reconcile(self, parent, ctx):
        return Response()


def test_related_is_shown_the_parent_without_status_or_version_as_the_host_shows_it():
    f = Fixture({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "p", "namespace": "demo", "resourceVersion": "7"}, "status": {"phase": "Done"}})
    (query,) = f.related_queries(StatusReader())
    assert query.names == ("no-status", "no-version", "p")
    assert f.parent["status"] == {"phase": "Done"}, "the fixture's own parent is left as it was"
