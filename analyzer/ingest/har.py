"""HAR 1.2 ingester (Chrome/Firefox DevTools, Playwright recordHar, mitmproxy hardump).

Producer quirks handled here:
- Entries are written in completion order by several producers; a long SSE
  stream started early is written late.  We order by ``startedDateTime`` (stable
  on the file's order) and keep the file's entry number as the location.
- Bodies may be base64 (``content.encoding == "base64"``; mitmproxy does this for
  bytes that are not valid UTF-8).
- Aborted requests: ``response.status == 0`` (Chrome, mitmproxy), ``_error``
  (Chrome, mitmproxy: the error text), ``_failureText`` (Playwright),
  ``_wasAborted`` (Playwright).
- SSE bodies: browsers keep the body only of requests that finished, and
  mitmproxy's HAR of a streamed response is empty.  An empty or missing body on
  a ``200 text/event-stream`` entry therefore means "not recorded", never "no
  events" (``body_recorded = false`` and a ``har_sse_body_not_recorded`` row).
- No producer keeps per-event times for SSE: events get ``ts = null``.
- Bodies are normally kept decoded (``Content-Encoding`` undone by the browser
  or mitmproxy), but mitmproxy keeps a stream cut mid-way as the raw encoded
  bytes (base64 gzip, ``H4sI…``): a body that is still encoded by its
  Content-Encoding (magic bytes, or a trial decode for br/deflate) is decoded
  as far as it goes (:mod:`analyzer.decode.content_coding`); SSE byte offsets are then
  offsets in the decoded body.  No SSE problem is ever read from encoded bytes.
"""
from __future__ import annotations

import base64
import binascii
import codecs
import io
import json
import os
import re
from datetime import datetime, timedelta, timezone
from typing import BinaryIO

import polars as pl

from analyzer.decode import content_coding, sse_columns
from analyzer.decode.http1 import add_header
from analyzer.ingest import har_typed
from analyzer.ingest.har_typed import ENTRIES as _ENTRIES, Entry, is_log_entries, outside_strings as _outside_strings
from analyzer.ingest.reading import Reading
from analyzer.limits import Limits
from analyzer.anomalies import AnomalyLog
from analyzer.errors import InputError
from analyzer.ingest.timestamps import parse_ts
from analyzer.tables import SSE_MEDIA, Builder, Ingested, media_type
from analyzer.formatted import formatted


# JSON may spell a lone UTF-16 surrogate ("\ud800"); Python decodes it into a str that no UTF-8
# encoder (Arrow's included) accepts.  Producers that escape raw bytes this way exist, so every
# string that becomes a table value is cleaned (SSE bodies are bytes and keep their own
# invalid-UTF-8 accounting).
_SURROGATE = re.compile("[\ud800-\udfff]")


class _Cleaner:
    __slots__ = ("replaced",)

    def __init__(self) -> None:
        self.replaced = 0

    def __call__(self, text: str) -> str:
        if _SURROGATE.search(text) is None:
            return text
        self.replaced += 1
        return _SURROGATE.sub("\ufffd", text)



def _as_is(text: str) -> str:
    return text


PLACEHOLDER_MIME = frozenset({"", "x-unknown"})  # HAR content.mimeType values that mean "no Content-Type"

def _headers(items: object, clean) -> dict[str, str] | None:
    if items is None:
        return {}
    if not isinstance(items, list):
        return None
    out: dict[str, str] = {}
    for h in items:
        if not isinstance(h, dict) or not isinstance(h.get("name"), str):
            return None
        name = clean(h["name"].lower())
        if name.startswith(":"):  # HTTP/2 pseudo-headers (Chrome)
            continue
        add_header(out, name, clean(str(h.get("value", ""))))
    return out


def _body_bytes(content: dict, log: AnomalyLog, where: str) -> bytes | None:
    text = content.get("text")
    if not isinstance(text, str) or text == "":
        return None
    if content.get("encoding") == "base64":
        try:
            return base64.b64decode(text, validate=False)
        except (binascii.Error, ValueError) as exc:
            log.add("har_bad_base64", where, str(exc))
            return None
    return text.encode("utf-8", "surrogatepass")


def _undo_coding(value: str, data: bytes, content: dict, log: AnomalyLog, where: str, ratio: int) -> bytes | None:
    """The body with its Content-Encoding undone when the producer kept it encoded; None: the body
    cannot be decoded, so what it held is unknown (the anomaly row says why)."""
    names, unknown = content_coding.codings(value)
    if unknown is not None:
        if content.get("encoding") != "base64" or _is_text(data):
            return data  # text: the producer kept it decoded (or it never was encoded)
        got = content_coding.Decoder(value, ratio).anomaly()
        if got is not None:
            log.add(got[0], where, got[1])
        return None
    if not content_coding.looks_encoded(value, data, ratio):
        return data
    out, dec = content_coding.decode_all(value, data, ratio)
    got = dec.anomaly()
    if got is not None:
        log.add(got[0], where, f"{got[1]} (the producer kept the body encoded)")
    return None if dec.undecodable else out


def _is_text(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _json_error(line: int, col: int, msg: str) -> str:
    """A JSON error as the note and the rejected entry's row quote it."""
    return f"JSON error at line {line} column {col}: {msg}"


def _not_a_har(source: str, error: str) -> InputError:
    """A document that breaks off before one whole entry: nothing to read."""
    return InputError(source, f"not a complete HAR document ({error}); expected a HAR 1.2 file — was it truncated while being written?")


def load(source: str, stream: BinaryIO, cap: int = Limits.document_bytes) -> tuple[list, tuple[str, bool] | None]:
    """``log.entries``, and for a document that breaks off: (the JSON error, whether an entry was cut).
    ``cap``: the most bytes read whole (``--max-har-mb``)."""
    raw = stream.read(cap + 1)
    if len(raw) > cap:
        raise InputError(
            source,
            f"a HAR document larger than {cap >> 20} MiB: it would be parsed whole (about ten times its size in "
            "memory); raise --max-har-mb if this machine has the memory, or export the HAR in parts",
        )
    text = raw.decode("utf-8", "replace")
    del raw
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        salvaged = _salvage(text)
        error = _json_error(exc.lineno, exc.colno, exc.msg)
        if salvaged is None or not salvaged[0]:  # not one whole entry: nothing to read, the file is unreadable
            raise _not_a_har(source, error) from None
        return salvaged[0], (error, salvaged[1])
    except RecursionError:
        # One entry nested deeper than the parser's stack (hostile, or a tool that recursed) must not
        # cost the others: read entry by entry, the deep one becomes an invalid entry.
        salvaged = _salvage(text)
        if salvaged is None or not salvaged[0]:
            raise InputError(source, "JSON nested too deeply to be a HAR document") from None
        return salvaged[0], (None if not salvaged[1] else ("JSON nested too deeply, and the document breaks off after it", True))
    entries = doc.get("log", {}).get("entries") if isinstance(doc, dict) and isinstance(doc.get("log"), dict) else None
    if not isinstance(entries, list):
        raise InputError(source, "JSON without `log.entries`: expected a HAR 1.2 file")
    return entries, None


def _salvage(text: str) -> tuple[list, bool] | None:
    """The whole entries of a HAR document that breaks off (a browser or proxy that died while exporting,
    a copy cut short): ``log.entries`` is read entry by entry up to the break.  One bad record must not
    cost the file.  Returns (entries, whether the break fell inside an entry), or None when the document
    breaks before its entries begin.  (Reading stops at the break: entries after a corrupt one are not
    searched for, since where the next one starts cannot be told reliably inside broken JSON.)"""
    m = _ENTRIES.search(text)
    if m is None:
        return None
    decode = json.JSONDecoder().raw_decode
    entries: list = []
    pos, n = m.end(), len(text)
    while True:
        pos = _skip_ws(text, pos)
        if pos >= n or text[pos] == "]":  # cut between entries, or the array is whole and the break came after it
            return entries, False
        try:
            entry, pos = decode(text, pos)
        except json.JSONDecodeError:
            return entries, True
        except RecursionError:
            end = _value_end(text, pos)
            if end is None:
                return entries, True
            entry, pos = TOO_DEEP, end  # read() reports it as an invalid entry
        entries.append(entry)
        pos = _skip_ws(text, pos)
        if pos >= n or text[pos] == "]":
            return entries, False
        if text[pos] != ",":
            return entries, True  # something that is no entry: reading stops there
        pos += 1


TOO_DEEP = "nested too deeply to parse"
_STRUCTURE = har_typed.STRUCTURE


def _value_end(text: str, pos: int) -> int | None:
    """Where the object or array starting at ``pos`` ends (brackets counted outside strings, one regex
    pass, no recursion); None when it never closes."""
    depth = 0
    for m in _STRUCTURE.finditer(text, pos):
        c = m.group()
        if c[0] == '"':
            continue
        depth += 1 if c in "{[" else -1
        if depth == 0:
            return m.end()
    return None


def _skip_ws(text: str, pos: int) -> int:
    n = len(text)
    while pos < n and text[pos] in " \t\r\n":
        pos += 1
    return pos


class _NotStreamable(Exception):
    """The document is not one the streaming reader takes as it is: read it whole (load) instead."""


STREAM_CHUNK = 1 << 20


def stream_entries(source: str, stream: BinaryIO, outcome: dict | None = None, cap: int = Limits.document_bytes):
    """``log.entries`` of a HAR, one entry at a time, parsed by the standard library's JSON decoder entry
    by entry: the values are those ``json.loads`` of the whole document gives, and memory holds one entry
    (and a read buffer), not the document.

    A document that breaks off -- cut short (an exporter killed, a disk that filled, a copy cut), or not
    valid JSON after a whole entry -- is read as :func:`load` salvages it, without reading it whole: the
    entries before the break, then ``outcome["broken"]`` is set to (the error ``json.loads`` of the whole
    document gives, as "JSON error at line L column C: message"; whether the break fell inside an entry).
    The error is found by parsing the document with its whole entries stood in for by one ``0``: every
    entry parsed, so the whole document's parser fails at the same place, in the part kept; its line and
    column are counted in the document.

    Raises :class:`_NotStreamable` for the rest, which :func:`load` then reads whole: no `"entries": [`
    (or the first one inside a string, where load's salvage would start), an entry nested too deeply,
    an entries list that is not the document's ``log.entries``."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")  # invalid UTF-8 as load() reads it
    raw_decode = json.JSONDecoder().raw_decode
    buf, eof = "", False
    base = 0  # the document offset (characters) of buf[0]; the newlines before it, and where the last one was
    lines_before, last_newline = 0, -1

    def grow() -> bool:  # at least doubles what is held: one long entry costs linear time, not quadratic
        nonlocal buf, eof
        if eof:
            return False
        if len(buf) > cap:
            raise InputError(
                source,
                f"one HAR entry, or the document around its entries, is larger than {cap >> 20} MiB: it would be held "
                "whole; raise --max-har-mb if this machine has the memory",
            )
        got = stream.read(max(STREAM_CHUNK, len(buf)))
        if not got:
            eof = True
            buf += decoder.decode(b"", final=True)
        else:
            buf += decoder.decode(got)
        return True

    def ws(pos: int) -> int:  # the first non-blank at or after pos, reading on as needed (len(buf) at the end)
        while True:
            n = len(buf)
            while pos < n and buf[pos] in " \t\r\n":
                pos += 1
            if pos < n or not grow():
                return pos

    # where the entries array opens: `"entries": [` outside any string; the document's structure up to
    # there is checked at the end, with everything after the array
    search_from = 0
    first_match = True  # the first `"entries": [` of the text (load's salvage starts at that one)
    while True:
        m = _ENTRIES.search(buf, search_from)
        if m is not None and _outside_strings(buf, m.start()):
            break
        if m is not None:
            search_from, first_match = m.start() + 1, False
            continue
        search_from = max(0, len(buf) - 64)
        if not grow():
            raise _NotStreamable
    head = buf[: m.end()]
    kept = m.end()  # buf[kept:] is the document after the last whole entry (or after the array's `[`)
    count = 0
    inside = None  # where the array breaks off, if it does: inside an entry (True) or between two (False)
    pos = ws(kept)
    while True:
        if pos >= len(buf):
            inside = False  # the document ends between entries
            break
        if buf[pos] == "]":
            if count:  # a comma before it: `[..., ]` is no JSON
                inside = False
            break
        try:
            entry, end = raw_decode(buf, pos)
        except json.JSONDecodeError:
            if grow():
                continue  # an entry the buffer cuts
            inside = True  # an entry that is cut off or broken
            break
        except RecursionError:
            raise _NotStreamable from None
        if end == len(buf) and grow():
            continue  # a number or literal may go on in the next read
        yield entry
        count += 1
        kept = end
        pos = ws(end)
        if pos >= len(buf):
            inside = False
            break
        if buf[pos] == "]":
            break
        if buf[pos] != ",":
            inside = True  # something that is no entry: reading stops there
            break
        if kept > STREAM_CHUNK and kept > len(buf) // 2:  # drop what was read, now and then (not per entry: a copy)
            lines_before += buf.count("\n", 0, kept)
            at = buf.rfind("\n", 0, kept)
            if at >= 0:
                last_newline = base + at
            base += kept
            buf, pos, kept = buf[kept:], pos - kept, 0
        pos = ws(pos + 1)
    while grow():  # the rest of the document
        pass
    if inside is None:
        # the array read must be the document's log.entries (not an `entries` of a page, nor one that a later
        # duplicate key overrides)
        try:
            whole = is_log_entries(head, buf[pos:])
        except (ValueError, RecursionError):
            raise _NotStreamable from None
        if whole is None:
            inside = False  # the document breaks off after its entries
        elif not whole:
            raise _NotStreamable
        else:
            return
    if not first_match:
        raise _NotStreamable
    error = _break_error(head, count > 0, buf, kept, base, lines_before, last_newline)
    if not count:  # not one whole entry: nothing to read, the file is unreadable (as load() says)
        raise _not_a_har(source, error)
    if outcome is not None:
        outcome["broken"] = (error, inside)


def _break_error(head: str, entries: bool, buf: str, kept: int, base: int, lines_before: int, last_newline: int) -> str:
    """The JSON error ``json.loads`` gives for a streamed document that breaks off (:func:`stream_entries`).

    The document is ``head`` (up to its entries array's ``[``), the whole entries read (if ``entries``),
    and ``buf[kept:]``, the rest after them, which starts at document offset ``base + kept``; the document
    before ``base`` held ``lines_before`` newlines, the last at ``last_newline`` (-1: none).  Parsed with
    the entries stood in for by one ``0``, it fails where the whole document does (every entry parsed);
    the line and column are counted in the document.  Raises :class:`_NotStreamable` when it does not fail
    as a JSON error there."""
    stand_in = "0" if entries else ""
    try:
        json.loads(head + stand_in + buf[kept:])
    except json.JSONDecodeError as exc:
        if exc.pos < len(head):  # in the part before the entries (held whole)
            return _json_error(head.count("\n", 0, exc.pos) + 1, exc.pos - head.rfind("\n", 0, exc.pos), exc.msg)
        at = kept + exc.pos - len(head) - len(stand_in)  # in buf
        if at < kept:
            raise _NotStreamable from None
        newline = buf.rfind("\n", 0, at)
        line = lines_before + buf.count("\n", 0, at) + 1
        return _json_error(line, base + at - (base + newline if newline >= 0 else last_newline), exc.msg)
    except (ValueError, RecursionError):
        pass
    raise _NotStreamable


class _EventBodies:
    """The event-stream bodies of the entries, parsed column-wise (:mod:`analyzer.decode.sse_columns`) in
    batches of about PARSE_BYTES: the events and their anomalies are what the reference parser gives,
    each at ``entry N byte K`` (K: where its block's first line starts in the decoded body).

    A batch's events go to the Builder as soon as it is parsed; its anomalies are logged every LOG_BYTES of
    bodies (and at the end), so the anomalies table keeps the order it had when the bodies were parsed in
    batches of LOG_BYTES: the rows of the entries read before, then those of the bodies.  The parse holds
    about six times its batch at its peak (a 32 MiB batch: +200 MiB): parsing 8 MiB at a time takes the
    250k-event HAR's read from a 428-437 to a 366-380 MiB peak, the same tables, events and anomalies in the
    same order (bench/SCALE.md, 2026-12-06 "HAR peak")."""

    PARSE_BYTES = 8 << 20
    LOG_BYTES = 32 << 20

    def __init__(self, b: Builder) -> None:
        self.b = b
        self.keys: list[int] = []
        self.entries: list[int] = []
        self.bodies: list[bytes] = []
        self.size = 0  # bodies' bytes not parsed yet
        self.unlogged = 0  # bodies' bytes since the anomalies were last logged
        self.flagged: list[tuple[str, list[str], str]] = []  # (location, codes, fate) of the rare rows not logged yet
        self.batches = 0  # parses run (for the tests)

    def add(self, xid: int, entry: int, body: bytes) -> None:
        self.keys.append(xid)
        self.entries.append(entry)
        self.bodies.append(body)
        self.size += len(body)
        self.unlogged += len(body)
        if self.unlogged >= self.LOG_BYTES:
            self.flush()
        elif self.size >= self.PARSE_BYTES:
            self._parse()

    def _parse(self) -> None:
        if not self.keys:
            return
        got = sse_columns.parse(self.keys, self.bodies).join(
            pl.DataFrame({"key": self.keys, "entry": self.entries}, schema={"key": pl.Int64, "entry": pl.Int64}),
            on="key", how="left", maintain_order="left",
        ).with_columns(location=formatted("entry {} byte {}", pl.col("entry"), pl.col("start")))
        self.keys, self.entries, self.bodies, self.size = [], [], [], 0
        self.batches += 1
        flagged = got.filter((pl.col("anomalies").list.len() > 0) | (pl.col("fate") == "cut_off"))
        self.flagged.extend(flagged.select("location", "anomalies", "fate").iter_rows())  # (rare rows only)
        self.b.add_events(got.select(pl.col("key").alias("xid"), "location", pl.lit(None, pl.Datetime("us", "UTC")).alias("ts"),
                                     "id", "event", "data", "retry", "fate"))

    def flush(self) -> None:
        """Parse what is left and log the anomalies of every body parsed."""
        self._parse()
        log = self.b.log
        for at, codes, fate in self.flagged:
            for code in codes:
                log.add(code, at)
            if fate == "cut_off":
                log.add("sse_unterminated_event", at)
        self.flagged, self.unlogged = [], 0


def read(source: str, stream: BinaryIO, reading: Reading = Reading()) -> Ingested:
    """A HAR document, streamed entry by entry when it is well-formed: decoded by msgspec
    (:func:`analyzer.ingest.har_typed.entries`), or, for a document msgspec does not read as Python's
    ``json`` would (one that breaks off, ``NaN``, a lone surrogate escape), by ``json``
    (:func:`stream_entries`); else read whole by :func:`load` (its size capped by --max-har-mb) with the
    entries before a break salvaged."""
    if stream.seekable():
        start = stream.tell()
        cap = reading.limits.document_bytes
        if _may_be_whole(stream):
            try:
                return _read(source, har_typed.entries(stream, cap, STREAM_CHUNK), {}, reading)
            except har_typed.Refused:
                stream.seek(start)
        outcome: dict = {}
        try:
            return _read(source, stream_entries(source, stream, outcome, cap), outcome, reading)
        except _NotStreamable:
            stream.seek(start)
    entries, broken = load(source, stream, reading.limits.document_bytes)
    return _read(source, iter(entries), {"broken": broken}, reading)


_WHOLE_END = re.compile(rb"\][ \t\r\n]*\}[ \t\r\n]*\}[ \t\r\n]*\Z")  # `]}}`: log.entries, log and the document closed


def _may_be_whole(stream: BinaryIO) -> bool:
    """False when the file the stream reads does not end as every producer's HAR ends, in ``]}}`` (blanks aside):
    likely a HAR cut short, which the msgspec reader would read up to the cut and then hand to the json reader to
    read again, so the json reader goes first.  True when it does, or when the stream has no file to look at (a
    gzip input: its end is known only once decompressed).  The file's end is read with ``pread``, which moves
    neither the stream nor the progress meter.  Only which reader goes first depends on this, never what is read
    (a whole HAR with other keys after its entries is read by the json reader, as before)."""
    try:
        fd = stream.fileno()
        size = os.fstat(fd).st_size
        tail = os.pread(fd, 64, max(0, size - 64))
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return True
    return _WHOLE_END.search(tail) is not None or not tail


def _read(source: str, entries, outcome: dict, reading: Reading) -> Ingested:
    """The entries in file order, each read as it comes; the exchanges are numbered by start time at the end.
    ``outcome["broken"]``, once the entries are read: (the JSON error, whether it fell inside an entry) for
    a document that breaks off, else missing or None."""
    log = AnomalyLog(source)
    b = Builder(source, log, reading.redact, reading.compact, reading.digest_key)
    ratio = reading.limits.gunzip_ratio
    clean = _Cleaner()
    far_future = datetime.max.replace(tzinfo=timezone.utc)
    order: list[tuple[datetime, int]] = []  # per exchange made: its start (unknown: last), then its entry number
    bodies = _EventBodies(b)
    notes: list[str] = []
    not_recorded = 0
    n = 0
    for n, entry in enumerate(entries, start=1):
        where = f"entry {n}"
        if entry is TOO_DEEP:
            log.add("har_entry_invalid", where, TOO_DEEP)
            continue
        if type(entry) is Entry:
            cl = _as_is  # decoded by msgspec, which refuses lone surrogates (escaped or encoded): nothing to clean
        else:  # as json.loads gave it
            entry, cl = har_typed.typed(entry), clean
        if entry is None:
            log.add("har_entry_invalid", where, "needs `request` and `response` objects")
            continue
        started = parse_ts(entry.startedDateTime)
        if started is None:
            log.add("har_bad_timestamp", where, repr(entry.startedDateTime)[:60])
            started = far_future
        req, resp = entry.request, entry.response
        req_headers = _headers(req.headers, cl)
        resp_headers = _headers(resp.headers, cl)
        if req_headers is None or resp_headers is None or not isinstance(req.method, str):
            log.add("har_entry_invalid", where, "request.method and name/value header lists are required")
            continue
        post = req.postData
        body = cl(post["text"]) if isinstance(post, dict) and isinstance(post.get("text"), str) else None
        row = b.exchange(
            conn=cl(str(entry.connection or f"entry-{n}")),
            location=where,
            started=None if started.year == 9999 else started,
            method=cl(req.method),
            url=cl(req.url) if isinstance(req.url, str) else None,
            req_headers=req_headers,
            request_body=body,
        )
        order.append((started, n))
        status = resp.status
        # (an integer that is no HTTP status, like 2**64, is as unknown as a missing one)
        status = status if isinstance(status, int) and not isinstance(status, bool) and 0 <= status <= 999 else None
        error = entry.error or resp.error or resp.failure or entry.failure
        if status in (0, None):
            b.response(row, None, {})
            row["end_reason"] = "aborted"
        else:
            b.response(row, status, resp_headers)
            row["end_reason"] = "aborted" if entry.aborted else ("error" if error else "complete")
        elapsed = entry.time
        if row["started"] is not None and isinstance(elapsed, (int, float)) and elapsed >= 0:
            try:
                row["ended"] = row["started"] + timedelta(milliseconds=elapsed)
            except (OverflowError, ValueError):  # Infinity (Python's json reads it), or past the year 9999
                row["ended"] = None

        content = resp.content if isinstance(resp.content, dict) else {}
        if row["content_type"] is None:
            mime = content.get("mimeType")
            # "x-unknown" is what browsers write when the response had no Content-Type: a placeholder, not a type
            mime = None if not isinstance(mime, str) or mime.strip().lower() in PLACEHOLDER_MIME else mime
            row["content_type"] = media_type(cl(mime) if mime is not None else None)
        data = _body_bytes(content, log, where)
        undecodable = False
        coding = resp_headers.get("content-encoding")
        if data is not None and coding:
            data = _undo_coding(coding, data, content, log, where, ratio)
            undecodable = data is None
        if row["content_type"] == SSE_MEDIA and row["status"] is not None and 200 <= row["status"] < 300:
            if undecodable:
                row["body_recorded"] = False  # its events are unknown, not absent
                continue
            if data is None:
                row["body_recorded"] = False
                not_recorded += 1
                log.add("har_sse_body_not_recorded", where)
                continue
            if isinstance(content.get("size"), int) and content["size"] > len(data):
                log.add("har_body_truncated", where, f"{len(data)} of {content['size']} bytes recorded")
            bodies.add(row["xid"], n, data)
        elif data is not None and row["status"] is not None:
            b.body(row, data.decode("utf-8", "replace"), where)
    bodies.flush()
    if not_recorded:
        notes.append(
            f"{not_recorded} text/event-stream response(s) have no recorded body: their events are unknown, not absent "
            "(mitmproxy's HAR of streamed responses is empty; browsers keep bodies only of finished requests). "
            "Record with the mitmproxy addon (proxy JSONL) to see every event."
        )
    if clean.replaced:
        notes.append(
            f"{clean.replaced} string(s) held lone UTF-16 surrogates (JSON escapes like \\ud800 that encode no character); "
            "they were replaced by U+FFFD."
        )
    notes.append("HAR keeps no per-event times: SSE events are ordered by their position in the body.")
    b.renumber(sorted(range(len(order)), key=order.__getitem__))  # xid: request-start (capture) order, as the tables say
    records = n
    broken = outcome.get("broken")
    if broken is not None:
        error, inside = broken
        if inside:  # the entry the break fell in is a record, rejected
            records += 1
            log.add("har_entry_invalid", f"entry {records}", f"the document breaks off inside this entry ({error})")
        notes.append(
            f"The HAR document is not complete ({error}): the {n} whole entries before the break were read. "
            "Was it truncated while being written?"
        )
    if not records:
        log.add("input_empty", "file")
    return b.finish("har", records, notes)
