"""capstan_sdk.http_hook: scripts written for http.server, answered in-process."""

import http.server
import json
import textwrap

import pytest

from capstan_sdk import http_hook

SYNC_HOOK = """
    from http.server import BaseHTTPRequestHandler, HTTPServer
    import json

    class Controller(BaseHTTPRequestHandler):
        def do_POST(self):
            observed = json.loads(self.rfile.read(int(self.headers.get('content-length'))))
            if self.path != '/sync':
                self.send_response(404)
                self.end_headers()
                return
            parent = observed['parent']
            desired = {
                'status': {'seen': len(observed['children']['ConfigMap.v1'])},
                'children': [{'apiVersion': 'v1', 'kind': 'ConfigMap',
                              'metadata': {'name': parent['metadata']['name']},
                              'data': {'greeting': parent['spec']['greeting']}}],
            }
            self.send_response(200)
            self.send_header('Content-type', 'application/json')
            self.end_headers()
            self.wfile.write(json.dumps(desired).encode('utf-8'))

    HTTPServer(('', 80), Controller).serve_forever()
"""


def script(tmp_path, source, name="sync.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return str(path)


def test_a_scripts_handler_answers_a_post_with_what_it_wrote(tmp_path):
    hook = http_hook.load(script(tmp_path, SYNC_HOOK))
    body = {"parent": {"metadata": {"name": "p"}, "spec": {"greeting": "hi"}},
            "children": {"ConfigMap.v1": {"p": {}}}}
    answer = hook.post("/sync", json.dumps(body).encode())
    assert answer.status == 200
    assert answer.headers["content-type"] == "application/json"
    desired = json.loads(answer.body)
    assert desired["status"] == {"seen": 1}
    assert desired["children"][0]["data"] == {"greeting": "hi"}


def test_each_post_gets_a_fresh_handler_and_the_path_it_was_sent(tmp_path):
    hook = http_hook.load(script(tmp_path, SYNC_HOOK))
    assert hook.post("/elsewhere", b"{}").status == 404
    body = {"parent": {"metadata": {"name": "q"}, "spec": {"greeting": "yo"}},
            "children": {"ConfigMap.v1": {}}}
    assert json.loads(hook.post("/sync", json.dumps(body).encode()).body)["status"] == {"seen": 0}


def test_the_real_http_server_is_back_after_loading(tmp_path):
    real = http.server.HTTPServer
    http_hook.load(script(tmp_path, SYNC_HOOK))
    assert http.server.HTTPServer is real
    import sys
    assert sys.modules["http.server"].HTTPServer is real


def test_a_main_guard_import_style_and_threading_server_are_served(tmp_path):
    source = """
        import http.server

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                self.send_response(201, 'Made')
                self.send_header('X-Seen', self.path)
                self.end_headers()
                self.wfile.write(b'ok')

        def main():
            with http.server.ThreadingHTTPServer(('', 8080), Handler) as server:
                server.serve_forever()

        if __name__ == '__main__':
            main()
    """
    answer = http_hook.load(script(tmp_path, source)).post("/finalize", b"{}")
    assert (answer.status, answer.headers["x-seen"], answer.body) == (201, "/finalize", b"ok")


def test_a_serve_forever_inside_try_except_exception_still_returns(tmp_path):
    source = """
        from http.server import BaseHTTPRequestHandler, HTTPServer

        class H(BaseHTTPRequestHandler):
            def do_POST(self):
                self.send_error(500, 'broken')

        try:
            HTTPServer(('', 80), H).serve_forever()
        except Exception:
            raise SystemExit('swallowed')
    """
    answer = http_hook.load(script(tmp_path, source)).post("/sync", b"{}")
    assert (answer.status, answer.body) == (500, b"broken")


def test_a_script_that_never_serves_or_exits_is_one_error(tmp_path):
    with pytest.raises(http_hook.HookError, match="never started an HTTPServer"):
        http_hook.load(script(tmp_path, "x = 1\n"))
    with pytest.raises(http_hook.HookError, match=r"exited \(2\) before serving"):
        http_hook.load(script(tmp_path, "import sys\nsys.exit(2)\n", "exits.py"))


def test_a_handler_that_writes_no_response_is_one_error(tmp_path):
    source = """
        from http.server import BaseHTTPRequestHandler, HTTPServer

        class H(BaseHTTPRequestHandler):
            def do_POST(self):
                self.wfile.write(b'no status line')

        HTTPServer(('', 80), H).serve_forever()
    """
    with pytest.raises(http_hook.HookError, match="sent no status line"):
        http_hook.load(script(tmp_path, source)).post("/sync", b"{}")
