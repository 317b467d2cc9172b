"""The producers' times, read as the canonical tables hold them (``tables.TS``: UTC): the proxy JSONL
``ts`` of every record and a HAR entry's ``startedDateTime``, both ISO 8601 (RFC 3339) text.
"""
from __future__ import annotations

import re
from datetime import datetime, timezone

# RFC 3339 allows a leap second (23:59:60Z); Python's datetime has none.  It is read as the last microsecond
# before the next minute, so the record keeps its place in time and in every window
_LEAP = re.compile(r"(\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}):60(?:[.,]\d+)?")


_FROMISO = datetime.fromisoformat
_UTC = timezone.utc


def parse_ts(value: object) -> datetime | None:
    """An ISO 8601 time as an aware UTC datetime; None for anything else (not text, not a time)."""
    if not isinstance(value, str):
        return None
    if ":60" in value and (leap := _LEAP.match(value)):
        value = f"{leap.group(1)}:59.999999{value[leap.end():]}"
    try:
        ts = _FROMISO(value)
        tz = ts.tzinfo
        if tz is _UTC:  # (a "Z" or "+00:00" time: already what astimezone would give; a third of the call's cost)
            return ts
        if tz is None:  # naive times are taken as UTC, as the format requires UTC
            return ts.replace(tzinfo=_UTC)
        return ts.astimezone(_UTC)
    except (ValueError, OverflowError):  # OverflowError: a valid time whose UTC is past year 9999 ("9999-12-31T23:00:00-05:00")
        return None
