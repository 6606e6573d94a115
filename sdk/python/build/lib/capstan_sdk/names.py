"""Names checked as the host (and the API server) checks them, with the host's messages."""

from __future__ import annotations

import re

_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z")


def rust_debug(s: str) -> str:
    """``s`` quoted as Rust's ``{:?}`` quotes it, so messages match the Rust SDK's."""
    out = ['"']
    for c in s:
        if c in '"\\':
            out.append("\\" + c)
        elif c == "\n":
            out.append("\\n")
        elif c == "\r":
            out.append("\\r")
        elif c == "\t":
            out.append("\\t")
        elif c == "\0":
            out.append("\\0")
        elif ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0:
            out.append(f"\\u{{{ord(c):x}}}")
        else:
            out.append(c)
    out.append('"')
    return "".join(out)


def printable(s: str) -> str:
    """A name as it may be shown in a message: escaped as Rust's ``escape_default``, cut at 80."""
    out = []
    for c in s[:80]:
        if c in "\t\r\n'\"\\":
            out.append({"\t": "\\t", "\r": "\\r", "\n": "\\n"}.get(c, "\\" + c))
        elif 0x20 <= ord(c) < 0x7F:
            out.append(c)
        else:
            out.append(f"\\u{{{ord(c):x}}}")
    if len(s) > 80:
        out.append("…")
    return "".join(out)


def dns1123_label(s: str) -> str | None:
    """None when ``s`` is an RFC 1123 label, else why not."""
    if _LABEL.match(s):
        return None
    return f"{rust_debug(printable(s))} is not a valid RFC 1123 label (at most 63 characters: a-z, 0-9, '-')"


def dns1123_subdomain(s: str) -> str | None:
    """None when ``s`` is an RFC 1123 subdomain (most object names), else why not."""
    if s and len(s.encode()) <= 253 and all(_LABEL.match(label) for label in s.split(".")):
        return None
    return (
        f"{rust_debug(printable(s))} is not a valid RFC 1123 subdomain "
        "(at most 253 characters: a-z, 0-9, '-', '.')"
    )
