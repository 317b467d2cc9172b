"""The producers' times, read as the canonical tables hold them (``tables.TS``: UTC): the proxy JSONL
``ts`` of every record and a HAR entry's ``startedDateTime``, both ISO 8601 (RFC 3339) text.
"""
from __future__ import annotations

import re
from datetime import datetime, timezone

# RFC 3339 allows a leap second (23:59:60Z); Python's datetime has none.  It is read as the last microsecond
# before the next minute, so the record keeps its place in time and in every window
_LEAP = re.compile(r"(\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}):60(?:[.,]\d+)?")


def parse_ts(value: object) -> datetime | None:
    """An ISO 8601 time as an aware UTC datetime; None for anything else (not text, not a time)."""
    if not isinstance(value, str):
        return None
    leap = _LEAP.match(value)
    if leap:
        value = f"{leap.group(1)}:59.999999{value[leap.end():]}"
    try:
        ts = datetime.fromisoformat(value)
        if ts.tzinfo is None:  # naive times are taken as UTC, as the format requires UTC
            ts = ts.replace(tzinfo=timezone.utc)
        return ts.astimezone(timezone.utc)
    except (ValueError, OverflowError):  # OverflowError: a valid time whose UTC is past year 9999 ("9999-12-31T23:00:00-05:00")
        return None
