"""``--since`` / ``--until``: a time window over the analyzed traffic, taken a whole session at a time.

What is kept.  A session *overlaps* the window when at least one of its exchanges (an HTTP request on
the MCP endpoint, with its response) was **open** during ``[since, until)``: it started strictly before
``until`` and ended at or after ``since`` (either bound may be absent), so an event stream opened before
``since`` that delivered into the window counts.  Every exchange of such a session is kept, the ones that started before
``since`` or after ``until`` too; events and JSON-RPC messages follow their exchange.  An exchange
without a session id (stateless traffic, a 2026-07-28 request) is its own unit: kept when it was open
inside the window.  An exchange whose time could not be read (no start time) is in every window, with its
session: nothing shows it outside, and a nightly job must not lose its findings to a bad clock (the run
says how many it kept so).

Why whole sessions.  A reconnect names the last event its client received (``Last-Event-ID``); the
event, its stream and the ``initialize`` that made the session usually lie before the reconnect.  Cut
at the window, a resume would name an event "no capture shows" (``unknown_last_event_id``), and the
verdicts would judge half a history.  Kept whole, every boundary a window keeps gets the verdict the
unwindowed run gives it.

A session is its ``Mcp-Session-Id`` (the request's, else the response's, as the analysis keys it:
``analyzer.signals.streams``), across every input: captures of one incident (client HAR, proxy log,
server pcap) share ids, and the cross-capture rules need all of them.  The same id in two unrelated
inputs is kept in both, a superset, each kept whole.  Time runs on each input's own clock.

What a window does not bring back: other sessions.  A rule that compares a session with the sessions
before it in the same input (a shared event store replaying another session's events) sees only the
sessions that overlap the window.

The relative form (``24h``) counts back from the clock, as ``journalctl --since`` does: a nightly
``--since 24h`` judges the last day whatever the captures say about their own times, so one capture
dated 9999 cannot move the window, and an archive that stops growing is not re-judged at its newest
day every night.  ``--now TIME`` sets "now" (re-running a past night, tests); the document's
``summary.window`` records the bounds it resolved to, so a re-run can give them as times.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import click
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from analyzer.errors import AuditError

When = datetime | timedelta  # an absolute time (UTC), or a duration before now (the clock, or --now)

FORMS = (
    "an RFC 3339 time as mcp-sse-audit prints it (2026-11-13T09:00:03.000000Z, or with an offset: "
    "2026-11-13T10:00:03+01:00; without one it is UTC; as the terminal prints it: 2026-11-13 09:00:03 UTC), a date "
    "(2026-11-13: its 00:00 UTC), or a duration before now (30s, 90m, 24h, 7d, 2w; combined: 1h30m)"
)

_TIME = re.compile(
    r"(?P<y>\d{4})-(?P<mo>\d{2})-(?P<d>\d{2})"
    r"(?:[Tt ](?P<h>\d{2}):(?P<mi>\d{2})(?::(?P<s>\d{2})(?:[.,](?P<frac>\d+))?)?"
    r"(?P<tz>[Zz]|(?P<sign>[+-])(?P<oh>\d{2}):?(?P<om>\d{2})| ?UTC)?)?"
)
_DURATION = re.compile(r"(?:\d+[wdhms])+")
_PART = re.compile(r"(\d+)([wdhms])")
_SECONDS = {"w": 7 * 86400, "d": 86400, "h": 3600, "m": 60, "s": 1}
TS_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"  # as the document prints times (analyzer.document.build.TS_FMT)


def parse(text: str) -> When:
    """One ``--since``/``--until`` value: an aware UTC datetime, or a timedelta (a duration back from now).
    ValueError naming the accepted forms otherwise."""
    s = text.strip()
    if _DURATION.fullmatch(s):
        try:
            return timedelta(seconds=sum(int(n) * _SECONDS[u] for n, u in _PART.findall(s)))
        except OverflowError:
            raise ValueError(f"{text!r} is too long a duration") from None
    m = _TIME.fullmatch(s)
    if not m:
        raise ValueError(f"{text!r} is not a time; give {FORMS}")
    # more than 6 digits of fraction (nanoseconds): cut to microseconds, the captures' resolution
    us = int((m["frac"] or "0")[:6].ljust(6, "0"))
    try:
        offset = timezone.utc
        if m["sign"]:
            if int(m["oh"]) > 23 or int(m["om"]) > 59:
                raise ValueError("offset")
            delta = timedelta(hours=int(m["oh"]), minutes=int(m["om"]))
            offset = timezone(-delta if m["sign"] == "-" else delta)
        at = datetime(int(m["y"]), int(m["mo"]), int(m["d"]), int(m["h"] or 0), int(m["mi"] or 0), int(m["s"] or 0), us, offset)
        return at.astimezone(timezone.utc)
    except (ValueError, OverflowError):
        raise ValueError(f"{text!r} is not a valid date and time; give {FORMS}") from None


def _utc(value: When | None) -> When | None:
    """A naive datetime is UTC (the store's and the captures' clock); aware ones are converted."""
    if isinstance(value, datetime):
        return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)
    return value


def show(value: datetime) -> str:
    """RFC 3339 in UTC as the document prints times (``TS_FORMAT``; a year before 1000 keeps its 4 digits)."""
    return value.astimezone(timezone.utc).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


class WhenParam(click.ParamType):
    """The click type of ``--since``/``--until``: :func:`parse`; a bad value is a usage error (exit 2)."""

    name = "when"

    def convert(self, value, param, ctx):
        if isinstance(value, (datetime, timedelta)):
            return _utc(value)
        try:
            return parse(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


@dataclass(frozen=True, slots=True)
class Window:
    """``[since, until)``: either bound absent, absolute (UTC) or relative (a duration before now).  ``now``: the
    "now" a relative bound was counted back from, once resolved."""

    since: When | None = None
    until: When | None = None
    now: datetime | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "since", _utc(self.since))
        object.__setattr__(self, "until", _utc(self.until))
        object.__setattr__(self, "now", _utc(self.now))

    @property
    def bounded(self) -> bool:
        """Any bound given (``timedelta(0)`` is one: ``--since 0s`` keeps the sessions open from now on)."""
        return self.since is not None or self.until is not None

    @property
    def relative(self) -> bool:
        return isinstance(self.since, timedelta) or isinstance(self.until, timedelta)

    def resolve(self, now: datetime | None = None) -> Window:
        """Absolute bounds: a duration counts back from ``now`` (None: the clock), as ``journalctl --since``
        does, never from the captures' own times (one record dated 9999 would otherwise move the window).
        AuditError when the window is empty (``since`` not before ``until``)."""
        if not self.relative:
            got = self
        else:
            now = _utc(now) if now is not None else datetime.now(timezone.utc)

            def at(v: When | None) -> datetime | None:
                if not isinstance(v, timedelta):
                    return v
                try:
                    return now - v
                except OverflowError:  # before year 1: before every capture
                    return datetime.min.replace(tzinfo=timezone.utc)

            got = Window(at(self.since), at(self.until), now)
        if got.since is not None and got.until is not None and got.since >= got.until:
            raise AuditError(
                f"the window is empty: --since {describe(self.since, got.since)} is not before --until "
                f"{describe(self.until, got.until)}; --since must be the earlier one"
            )
        return got

    def contains(self, started: pl.Expr, ended: pl.Expr | None = None) -> pl.Expr:
        """True for an exchange that was open during ``[since, until)``: it started before ``until`` and had not
        ended before ``since`` (``ended``; without it, or where it is null, its start stands for its end).  A long
        GET stream opened before a nightly ``--since 24h`` that kept delivering into the window is in it.  False
        for no start time: that is True, it is in every window (it cannot be shown to be outside one)."""
        if self.relative:
            raise ValueError("a relative window: resolve it first (Window.resolve)")
        # no start time (a record whose time could not be read): it cannot be placed outside any window, so it is
        # in every one -- a capture's bad clock never makes its findings vanish from a nightly job (the run says how many)
        untimed = started.is_null()
        inside = pl.lit(True)
        if self.since is not None:
            last = started if ended is None else pl.coalesce(ended, started)
            inside = inside & (last >= pl.lit(self.since, pl.Datetime("us", "UTC")))
        if self.until is not None:
            inside = inside & (started < pl.lit(self.until, pl.Datetime("us", "UTC")))
        return (untimed | inside).fill_null(False)

    def summary(self) -> dict:
        """The document's ``summary.window``: the bounds applied, resolved, as RFC 3339 UTC (null: open); a re-run
        given these two times judges the same sessions, whatever the clock says then."""
        return {"since": None if self.since is None else show(self.since), "until": None if self.until is None else show(self.until)}


def of(since: When | None, until: When | None) -> Window | None:
    """The window of the two options, None when neither was given."""
    w = Window(since, until)
    return w if w.bounded else None


def empty(since: When | None, until: When | None) -> str | None:
    """Two absolute bounds in the wrong order: the usage error that says so (found before anything is read)."""
    if isinstance(since, datetime) and isinstance(until, datetime) and _utc(since) >= _utc(until):
        return f"--since {show(since)} is not before --until {show(until)}: the window [since, until) is empty"
    return None


def describe(given: When | None, resolved: datetime | str | None = None) -> str:
    """A bound as the user gave it, with what a duration resolved to: ``24h (2026-11-12T10:00:00.000000Z)``."""
    if isinstance(given, timedelta):
        secs = int(given.total_seconds())
        text = next((f"{secs // n}{u}" for u, n in _SECONDS.items() if secs and not secs % n), f"{secs}s")
        if resolved is None:
            return text
        return f"{text} ({resolved if isinstance(resolved, str) else show(resolved)})"
    return show(given) if given is not None else "-"


# --- the rule, one Polars expression over the exchanges ---------------------------------------------


def session_key() -> pl.Expr:
    """The session an exchange belongs to, as the analysis keys it (analyzer.signals.streams): the request's
    Mcp-Session-Id, else the response's; null when it has none (or an empty one)."""
    sid = pl.coalesce("req_session_id", "resp_session_id")
    return pl.when(sid != "").then(sid)


def overlapping(exchanges: pl.LazyFrame, window: Window) -> pl.LazyFrame:
    """The exchanges of every session that overlaps ``window`` (an absolute one), whole, and the exchanges
    without a session id that started inside it; in their order.  See the module's docstring."""
    inside = window.contains(pl.col("started"), pl.col("ended"))
    sid = session_key()
    keep = pl.when(sid.is_null()).then(inside).otherwise(inside.any().over(sid))
    return exchanges.filter(keep.fill_null(False))


def session_ids(exchanges: pl.LazyFrame, window: Window) -> pl.LazyFrame:
    """The ids of the sessions that overlap ``window`` (column ``session_id``): what a store scans first,
    with the time predicate pushed into the Parquet reader, before it selects their exchanges."""
    return (
        exchanges.filter(window.contains(pl.col("started"), pl.col("ended")))
        .select(session_key().alias("session_id"))
        .drop_nulls()
        .unique()
    )


def candidates(exchanges: pl.LazyFrame, window: Window, ids: pl.Series) -> pl.LazyFrame:
    """The rows :func:`overlapping` can keep, given :func:`session_ids` collected: a literal ``is_in`` the
    Parquet reader evaluates as it scans.  ``overlapping(candidates(x, w, ids), w) == overlapping(x, w)``:
    the sessions of ``ids`` are in it whole, and sessionless rows are judged by their own start."""
    sid = session_key()
    return exchanges.filter(sid.is_in(ids.implode()).fill_null(False) | (sid.is_null() & window.contains(pl.col("started"), pl.col("ended"))))


def apply(tables: dict, window: Window) -> tuple[dict, Window]:
    """The canonical tables of a single pass (read from inputs) narrowed to ``window``; and the window
    resolved (a duration against the clock, when the caller has not resolved it).  Events and messages follow the exchanges kept; the
    anomalies of an input that keeps no exchange go with it (as a store narrows: analyzer.scale.store)."""
    x = pl.from_arrow(tables["exchanges"])
    window = window.resolve()  # (a run resolves it once, before reading: analyzer.run)
    kept = overlapping(x.lazy(), window).collect()
    keys = kept.select("source", "xid")
    out = dict(tables)
    out["exchanges"] = kept.to_arrow().cast(tables["exchanges"].schema)

    def follow(t):
        if isinstance(t, pl.DataFrame):  # the single pass's events are a Polars frame (inputs.concat)
            return t.join(keys, on=["source", "xid"], how="semi", maintain_order="left")
        got = pl.from_arrow(t).join(keys, on=["source", "xid"], how="semi", maintain_order="left")
        return got.to_arrow().cast(t.schema) if got.height else t.schema.empty_table()

    out["events"] = follow(tables["events"])
    out["messages"] = follow(tables["messages"])
    anomalies = tables["anomalies"]
    sources = pa.array(keys["source"].unique().to_list(), pa.string())
    out["anomalies"] = anomalies.filter(pc.is_in(anomalies["source"], value_set=sources))
    return out, window


def stamp(document: dict, window: Window | None) -> dict:
    """Record the (resolved) window in the document's summary: ``summary.window`` (schemas/findings.schema.json)."""
    if window is not None and window.bounded:
        document["summary"]["window"] = window.summary()
    return document
