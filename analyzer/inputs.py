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

from . import ingest_har, ingest_jsonl, ingest_pcap, limits
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
_HAR_START = re.compile(rb'\{\s*"log"\s*:')
SNIFF_HEAD = 65536  # bytes read to recognise the format
SNIFF_LINES = 50  # lines of the head tried as JSONL records when the first one is not one
_JSONL_KIND = re.compile(rb'"kind"\s*:')
CHUNK = 1 << 20
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


class _Gunzip(io.RawIOBase):
    """A gzip member stream whose early end is an end, not an error.

    A ``.gz`` cut while it was written (a log rotated mid-write, a copy that
    stopped) raises EOFError or zlib.error part-way through; GzipFile would
    lose the whole file to it.  Here the bytes decompressed so far read as the
    whole input and ``broken`` says why it ended: the ingester then treats it
    like a plain file cut at that point (a rejected last line, a truncated
    packet record), and read_one adds one anomaly row.  ``seek(0)`` starts
    over (read_one reads the head twice).
    """

    def __init__(self, fh: BinaryIO, compressed: int = 0) -> None:
        super().__init__()
        self.fh = fh
        self.broken: str | None = None
        self.produced = 0
        # a decompression bomb stops here, read as a cut input (analyzer.limits)
        ratio = limits.current().gunzip_ratio
        self.cap = max(ratio * compressed, limits.GUNZIP_FLOOR)
        self.ratio = ratio
        self._restart()

    def _restart(self) -> None:
        self.fh.seek(0)
        self.gz = gzip.GzipFile(fileobj=self.fh, mode="rb")
        self.pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if (offset, whence) == (0, io.SEEK_SET):
            self._restart()
            self.broken = None
            return 0
        if (offset, whence) == (0, io.SEEK_CUR):
            return self.pos
        raise io.UnsupportedOperation("a gzip input can only be rewound")

    def tell(self) -> int:
        return self.pos

    def readinto(self, buf) -> int:  # type: ignore[override]
        if self.broken is not None:
            return 0
        if self.pos >= self.cap:
            self.broken = (f"stopped at {self.pos >> 20} MiB decompressed, more than {self.ratio} times the compressed size "
                           "(a decompression bomb? raise --max-gunzip-ratio if the file is genuine)")
            return 0
        try:
            got = self.gz.read1(min(len(buf), self.cap - self.pos))  # read1: what is decompressed so far comes out before a cut ends it
        except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
            self.broken = str(exc) or type(exc).__name__
            return 0
        n = len(got)
        buf[:n] = got
        self.pos += n
        self.produced = max(self.produced, self.pos)
        return n

    def close(self) -> None:
        try:
            self.gz.close()
            self.fh.close()
        finally:
            super().close()


def open_input(source: str) -> BinaryIO:
    """The file's bytes, decompressed when it is gzip (by magic, not by name)."""
    try:
        fh = open(source, "rb")
    except OSError as exc:
        raise InputError(source, f"cannot open: {exc.strerror}") from None
    head = fh.read(2)
    fh.seek(0)
    if head == b"\x1f\x8b":
        return io.BufferedReader(_Gunzip(fh, os.fstat(fh.fileno()).st_size), CHUNK)  # type: ignore[return-value]
    return fh


def sniff(source: str, head: bytes) -> str:
    if head[:4] in PCAP_MAGIC:
        return "pcap"
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    lines = text.split(b"\n", SNIFF_LINES)
    obj = text.startswith(b"{")
    if obj and _jsonl_record(lines[0]):
        return "jsonl"
    if obj and _HAR_START.match(text):
        return "har"
    # The first line may be the one bad record of a JSONL log, and one bad record must not cost the
    # file: the next lines decide.  (Only whole lines: the last piece of a full head may be cut.)
    whole = lines if len(head) < SNIFF_HEAD else lines[:-1]
    if any(_jsonl_record(line) for line in whole[1:]):
        return "jsonl"
    if not obj:
        raise InputError(source, "not a proxy JSONL log or a HAR file (it does not start with a JSON object)")
    if _HAR_HEAD.search(text):
        return "har"
    if len(lines) == 1 and _JSONL_KIND.search(lines[0]):
        # the first record is longer than the head we sniff (a big request body): judge it by its `kind` key
        return "jsonl"
    raise InputError(
        source,
        "JSON, but neither proxy JSONL (one object per line with a `kind`) nor HAR (`log.entries`)",
    )


def _jsonl_record(line: bytes) -> bool:
    try:
        rec = json.loads(line)
    except (ValueError, RecursionError):  # RecursionError: a line of 100k '[' is hostile input, not a crash
        return False
    return isinstance(rec, dict) and "kind" in rec


def read_one(source: str, fmt: str = "auto", redact_secrets: bool = True, ports: frozenset[int] | None = None) -> Ingested:
    stream = open_input(source)
    gz = stream.raw if isinstance(stream, io.BufferedReader) and isinstance(stream.raw, _Gunzip) else None
    try:
        try:
            head = stream.read(SNIFF_HEAD)
            if gz is not None and gz.broken is not None and not head:
                raise InputError(source, f"cannot decompress: {gz.broken}")
            stream.seek(0)
        except (OSError, EOFError, zlib.error) as exc:
            raise InputError(source, f"cannot decompress: {exc}") from None
        kind = sniff(source, head) if fmt == "auto" else fmt
        if not head.strip():
            log = AnomalyLog(source)
            log.add("input_empty", "file")
            return READERS[kind](source, io.BytesIO(b""), redact_secrets) if kind == "jsonl" else _empty(source, kind, log)
        try:
            if kind == "pcap":
                got = ingest_pcap.read(source, stream, redact_secrets, ports)
            else:
                got = READERS[kind](source, stream, redact_secrets)
        except (OSError, EOFError, zlib.error) as exc:
            raise InputError(source, f"read failed part-way: {exc}") from None
        if gz is not None and gz.broken is not None:
            return _gzip_cut(got, gz)
        return got
    finally:
        stream.close()


def _gzip_cut(got: Ingested, gz: _Gunzip) -> Ingested:
    """The gzip stream ended early: everything decompressed before was read; say where it stopped."""
    log = AnomalyLog(got.source)
    log.add("input_unreadable", "file", f"the gzip stream breaks off after {gz.produced} decompressed bytes ({gz.broken}); everything before was read")
    # Not added to ``rejected``: the record the cut fell in is already counted by the ingester (a bad last
    # line, a truncated packet record), and how many records the lost rest held is unknown.
    got.anomalies = pa.concat_tables([got.anomalies, log.table()])
    return got


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
