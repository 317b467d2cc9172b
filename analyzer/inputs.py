"""Finding, opening and recognising inputs.

Formats are recognised by content, never by file name (``--format`` forces
one); gzip is recognised by its magic bytes.  Directories are walked in sorted
order; inside a directory only files whose names look like captures are taken,
and the others are listed as skipped (never silently).
"""
from __future__ import annotations

import gzip
import io
import json
import os
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Callable

import pyarrow as pa

from . import ingest_har, ingest_jsonl, ingest_pcap
from .anomalies import AnomalyLog
from .errors import InputError
from .tables import Ingested

CAPTURE_SUFFIXES = (".jsonl", ".ndjson", ".json", ".har", ".log", ".pcap", ".pcapng", ".cap")
READERS: dict[str, Callable[[str, BinaryIO, bool], Ingested]] = {
    "jsonl": ingest_jsonl.read,
    "har": ingest_har.read,
    "pcap": ingest_pcap.read,
}
_HAR_HEAD = re.compile(rb'^\s*\{\s*"log"\s*:|"entries"\s*:', re.S)
PCAP_MAGIC = (b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4", b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d", b"\x0a\x0d\x0d\x0a")


@dataclass
class Collected:
    files: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    walked: set[str] = field(default_factory=set)  # files found by walking a directory (not named by the user)


def collect(paths: list[str]) -> Collected:
    out = Collected()
    for p in paths:
        path = Path(p)
        if path.is_dir():
            for root, dirs, files in os.walk(path):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for name in sorted(files):
                    full = str(Path(root) / name)
                    stem = name[:-3] if name.endswith(".gz") else name
                    if stem.lower().endswith(CAPTURE_SUFFIXES):
                        out.files.append(full)
                        out.walked.add(full)
                    else:
                        out.skipped.append(full)
        else:
            out.files.append(p)  # an explicit file is always tried, whatever its name
    return out


def open_input(source: str) -> BinaryIO:
    """The file's bytes, decompressed when it is gzip (by magic, not by name)."""
    try:
        fh = open(source, "rb")
    except OSError as exc:
        raise InputError(source, f"cannot open: {exc.strerror}") from None
    head = fh.read(2)
    fh.seek(0)
    if head == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=fh, mode="rb")  # type: ignore[return-value]
    return fh


def sniff(source: str, head: bytes) -> str:
    if head[:4] in PCAP_MAGIC:
        return "pcap"
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if not text.startswith(b"{"):
        raise InputError(source, "not a proxy JSONL log or a HAR file (it does not start with a JSON object)")
    first_line = text.split(b"\n", 1)[0]
    try:
        rec = json.loads(first_line)
        if isinstance(rec, dict) and "kind" in rec:
            return "jsonl"
    except ValueError:
        pass
    if _HAR_HEAD.search(text[:65536]):
        return "har"
    raise InputError(
        source,
        "JSON, but neither proxy JSONL (one object per line with a `kind`) nor HAR (`log.entries`)",
    )


def read_one(source: str, fmt: str = "auto", redact_secrets: bool = True, ports: frozenset[int] | None = None) -> Ingested:
    stream = open_input(source)
    try:
        try:
            head = stream.read(65536)
            stream.seek(0)
        except (OSError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
            raise InputError(source, f"cannot decompress: {exc}") from None
        kind = sniff(source, head) if fmt == "auto" else fmt
        if not head.strip():
            log = AnomalyLog(source)
            log.add("input_empty", "file")
            return READERS[kind](source, io.BytesIO(b""), redact_secrets) if kind == "jsonl" else _empty(source, kind, log)
        try:
            if kind == "pcap":
                return ingest_pcap.read(source, stream, redact_secrets, ports)
            return READERS[kind](source, stream, redact_secrets)
        except (OSError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
            raise InputError(source, f"read failed part-way: {exc}") from None
    finally:
        stream.close()


def _empty(source: str, kind: str, log: AnomalyLog) -> Ingested:
    from . import tables

    return Ingested(
        source, kind, 0,
        tables.EXCHANGES.empty_table(), tables.EVENTS.empty_table(), tables.MESSAGES.empty_table(),
        log.table(), 0,
    )


def concat(parts: list[Ingested]) -> dict[str, pa.Table]:
    from . import anomalies, tables

    def cat(attr: str, schema: pa.Schema) -> pa.Table:
        got = [getattr(p, attr) for p in parts]
        return pa.concat_tables(got) if got else schema.empty_table()

    return {
        "exchanges": cat("exchanges", tables.EXCHANGES),
        "events": cat("events", tables.EVENTS),
        "messages": cat("messages", tables.MESSAGES),
        "anomalies": cat("anomalies", anomalies.SCHEMA),
    }
