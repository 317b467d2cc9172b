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
inputs from their source files.  The writer and its commit protocol: :mod:`analyzer.scale.store_commit`.

Where.  ``store`` is a folder or an object store URI (:mod:`analyzer.scale.storage`): the paths above
are then object keys under ``s3://bucket/prefix`` and every read goes through pyarrow's filesystem
(Snapshot.store is a :class:`~analyzer.scale.storage.Local` or :class:`~analyzer.scale.storage.Remote`).
On S3 there is no ``.staging`` and no rename: the commit is the manifest's compare-and-swap and the lock
a lease (:mod:`analyzer.scale.store_remote`).
"""
from __future__ import annotations

import hashlib
import json
import re
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Iterator

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from analyzer import anomalies as anomaly_catalog
from analyzer import tables
from analyzer import window as windows
from analyzer.errors import AuditError, StoreError
from analyzer.scale.storage import Local, Remote, file_sha256, locate  # noqa: F401 (file_sha256: re-exported)
from analyzer.window import Window

TABLES = {
    "exchanges": tables.EXCHANGES,
    "events": tables.EVENTS,
    "messages": tables.MESSAGES,
    "anomalies": anomaly_catalog.SCHEMA,
}
MANIFEST = "inputs.parquet"
PREVIOUS = MANIFEST + ".prev"
VERSION = "2"
SHA256 = re.compile(r"[0-9a-f]{64}")
BASE_COLUMNS = [
    ("sha256", pa.string()),
    ("path", pa.string()),
    ("format", pa.string()),
    ("records", pa.int64()),
    ("rejected", pa.int64()),
    ("notes", pa.string()),  # JSON list
]
PART_COLUMNS = [(f"{t}_{c}", typ) for t in TABLES for c, typ in (("file", pa.string()), ("bytes", pa.int64()), ("rows", pa.int64()), ("sha256", pa.string()))]
MANIFEST_SCHEMA = pa.schema(BASE_COLUMNS + PART_COLUMNS, metadata={"mcp_sse_audit_store": VERSION})
# the manifest's own checksum (the parts have theirs in it): sha256 of its rows as canonical JSON, in the Parquet
# file's key-value metadata, so one flipped byte anywhere in it is "damaged", never other paths, counts or notes
ROWS_SHA256 = b"mcp_sse_audit_rows_sha256"
KNOWN_VERSIONS = {"1", "2"}


def _rows_sha256(rows: list[dict]) -> str:
    return hashlib.sha256(json.dumps(rows, sort_keys=True, ensure_ascii=True, separators=(",", ":")).encode()).hexdigest()


def manifest_table(rows: list[dict]) -> pa.Table:
    """The manifest of ``rows`` as written: MANIFEST_SCHEMA, with the checksum of its rows in its metadata."""
    table = pa.Table.from_pylist(rows, schema=MANIFEST_SCHEMA)
    meta = dict(table.schema.metadata or {})
    meta[ROWS_SHA256] = _rows_sha256(table.to_pylist()).encode()
    return table.replace_schema_metadata(meta)



# --- the manifest, read once per analysis ----------------------------------------------------------


@dataclass
class Snapshot:
    """One reading of the manifest: every read of an analysis uses the same one (see :func:`reading`)."""

    store: Local | Remote
    rows: list[dict]  # one per input, deduplicated by sha256, all MANIFEST_SCHEMA columns
    legacy: bool = False  # written by version 1: no checksums (part files derived from the layout)
    duplicates: int = 0  # rows dropped because their sha256 was listed already (version 1's races)
    verified: set = field(default_factory=set)  # parts found intact, by (path, size, mtime, inode)

    def frame(self) -> pl.DataFrame:
        return pl.from_arrow(pa.Table.from_pylist(self.rows, schema=MANIFEST_SCHEMA))

    def exists(self) -> bool:
        return self.store.exists(MANIFEST)


_pinned: ContextVar[dict[object, Snapshot]] = ContextVar("store_snapshots", default={})


def read_manifest(store, raw: bytes | None = None) -> Snapshot:
    """The manifest of ``store``; ``raw``: its bytes, already fetched (the remote writer reads them with
    their ETag, so that what it parses is the version its compare-and-swap names)."""
    store = locate(store)
    if raw is None:
        if isinstance(store, Remote):
            store.check()  # no bucket, refused credentials, no endpoint: say so, not "no store here"
            try:
                if not store.exists(MANIFEST):
                    return Snapshot(store, [])
                raw = store.read_bytes(MANIFEST)
            except FileNotFoundError:
                return Snapshot(store, [])
            except (OSError, pa.ArrowException) as exc:
                raise StoreError(store.failure(exc, f"cannot read {MANIFEST}")) from None
        elif not store.exists(MANIFEST):
            return Snapshot(store, [])
    try:
        table = store.read_table(MANIFEST) if raw is None else pq.read_table(pa.BufferReader(raw))
        return _parse_manifest(store, table)
    except StoreError:
        raise
    except Exception as exc:  # noqa: BLE001 -- any damage of the file (a flipped byte can raise nearly anything from the
        # Parquet reader or the values it yields: UnicodeDecodeError, OverflowError...) is a damaged manifest, with the way back
        raise StoreError(_bad_manifest(store, f"not a readable Parquet file: {exc.__class__.__name__}: {exc}")) from None


def _parse_manifest(store: Local | Remote, table: pa.Table) -> Snapshot:
    meta = table.schema.metadata or {}
    version = meta.get(b"mcp_sse_audit_store", b"1").decode("utf-8", "replace")
    if version not in KNOWN_VERSIONS:
        raise StoreError(_bad_manifest(store, f"its format version is {version!r}"))
    missing = [c for c, _ in BASE_COLUMNS if c not in table.column_names]
    if missing:
        raise StoreError(_bad_manifest(store, f"no column {', '.join(missing)}"))
    legacy = not all(c in table.column_names for c, _ in PART_COLUMNS)
    try:
        table = table.select([c for c, _ in BASE_COLUMNS] + ([] if legacy else [c for c, _ in PART_COLUMNS]))
        table = table.cast(pa.schema(BASE_COLUMNS + ([] if legacy else PART_COLUMNS)))
    except (pa.ArrowException, ValueError) as exc:
        raise StoreError(_bad_manifest(store, f"unexpected column types: {exc}")) from None
    listed = table.to_pylist()
    want = meta.get(ROWS_SHA256)
    if want is not None and _rows_sha256(listed) != want.decode("utf-8", "replace"):
        raise StoreError(_bad_manifest(store, "its rows do not match its checksum"))
    # (no checksum: a manifest written before it existed; read as before, every part still checked against its own)
    rows, seen = [], set()
    for r in listed:
        if not SHA256.fullmatch(r["sha256"] or ""):
            raise StoreError(_bad_manifest(store, f"an input's sha256 is {r['sha256']!r}"))
        if r["sha256"] in seen:
            continue
        seen.add(r["sha256"])
        if legacy:
            for t in TABLES:
                r |= {f"{t}_file": f"{t}/input={r['sha256']}/part-0.parquet", f"{t}_bytes": None, f"{t}_rows": None, f"{t}_sha256": None}
        for t in TABLES:  # only files of this input's folder: a manifest never makes us read or delete others
            if not re.fullmatch(rf"{t}/input={r['sha256']}/part-[0-9a-z]+\.parquet", r[f"{t}_file"] or ""):
                raise StoreError(_bad_manifest(store, f"the {t} part of {r['path']} is {r[f'{t}_file']!r}"))
        rows.append(r)
    return Snapshot(store, rows, legacy, table.num_rows - len(rows))


def _bad_manifest(store: Local | Remote, why: str) -> str:
    p, prev = store.show(MANIFEST), store.show(PREVIOUS)
    cp = f"aws s3 cp {prev} {p}" if isinstance(store, Remote) and store.scheme == "s3" else f"cp {prev} {p}"
    fix = (
        f"restore the previous one ({cp}) and run `mcp-sse-audit ingest` again over your captures (it adds back what the last commit had)"
        if store.exists(PREVIOUS)
        else f"move the store aside and run `mcp-sse-audit ingest` again over your captures into a new store"
    )
    return f"{p}: the store's manifest is damaged ({why}); {fix}"


def _snapshot(store) -> Snapshot:
    store = locate(store)
    return _pinned.get().get(store.key) or read_manifest(store)


@contextmanager
def reading(store, check_parts: bool = True) -> Iterator[list[str]]:
    """Pin one manifest snapshot for every read of the store in this block, after checking all its parts.

    An ingest running meanwhile commits atomically and never changes a committed part, so the
    analysis sees the inputs committed when it started, whole.  Yields warnings for the user.
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
    with _pin(snap):
        yield notes


@contextmanager
def _pin(snap: Snapshot) -> Iterator[Snapshot]:
    token = _pinned.set({**_pinned.get(), snap.store.key: snap})
    try:
        yield snap
    finally:
        _pinned.reset(token)


def manifest(store) -> pl.DataFrame:
    return _snapshot(store).frame()


# --- verification ------------------------------------------------------------------------------------


def _part_problem(snap: Snapshot, row: dict, table: str) -> str | None:
    """What is wrong with one part of one input, or None when it is as committed."""
    where, rel = snap.store, row[f"{table}_file"]
    try:
        size, identity = where.stat(rel)
    except FileNotFoundError:
        return "is missing"
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    key = (where.show(rel), size, *identity, row[f"{table}_sha256"])
    if key in snap.verified:
        return None
    want = row[f"{table}_bytes"]
    if want is not None and size != want:
        return f"has {size} bytes instead of {want} (truncated or overwritten)"
    try:
        if isinstance(where, Remote):  # one GET: its bytes give both the sha256 and the footer's row count
            data = where.read_bytes(rel)
            if row[f"{table}_sha256"] is not None and hashlib.sha256(data).hexdigest() != row[f"{table}_sha256"]:
                return "does not match its sha256 (its bytes changed since the commit)"
            rows = pq.read_metadata(pa.BufferReader(data)).num_rows
        else:
            if row[f"{table}_sha256"] is not None and where.sha256(rel) != row[f"{table}_sha256"]:
                return "does not match its sha256 (its bytes changed since the commit)"
            rows = where.num_rows(rel)
    except FileNotFoundError:
        return "is missing"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    except pa.ArrowException:
        return "is not a readable Parquet file"
    if row[f"{table}_rows"] is not None and rows != row[f"{table}_rows"]:
        return f"has {rows} rows instead of {row[f'{table}_rows']}"
    snap.verified.add(key)
    return None


@dataclass
class Damage:
    sha: str
    path: str  # the input's original path
    table: str
    file: str  # the part, as the store shows it (a path or a URI)
    problem: str

    def __str__(self) -> str:
        return f"input {self.path} (sha256 {self.sha[:16]}): its {self.table} part {self.file} {self.problem}"


def damage(snap: Snapshot, shas: set[str] | None = None, names=tuple(TABLES)) -> list[Damage]:
    return [
        Damage(r["sha256"], r["path"], t, snap.store.show(r[f"{t}_file"]), problem)
        for r in sorted(snap.rows, key=lambda r: r["sha256"])
        if shas is None or r["sha256"] in shas
        for t in names
        if (problem := _part_problem(snap, r, t)) is not None
    ]


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


# --- writing: analyzer/scale/store_commit.py ------------------------------------------------------------------


def ingest(*args, **kwargs):
    """:func:`analyzer.scale.store_commit.ingest` (imported when called: store_commit imports this module)."""
    from analyzer.scale.store_commit import ingest as commit_ingest

    return commit_ingest(*args, **kwargs)


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
        {"path": r["path"], "format": r["format"], "records": r["records"], "rejected": r["rejected"], "error": None,
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
    duration counts back from the newest exchange start of the whole store (:func:`window`).
    ``inputs``: only these stored inputs (sha256s; their parts are the only files read)."""
    store = locate(store)
    snap = _manifest_or_fail(store)
    verify(snap, None if inputs is None else set(inputs))  # every damaged part named at once
    with _pin(snap):  # every table from this one manifest
        win = window(store, since, until)
        return _load(store, snap, win.since, win.until, sessions, inputs)


def newest(store) -> datetime | None:
    """The newest exchange start in the whole store (None: no exchange has one): a lazy max over one column."""
    got = scan(store, "exchanges").select(pl.col("started").max()).collect().item()
    return got if got is None or got.tzinfo is not None else got.replace(tzinfo=timezone.utc)


def window(store, since: datetime | timedelta | None, until: datetime | timedelta | None) -> Window:
    """``[since, until)`` with absolute bounds: a duration counts back from the store's :func:`newest` start
    (read only when one is given)."""
    w = Window(since, until)
    return w.resolve(newest(store) if w.relative else None)


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
