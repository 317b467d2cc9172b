"""A Parquet store of canonical tables, for nightly audits over archives.

Layout (Hive-partitioned by input, so a new file only adds a folder)::

    STORE/exchanges/input=<sha>/part-<gen>.parquet  the canonical tables of one input
    STORE/events/input=<sha>/part-<gen>.parquet     (``part-0.parquet`` in stores of version 1)
    STORE/messages/input=<sha>/part-<gen>.parquet
    STORE/anomalies/input=<sha>/part-<gen>.parquet
    STORE/inputs.parquet       the manifest: one row per committed input (sha256 of its bytes, path,
                               format, records, rejected, notes) and, per table, its part's
                               ``<table>_file``, ``_bytes``, ``_rows`` and ``_sha256``
    STORE/inputs.parquet.prev  the manifest before the last commit
    STORE/.lock                the writer lock (pid, host and start time of the holder)
    STORE/.staging/            parts and manifest being written; a dead writer's leftovers

An input is known by the sha256 of its bytes, not its name: a second run over
an archive with a few new files parses only those, and a renamed file is not
parsed again.  Analysis reads the store lazily; ``sessions`` and the window
(``since``/``until``: whole sessions, :mod:`analyzer.window`) are pushed down into
the Parquet scan of ``exchanges`` and the other tables follow by a semi-join on
the exchanges that remain.

Crash safety.  The manifest is the commit record: an input exists when, and only when, its row is in
``inputs.parquet``.  Commit of one input: its four parts are written and fsync'd in ``.staging``,
renamed to fresh names in their folders, then the new manifest is written beside, fsync'd and
``os.replace``d over the old one, and the store folder fsync'd.  Readers list the files to read from
the manifest (never by globbing folders), so parts of an interrupted commit are invisible, and check
every part against its size, sha256 and row count before reading.  Writers take ``STORE/.lock``;
under it, ``ingest`` removes leftovers of dead writers and parts no row lists, and re-reads damaged
inputs from their source files.  The manifest, its checksum and the check of each part:
:mod:`analyzer.scale.manifest`; the writer and its commit protocol: :mod:`analyzer.scale.store_commit`.

Where.  ``store`` is a folder or an object store URI (:mod:`analyzer.scale.storage`): the paths above
are then object keys under ``s3://bucket/prefix`` and every read goes through pyarrow's filesystem
(Snapshot.store is a :class:`~analyzer.scale.storage.Local` or :class:`~analyzer.scale.storage.Remote`).
On S3 there is no ``.staging`` and no rename: the commit is the manifest's compare-and-swap and the lock
a lease (:mod:`analyzer.scale.store_remote`).
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq  # noqa: F401 (tests patch its write_table through this module)

from analyzer import window as windows
from analyzer.document.facts import unread
from analyzer.errors import AuditError, StoreError
from analyzer.scale.manifest import (  # noqa: F401 (re-exported: the store's names, for its readers and tests)
    BASE_COLUMNS,
    MANIFEST,
    MANIFEST_SCHEMA,
    PREVIOUS,
    ROWS_SHA256,
    TABLES,
    VERSION,
    Snapshot,
    damage,
    read_manifest,
)
from analyzer.scale.storage import file_sha256, locate  # noqa: F401 (file_sha256: re-exported)
from analyzer.scale.store_commit import ingest  # noqa: F401 (re-exported: the writer, for the command line)
from analyzer.window import Window


# --- the manifest, read once per analysis (its model: analyzer/scale/manifest.py) --------------------


def _snapshot(store) -> Snapshot:
    store = locate(store)
    return store.pinned or read_manifest(store)


def pin(snap: Snapshot):
    """The store as a value that reads through ``snap``: every function here given it (and every engine it is
    handed to) sees that one manifest, whatever commits meanwhile.  A value, not a context: a pin cannot leak
    into another analysis, and one that ends is simply dropped."""
    return dataclasses.replace(snap.store, pinned=snap)


@dataclass
class Reading:
    """A store pinned for one analysis (:func:`reading`), and warnings for the user."""

    store: object  # storage.Local | storage.Remote carrying its snapshot
    notes: list[str]


def reading(store, check_parts: bool = True) -> Reading:
    """One manifest snapshot for every read of an analysis, after checking all its parts: pass the returned
    ``.store`` wherever the store goes (:func:`load`, :func:`manifest`, the partitions, the spill, Spark).

    An ingest running meanwhile commits atomically and never changes a committed part, so the
    analysis sees the inputs committed when it started, whole.  ``.notes``: warnings for the user.
    ``check_parts=False``: whoever reads the parts checks them (Spark's tasks over an object store)."""
    store = locate(store)
    snap = read_manifest(store)
    _manifest_or_fail(store, snap)
    if check_parts:
        verify(snap)
    notes = []
    if snap.legacy:
        notes.append(
            f"{store} was written by an older mcp-sse-audit: its parts have no checksums, so only their presence and "
            f"Parquet structure were checked; the next `mcp-sse-audit ingest ... --store {store}` adds them"
        )
    return Reading(pin(snap), notes)


def manifest(store) -> pl.DataFrame:
    return _snapshot(store).frame()


# --- verification (of each part: analyzer.scale.manifest.damage) --------------------------------------


def verify(snap: Snapshot, shas: set[str] | None = None, names=tuple(TABLES)) -> None:
    """Every part the analysis will read is as committed, or a StoreError naming each damaged one."""
    found = damage(snap, shas, names)
    if not found:
        return
    inputs = sorted({d.path for d in found})
    shown = "; ".join(str(d) for d in found[:8]) + (f"; and {len(found) - 8} more" if len(found) > 8 else "")
    raise StoreError(
        f"{snap.store}: {len(found)} damaged part(s), so the store was not analyzed: {shown}. "
        f"Run `mcp-sse-audit ingest {' '.join(inputs[:3])}{' ...' if len(inputs) > 3 else ''} --store {snap.store}` "
        f"again: it re-reads each damaged input from its file when that file still has the same bytes"
    )


# --- reading ---------------------------------------------------------------------------------------------


def scan(store, name: str, inputs: list[str] | set[str] | None = None) -> pl.LazyFrame:
    """One canonical table of the store (only these inputs, when given), lazily, with the ``input``
    (sha256) column of its folder.  Reads only the committed parts the manifest lists, checked first."""
    snap = _snapshot(store)
    want = None if inputs is None else set(inputs)
    verify(snap, want, (name,))
    files = [r[f"{name}_file"] for r in sorted(snap.rows, key=lambda r: r["sha256"]) if want is None or r["sha256"] in want]
    schema = pl.from_arrow(TABLES[name].empty_table()).schema | {"input": pl.String}
    if not files:
        return pl.DataFrame(schema=schema).lazy()
    return snap.store.scan(files, schema)


def _manifest_or_fail(store, snap: Snapshot | None = None) -> Snapshot:
    snap = snap or _snapshot(store)
    if not snap.rows:
        raise AuditError(f"{store}: no mcp-sse-audit store here (no {MANIFEST}); fill it with: mcp-sse-audit ingest PATH... --store {store}")
    return snap


def input_rows(store: str | Path, used: set[str] | None = None) -> list[dict]:
    """The document's ``inputs`` rows for the stored inputs (only those in ``used``, when given), by path."""
    snap = _manifest_or_fail(locate(store))
    return [
        {"path": r["path"], "format": r["format"], "records": r["records"], "rejected": r["rejected"],
         "error": unread(r["records"], r["rejected"]),  # as the single pass says it (every record rejected)
         "notes": json.loads(r["notes"] or "[]")}
        for r in sorted(snap.rows, key=lambda r: r["path"])
        if used is None or r["path"] in used
    ]


def load(
    store: str | Path,
    since: datetime | timedelta | None = None,
    until: datetime | timedelta | None = None,
    sessions: tuple[str, ...] = (),
    inputs: list[str] | None = None,
) -> tuple[dict[str, pa.Table], list[dict]]:
    """The canonical tables held by the store, narrowed lazily; and the inputs they came from.

    ``since``/``until``: the sessions that overlap ``[since, until)``, whole (:mod:`analyzer.window`); a
    duration counts back from the clock (:func:`window`).
    ``inputs``: only these stored inputs (sha256s; their parts are the only files read)."""
    snap = _manifest_or_fail(locate(store))
    verify(snap, None if inputs is None else set(inputs))  # every damaged part named at once
    store = pin(snap)  # every table from this one manifest
    win = window(store, since, until)
    return _load(store, snap, win.since, win.until, sessions, inputs)


def window(store, since: datetime | timedelta | None, until: datetime | timedelta | None) -> Window:
    """``[since, until)`` with absolute bounds (a duration: back from the clock; a run resolves it once, with
    ``--now``, before it reads: :mod:`analyzer.run`).  ``store`` is not read: a window never depends on what a
    capture says its time is."""
    return Window(since, until).resolve()


def narrowed(x: pl.LazyFrame, since: datetime | None, until: datetime | None, sessions: tuple[str, ...] = ()) -> pl.LazyFrame:
    """The stored exchanges ``x`` (a scan) narrowed to ``sessions`` and to the sessions overlapping the
    window, whole (absolute bounds).  Two passes, so that the Parquet reader filters as it scans: the
    ids of the sessions with an exchange started inside the window (the time predicate pushed into the
    scan), then their exchanges (a literal ``is_in``) and the sessionless ones started inside."""
    if sessions:
        x = x.filter(pl.col("req_session_id").is_in(sessions) | pl.col("resp_session_id").is_in(sessions))
    win = Window(since, until)
    if not win.bounded:
        return x
    ids = windows.session_ids(x, win).collect()["session_id"]
    return windows.overlapping(windows.candidates(x, win, ids), win)


@dataclass
class Touched:
    """What an incremental audit judges (:mod:`analyzer.scale.audits`): the tables of every session the
    ``pending`` inputs touch, whole (their exchanges in older inputs too), and the sessionless exchanges of the
    pending inputs; the inputs they came from (every pending input, even one that gave no exchange: its records,
    rejections and damage count); and which input holds which session (``pairs``: input sha256, session id)."""

    tables: dict[str, pa.Table]
    rows: list[dict]
    pairs: pl.DataFrame


def load_touched(store, pending: list[str]) -> Touched:
    """See :class:`Touched`.  ``store``: pinned.  Two scans, as a window's: the session ids of the pending inputs
    (their parts only), then every stored exchange of those sessions (a literal ``is_in`` pushed into the scan)."""
    snap = _manifest_or_fail(locate(store))
    sid = windows.session_key()
    ids = scan(store, "exchanges", pending).select(sid.alias("session_id")).drop_nulls().unique().collect()["session_id"]
    x = scan(store, "exchanges").filter(sid.is_in(ids.implode()).fill_null(False)
                                        | (sid.is_null() & pl.col("input").is_in(pending)))
    chosen = x.collect()
    pairs = chosen.select("input", sid.alias("session_id")).drop_nulls().unique()
    out = {"exchanges": chosen.drop("input")}
    keys = chosen.select("source", "xid").lazy()
    for name in ("events", "messages"):
        out[name] = scan(store, name).join(keys, on=["source", "xid"], how="semi").drop("input").collect()
    sources = set(chosen["source"].unique().to_list())
    pending_paths = {r["path"] for r in snap.rows if r["sha256"] in set(pending)}
    # the anomalies of every input that contributes, and of every pending input (a damaged new input with no
    # exchange left must fail the night it arrives, not vanish from the audit)
    out["anomalies"] = scan(store, "anomalies").filter(pl.col("source").is_in(sorted(sources | pending_paths))
                                                       | pl.col("input").is_in(pending)).drop("input").collect()
    tables_ = {name: df.to_arrow().cast(TABLES[name]) for name, df in out.items()}
    return Touched(tables_, input_rows(store, sources | pending_paths), pairs)


def _load(store, snap: Snapshot, since, until, sessions, inputs) -> tuple[dict[str, pa.Table], list[dict]]:
    """``since``/``until``: absolute (resolved by :func:`load`, or by the Spark driver)."""
    def scan_(name: str) -> pl.LazyFrame:
        return scan(store, name, inputs)

    x = narrowed(scan_("exchanges"), since, until, sessions)
    narrowing = since is not None or until is not None or bool(sessions)
    out = {"exchanges": x.drop("input").collect()}
    chosen = out["exchanges"].select("source", "xid")
    for name in ("events", "messages"):
        out[name] = scan_(name).join(chosen.lazy(), on=["source", "xid"], how="semi").drop("input").collect()
    sources = chosen["source"].unique()
    anomalies = scan_("anomalies")
    if narrowing:  # the anomalies of the inputs that still contribute
        anomalies = anomalies.filter(pl.col("source").is_in(sources.implode()))
    out["anomalies"] = anomalies.drop("input").collect()
    tables_ = {name: df.to_arrow().cast(TABLES[name]) for name, df in out.items()}
    if inputs is not None:  # a partition: its own inputs
        paths = {r["path"] for r in snap.rows if r["sha256"] in set(inputs)}
        used = paths & set(sources.to_list()) if narrowing else paths
        return tables_, input_rows(store, used)
    return tables_, input_rows(store, set(sources.to_list()) if narrowing else None)
