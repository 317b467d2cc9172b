"""inputs → canonical tables → sessions/streams/boundaries → findings document."""
from __future__ import annotations

import dataclasses
import time
from datetime import datetime, timedelta, timezone
from dataclasses import dataclass, field
from typing import Callable

import polars as pl

from analyzer import exits
from analyzer.signals import eras, streams
from analyzer.document import build as findings
from analyzer.ingest import inputs
from analyzer.rules import verdicts
from analyzer.anomalies import SCHEMA as ANOMALY_SCHEMA
from analyzer.document.assemble import assemble
from analyzer.document.facts import plural, unread
from analyzer.errors import InputError, NotACapture
from analyzer.ingest.reading import Reading
from analyzer.rules.registry import Analysis
from analyzer.formatted import formatted

def release_freed() -> None:
    """Give back to the system what the read freed but two allocators keep: PyArrow's pool (mimalloc)
    and the C library's heap (the Python objects of a parse: a HAR's entries, JSON-RPC bodies).  Polars'
    own allocator returns freed pages by itself (analyzer.__main__).  A 250k-event HAR, read and let go:
    304 MiB resident, 218 MiB after these two calls (imports alone: 101 MiB).  Best effort: a C library
    without ``malloc_trim`` (musl, macOS) keeps its heap."""
    import ctypes

    import pyarrow as pa

    pa.default_memory_pool().release_unused()
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (AttributeError, OSError):
        pass


@dataclass
class Result:
    document: dict
    readable: int  # inputs that yielded records
    errors: list[InputError] = field(default_factory=list)
    skip_reasons: dict[str, str] = field(default_factory=dict)  # skipped path -> why (a FIFO, a device)

    def fails(self, fail_on: str) -> bool:
        return exits.fails(self.document["summary"], fail_on)


@dataclass
class Read:
    """Inputs read into canonical tables, and the account of every file."""

    parts: list
    input_rows: list[dict]
    errors: list[InputError]
    skipped: list[str]
    readable_count: int = 0  # inputs handed to a sink (not kept in parts) that were read (facts.unread: not unreadable)
    skip_reasons: dict[str, str] = field(default_factory=dict)  # skipped path -> why (a FIFO, a device)

    @property
    def readable(self) -> int:
        return self.readable_count + sum(1 for p in self.parts if not unread(p.records, p.rejected))


NOT_A_CAPTURE = "not a capture"  # the start of a skip reason for a file that was read, not for a FIFO or a device


def read_inputs(
    paths: list[str],
    reading: Reading = Reading(),
    progress: Callable[[str], None] | None = None,
    only: Callable[[str], bool] | None = None,
    sink: Callable[[object, dict], None] | None = None,
) -> Read:
    """Read every input as ``reading`` says; ``only(path)`` may skip files (the store's already-ingested ones).

    ``sink(part, row)``: each input's tables go there as soon as it is read and are not kept, so
    memory holds one input at a time (the store's streaming ingest)."""
    collected = inputs.collect(paths)
    # Read in path order, whatever order the paths were given in: the document (inputs, anomalies, and
    # everything numbered from them) is the same for any permutation, so two audit runs can be diffed.
    out = Read([], [], [], sorted(collected.skipped), skip_reasons=collected.reasons)
    for path, why in sorted(collected.unreadable.items()):  # a folder the walk could not list: lost input, named
        exc = InputError(path, why)
        out.errors.append(exc)
        out.input_rows.append({"path": path, "format": "unknown", "records": 0, "rejected": 0, "error": exc.reason, "notes": []})
    files = []
    stored = 0  # files ``only`` passed over (already in the store)
    for path in sorted(collected.files):
        if sink is not None and inputs.is_stream(path):
            # a store knows inputs by the sha256 of their file, and a stream read to hash it is gone
            exc = InputError(path, "a stream (standard input, a pipe) cannot go into a store: save it to a file and name the file")
            out.errors.append(exc)
            out.input_rows.append({"path": path, "format": "unknown", "records": 0, "rejected": 0, "error": exc.reason, "notes": []})
        elif only is None or only(path):
            files.append(path)
        else:
            stored += 1
    meter = reading.meter
    for n, path in enumerate(files, start=1):
        started = time.perf_counter()
        if meter is not None:
            meter.begin(n, len(files), path, inputs.size(path) if not inputs.is_stream(path) else 0)
        try:
            got = inputs.read_one(path, reading)
            if path in collected.walked and path.endswith(".json") and got.format == "unknown":
                raise NotACapture(path, "an empty file")  # blank: a walked .json (a config) is no capture, as below
        except InputError as exc:
            if path in collected.walked and path.endswith(".json"):
                # a .json met while walking a directory (package.json, a config) is not an error
                out.skipped.append(path)
                continue
            if path in collected.walked and isinstance(exc, NotACapture):
                # JSON Lines without a proxy record beside the captures (a client's or a server's own log): named,
                # it would be an error; found in a folder of captures, it is listed as skipped, with the reason
                out.skipped.append(path)
                out.skip_reasons[path] = f"{NOT_A_CAPTURE}: {exc.reason}"
                continue
            out.errors.append(exc)
            out.input_rows.append({"path": path, "format": "unknown", "records": 0, "rejected": 0, "error": exc.reason, "notes": []})
            continue
        if meter is not None:
            meter.done(got.records)
        if progress and meter is None:
            mb = inputs.size(path) / 1e6
            secs = max(time.perf_counter() - started, 1e-6)
            progress(f"[{n}/{len(files)}] {path}: {got.records} records, {mb:.1f} MB at {mb / secs:.1f} MB/s")
        # every record rejected: nothing was read from it, an unreadable input (facts.unread), though its tables and
        # anomalies are kept (they say what each record lacked)
        row = {"path": path, "format": got.format, "records": got.records, "rejected": got.rejected,
               "error": unread(got.records, got.rejected), "notes": got.notes}
        if sink is not None:
            sink(got, row)
            out.readable_count += 0 if row["error"] else 1
            del got
        else:
            out.parts.append(got)
        out.input_rows.append(row)
    out.skipped.sort()
    if meter is not None:  # the summary's counts (facts): every input with a row, every file skipped
        meter.end(len(out.input_rows), len(out.skipped), stored if only is not None else None)
    return out


def run(
    paths: list[str],
    reading: Reading = Reading(),
    progress: Callable[[str], None] | None = None,
    columnar: bool = False,
    window=None,
    analysis: Analysis | None = None,
) -> Result:
    """The single pass: ``paths`` read as ``reading`` says, analyzed in memory.

    ``columnar``: the document's exchanges and boundaries are :class:`~analyzer.document.records.Records` (see there).

    ``window``: an :class:`analyzer.window.Window`; only the sessions that overlap it are analyzed, whole
    (a duration counts back from the newest exchange start read).  Every input read still counts (the
    summary's ``inputs``, ``records``); the window applied, resolved, is the summary's ``window``.  ``analysis``: the rules'
    thresholds (:class:`~analyzer.rules.registry.Analysis`; None: their defaults)."""
    # compact events: the tables go to the analysis, never to a store
    got = read_inputs(paths, dataclasses.replace(reading, compact=True), progress)
    readable = got.readable
    tables = inputs.concat(got.parts)
    got.parts = []  # the tables hold the parts' frames now: one owner, so the analysis can let them go
    release_freed()  # before the analysis's peak, not after it
    if window is not None:
        from analyzer import window as windows

        tables, window = windows.apply(tables, window)
    if progress:
        progress(f"analyzing {tables['exchanges'].num_rows} exchanges, {len(tables['events'])} events")
    result = analyze_tables(tables, got.input_rows, got.errors, got.skipped, readable, consume=True, columnar=columnar, progress=progress,
                           analysis=analysis)
    result.skip_reasons = got.skip_reasons
    if window is not None:
        windows.stamp(result.document, window)
    return result


FUTURE = timedelta(days=1)  # past the run's clock by more than this: a wrong clock, not a time zone slip


def _in_future(exchanges) -> pl.DataFrame:
    """A ``time_in_future`` anomaly per exchange that starts more than :data:`FUTURE` after the clock (a capture
    dated 9999 beside a real incident: said, and moving no window)."""
    x = pl.from_arrow(exchanges.select(["source", "location", "started"])) if exchanges.num_rows else None
    schema = pl.from_arrow(ANOMALY_SCHEMA.empty_table()).schema
    if x is None:
        return pl.DataFrame(schema=schema)
    limit = datetime.now(timezone.utc) + FUTURE
    return (x.filter(pl.col("started") > limit)
            .select("source", "location", code=pl.lit("time_in_future"), severity=pl.lit("warning"),
                    message=formatted("the exchange starts at {}, more than a day after this run's clock",
                                      pl.col("started").dt.strftime("%Y-%m-%dT%H:%M:%S%.6fZ")))
            .cast(schema))


def analyze_tables(
    tables: dict, input_rows: list[dict], errors: list[InputError], skipped: list[str], readable: int, keep_pos: bool = False,
    consume: bool = False, columnar: bool = False, progress: Callable[[str], None] | None = None, analysis: Analysis | None = None,
) -> Result:
    """Canonical tables (from inputs or from a store) → the findings document.

    ``keep_pos``: findings keep their place in history as ``_pos`` (analyzer.scale.partitions merges by it).
    ``consume``: the caller hands the tables over; the canonical tables are let go once the frames are built
    from them (the frames carry what the rules need), instead of staying beside them for the whole run.
    ``columnar``, ``analysis``: see :func:`run`."""
    n_events = len(tables["events"])
    n_messages = len(tables["messages"])  # (an Arrow table, or the single pass's Polars frame)
    in_future = _in_future(tables["exchanges"])
    if consume:
        tables["events"] = streams.owned_events(tables)
    say = progress or (lambda _msg: None)
    say("rebuilding sessions, streams and reconnects")
    frames, links = streams.build(tables, consume=consume)
    if consume:
        # the frames hold what the rules read: the canonical events, exchanges and messages beside them were
        # a second copy through the whole analysis (500k tiny POST exchanges, 1M messages: 224 MiB of Arrow);
        # build let the exchanges and messages go, and what PyArrow's pool kept of them goes back now
        tables["events"] = tables["exchanges"] = tables["messages"] = None
        release_freed()
    rev = eras.revisions(frames)
    say(f"judging the reconnects of {frames.exchanges.height:,} exchanges")
    b = verdicts.judge(frames, links, rev)
    say(f"{plural(b.height, 'reconnect')} judged; checking the whole history and building the findings")
    body = findings.build_document(frames, b, rev, keep_pos=keep_pos, columnar=columnar, analysis=analysis)

    anomalies = pl.from_arrow(tables["anomalies"]) if tables["anomalies"].num_rows else pl.from_arrow(ANOMALY_SCHEMA.empty_table())
    anomalies = pl.concat([anomalies, in_future])
    doc = assemble(input_rows, errors, skipped, body, n_events, n_messages, anomalies.to_dicts())
    return Result(doc, readable, errors)


