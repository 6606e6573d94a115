"""Log lines to the host, which emits them with the plugin name and the object's key.

In the Wasm build they go to the host's ``log`` import; natively (tests) they go to the
standard :mod:`logging` module under the ``capstan.plugin`` logger.
"""

from __future__ import annotations

from typing import Callable

TRACE, DEBUG, INFO, WARN, ERROR = range(5)

_sink: Callable[[int, str], None] | None = None


def set_sink(sink: Callable[[int, str], None] | None) -> None:
    """Where log lines go; the Wasm adapter points it at the host."""
    global _sink
    _sink = sink


def log(level: int, message: str) -> None:
    if _sink is not None:
        _sink(level, message)
        return
    import logging

    logging.getLogger("capstan.plugin").log(
        {TRACE: 5, DEBUG: logging.DEBUG, INFO: logging.INFO, WARN: logging.WARNING}.get(level, logging.ERROR),
        message,
    )


def trace(message: str) -> None:
    log(TRACE, message)


def debug(message: str) -> None:
    log(DEBUG, message)


def info(message: str) -> None:
    log(INFO, message)


def warn(message: str) -> None:
    log(WARN, message)


def error(message: str) -> None:
    log(ERROR, message)
