"""A Parquet store of canonical tables, for nightly audits over archives.

Layout (Hive-partitioned by input, so a new file only adds a folder)::

    STORE/exchanges/input=<sha>/part-0.parquet     the canonical tables of one input
    STORE/events/input=<sha>/part-0.parquet
    STORE/messages/input=<sha>/part-0.parquet
    STORE/anomalies/input=<sha>/part-0.parquet
    STORE/inputs.parquet                            one row per stored input: sha256 of its bytes,
                                                    path, format, records, rejected, notes

An input is known by the sha256 of its bytes, not its name: a second run over
an archive with a few new files parses only those, and a renamed file is not
parsed again.  Analysis reads the store lazily; ``since``/``until``/``sessions``
are pushed down into the Parquet scan of ``exchanges`` and the other tables
follow by a semi-join on the exchanges that remain.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Callable

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from . import anomalies as anomaly_catalog
from . import tables
from .errors import AuditError
from .pipeline import read_inputs

TABLES = {
    "exchanges": tables.EXCHANGES,
    "events": tables.EVENTS,
    "messages": tables.MESSAGES,
    "anomalies": anomaly_catalog.SCHEMA,
}
MANIFEST = "inputs.parquet"
MANIFEST_SCHEMA = pa.schema(
    [
        ("sha256", pa.string()),
        ("path", pa.string()),
        ("format", pa.string()),
        ("records", pa.int64()),
        ("rejected", pa.int64()),
        ("notes", pa.string()),  # JSON list
    ]
)


def file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def manifest(store: Path) -> pl.DataFrame:
    p = store / MANIFEST
    if not p.exists():
        return pl.from_arrow(MANIFEST_SCHEMA.empty_table())
    return pl.read_parquet(p)


@dataclass
class IngestReport:
    added: list[str]
    already: list[str]
    unreadable: list[str]
    skipped: list[str]


def ingest(
    paths: list[str],
    store: str | Path,
    fmt: str = "auto",
    redact_secrets: bool = True,
    ports: frozenset[int] | None = None,
    progress: Callable[[str], None] | None = None,
) -> IngestReport:
    """Parse the inputs the store does not hold yet and add their tables."""
    store = Path(store)
    store.mkdir(parents=True, exist_ok=True)
    known = set(manifest(store)["sha256"].to_list())
    sha: dict[str, str] = {}
    already: list[str] = []

    def new(path: str) -> bool:
        try:
            digest = file_sha256(path)
        except OSError:
            return True  # let the reader report it, with its reason
        if digest in known or digest in sha.values():
            already.append(path)
            return False
        sha[path] = digest
        return True

    added: list[str] = []

    def write(part, row: dict) -> None:
        """One input's tables to disk, then its manifest row: a crash loses at most this input."""
        digest = sha[part.source]
        for name, schema in TABLES.items():
            folder = store / name / f"input={digest}"
            folder.mkdir(parents=True, exist_ok=True)
            table = getattr(part, name).cast(schema)
            tmp = folder / "part-0.parquet.tmp"
            pq.write_table(table, tmp, compression="zstd")
            os.replace(tmp, folder / "part-0.parquet")  # a crash never leaves half a file under the real name
        got = {"sha256": digest, "path": row["path"], "format": row["format"], "records": row["records"],
               "rejected": row["rejected"], "notes": json.dumps(row["notes"])}
        merged = pl.concat([manifest(store), pl.DataFrame([got], schema=pl.from_arrow(MANIFEST_SCHEMA.empty_table()).schema)])
        tmp = store / (MANIFEST + ".tmp")
        merged.write_parquet(tmp)
        os.replace(tmp, store / MANIFEST)
        added.append(row["path"])

    # streaming: each input is written as soon as it is read, and only one is held in memory
    got = read_inputs(paths, fmt, redact_secrets, progress, ports, only=new, sink=write)
    return IngestReport(added, already, [e.source for e in got.errors], got.skipped)


def scan(store: Path, name: str) -> pl.LazyFrame:
    """One canonical table of the store, lazily, with the ``input`` (sha256) column of its folder."""
    return pl.scan_parquet(store / name / "**" / "*.parquet", hive_partitioning=True, schema=pl.from_arrow(TABLES[name].empty_table()).schema | {"input": pl.String})


def _manifest_or_fail(store: Path) -> pl.DataFrame:
    man = manifest(store)
    if man.height == 0:
        raise AuditError(f"{store}: no mcp-sse-audit store here (no {MANIFEST}); fill it with: mcp-sse-audit ingest PATH... --store {store}")
    return man


def input_rows(store: str | Path, used: set[str] | None = None) -> list[dict]:
    """The document's ``inputs`` rows for the stored inputs (only those in ``used``, when given), by path."""
    man = _manifest_or_fail(Path(store))
    return [
        {"path": r["path"], "format": r["format"], "records": r["records"], "rejected": r["rejected"], "error": None,
         "notes": json.loads(r["notes"] or "[]")}
        for r in man.sort("path").iter_rows(named=True)
        if used is None or r["path"] in used
    ]


def load(
    store: str | Path,
    since: datetime | None = None,
    until: datetime | None = None,
    sessions: tuple[str, ...] = (),
    inputs: list[str] | None = None,
) -> tuple[dict[str, pa.Table], list[dict]]:
    """The canonical tables held by the store, narrowed lazily; and the inputs they came from.

    ``inputs``: only these stored inputs (sha256s; their folders are the only files read)."""
    store = Path(store)
    _manifest_or_fail(store)

    def scan_(name: str) -> pl.LazyFrame:
        lf = scan(store, name)
        return lf if inputs is None else lf.filter(pl.col("input").is_in(inputs))

    x = scan_("exchanges")
    if since is not None:
        x = x.filter(pl.col("started") >= since)
    if until is not None:
        x = x.filter(pl.col("started") < until)
    if sessions:
        x = x.filter(pl.col("req_session_id").is_in(sessions) | pl.col("resp_session_id").is_in(sessions))
    narrowed = bool(since or until or sessions)
    out = {"exchanges": x.drop("input").collect()}
    chosen = out["exchanges"].select("source", "xid")
    for name in ("events", "messages"):
        out[name] = scan_(name).join(chosen.lazy(), on=["source", "xid"], how="semi").drop("input").collect()
    sources = chosen["source"].unique()
    anomalies = scan_("anomalies")
    if narrowed:  # the anomalies of the inputs that still contribute
        anomalies = anomalies.filter(pl.col("source").is_in(sources.implode()))
    out["anomalies"] = anomalies.drop("input").collect()
    tables_ = {name: df.to_arrow().cast(TABLES[name]) for name, df in out.items()}
    if inputs is not None:  # a partition: its own inputs
        paths = set(manifest(store).filter(pl.col("sha256").is_in(inputs))["path"].to_list())
        used = paths & set(sources.to_list()) if narrowed else paths
        return tables_, input_rows(store, used)
    return tables_, input_rows(store, set(sources.to_list()) if narrowed else None)
