"""Why a reconcile produced no response: raise one of these from ``reconcile``.

Same meaning as the Rust SDK's ``ReconcileError``: :class:`Retry` is transient (the host
retries, after ``after`` when given, else with per-object exponential backoff, capped at
five minutes by the host); :class:`Fatal` is permanent for the object as it is (the host
records a Warning event and waits until the object changes).
"""

from __future__ import annotations

from datetime import timedelta


class ReconcileError(Exception):
    """Base of :class:`Fatal` and :class:`Retry`; catch this to catch both."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    @staticmethod
    def fatal(message: str) -> "Fatal":
        return Fatal(message)

    @staticmethod
    def retry(message: str, after: timedelta | float | None = None) -> "Retry":
        return Retry(message, after)


class Fatal(ReconcileError):
    """Retrying cannot help until the object changes (e.g. an invalid spec)."""

    def __str__(self) -> str:
        return f"fatal: {self.message}"

    def __eq__(self, other: object) -> bool:
        return type(other) is Fatal and other.message == self.message

    def __hash__(self) -> int:
        return hash(("fatal", self.message))


class Retry(ReconcileError):
    """A transient failure; ``after`` (a timedelta, or seconds) says when to try again."""

    def __init__(self, message: str, after: timedelta | float | None = None) -> None:
        super().__init__(message)
        if after is not None and not isinstance(after, timedelta):
            after = timedelta(seconds=after)
        self.after: timedelta | None = after

    @property
    def after_ms(self) -> int | None:
        return None if self.after is None else max(0, _millis(self.after))

    def __str__(self) -> str:
        if self.after is None:
            return f"retry: {self.message}"
        return f"retry after {self.after.total_seconds():g}s: {self.message}"

    def __eq__(self, other: object) -> bool:
        return type(other) is Retry and (other.message, other.after) == (self.message, self.after)

    def __hash__(self) -> int:
        return hash(("retry", self.message, self.after))


def _millis(d: timedelta) -> int:
    # Integer arithmetic: total_seconds() is a float and loses milliseconds on long spans.
    return (d.days * 86_400 + d.seconds) * 1000 + d.microseconds // 1000
