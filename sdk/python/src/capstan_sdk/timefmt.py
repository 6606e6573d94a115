"""RFC 3339 times as the host sends them and as Kubernetes writes them."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:([Zz])|([+-])(\d{2}):(\d{2}))\Z"
)

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def parse_time(text: str) -> datetime:
    """An RFC 3339 time as an aware UTC datetime; digits past microseconds are dropped.
    Raises ValueError."""
    m = _RFC3339.match(text.strip())
    if not m:
        raise ValueError(f"{text!r} is not an RFC 3339 time")
    y, mo, d, h, mi, s, frac, z, sign, oh, om = m.groups()
    micros = int((frac or "0")[:6].ljust(6, "0"))
    t = datetime(int(y), int(mo), int(d), int(h), int(mi), int(s), micros, tzinfo=timezone.utc)
    if not z:
        offset = timedelta(hours=int(oh), minutes=int(om))
        t -= offset if sign == "+" else -offset
    return t


def format_time(t: datetime) -> str:
    """``t`` as Kubernetes writes ``metav1.Time``: UTC, whole seconds, ``Z``."""
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    t = t.astimezone(timezone.utc)
    if t.year < 1000:
        return t.strftime("%Y-%m-%dT%H:%M:%SZ")  # how the C library pads such a year
    # What strftime writes for four-digit years, without its cost on every condition.
    return f"{t.year}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}:{t.second:02d}Z"


def format_time_precise(t: datetime) -> str:
    """``t`` in RFC 3339 UTC with as many fractional digits as it needs (none when whole),
    as the host's and the Rust SDK's clocks print."""
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    t = t.astimezone(timezone.utc)
    text = t.strftime("%Y-%m-%dT%H:%M:%S")
    if t.microsecond:
        text += "." + f"{t.microsecond:06d}".rstrip("0")
    return text + "Z"
