"""Finding, opening and recognising inputs.

Formats are recognised by content, never by file name (``--format`` forces
one); gzip is recognised by its magic bytes.  Directories are walked in sorted
order; inside a directory only files whose names look like captures are taken,
and the others are listed as skipped (never silently).

Only regular files are read from a walked directory: a FIFO there would block
the run until a writer came, a device (``/dev/zero``) would never end.  They are
skipped with their kind as the reason.  Streams the user names are read:
standard input (``-`` or ``/dev/stdin``) and a pipe named on the command line
(process substitution ``<(zcat log.gz)``, a ``mkfifo``) are each copied once to
a temporary file (up to ``STDIN_LIMIT`` bytes) and read from there, so the
readers can seek in them like in any file.  A named device or socket is still
skipped: nothing tells when it ends.
"""
from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import os
import re
import stat
import sys
import tempfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Callable

import pyarrow as pa

from analyzer.ingest import har as ingest_har, jsonl as ingest_jsonl, pcap as ingest_pcap
from analyzer.ingest.reading import Meter, Reading, collector_paused
from analyzer import limits
from analyzer.anomalies import AnomalyLog
from analyzer.errors import InputError, NotACapture
from analyzer.tables import Ingested

CAPTURE_SUFFIXES = (".jsonl", ".ndjson", ".json", ".har", ".log", ".pcap", ".pcapng", ".cap")
READERS: dict[str, Callable[[str, BinaryIO, Reading], Ingested]] = {
    "jsonl": ingest_jsonl.read,
    "har": ingest_har.read,
    "pcap": ingest_pcap.read,
}
_HAR_HEAD = re.compile(rb'^\s*\{\s*"log"\s*:|"entries"\s*:', re.S)
_HAR_START = re.compile(rb'\{\s*"log"\s*:')
SNIFF_HEAD = 65536  # bytes read to recognise the format
_JSONL_KIND = re.compile(rb'"kind"\s*:')
CHUNK = 1 << 20
PCAP_MAGIC = (b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4", b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d", b"\x0a\x0d\x0d\x0a")


STDIN_NAMES = ("-", "/dev/stdin")
STDIN_LIMIT = 8 << 30  # bytes of standard input spooled to disk; past this it is refused (save it to a file)
_KINDS = (
    (stat.S_ISFIFO, "FIFO"), (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
    (stat.S_ISSOCK, "socket"), (stat.S_ISDIR, "directory"),
)


@dataclass
class Collected:
    files: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    walked: set[str] = field(default_factory=set)  # files found by walking a directory (not named by the user)
    reasons: dict[str, str] = field(default_factory=dict)  # skipped path -> why, when it is not "not a capture name"
    unreadable: dict[str, str] = field(default_factory=dict)  # a directory the walk could not list -> why (lost input)


def not_regular(path: str) -> str | None:
    """Why ``path`` must not be opened (``"FIFO"``, ``"character device"``...), or None for a regular file.

    A path that cannot be stat'ed (gone, no permission) is left to the reader, which names the reason."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode):
        return None
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def collect(paths: list[str]) -> Collected:
    out = Collected()

    def skip(full: str, reason: str | None) -> None:
        out.skipped.append(full)
        if reason:
            out.reasons[full] = reason

    for p in paths:
        path = Path(p)
        if p in STDIN_NAMES:
            if not any(f in STDIN_NAMES for f in out.files):  # one standard input, read once
                out.files.append(p)
        elif path.is_dir():
            def lost(exc: OSError) -> None:
                # os.walk skips a folder it cannot list (chmod 000, a vanished mount) unless told: its captures
                # would be missing from a run that looks complete
                where = exc.filename or str(path)
                out.unreadable[str(where)] = (f"a folder that cannot be listed ({exc.strerror or exc}): the captures in it "
                                              "were not read; give the user running the audit read access, or name the files")

            for root, dirs, files in os.walk(path, onerror=lost):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for name in sorted(files):
                    full = str(Path(root) / name)
                    stem = name[:-3] if name.endswith(".gz") else name
                    if not stem.lower().endswith(CAPTURE_SUFFIXES):
                        skip(full, None)
                    elif (why := not_regular(full)) is not None:
                        skip(full, why)
                    else:
                        out.files.append(full)
                        out.walked.add(full)
        elif (why := not_regular(p)) == "FIFO":
            out.files.append(p)  # a pipe the user named (process substitution): read once, like stdin
        elif why is not None:
            skip(p, why)  # named, but reading it could never end (/dev/zero) or never start (a socket)
        else:
            out.files.append(p)  # an explicit file is always tried, whatever its name
    return out


_spooled: dict[str, tuple[object, BinaryIO]] = {}  # stream name -> (what was read, its copy)


def is_stream(source: str) -> bool:
    """Standard input, or a pipe named on the command line: read once, through a spooled copy."""
    return source in STDIN_NAMES or not_regular(source) == "FIFO"


def _spool(source: str) -> BinaryIO:
    """A stream copied once to an anonymous temporary file (seekable; the OS removes it at exit).

    Standard input is keyed by the stdin object, so a test harness that swaps ``sys.stdin`` gets its
    own copy; a named pipe by its name."""
    if source in STDIN_NAMES:
        src = getattr(sys.stdin, "buffer", None)
        if src is None:  # a daemon started without one
            raise InputError("-", "there is no standard input to read")
        key, what = "-", "standard input"
    else:
        key, what, src = source, f"the pipe {source}", None
    held = _spooled.get(key)
    if held is None or (src is not None and held[0] is not src):
        spool = tempfile.TemporaryFile(prefix="mcp-sse-audit-stream-")
        total = 0
        with (open(source, "rb") if src is None else contextlib.nullcontext(src)) as fh:
            while block := fh.read(CHUNK):
                total += len(block)
                if total > STDIN_LIMIT:
                    spool.close()
                    raise InputError(source, f"{what} is larger than {_size_text(STDIN_LIMIT)}: save it to a file and name the file")
                spool.write(block)
        spool.flush()
        if held is not None:
            held[1].close()
        held = _spooled[key] = (src, spool)
    return held[1]


def _spooled_copy(source: str) -> BinaryIO:
    """Its own handle on a stream's copy, at the start (a duplicated descriptor shares the offset)."""
    fh = os.fdopen(os.dup(_spool(source).fileno()), "rb")
    fh.seek(0)
    return fh


def sha256(source: str) -> str:
    """The sha256 of an input's bytes, as read (standard input: its spooled copy, never read a second time)."""
    h = hashlib.sha256()
    with _spooled_copy(source) if is_stream(source) else open(source, "rb") as fh:
        fh.seek(0)
        while block := fh.read(CHUNK):
            h.update(block)
    return h.hexdigest()


def _size_text(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n} bytes"


def size(source: str) -> int:
    """Bytes of an input (of the spooled copy for standard input)."""
    if is_stream(source):
        return os.fstat(_spool(source).fileno()).st_size
    return os.path.getsize(source)


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

    def __init__(self, fh: BinaryIO, compressed: int = 0, ratio: int = limits.Limits.gunzip_ratio) -> None:
        super().__init__()
        self.fh = fh
        self.broken: str | None = None
        self.produced = 0
        # a decompression bomb stops here, read as a cut input (analyzer.limits)
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


class _Metered(io.RawIOBase):
    """A file that tells the meter how far into it reading has got (its furthest position, so the
    head read twice by format detection is not counted twice)."""

    def __init__(self, fh: BinaryIO, meter: Meter) -> None:
        super().__init__()
        self.fh, self.meter, self.furthest = fh, meter, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return self.fh.seekable()

    def readinto(self, b) -> int:  # type: ignore[override]
        n = self.fh.readinto(b)
        pos = self.fh.tell()
        if pos > self.furthest:
            self.furthest = pos
            self.meter.at(pos)
        return n

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.fh.seek(offset, whence)

    def tell(self) -> int:
        return self.fh.tell()

    def fileno(self) -> int:
        return self.fh.fileno()

    def close(self) -> None:
        try:
            self.fh.close()
        finally:
            super().close()


def open_input(source: str, reading: Reading = Reading()) -> BinaryIO:
    """The file's bytes, decompressed when it is gzip (by magic, not by name, within ``reading.limits``), telling
    ``reading.meter`` how far it has been read."""
    try:
        if is_stream(source):
            fh = _spooled_copy(source)  # its own handle; the spool stays for a second read
        else:
            fh = open(source, "rb")
    except InputError as exc:
        raise InputError(source, exc.reason) from None
    except FileNotFoundError:
        raise InputError(source, "does not exist (check the path; it is counted as an unreadable input)") from None
    except OSError as exc:
        raise InputError(source, f"cannot open: {exc.strerror}") from None
    if reading.meter is not None:
        fh = io.BufferedReader(_Metered(fh, reading.meter), CHUNK)  # type: ignore[assignment]
    head = fh.read(2)
    fh.seek(0)
    if head == b"\x1f\x8b":
        return io.BufferedReader(_Gunzip(fh, os.fstat(fh.fileno()).st_size, reading.limits.gunzip_ratio), CHUNK)  # type: ignore[return-value]
    return fh


def sniff(source: str, head: bytes) -> str:
    if head[:4] in PCAP_MAGIC:
        return "pcap"
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    lines = text.split(b"\n")
    obj = text.startswith(b"{")
    if obj and _jsonl_record(lines[0]):
        return "jsonl"
    if obj and _HAR_START.match(text):
        return "har"
    # The first line may be the one bad record of a JSONL log, and one bad record must not cost the
    # file: the next lines decide.  (Only whole lines: the last piece of a full head may be cut.)
    # Every whole line of the head is tried (a run of damaged lines at the start must not cost the file);
    # a cheap look for a `kind` key first, so a head of 64 KiB of garbage costs one regex pass.
    whole = lines if len(head) < SNIFF_HEAD else lines[:-1]
    if any((b"kind" in line or b"\\u" in line) and _jsonl_record(line) for line in whole[1:]):
        return "jsonl"
    if not obj:
        raise InputError(source, "not a proxy JSONL log or a HAR file (it does not start with a JSON object)")
    if _HAR_HEAD.search(text):
        return "har"
    if len(lines) == 1 and _JSONL_KIND.search(lines[0]):
        # the first record is longer than the head we sniff (a big request body): judge it by its `kind` key
        return "jsonl"
    raise NotACapture(
        source,
        "JSON, but neither proxy JSONL (one object per line with a `kind`) nor HAR (`log.entries`)",
    )


def _records_after_first_line(stream: BinaryIO, line_bytes: int) -> bool:
    """Whether the whole lines after the first one, read from the start of ``stream``, hold a proxy JSONL record.

    The first line is passed over without being kept (it may be up to --max-line-mb long; a longer one is
    not a record the reader would take anyway); then up to SNIFF_HEAD bytes of lines are looked at, as the
    head's are."""
    stream.seek(0)
    limit = line_bytes + 1
    passed = 0
    while True:  # bounded: at most `limit` bytes are read before the first newline
        chunk = stream.read(CHUNK)
        if not chunk:
            return False
        at = chunk.find(b"\n")
        if at >= 0:
            after = bytearray(chunk[at + 1 :])
            break
        passed += len(chunk)
        if passed > limit:
            return False
    while len(after) < SNIFF_HEAD:
        more = stream.read(SNIFF_HEAD - len(after))
        if not more:
            break
        after += more
    lines = bytes(after).split(b"\n")
    whole = lines if len(after) < SNIFF_HEAD else lines[:-1]
    return any((b"kind" in line or b"\\u" in line) and _jsonl_record(line) for line in whole)


def _jsonl_record(line: bytes) -> bool:
    try:
        rec = json.loads(line)
    except (ValueError, RecursionError):  # RecursionError: a line of 100k '[' is hostile input, not a crash
        return False
    return isinstance(rec, dict) and "kind" in rec


def read_one(source: str, reading: Reading = Reading()) -> Ingested:
    """One input's canonical tables, read as ``reading`` says (its format, redaction, ports, limits, keys)."""
    fmt = reading.fmt
    stream = open_input(source, reading)
    gz = stream.raw if isinstance(stream, io.BufferedReader) and isinstance(stream.raw, _Gunzip) else None
    try:
        try:
            head = stream.read(SNIFF_HEAD)
            if gz is not None and gz.broken is not None and not head:
                raise InputError(source, f"cannot decompress: {gz.broken}")
            stream.seek(0)
        except (OSError, EOFError, zlib.error) as exc:
            raise InputError(source, f"cannot decompress: {exc}") from None
        if not head.strip() and fmt == "auto":
            # nothing in it (a proxy log of a quiet night): read, with 0 records and a warning, not unreadable -- nothing
            # was lost (analyzer/document/facts.py); its format cannot be told, and does not matter
            log = AnomalyLog(source)
            log.add("input_empty", "file")
            return _empty(source, "unknown", log)
        try:
            kind = sniff(source, head) if fmt == "auto" else fmt
        except InputError:
            # a first line longer than the head (the tail of a record cut by log rotation, a deep or long object
            # without `kind`) decides nothing: the records after it do
            if len(head) < SNIFF_HEAD or not _records_after_first_line(stream, reading.limits.line_bytes):
                raise
            kind = "jsonl"
        finally:
            stream.seek(0)
        if not head.strip():
            log = AnomalyLog(source)
            log.add("input_empty", "file")
            return READERS[kind](source, io.BytesIO(b""), reading) if kind == "jsonl" else _empty(source, kind, log)
        try:
            with collector_paused():
                got = READERS[kind](source, stream, reading)
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
    from analyzer import tables

    return Ingested(
        source, kind, 0,
        tables.EXCHANGES.empty_table(), tables.EVENTS.empty_table(), tables.MESSAGES.empty_table(),
        log.table(), 0,
    )


def concat(parts: list[Ingested]) -> dict:
    """The canonical tables of all parts: Arrow tables, and the events as one Polars frame (the
    ingesters' own, not copied: see tables.Ingested); the messages too when the parts were read for the single pass."""
    import polars as pl

    from analyzer import anomalies, tables

    def cat(attr: str, schema: pa.Schema) -> pa.Table:
        got = [getattr(p, attr) for p in parts]
        return pa.concat_tables(got) if got else schema.empty_table()

    frames = [p.events_polars() for p in parts]
    compact = [f.schema["digest"] == pl.UInt64 for f in frames]
    if any(compact) and not all(compact):
        # parts read compact (Reading.compact) beside parts that were not (an empty input's tables,
        # say): all compact, as the analysis compares them
        frames = [f if c else f.select(tables.compact_events_expr())
                  for f, c in zip(frames, compact)]
    # the messages: the single pass's are Polars frames (tables.Ingested), joined as they are; an Arrow part beside
    # them (an empty input's) joins them as Polars
    held = [p.messages_frame for p in parts]
    if any(isinstance(m, pl.DataFrame) for m in held):
        messages = pl.concat([m if isinstance(m, pl.DataFrame) else pl.from_arrow(m).cast(tables.MESSAGES_POLARS) for m in held],
                             rechunk=False)
    else:
        messages = cat("messages", tables.MESSAGES)
    del held
    return {
        "exchanges": cat("exchanges", tables.EXCHANGES),
        "events": pl.concat(frames, rechunk=False) if frames else pl.from_arrow(tables.EVENTS.empty_table()),
        "messages": messages,
        "anomalies": cat("anomalies", anomalies.SCHEMA),
    }
