"""The trend over a store's history: per UTC day and host, the reconnects judged, how many diverged, the events lost.

:func:`per_reconnect` gives one plain row per reconnect of a findings document, :func:`per_day` adds rows up by
day and host.  ``per_day`` takes plain rows from anywhere (the spilling writer makes them one boundary at a time
with :func:`reconnect`; the store's audit history can be fed the same way), so the rows, not the document, are
its contract.  The document carries the result as ``trend`` when the analysis read a store
(:func:`analyzer.run.run`), and the report draws it (:mod:`analyzer.report.trend`).

"Diverged" is the catalog's: a verdict that proves the stream diverged (``catalog.DIVERGED``), as the terminal
and the report's "Did anything diverge?" count it; ``unverifiable`` and ``continuous`` are judged, not diverged.
"""
from __future__ import annotations

from collections.abc import Iterable

from analyzer.catalog import DIVERGED
from analyzer.document import hosts

_DIVERGED = frozenset(DIVERGED)


def reconnect(b: dict, host: str) -> dict:
    """One reconnect (a boundary record of the document) as a trend row; ``host``: where its request went."""
    started = b.get("started")
    return {
        "reconnect": b["boundary_id"],
        "session_id": b.get("session_id"),
        "day": started[:10] if started else None,  # the document's times are UTC, "2026-11-13T09:00:03.000000Z"
        "host": host,
        "verdict": b["verdict"],
        "diverged": b["verdict"] in _DIVERGED,
        "events_lost": b.get("lost_count") or 0,
        "events_duplicated": b.get("duplicated_count") or 0,
    }


def per_reconnect(doc: dict) -> list[dict]:
    """Every reconnect (boundary) of ``doc`` as a row: ``reconnect`` (its ``b<n>``), ``session_id``, ``day`` (UTC date
    of its request; None when the capture has no time for it), ``host`` (:mod:`analyzer.document.hosts`; "" when
    its URL names none), ``verdict``, ``diverged``, ``events_lost``, ``events_duplicated``."""
    host = hosts.by_exchange(doc["exchanges"])
    bs = doc["boundaries"]
    keys = ("boundary_id", "session_id", "started", "verdict", "lost_count", "duplicated_count")
    cols = [hosts.column(bs, k) for k in keys]  # (columns: a Records array makes no dict per boundary)
    return [reconnect(dict(zip(keys, values)), host.get(x, ""))
            for x, *values in zip(hosts.column(bs, "request_exchange"), *cols, strict=True)]


def per_day(rows: Iterable[dict]) -> list[dict]:
    """Rows of :func:`per_reconnect` added up per ``day`` and ``host``: ``judged`` (reconnects), ``diverged``,
    ``events_lost``; sorted by day (days unknown last) then host."""
    days: dict[tuple, dict] = {}
    for r in rows:
        d = days.get((r["day"], r["host"]))
        if d is None:
            d = days[(r["day"], r["host"])] = {"day": r["day"], "host": r["host"], "judged": 0, "diverged": 0, "events_lost": 0}
        d["judged"] += 1
        d["diverged"] += int(bool(r["diverged"]))
        d["events_lost"] += r["events_lost"] or 0
    return sorted(days.values(), key=lambda d: (d["day"] is None, d["day"] or "", d["host"]))
