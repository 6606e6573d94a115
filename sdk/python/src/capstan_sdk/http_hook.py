"""A webhook written for ``python hook.py`` and ``http.server``, called in-process.

Metacontroller's Python hooks are scripts that subclass ``BaseHTTPRequestHandler``,
implement ``do_POST`` and end with ``HTTPServer(('', 80), Handler).serve_forever()``. A
plugin has no sockets (and a WASI build of CPython has no ``socket`` module for the real
``http.server`` to import), so :func:`load` runs the script with a stand-in
``http.server`` module: the script's server records its handler class instead of
listening, and :meth:`Hook.post` drives that class's ``do_POST`` with the request body
in ``rfile`` and reads the status line, headers and body it writes to ``wfile``. The
script's source is not changed.
"""

from __future__ import annotations

import io
import runpy
import sys
import types
from dataclasses import dataclass, field
from email.message import Message
from http import HTTPStatus
from typing import Any


class HookError(Exception):
    """The script could not be loaded or answered a call with something unusable."""


class _Served(BaseException):
    """Raised by the stand-in ``serve_forever`` to end the script's main loop.

    A BaseException, so a script's ``except Exception`` around its server does not
    swallow it."""


class BaseHTTPRequestHandler:
    """What a hook's handler uses of ``http.server.BaseHTTPRequestHandler``, with no
    connection behind it: the request comes from ``rfile`` and ``headers``, and what the
    handler sends goes to ``wfile`` as an HTTP/1.0 response would."""

    server_version = "capstan-hook/0.1"
    sys_version = ""
    protocol_version = "HTTP/1.0"
    default_request_version = "HTTP/0.9"
    error_content_type = "text/plain;charset=utf-8"
    responses = {s: (s.phrase, s.description) for s in HTTPStatus}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # The real constructor handles a connection; a hook's handler is built by
        # Hook.post without one. Scripts that override __init__ still call this.
        pass

    def send_response(self, code: int, message: str | None = None) -> None:
        self.send_response_only(code, message)

    def send_response_only(self, code: int, message: str | None = None) -> None:
        if message is None:
            message = self.responses.get(code, ("",))[0]
        self._head = [f"{self.protocol_version} {code} {message}\r\n"]

    def send_header(self, keyword: str, value: str) -> None:
        self._head.append(f"{keyword}: {value}\r\n")

    def end_headers(self) -> None:
        self._head.append("\r\n")
        self.wfile.write("".join(self._head).encode("latin-1", "strict"))
        self._head = []

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        self.send_response(code, message)
        self.send_header("Content-Type", self.error_content_type)
        self.end_headers()
        self.wfile.write((message or self.responses.get(code, ("",))[0]).encode())

    def log_request(self, code: Any = "-", size: Any = "-") -> None:
        pass

    def log_error(self, format: str, *args: Any) -> None:
        self.log_message(format, *args)

    def log_message(self, format: str, *args: Any) -> None:
        sys.stderr.write(f"{self.address_string()} - {format % args}\n")

    def address_string(self) -> str:
        return self.client_address[0]

    def version_string(self) -> str:
        return self.server_version

    def date_time_string(self, timestamp: float | None = None) -> str:
        return "Thu, 01 Jan 1970 00:00:00 GMT"


class HTTPServer:
    """Records the handler class a script serves; ``serve_forever`` returns to the loader."""

    def __init__(self, server_address: Any, handler: type, bind_and_activate: bool = True) -> None:
        self.server_address = server_address
        self.RequestHandlerClass = handler
        _loading.handlers.append(handler)

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        raise _Served()

    def handle_request(self) -> None:
        raise _Served()

    def server_close(self) -> None:
        pass

    def __enter__(self) -> "HTTPServer":
        return self

    def __exit__(self, *exc: Any) -> None:
        pass


class ThreadingHTTPServer(HTTPServer):
    """The same stand-in: calls are one at a time in a plugin."""


@dataclass
class _Loading:
    handlers: list[type] = field(default_factory=list)


_loading = _Loading()


def _stand_in() -> types.ModuleType:
    module = types.ModuleType("http.server", __doc__)
    for name in ("BaseHTTPRequestHandler", "HTTPServer", "ThreadingHTTPServer"):
        setattr(module, name, globals()[name])
    module.SimpleHTTPRequestHandler = BaseHTTPRequestHandler
    return module


@dataclass
class Answer:
    """What the handler sent: its status code, headers and body."""

    status: int
    headers: dict[str, str]
    body: bytes


class Hook:
    """A loaded script's handler class, called once per request."""

    def __init__(self, handler: type, path: str) -> None:
        self.handler = handler
        self.path = path

    def post(self, url_path: str, body: bytes) -> Answer:
        """``POST url_path`` with ``body`` (JSON), as the script's server would run it."""
        h = self.handler.__new__(self.handler)
        headers = Message()
        headers["Content-Type"] = "application/json"
        headers["Content-Length"] = str(len(body))
        h.command, h.path, h.request_version = "POST", url_path, "HTTP/1.1"
        h.requestline = f"POST {url_path} HTTP/1.1"
        h.headers, h.rfile, h.wfile = headers, io.BytesIO(body), io.BytesIO()
        h.client_address, h.server, h.close_connection = ("127.0.0.1", 0), None, True
        h._head = []
        if not hasattr(h, "do_POST"):
            raise HookError(f"{self.path}: its handler {self.handler.__name__} has no do_POST")
        h.do_POST()
        return _answer(self.path, url_path, h.wfile.getvalue())


def _answer(script: str, url_path: str, raw: bytes) -> Answer:
    head, sep, body = raw.partition(b"\r\n\r\n")
    if not sep:
        raise HookError(f"{script}: POST {url_path} sent no status line and headers")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[1].isdigit():
        raise HookError(f"{script}: POST {url_path} sent a bad status line {lines[0]!r}")
    headers = {}
    for line in lines[1:]:
        key, _, value = line.partition(":")
        headers[key.strip().lower()] = value.strip()
    return Answer(int(parts[1]), headers, body)


def load(path: str) -> Hook:
    """Run the script at ``path`` as ``python path`` would, up to its ``serve_forever``,
    with the stand-in ``http.server``; the handler class it serves."""
    import http

    saved_module = sys.modules.get("http.server")
    saved_attr = http.__dict__.get("server")
    stand_in = _stand_in()
    # Both, so `from http.server import …` and `import http.server` find the stand-in.
    sys.modules["http.server"] = stand_in
    http.server = stand_in  # type: ignore[attr-defined]
    _loading.handlers = []
    try:
        runpy.run_path(path, run_name="__main__")
    except _Served:
        pass
    except SystemExit as e:
        raise HookError(f"{path}: exited ({e.code}) before serving") from None
    finally:
        if saved_module is None:
            sys.modules.pop("http.server", None)
        else:
            sys.modules["http.server"] = saved_module
        if saved_attr is None:
            http.__dict__.pop("server", None)
        else:
            http.server = saved_attr  # type: ignore[attr-defined]
    if not _loading.handlers:
        raise HookError(f"{path}: never started an HTTPServer with a handler")
    return Hook(_loading.handlers[-1], path)
