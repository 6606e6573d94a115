"""capstan_sdk.metacontroller: Metacontroller's hook requests and responses over Capstan's."""

import json
import textwrap
from datetime import timedelta

import pytest

from capstan_sdk import Context, Fatal, KindRef, Metadata, Retry, http_hook, kinds
from capstan_sdk.metacontroller import Composite, Decorator, label_selector, object_key, selects, webhook

TEAM = KindRef("example.com", "v1", "Team", "teams")
REGION = KindRef("example.com", "v1", "Region", "regions", namespaced=False)
ROLE = KindRef("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", namespaced=False)


def obj(kind, name, ns=None, **rest):
    return {**kind.new(name, ns), **rest}


def recorder(answer=None):
    """A hook that keeps each request and answers ``answer``."""
    seen = []

    def hook(request):
        seen.append(request)
        return answer if answer is not None else {}

    return hook, seen


def team(generation=3):
    return {**obj(TEAM, "a", "ns1"), "metadata": {"name": "a", "namespace": "ns1", "generation": generation}}


def composite(hook, version="v1", parent=TEAM, **kw):
    meta = Metadata("teams", "0.1.0", parent=parent).child(kinds.CONFIG_MAP).child(ROLE).related(kinds.SECRET)
    return Composite({"metadata": {"name": "teams"}}, meta, hook, version=version, **kw)


def test_v1_keys_a_namespaced_parents_children_by_name_and_lists_every_child_kind():
    hook, seen = recorder()
    ctx = Context(children=[obj(kinds.CONFIG_MAP, "one", "ns1")], related=[obj(kinds.SECRET, "s", "ns1")])
    composite(hook).reconcile(team(), ctx)
    request = seen[0]
    assert request["children"] == {
        "ConfigMap.v1": {"one": obj(kinds.CONFIG_MAP, "one", "ns1")},
        "ClusterRole.rbac.authorization.k8s.io/v1": {},
    }
    assert list(request["related"]["Secret.v1"]) == ["s"]
    assert request["controller"] == {"metadata": {"name": "teams"}}
    assert request["finalizing"] is False


def test_v2_keys_namespaced_objects_by_namespace_and_name_and_cluster_ones_by_name():
    hook, seen = recorder()
    ctx = Context(children=[obj(kinds.CONFIG_MAP, "one", "ns1"), obj(ROLE, "reader")])
    composite(hook, version="v2").reconcile(team(), ctx)
    assert list(seen[0]["children"]["ConfigMap.v1"]) == ["ns1/one"]
    assert list(seen[0]["children"]["ClusterRole.rbac.authorization.k8s.io/v1"]) == ["reader"]


def test_v1_keys_a_cluster_scoped_parents_namespaced_children_by_namespace_and_name():
    region = obj(REGION, "eu")
    assert object_key(obj(kinds.CONFIG_MAP, "one", "ns1"), parent_namespaced=False, version="v1") == "ns1/one"
    assert object_key(obj(ROLE, "reader"), parent_namespaced=False, version="v1") == "reader"
    hook, seen = recorder()
    composite(hook, parent=REGION).reconcile(region, Context(children=[obj(kinds.CONFIG_MAP, "one", "ns1")]))
    assert list(seen[0]["children"]["ConfigMap.v1"]) == ["ns1/one"]


def test_the_answer_becomes_capstans_response():
    answer = {
        "status": {"ready": 1},
        "children": [obj(kinds.CONFIG_MAP, "made"), obj(ROLE, "reader"), obj(kinds.CONFIG_MAP, "there", "other")],
        "resyncAfterSeconds": 30,
    }
    hook, _ = recorder(answer)
    response = composite(hook).reconcile(team(generation=7), Context())
    names = [(c["metadata"]["name"], c["metadata"].get("namespace")) for c in response.children]
    # Namespaced children without a namespace go to the parent's; cluster-scoped ones stay so.
    assert names == [("made", "ns1"), ("reader", None), ("there", "other")]
    assert response.status == {"ready": 1, "observedGeneration": 7}
    assert response.requeue_after == timedelta(seconds=30)
    assert not response.finalized


def test_the_status_is_pruned_to_the_parents_schema_as_the_api_server_prunes_an_update():
    status = {"ready": 1, "new": 2, "rs": {"replicas": 3, "terminating": 0}, "list": [{"a": 1, "b": 2}]}
    schema = {
        "type": "object",
        "properties": {
            "ready": {"type": "integer"},
            "rs": {"type": "object", "properties": {"replicas": {"type": "integer"}}},
            "list": {"type": "array", "items": {"type": "object", "properties": {"a": {"type": "integer"}}}},
        },
    }
    hook, _ = recorder({"status": status})
    response = composite(hook, status_schema=schema).reconcile(team(generation=7), Context())
    assert response.status == {"ready": 1, "rs": {"replicas": 3}, "list": [{"a": 1}]}
    kept = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    response = composite(hook, status_schema=kept).reconcile(team(generation=7), Context())
    assert response.status == {**status, "observedGeneration": 7}
    # A schema that holds nothing of it (a built-in parent's): no status written.
    response = composite(hook, status_schema={"type": "object"}).reconcile(team(), Context())
    assert response.status is None


def test_no_resync_asked_is_no_requeue_and_no_status_is_none_written():
    hook, _ = recorder({"children": []})
    response = composite(hook).reconcile(team(), Context())
    assert response.requeue_after_ms is None
    assert response.status is None


def test_finalizing_calls_the_finalize_hook_and_its_finalized_releases_the_parent():
    sync, synced = recorder({"finalized": True})
    finalize, finalized = recorder({"children": [], "finalized": True})
    plugin = composite(sync, finalize=finalize)
    assert not plugin.reconcile(team(), Context()).finalized
    response = plugin.reconcile(team(), Context(finalizing=True))
    assert response.finalized
    assert len(synced) == 1 and len(finalized) == 1
    assert finalized[0]["finalizing"] is True


def test_customize_rules_become_related_queries_of_declared_kinds():
    customize, asked = recorder(
        {
            "relatedResources": [
                {"apiVersion": "v1", "resource": "secrets", "labelSelector": {"matchLabels": {"app": "web"}}},
                {"apiVersion": "v1", "resource": "secrets", "names": ["tls", "ca"], "namespace": "certs"},
            ]
        }
    )
    hook, _ = recorder()
    queries = composite(hook, customize=customize).related(team(), Context())
    assert asked[0] == {"controller": {"metadata": {"name": "teams"}}, "parent": team()}
    assert (queries[0].kind, queries[0].labels, queries[0].namespace) == ("Secret", "app=web", None)
    assert (queries[1].names, queries[1].namespace) == (("tls", "ca"), "certs")


def test_a_rule_naming_no_namespace_reads_every_one_but_for_a_v1_hooks_namespaced_parent():
    rule = {"apiVersion": "v1", "resource": "secrets", "labelSelector": {"matchLabels": {"app": "web"}}}
    named = {"apiVersion": "v1", "resource": "secrets", "names": ["tls"]}
    customize, _ = recorder({"relatedResources": [rule, named]})
    hook, _ = recorder()
    v1 = composite(hook, customize=customize).related(team(), Context())
    assert [q.namespace for q in v1] == [None, None], "v1: the parent's own"
    v2 = composite(hook, version="v2", customize=customize).related(team(), Context())
    assert [q.namespace for q in v2] == ["*", "*"], "v2: every namespace"
    cluster = {"apiVersion": "example.com/v1", "kind": "Team", "metadata": {"name": "a"}}
    v1_cluster = composite(hook, customize=customize).related(cluster, Context())
    assert [q.namespace for q in v1_cluster] == ["*", "*"], "a cluster-scoped parent: every namespace"


def test_a_customize_rule_for_an_undeclared_resource_is_the_plugins_error_naming_it():
    customize, _ = recorder({"relatedResources": [{"apiVersion": "v1", "resource": "pods"}]})
    hook, _ = recorder()
    with pytest.raises(Fatal, match=r"pods \(v1\) is not declared related"):
        composite(hook, customize=customize).related(team(), Context())


def namespace(name, **labels):
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def by_namespaces(hook, version="v2", related=(kinds.SECRET, kinds.NAMESPACE), **rule):
    rules = {"relatedResources": [{"apiVersion": "v1", "resource": "secrets", **rule}]}
    customize, _ = recorder(rules)
    meta = Metadata("teams", "0.1.0", parent=REGION)
    for kind in related:
        meta = meta.related(kind)
    return Composite({"metadata": {"name": "teams"}}, meta, hook, version=version, customize=customize)


def test_a_namespace_selector_reads_the_namespaces_it_picks_and_its_kind_in_every_namespace():
    hook, seen = recorder()
    plugin = by_namespaces(
        hook, namespaceSelector={"matchLabels": {"team": "red"}}, labelSelector={"matchLabels": {"app": "web"}}
    )
    queries = plugin.related(obj(REGION, "eu"), Context())
    assert [(q.kind, q.labels, q.namespace) for q in queries] == [
        ("Namespace", "team=red", None),
        ("Secret", "app=web", "*"),
    ]
    # The host answers both; the hook sees the rule's objects in a picked namespace alone,
    # and no Namespace, which no rule asked for.
    red, blue = namespace("red", team="red"), namespace("blue", team="blue")
    web = {"labels": {"app": "web"}}
    inside = {**obj(kinds.SECRET, "in", "red"), "metadata": {"name": "in", "namespace": "red", **web}}
    outside = {**obj(kinds.SECRET, "out", "blue"), "metadata": {"name": "out", "namespace": "blue", **web}}
    plugin.reconcile(obj(REGION, "eu"), Context(related=[red, blue, inside, outside]))
    assert seen[0]["related"] == {"Secret.v1": {"red/in": inside}, "Namespace.v1": {}}


def test_a_namespace_selector_is_refused_where_metacontroller_refuses_it():
    hook, _ = recorder()
    region = obj(REGION, "eu")
    cases = [
        ({"names": ["tls"]}, "v2", region, "both names and a namespaceSelector"),
        ({"namespace": "red"}, "v2", region, "both a namespace and a namespaceSelector"),
        ({}, "v1", team(), "namespaced parent in a v1 hook"),
    ]
    for rule, version, parent, words in cases:
        with pytest.raises(Fatal, match=words):
            by_namespaces(hook, version, namespaceSelector={}, **rule).related(parent, Context())
    with pytest.raises(Fatal, match="declare v1 namespaces related"):
        by_namespaces(hook, related=(kinds.SECRET,), namespaceSelector={}).related(region, Context())
    rule = {"apiVersion": "rbac.authorization.k8s.io/v1", "resource": "clusterroles", "namespaceSelector": {}}
    roles, _ = recorder({"relatedResources": [rule]})
    meta = Metadata("teams", "0.1.0", parent=REGION).related(ROLE).related(kinds.NAMESPACE)
    plugin = Composite({}, meta, hook, version="v2", customize=roles)
    with pytest.raises(Fatal, match="only for namespaced resources"):
        plugin.related(region, Context())


def test_label_selectors_become_selector_text():
    selector = {
        "matchLabels": {"tier": "web", "app": "shop"},
        "matchExpressions": [
            {"key": "env", "operator": "In", "values": ["a", "b"]},
            {"key": "zone", "operator": "NotIn", "values": ["x"]},
            {"key": "owner", "operator": "Exists"},
            {"key": "legacy", "operator": "DoesNotExist"},
        ],
    }
    assert label_selector(selector) == "app=shop,tier=web,env in (a,b),zone notin (x),owner,!legacy"
    assert label_selector(None) == ""
    with pytest.raises(Fatal, match="operator 'Near'"):
        label_selector({"matchExpressions": [{"key": "k", "operator": "Near"}]})


def test_an_unknown_hook_version_is_refused():
    hook, _ = recorder()
    with pytest.raises(ValueError, match="'v3'"):
        composite(hook, version="v3")


COUNTER = """
    from http.server import BaseHTTPRequestHandler, HTTPServer
    import json

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers['Content-Length'])))
            if self.path != '/sync':
                self.send_response(500)
                self.end_headers()
                self.wfile.write(b'no such hook')
                return
            maps = body['children']['ConfigMap.v1']
            out = {'status': {'keys': sorted(maps)},
                   'children': [{'apiVersion': 'v1', 'kind': 'ConfigMap',
                                 'metadata': {'name': body['parent']['metadata']['name'] + '-count'},
                                 'data': {'n': str(len(maps))}}]}
            self.send_response(200)
            self.send_header('Content-Type', 'application/json')
            self.end_headers()
            self.wfile.write(json.dumps(out).encode())

    HTTPServer(('', 80), Handler).serve_forever()
"""


def test_an_http_server_script_is_a_hook_end_to_end(tmp_path):
    path = tmp_path / "sync.py"
    path.write_text(textwrap.dedent(COUNTER))
    served = http_hook.load(str(path))
    plugin = composite(webhook(served, "/sync"), version="v2")
    ctx = Context(children=[obj(kinds.CONFIG_MAP, "a-count", "ns1")])
    response = plugin.reconcile(team(), ctx)
    assert response.status == {"keys": ["ns1/a-count"], "observedGeneration": 3}
    assert response.children[0]["metadata"] == {"name": "a-count", "namespace": "ns1"}
    assert response.children[0]["data"] == {"n": "1"}
    with pytest.raises(Retry, match="/finalize answered 500: no such hook"):
        webhook(served, "/finalize")({"parent": team()})


def test_the_request_is_json_as_metacontroller_sends_it():
    hook, seen = recorder()
    composite(hook).reconcile(team(), Context(children=[obj(kinds.CONFIG_MAP, "one", "ns1")]))
    assert json.loads(json.dumps(seen[0])) == seen[0]


def decorator(hook, **kw):
    meta = Metadata("roles", "0.1.0", parent=ROLE).child(kinds.CONFIG_MAP)
    return Decorator({"metadata": {"name": "roles"}}, meta, hook, **kw)


def role(name="reader", labels=None, annotations=None, generation=4):
    return {**obj(ROLE, name), "metadata": {"name": name, "generation": generation,
                                           "labels": labels or {}, "annotations": annotations or {}}}


def test_a_decorator_sends_object_and_attachments_and_writes_the_hooks_status_alone():
    hook, seen = recorder({"attachments": [obj(kinds.CONFIG_MAP, "made", "ns1")], "status": {"seen": 1}})
    response = decorator(hook).reconcile(role(), Context(children=[obj(kinds.CONFIG_MAP, "made", "ns1")]))
    assert set(seen[0]) == {"controller", "object", "attachments", "related", "finalizing"}
    assert list(seen[0]["attachments"]["ConfigMap.v1"]) == ["ns1/made"]
    assert response.children == [obj(kinds.CONFIG_MAP, "made", "ns1")]
    # No observedGeneration: the target's own controller keeps that field.
    assert response.status == {"seen": 1}


def test_a_decorator_leaves_targets_its_selectors_do_not_pick():
    hook, seen = recorder({"attachments": [obj(kinds.CONFIG_MAP, "made", "ns1")]})
    plugin = decorator(
        hook,
        parent_selector={"matchLabels": {"team": "a"}},
        annotation_selector={"matchExpressions": [{"key": "bind", "operator": "Exists"}]},
    )
    picked = role(labels={"team": "a"}, annotations={"bind": ""})
    assert len(plugin.reconcile(picked, Context()).children) == 1
    for other in (role(labels={"team": "b"}, annotations={"bind": ""}), role(labels={"team": "a"})):
        response = plugin.reconcile(other, Context())
        assert response.children == [] and response.status is None
        assert response.finalized, "without a finalize hook nothing is held for it"
        assert plugin.reconcile(other, Context(finalizing=True)).finalized
    assert len(seen) == 1


def test_a_target_the_rule_no_longer_selects_is_finalized_as_metacontroller_finalizes_it():
    sync, synced = recorder({"attachments": [obj(kinds.CONFIG_MAP, "made", "ns1")]})
    asked = []

    def finalize(request):
        asked.append(request["finalizing"])
        return {"attachments": [], "finalized": not request["attachments"]["ConfigMap.v1"]}

    plugin = decorator(sync, annotation_selector={"matchLabels": {"bind": "yes"}}, finalize=finalize)
    still = plugin.reconcile(role(), Context(children=[obj(kinds.CONFIG_MAP, "made", "ns1")]))
    assert (still.children, still.finalized, asked) == ([], False, [True]), "attachments go first"
    gone = plugin.reconcile(role(), Context())
    assert (gone.children, gone.finalized) == ([], True), "then the target is let go"
    assert synced == []


def test_labels_and_annotations_for_the_target_are_set_and_removed_by_key():
    change, _ = recorder({"labels": {"team": "b", "tier": "web", "gone": None}, "annotations": {"note": "hi"}})
    r = decorator(change).reconcile(role(labels={"team": "a", "gone": "x"}), Context())
    assert r.parent_labels == {"team": "b", "tier": "web", "gone": None}
    assert r.parent_annotations == {"note": "hi"}
    assert r.to_json()["parentMetadata"] == {
        "labels": {"gone": None, "team": "b", "tier": "web"},
        "annotations": {"note": "hi"},
    }
    none, _ = recorder({})
    assert "parentMetadata" not in decorator(none).reconcile(role(labels={"team": "a"}), Context()).to_json()


def test_selectors_match_as_kubernetes_does():
    labels = {"app": "web", "tier": "front"}
    assert selects(None, labels) and selects({}, labels)
    assert selects({"matchLabels": {"app": "web"}}, labels)
    assert not selects({"matchLabels": {"app": "db"}}, labels)
    assert selects({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["front", "back"]}]}, labels)
    assert not selects({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["front"]}]}, labels)
    assert selects({"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["x"]}]}, labels)
    assert not selects({"matchExpressions": [{"key": "zone", "operator": "Exists"}]}, labels)
    assert selects({"matchExpressions": [{"key": "zone", "operator": "DoesNotExist"}]}, labels)
