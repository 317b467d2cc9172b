"""The producers' times, read as the canonical tables hold them (``tables.TS``: UTC): the proxy JSONL
``ts`` of every record and a HAR entry's ``startedDateTime``, both ISO 8601 (RFC 3339) text.
"""
from __future__ import annotations

from datetime import datetime, timezone


def parse_ts(value: object) -> datetime | None:
    """An ISO 8601 time as an aware UTC datetime; None for anything else (not text, not a time)."""
    if not isinstance(value, str):
        return None
    try:
        ts = datetime.fromisoformat(value)
        if ts.tzinfo is None:  # naive times are taken as UTC, as the format requires UTC
            ts = ts.replace(tzinfo=timezone.utc)
        return ts.astimezone(timezone.utc)
    except (ValueError, OverflowError):  # OverflowError: a valid time whose UTC is past year 9999 ("9999-12-31T23:00:00-05:00")
        return None
