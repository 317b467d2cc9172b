"""The store's manifest, ``STORE/inputs.parquet``: its columns, its checksum, one reading of it, and the
check of every part it lists.

The manifest is the commit record (:mod:`analyzer.scale.store`): an input exists when, and only when,
its row is here.  One row per input: the sha256 of its bytes, path, format, records, rejected, notes,
and per table its part's ``<table>_file``, ``_bytes``, ``_rows`` and ``_sha256``.  The sha256 of the
rows themselves is in the Parquet file's metadata, so a flipped byte anywhere makes the manifest
"damaged", never other paths, counts or notes.

Everything that reads or writes a store starts here: the reader (:mod:`analyzer.scale.store`) and the
two writers (:mod:`analyzer.scale.store_commit`, :mod:`analyzer.scale.store_remote`) import this
module, and it imports none of them.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from analyzer import anomalies as anomaly_catalog
from analyzer import tables
from analyzer.errors import StoreError
from analyzer.scale.storage import Local, Remote, locate

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


# --- one reading of the manifest ------------------------------------------------------------------


@dataclass
class Snapshot:
    """One reading of the manifest: every read of an analysis uses the same one (see :func:`analyzer.scale.store.reading`)."""

    store: Local | Remote
    rows: list[dict]  # one per input, deduplicated by sha256, all MANIFEST_SCHEMA columns
    legacy: bool = False  # written by version 1: no checksums (part files derived from the layout)
    duplicates: int = 0  # rows dropped because their sha256 was listed already (version 1's races)
    verified: set = field(default_factory=set)  # parts found intact, by (path, size, mtime, inode)

    def frame(self) -> pl.DataFrame:
        return pl.from_arrow(pa.Table.from_pylist(self.rows, schema=MANIFEST_SCHEMA))

    def exists(self) -> bool:
        return self.store.exists(MANIFEST)


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


# --- the parts it lists, as committed? --------------------------------------------------------------


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


# --- the store's digest key ------------------------------------------------------------------------

# The store's secret, with which the digests it keeps are keyed (analyzer.tables.keyed_digest_expr): made by the
# first ingest into a new store, readable by whoever can read the store, never written into any output.  A store
# made before it keeps unkeyed digests for good: keying only the new inputs would make the same traffic in an old
# and a new capture look different to the cross-capture rules (ingest says so; a new store fixes it).
DIGEST_KEY = "digest.key"
_KEY = re.compile(r"[0-9a-f]{64}")


def key_text(data: bytes | None, where: str) -> str | None:
    if data is None:
        return None
    text = data.decode("ascii", "replace").strip()
    if not _KEY.fullmatch(text):
        raise StoreError(f"{where}: the store's digest key is damaged (not 64 hex digits); restore it from a backup of the store, "
                         "or ingest the captures into a new store (its digests cannot be compared with this key's)")
    return text
