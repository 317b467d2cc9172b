"""Proxy JSONL ingester (format: schemas/proxy-jsonl.schema.json).

One JSON object per line; records of one connection are tied together by
``conn``.  A ``request`` record opens an exchange on its connection (several
per connection with keep-alive); response/sse/body/close records attach to the
connection's current exchange.  Every line is read or rejected with its line
number: a bad line never costs the lines around it.

A ``body`` record with ``"base64": true`` carries the raw body as the proxy
received it (after de-chunking): it is decoded by the response's
``Content-Encoding`` here (:mod:`analyzer.decode.content_coding`), and when the
response is an event stream its events are parsed from it (each with the
record's time, at ``line N byte K`` of the decoded body).  ``sse`` records are always decoded text already --
except from mitm_addon.py before it undid Content-Encoding: it parsed a gzip
stream as SSE and wrote noise.  Such a stream (a coded event stream whose
response record has no ``decoded`` field and whose first record holds
U+FFFD) is read as not recorded, its records rejected (``jsonl_sse_not_decoded``).

A log is read in batches of lines (:mod:`analyzer.ingest.jsonl_typed`): the bulk, its ``sse`` records, reaches
the tables column-wise, whatever the writer's spacing, key order or escapes (the recorder's key order, spaced or
not, by a grammar and one ``read_ndjson`` of the lines it vets, any other by msgspec Structs tagged by ``kind``); every other line -- the other kinds, and a
line neither takes -- goes through the per-line reader (``_Reader.line``), which keeps the connection state and
gets every anomaly (in the single pass's compact reading, the exchange records the compiled core vets come to it
parsed already: ``_Reader.compiled``, the same steps on the values it read; and a batch whose other slow lines change
no connection's state is read by :mod:`analyzer.ingest.jsonl_machine`, the same steps over the batch's columns, its
ended exchanges and its bodies' messages made Arrow by the core and by gathers).  The result is the per-line reader's, row for row
(``read(..., columns=False)``; tests/test_jsonl_columns.py, which also compares the reader before msgspec,
``_grammar``: the recorder's compact ``sse`` lines by a regular expression, :mod:`analyzer.ingest.jsonl_columns`).
"""
from __future__ import annotations

import base64
import binascii
import functools
import re
from concurrent.futures import ThreadPoolExecutor
from itertools import repeat
from datetime import datetime
from typing import BinaryIO

import polars as pl

from analyzer.decode import content_coding
from analyzer.decode.http1 import add_header
from analyzer import compiled, redact
from analyzer.ingest import jsonl_columns, jsonl_machine, jsonl_native, jsonl_typed
from analyzer.ingest.reading import Reading
from analyzer.anomalies import AnomalyLog
from analyzer.errors import NotACapture
from analyzer.decode.jsonrpc import loads, text_safe
from analyzer.decode.sse import parse_all
from analyzer.ingest.timestamps import parse_ts
from analyzer.tables import FRAME_COLUMNS, READ_AHEAD, SSE_MEDIA, VALUE_CHUNK, Builder, Ingested

CLOSE_REASONS = {"eof", "reset", "error", "capture_end"}
PROXY_KINDS = ("request", "response", "sse", "body", "close")
# a close record's "decoding" (mitm_addon.py: how the event stream's Content-Encoding ended)
_DECODING = {"truncated": "body_encoding_truncated", "invalid": "body_encoding_invalid", "over_limit": "body_decoded_over_limit"}


def _headers(value: object) -> dict[str, str] | None:
    if value is None:
        return {}
    if not isinstance(value, dict):
        return None
    # repeated headers as a list, as some proxies write them: joined, or the first of a single-valued one (add_header);
    # a name given twice in other case ("Content-Type" and "content-type") is a repeat too
    # the common case in C: one value per name, every name once in lower case (what add_header makes of it); a
    # recorder's names are lower case already: then the record's own dict is the result, no copy made
    names = list(map(str.lower, value))
    if all(map(isinstance, value.values(), repeat(str))):
        if names == list(value):
            return value
        out = dict(zip(names, value.values()))
        if len(out) == len(value):
            return out
    out = {}
    for k, v in value.items():
        for one in (v if type(v) is list else (v,)):
            add_header(out, str(k).lower(), str(one))
    return out


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _text_safe(value):
    """Lone surrogates (from escapes like \\ud800) replaced in every string of a decoded record."""
    if isinstance(value, str):
        return text_safe(value)
    if isinstance(value, dict):
        return {text_safe(k): _text_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_text_safe(v) for v in value]
    return value


READ_BLOCK = 8 << 20  # bytes per read: the log is split into lines by bytes.split, not one readline per line


BLANK_RUN = 1 << 16  # white space bytes in a row that go as a Blank count instead of empty lines


class Blank(int):
    """That many blank lines in a row (a block of nothing but white space and newlines): counted, never split
    into a list of empty lines -- a gzip of newlines expands to billions of them (the newline bomb)."""


class Lines:
    """A block's lines (each without its newline) as spans of the block's bytes: ``data[starts[i]:starts[i + 1] - 1]``
    for i in ``lo``..``hi``.  What :func:`_lines_in_blocks` gives where the compiled core is built: the newlines are
    found by it (``line_starts``), and no bytes object is made for a line until it is asked for (``lines[i]``: the
    per-line reader's lines); the core's ``sse_lines`` reads the plain ``sse`` records in place.  A list of bytes
    otherwise (the 1M log: 1.2M objects made and freed, about 0.5 s of the reading thread)."""

    __slots__ = ("data", "starts", "lo", "hi", "_at")

    def __init__(self, data: bytes, starts: bytes, lo: int, hi: int, at=None) -> None:
        self.data, self.starts, self.lo, self.hi = data, starts, lo, hi
        self._at = memoryview(starts).cast("Q") if at is None else at

    def __len__(self) -> int:
        return self.hi - self.lo

    def __getitem__(self, i):
        at = self._at
        if type(i) is slice:
            start, stop, step = i.indices(self.hi - self.lo)
            if step != 1:
                raise ValueError("Lines are sliced in order")
            return Lines(self.data, self.starts, self.lo + start, self.lo + max(start, stop), at)
        if i < 0:
            i += self.hi - self.lo
        if not 0 <= i < self.hi - self.lo:
            raise IndexError(i)
        i += self.lo
        return self.data[at[i] : at[i + 1] - 1]

    def __iter__(self):
        data, at = self.data, self._at
        return (data[at[i] : at[i + 1] - 1] for i in range(self.lo, self.hi))

    def nbytes(self) -> int:
        """The lines' bytes, their newlines counted."""
        return self._at[self.hi] - self._at[self.lo]


def _lines_in_blocks(stream: BinaryIO, limit: int, blanks: bool = True):
    """The stream's lines in lists (one list per read block), without their newline; a line longer than
    ``limit`` comes as its length with the newline (an int), and is never held whole: past the limit its
    bytes are counted, not kept.  The lists are made by ``bytes.split`` in C, not a Python call per line.
    A block of blank lines alone comes as their count (:class:`Blank`), found by one strip in C (``blanks``;
    without it every line comes as its bytes, as readline gives them)."""
    read = stream.read
    split = compiled.core.line_starts if compiled.ENABLED else None
    size = min(READ_BLOCK, max(limit, 1 << 16))  # (a block is held twice while split: not much more than the limit)
    carry: list[bytes] = []  # the pieces of the line the last block ended inside (while within the limit)
    carry_len = 0
    pending: list[bytes] = []  # what is left of the block read: pieces around a long blank run, in order
    while True:
        block = pending.pop(0) if pending else read(size)
        if not block:
            if carry_len:  # the last line, without a newline
                yield [b"".join(carry) if carry_len <= limit else carry_len]
            return
        if blanks and not carry_len and not block.strip() and (n := block.count(b"\n")):
            # (no line was open, so each newline ends a blank line; the white space after the last one opens the next)
            tail = block[block.rfind(b"\n") + 1 :]
            carry, carry_len = ([tail] if tail else []), len(tail)
            yield Blank(n)
            continue
        if blanks and not pending and len(block) > BLANK_RUN:
            # records and a long run of blank lines in one block (the start or the end of a newline bomb): the run
            # goes on its own, as a Blank, not as millions of empty lines; cut at newlines, so no line is split
            body = block.rstrip()
            cut = block.find(b"\n", len(body))
            if cut >= 0 and len(block) - cut > BLANK_RUN:
                block, pending = block[: cut + 1], [block[cut + 1 :]]
            elif not carry_len:
                lead = len(block) - len(block.lstrip())
                cut = block.rfind(b"\n", 0, lead)
                if cut > BLANK_RUN:  # the blank run first (a Blank on the next turn), then the records
                    pending = [block[: cut + 1], block[cut + 1 :]]
                    continue
        if split is not None and carry_len <= limit and (cut := block.rfind(b"\n")) >= 0:
            # the compiled core's newline search: the lines as spans of one buffer (Lines), when none is too long
            data = b"".join([*carry, block[: cut + 1]]) if carry_len else block[: cut + 1]
            starts, longest = split(data)
            if longest <= limit:
                tail = block[cut + 1 :]
                del block  # (not held beside its lines while they are read)
                carry, carry_len = ([tail] if len(tail) <= limit else []), len(tail)
                yield Lines(data, starts, 0, len(starts) // 8 - 1)
                continue
            del data, starts
        parts = block.split(b"\n")
        del block
        tail = parts.pop()  # after the block's last newline: the start of the next line (b"" when it ends with one)
        if not parts:  # no newline in this block: the line goes on
            carry_len += len(tail)
            if carry_len <= limit:
                carry.append(tail)
            else:
                carry = []
            continue
        first_len = carry_len + len(parts[0])
        parts[0] = (b"".join(carry) + parts[0]) if first_len <= limit else first_len + 1
        carry, carry_len = ([tail] if len(tail) <= limit else []), len(tail)
        if len(parts) > 1 and max(map(len, parts[1:])) > limit:  # (rare) a whole line too long within the block
            parts[1:] = [p if len(p) <= limit else len(p) + 1 for p in parts[1:]]
        yield parts


def _lines(stream: BinaryIO, limit: int):
    """The stream's lines one by one, each as its bytes (see :func:`_lines_in_blocks`)."""
    for block in _lines_in_blocks(stream, limit, blanks=False):
        yield from block


def _opt_str(rec: dict, key: str) -> tuple[bool, str | None]:
    v = rec.get(key)
    return (v is None or isinstance(v, str)), v


def _noise(rec: dict) -> bool:
    """An sse record parsed from compressed bytes: its text holds U+FFFD (bytes that are not UTF-8)."""
    values = [rec.get(k) for k in ("id", "event", "data", "partial_line")]
    anomalies = rec.get("anomalies")
    if isinstance(anomalies, list):
        values += anomalies
    return any(isinstance(v, str) and "\ufffd" in v for v in values)


def _raw_body(b: Builder, row: dict, data: str, coding: str | None, where: str, ts: datetime | None, lineno: int, ratio: int) -> None:
    """A ``"base64": true`` body record: the raw body, decoded by the response's Content-Encoding."""
    log = b.log
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        log.add("jsonl_bad_record", where, "body `data` with `base64: true` is not base64")
        return
    sse = row["content_type"] == SSE_MEDIA and row["status"] is not None and 200 <= row["status"] < 300
    if coding:
        raw, dec = content_coding.decode_all(coding, raw, ratio)
        got = dec.anomaly()
        if got is not None:
            log.add(got[0], where, got[1])
        if dec.undecodable:
            if sse:
                row["body_recorded"] = False  # its events are unknown, not absent
            return
    if not sse:
        b.body(row, raw.decode("utf-8", "replace"), where)
        return
    # an event stream recorded whole (a proxy that does not parse SSE): each event at its byte offset, as HAR's
    for ev in parse_all(raw):
        at = f"{where} byte {ev.offset}"
        codes = list(ev.anomalies)
        retry = ev.retry if ev.retry is None or ev.retry < 2**63 else None
        if retry is None and ev.retry is not None and "sse_retry_invalid" not in codes:
            codes.append("sse_retry_invalid")
        for code in codes:
            log.add(code, at)
        if ev.fate == "cut_off":
            log.add("sse_unterminated_event", at)
        b.event(row, location=at, ts=ts, event_id=ev.id, event_type=ev.event, data=ev.data, retry=retry, fate=ev.fate, line=lineno)


# exchange rows per Arrow chunk: rows sealed lately are still in the CPU's caches when they are converted (1M events,
# 59k exchanges: 0.40 thread-s in chunks of 4,096 against 0.69-0.75 in one chunk of all of them at the end)
SEAL_ROWS = 4_096


class _Reader:
    """The per-line reader: the connection state machine, and every record the column-wise path does not take."""

    def __init__(self, source: str, reading: Reading) -> None:
        self.log = AnomalyLog(source)
        self.b = Builder(source, self.log, reading.redact, reading.compact, reading.digest_key)
        self.b.seal_chunk = min(SEAL_ROWS, self.b.seal_chunk)  # (tests make the Builder's chunks smaller still)
        self.max_line = reading.limits.line_bytes
        self.ratio = reading.limits.gunzip_ratio
        self.current: dict[str, dict] = {}  # conn -> its open exchange row
        self.records = 0
        self.foreign = 0  # JSON objects of another log: no `kind` of a proxy record, and no `conn`
        self.encodings: dict[int, str] = {}  # xid -> its response's Content-Encoding, for base64 body records
        self.suspect: dict[int, str] = {}  # xid -> "undecided" | "noise": a coded event stream the recorder may have parsed undecoded
        # while set (by _read_batches), each change of ``current``: (line number, conn, xid, or -1 when it closed)
        self.moves: list[tuple[int, str, int]] | None = None
        # how many records each path read: plain sse records column-wise, records msgspec read (jsonl_typed) through
        # the state machine, lines parsed here by json.loads (tests count them: spaced JSON must take the fast paths)
        # the exchange records the compiled core read ahead (compiled: the compact reading alone)
        self.paths = {"columns": 0, "typed": 0, "per_line": 0, "compiled": 0}
        # whether the batches' exchange records are read by the compiled core (jsonl_native.exchange_records): the
        # single pass's compact reading keeps none of the header objects the per-line reader would make
        self.ahead = compiled.ENABLED and reading.compact

    def compiled(self, lineno: int, t: tuple) -> None:
        """An exchange record the compiled core vetted and read ahead (:func:`analyzer.ingest.jsonl_native.exchange_records`):
        one the per-line reader below reads without an anomaly, in the compact reading (no header objects), as the
        values that reading takes of it.  The same steps as :meth:`line`'s for its kind, on those values."""
        self.records += 1
        self.paths["compiled"] += 1
        kind, conn = t[0], t[1]
        current, b = self.current, self.b
        if kind == 0:  # request: (0, conn, ts, method, url, body, session id, Last-Event-ID, protocol version, user agent,
            # the body redacted already or None: jsonl_native.exchange_records)
            self._began(lineno, conn, b.opened(conn, f"line {lineno}", parse_ts(t[2]), t[3], t[4], t[5], t[6], t[7], t[8], t[9], None, t[10]))
            return
        row = current.get(conn)
        if row is None:
            self.log.add("jsonl_orphan_record", f"line {lineno}", f"conn {conn!r}")
            return
        if kind == 1:  # response: (1, conn, status, session id, content type, replay epoch); no Content-Encoding
            b.answered(row, t[2], t[3], t[4], t[5])
        elif kind == 2:  # body: (2, conn, data), not base64
            b.body(row, t[2], f"line {lineno}")
        else:  # close: (3, conn, ts, reason, by), no decoding that ended badly
            row["end_reason"] = t[3]
            row["ended"] = parse_ts(t[2])
            row["end_by"] = t[4]
            self._ended(lineno, conn, row)

    def _began(self, lineno: int, conn: str, row: dict) -> None:
        """``row``, just opened by a request on ``conn``, becomes its current exchange; the one before it, answered and
        still open, ends complete (keep-alive), and is sealed: no record changes it again."""
        prev = self.current.get(conn)
        if prev is not None and prev["end_reason"] == "open" and prev["status"] is not None:
            prev["end_reason"] = "complete"
        self.current[conn] = row
        if prev is not None:
            self.b.seal(prev)
        if self.moves is not None:
            self.moves.append((lineno, conn, row["xid"]))

    def _ended(self, lineno: int, conn: str, row: dict) -> None:
        """``row``, ``conn``'s current exchange, was closed: the conn has none, and the row is sealed."""
        self.current.pop(conn, None)
        self.b.seal(row)
        if self.moves is not None:
            self.moves.append((lineno, conn, -1))

    def line(self, lineno: int, raw: bytes | int | None, rec: dict | tuple | None = None) -> None:
        """``rec``: the line's record as msgspec read it (:mod:`analyzer.ingest.jsonl_typed`: the dict ``json.loads``
        gives, of a line that is UTF-8 and has no lone surrogate), or as the compiled core read it ahead (a tuple:
        :meth:`compiled`), else None: the line (``raw``) is parsed here."""
        if type(rec) is tuple:
            self.compiled(lineno, rec)
            return
        log, b, current, encodings, suspect = self.log, self.b, self.current, self.encodings, self.suspect
        if rec is not None:
            self.records += 1
            self.paths["typed"] += 1
            where = f"line {lineno}"
        else:
            if type(raw) is int:  # a line past the limit, skipped unread: its length
                self.records += 1
                max_line = self.max_line
                log.add("jsonl_line_too_long", f"line {lineno}", f"{raw} bytes; the limit is {max_line >> 20} MiB (--max-line-mb)")
                return
            if not raw.strip():
                return
            self.records += 1
            self.paths["per_line"] += 1
            where = f"line {lineno}"
            if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]  # a UTF-8 byte order mark (Windows editors, PowerShell's Out-File) is not part of the record
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                log.add("jsonl_invalid_utf8", where, f"byte {exc.start}")
                text = raw.decode("utf-8", "replace")
            try:
                rec = loads(text)  # (json.loads' value or error, mostly by msgspec)
            except (ValueError, RecursionError) as exc:
                log.add("jsonl_bad_line", where, str(exc)[:120])
                return
            if not isinstance(rec, dict):
                log.add("jsonl_bad_line", where, f"a JSON {type(rec).__name__}, not an object")
                return
            if "\\u" in text and _SURROGATE_ESCAPE.search(text):
                safe = _text_safe(rec)
                if safe != rec:
                    log.add("text_lone_surrogate", where)
                    rec = safe
        kind = rec.get("kind")
        conn = rec.get("conn")
        if isinstance(conn, int) and not isinstance(conn, bool):
            conn = str(conn)
        if not isinstance(kind, str) or not isinstance(conn, str):
            if kind not in PROXY_KINDS and "conn" not in rec:
                self.foreign += 1
            log.add("jsonl_bad_record", where, "`kind` and `conn` must be strings")
            return
        ts = parse_ts(rec.get("ts"))
        if ts is None and rec.get("ts") is not None:
            log.add("jsonl_bad_timestamp", where, repr(rec.get("ts"))[:60])

        if kind == "request":
            headers = _headers(rec.get("headers"))
            ok_body, body = _opt_str(rec, "body")
            if headers is None or not ok_body or not isinstance(rec.get("method"), str):
                log.add("jsonl_bad_record", where, "request needs `method` (string), `headers` (object), `body` (string or null)")
                return
            self._began(lineno, conn, b.exchange(
                conn=conn,
                location=where,
                started=ts,
                method=rec["method"],
                url=rec.get("url") if isinstance(rec.get("url"), str) else None,
                req_headers=headers,
                request_body=body,
            ))
            return

        if kind not in ("response", "sse", "body", "close"):
            log.add("jsonl_unknown_kind", where, repr(kind)[:40])
            return
        row = current.get(conn)
        if row is None:
            log.add("jsonl_orphan_record", where, f"conn {conn!r}")
            return

        if kind == "response":
            headers = _headers(rec.get("headers"))
            status = rec.get("status")
            if headers is None or type(status) is not int or not 0 <= status < 2**31:
                log.add("jsonl_bad_record", where, "response needs `status` (integer 0..2^31-1) and `headers` (object)")
                return
            b.response(row, status, headers)
            if headers.get("content-encoding"):
                encodings[row["xid"]] = headers["content-encoding"]
                if row["content_type"] == SSE_MEDIA and "decoded" not in rec and content_coding.Decoder(headers["content-encoding"]).active:
                    suspect[row["xid"]] = "undecided"
        elif kind == "sse":
            state = suspect.get(row["xid"])
            if state == "undecided":  # its first record decides
                if _noise(rec):
                    state = suspect[row["xid"]] = "noise"
                else:
                    del suspect[row["xid"]]
            if state == "noise":  # noise: every record of the stream is rejected, the stream's events are unknown
                row["body_recorded"] = False
                log.add("jsonl_sse_not_decoded", where, f"Content-Encoding {content_coding.Decoder(encodings[row['xid']]).label}")
                return
            eid = rec.get("id")
            etype = rec.get("event")
            data = rec.get("data")
            retry = rec.get("retry")
            if (
                (eid is not None and type(eid) is not str)
                or (etype is not None and type(etype) is not str)
                or (data is not None and type(data) is not str)
                or (retry is not None and (type(retry) is not int or not 0 <= retry < 2**63))
            ):
                log.add("jsonl_bad_record", where, "sse needs `data` (string), `id`/`event` (string or null), `retry` (integer 0..2^63-1 or null)")
                return
            if rec.get("truncated") is True:
                fate = "cut_off"
                log.add("sse_unterminated_event", where)
            elif rec.get("dispatched") is False or data is None:
                fate = "no_data"
            else:
                fate = "dispatched"
            if eid is not None and "\x00" in eid:
                log.add("sse_id_contains_nul", where)
                eid = None
            # (the bulk of a log's sse records never comes here: jsonl_columns reads them column-wise)
            b.event(row, location=None, ts=ts, event_id=eid, event_type=etype, data=data or "", retry=retry, fate=fate, line=lineno)
        elif kind == "body":
            data = rec.get("data")
            if not isinstance(data, str):
                log.add("jsonl_bad_record", where, "body needs `data` (string)")
                return
            if rec.get("base64") is True:
                _raw_body(b, row, data, encodings.get(row["xid"]), where, ts, lineno, self.ratio)
                return
            b.body(row, data, where)
        else:  # close
            reason = rec.get("reason")
            if not isinstance(reason, str) or reason not in CLOSE_REASONS:
                log.add("jsonl_bad_record", where, f"close `reason` must be one of {sorted(CLOSE_REASONS)}")
                reason = "error"
            row["end_reason"] = reason
            row["ended"] = ts
            by = rec.get("by")
            row["end_by"] = by if by in ("client", "server") else None
            code = _DECODING.get(rec.get("decoding")) if isinstance(rec.get("decoding"), str) else None
            if code is not None:  # the recorder undid the stream's Content-Encoding and it did not end complete
                detail = rec.get("decoding_detail")
                log.add(code, where, f"{detail[:200] if isinstance(detail, str) else ''} (as the recorder decoded it)".lstrip())
            self._ended(lineno, conn, row)


def read(source: str, stream: BinaryIO, reading: Reading = Reading(), columns: bool = True) -> Ingested:
    """``columns=False``: every line through the per-line reader (the reference the column-wise path is tested against)."""
    return _read(source, stream, reading, columns)[0]


def _grammar(batch: list) -> tuple[pl.DataFrame, dict]:
    """The reader before msgspec: the recorder's compact ``sse`` lines by a regular expression, nothing else typed
    (kept for tests/test_jsonl_columns.py, which compares it with today's)."""
    return jsonl_columns.sse_rows(batch), {}


def _read(source: str, stream: BinaryIO, reading: Reading, columns: bool, decode=None) -> tuple[Ingested, dict[str, int]]:
    """The reading, and how many records each path read (``_Reader.paths``); ``decode``: how a batch's lines are
    decoded ahead of the per-line reader (:func:`analyzer.ingest.jsonl_typed.decode`, or :func:`_grammar`)."""
    r = _Reader(source, reading)
    limit = reading.limits.line_bytes
    if columns:
        _read_batches(r, _lines_in_blocks(stream, limit), decode or jsonl_typed.decode)
    else:
        for lineno, raw in enumerate(_lines(stream, limit), start=1):
            r.line(lineno, raw)
    for row in r.current.values():
        if row["end_reason"] == "open" and row["status"] is not None and row["content_type"] != "text/event-stream":
            row["end_reason"] = "complete"
    if r.records == 0:
        r.log.add("input_empty", "file")
    elif r.foreign == r.records:
        # a client's or a server's own log in JSON Lines (walked into from a folder of captures: skipped, with this)
        raise NotACapture(source, f"JSON Lines, but none of its {r.records} records is a proxy record (a `kind` of "
                                  f"{', '.join(PROXY_KINDS)})")
    return r.b.finish("jsonl", r.records), r.paths


BATCH_LINES = VALUE_CHUNK
# a batch of long lines stays about this small: its bytes are held twice (the lines, their Polars column),
# on top of at most one line of --max-line-mb (a longer line is an int, not its bytes)
BATCH_BYTES = 16 << 20


def _batches(blocks):
    """The lines of ``blocks`` in batches of at most BATCH_LINES lines and about BATCH_BYTES bytes (a run of
    blank lines passes as its count)."""
    for block in blocks:
        if type(block) is Blank:
            yield block
            continue
        at, n = 0, len(block)
        while at < n:
            end = min(n, at + BATCH_LINES)
            batch = block[at:end]
            if type(batch) is Lines:
                size = batch.nbytes()
            else:
                try:
                    size = sum(map(len, batch))  # (in C: a generator with a type test per line was 0.3 s of a 1.2M-line read)
                except TypeError:  # a line too long to keep is its length (an int)
                    size = sum(len(r) for r in batch if type(r) is bytes)
            if size > BATCH_BYTES and len(batch) > 1:  # long lines: fewer of them per batch
                end = at + max(1, int(len(batch) * BATCH_BYTES / size))
                batch = block[at:end]
            yield batch
            at = end


def _with_columns(batches, decode):
    """Each batch with what ``decode`` makes of it (its column-wise ``sse`` rows, the other records msgspec read); the
    next batch's are decoded in a worker thread while the caller reads this one per line.  ``decode`` depends on the
    lines alone (not on the reader's state), and the Polars part of it releases the GIL: the per-line reader
    (Python) and the column-wise work of the next batch overlap.  One batch is decoded ahead,
    and the one after it is read meanwhile (so at most three are held: the caller's, the one in the
    worker, the one read); an error in the worker is raised here, at its batch."""
    with ThreadPoolExecutor(1, thread_name_prefix="jsonl-columns") as pool:
        ahead = None
        for batch in batches:
            if type(batch) is Blank:  # nothing to decode: it keeps its place between the batches
                if ahead is not None:
                    yield ahead[0], ahead[1].result()
                    ahead = None
                yield batch, None
                continue
            job = pool.submit(decode, batch)
            if ahead is not None:
                yield ahead[0], ahead[1].result()
            ahead = (batch, job)
        if ahead is not None:
            yield ahead[0], ahead[1].result()


class _Deferred:
    """Stands in for the anomaly log while the slow lines of a batch are read ahead of its plain ``sse``
    lines: each call is kept with the batch position of the line that made it, and replayed into the
    log in line order once the plain lines' own anomalies (orphans) are known, so the log gets the
    calls the per-line reader would have made, in its order."""

    __slots__ = ("at", "calls")

    def __init__(self) -> None:
        self.at = 0
        self.calls: list[tuple[int, str, str, str]] = []

    def add(self, code: str, location: str, detail: str = "") -> None:
        self.calls.append((self.at, code, location, detail))


_TAKEN = {"pos": pl.UInt32, "xid": pl.Int64}


def _in_order(r: _Reader, batch: list, fast: pl.DataFrame, records: dict, first: int, start: int) -> pl.DataFrame:
    """Lines ``start``.. of the batch one at a time: each plain ``sse`` record gets its connection's
    exchange as the per-line reader would find it there, or goes to the per-line reader (no exchange
    open, or a stream whose first record decides whether it is noise)."""
    current, suspect, line = r.current, r.suspect, r.line
    conn_at = [None] * len(batch)
    for p, c in zip(fast["pos"].to_list(), fast["conn"].to_list()):
        conn_at[p] = c
    take, xids = [], []
    for i in range(start, len(batch)):
        c = conn_at[i]
        if c is not None:
            row = current.get(c)
            if row is not None and row["xid"] not in suspect:
                take.append(i)
                xids.append(row["xid"])
                continue
        rec = records.get(i)
        line(first + i, batch[i] if rec is None else None, rec)
    return pl.DataFrame({"pos": take, "xid": xids}, schema=_TAKEN)


def _hand_out(r: _Reader, batch: list, fast: pl.DataFrame, records: dict, first: int, xs: pl.DataFrame | None = None) -> pl.DataFrame:
    """Reads the batch's slow lines and says which exchange each plain ``sse`` record of ``fast`` belongs
    to (``pos``, ``xid``): the records the per-line reader would have attached to an exchange.

    The connection state only changes at slow lines (a request opens an exchange on its conn, a close
    ends it), so the slow lines are read first, in order, with each change noted, and every plain
    record then takes the exchange its conn had at its line by one as-of join -- not a Python step per
    record.  What the per-line reader would have done otherwise is kept exactly: a plain record with no
    exchange open is an orphan, its anomaly put among the slow lines' ones in line order
    (:class:`_Deferred`); and from a slow line that makes a stream suspect (a coded event stream whose
    first record decides whether it is noise) on, the batch is read line by line (:func:`_in_order`)."""
    n = len(batch)
    slow = _slow(n, fast)
    # the exchange records, parsed by the compiled core (here: the decoder's thread is the busier); read as columns by
    # jsonl_machine.run when every other slow line is a plain record that changes no connection's state, else one by one
    if r.ahead and slow and not r.suspect:
        if xs is None:  # (not parsed ahead by the decoder: _exchanges_ahead)
            xs = jsonl_native.exchange_frame(batch, slow, r.b.redact)
        if not jsonl_machine.settled(batch, slow, xs.get_column("pos").to_list(), records):
            xs = None
    if r.ahead and slow and xs is None:
        records = records | jsonl_native.exchange_records(batch, slow, r.b.redact)
    if xs is None and (r.suspect or fast.height == 0):
        return _in_order(r, batch, fast, records, first, 0)
    # the state the batch starts from, for the conns its plain records name
    conns = fast["conn"].unique().to_list()
    current = r.current
    before = [(c, current[c]["xid"]) for c in conns if c in current]
    real, deferred, suspect, line = r.log, _Deferred(), r.suspect, r.line
    r.log = r.b.log = deferred
    r.moves = moves = []
    stop = n
    try:
        if xs is not None:
            jsonl_machine.run(r, batch, slow, xs, records, first, deferred)
        else:
            for i in slow:
                deferred.at = i
                rec = records.get(i)  # (a line read ahead is not made into bytes)
                line(first + i, batch[i] if rec is None else None, rec)
                if suspect:  # a coded event stream opened: what its records are depends on the first of them
                    stop = i + 1
                    break
    finally:
        r.log = r.b.log = real
        r.moves = None
    if fast.height == 0:  # (no plain record to attach: the slow lines' anomalies, in their order)
        for _, code, location, detail in deferred.calls:
            real.add(code, location, detail)
        return pl.DataFrame(schema=_TAKEN)
    changes = pl.DataFrame(
        {"pos": [-1] * len(before) + [m[0] - first for m in moves],
         "conn": [c for c, _ in before] + [m[1] for m in moves],
         "xid": [x for _, x in before] + [m[2] for m in moves]},
        schema={"pos": pl.Int64, "conn": pl.String, "xid": pl.Int64},
    )
    got = (
        fast.lazy()
        .select(pl.col("pos").cast(pl.Int64), "conn")
        .filter(pl.col("pos") < stop)
        # (both sorted by pos: the plain records in line order; the changes as they came, after the state before)
        .join_asof(changes.lazy(), on="pos", by="conn", strategy="backward", check_sortedness=False)
        .collect()
    )
    attached = pl.col("xid").is_not_null() & (pl.col("xid") >= 0)
    orphans = got.filter(~attached)
    calls = deferred.calls
    if orphans.height:  # (a log that starts inside a stream) each one as the per-line reader has it
        calls += [(p, "jsonl_orphan_record", f"line {first + p}", f"conn {c!r}") for p, c in orphans.select("pos", "conn").iter_rows()]
        r.records += orphans.height
        calls.sort(key=lambda call: call[0])  # stable: a line's own anomalies keep their order
    for _, code, location, detail in calls:
        real.add(code, location, detail)
    taken = got.filter(attached).select(pl.col("pos").cast(pl.UInt32), "xid")
    if stop < n:
        taken = pl.concat([taken, _in_order(r, batch, fast, records, first, stop)])
    return taken


def _redacted(decode, lines: list) -> tuple[pl.DataFrame, dict]:
    """``decode``, and the data of the events the compiled reader took (their digests and notifications' methods are
    made from the raw text already) redacted as the Builder would redact it at the end (``redact.column``, value by
    value), in the worker thread: the regex passes over the events' text run beside the per-line reader, not after
    it (1M events: about a second of the read's wall time).  ``_clean`` marks them; ``_raw`` keeps the raw text of
    an event whose redaction changed it, which the JSON-RPC pass reads (:meth:`analyzer.tables.Builder.finish`)."""
    fast, records = decode(lines)
    if "digest" not in fast.columns or not fast.height:  # (the Python paths: finish redacts)
        return fast, records
    data = fast.get_column("data")
    took = fast.get_column("digest").is_not_null()
    idx = took.arg_true()
    part = data.gather(idx) if idx.len() < data.len() else data
    done = redact.column(part)
    raw = pl.repeat(None, fast.height, dtype=pl.String, eager=True)
    if done is not part:
        changed = done.ne_missing(part)
        raw = raw.scatter(idx.filter(changed), part.filter(changed))
        data = done if part is data else data.clone().scatter(idx, done)
    return fast.with_columns(data=data, _clean=took, _raw=raw), records


def _slow(n: int, fast: pl.DataFrame) -> list[int]:
    """The positions of a batch's ``n`` lines that ``fast`` (its plain ``sse`` records, by ``pos``) does not hold."""
    return pl.repeat(True, n, eager=True).scatter(fast["pos"], False).arg_true().to_list()


def _exchanges_ahead(decode, redact_bodies: bool, lines: list) -> tuple:
    """``decode``, and for a batch whose lines are mostly exchange records (fewer plain ``sse`` records than other
    lines: the decoder's own pass was short) the core's parse of them too (``jsonl_native.exchange_frame``), in the
    worker thread: a log of POST exchanges (rpc-post, 2M records: 0.9 s of the core's parse) then reads on both cores.
    A batch of events leaves them to the main thread, where :func:`_hand_out` parses them: there the decoder is the
    busier (the 1M bench log)."""
    fast, records = decode(lines)
    if fast.height * 2 >= len(lines):
        return fast, records
    slow = _slow(len(lines), fast)
    if not slow:
        return fast, records
    return fast, records, jsonl_native.exchange_frame(lines, slow, redact_bodies)


def _read_batches(r: _Reader, blocks, decode) -> None:
    """The log in batches: its plain ``sse`` records column-wise (:mod:`analyzer.ingest.jsonl_columns`), the rest per line.

    A plain sse record attaches to its connection's current exchange as the per-line reader would
    attach it: the state (which exchange is open on a conn, whether its stream is suspect) only
    changes at lines the per-line reader reads, so the slow lines are read first and each plain record
    then takes, by an as-of join, either its exchange or -- no exchange open -- the per-line reader's
    orphan anomaly (:func:`_hand_out`)."""
    b = r.b
    first = 1
    if b.redact and b.compact:  # the single pass: its plain events' data redacted in the worker thread (_redacted)
        decode = functools.partial(_redacted, decode)
    if r.ahead:  # the exchange records of a batch of few events parsed in the worker thread too (_exchanges_ahead)
        decode = functools.partial(_exchanges_ahead, decode, b.redact)
    for batch, decoded in _with_columns(_batches(blocks), decode):
        if type(batch) is Blank:  # blank lines are no records: only the line numbers after them move
            first += batch
            continue
        fast, records, *ahead = decoded
        frames_before = len(b.event_frames)
        taken = _hand_out(r, batch, fast, records, first, *ahead)
        del records
        r.records += taken.height
        r.paths["columns"] += taken.height
        if taken.height:
            if taken.height == fast.height and taken.get_column("pos").equals(fast.get_column("pos")):
                plan = fast.with_columns(taken.get_column("xid")).lazy()  # (every plain record attached: no join)
            else:
                plan = fast.lazy().join(taken.lazy(), on="pos", maintain_order="left")
            got = (  # (one plan: the batch's columns made in one pass)
                plan.with_columns(
                    _line=pl.col("pos").cast(pl.Int64) + first,
                    location=pl.lit(None, pl.String),  # "line N", from _line, made for the whole table (tables.Builder)
                    fate=pl.when(pl.col("data").is_null()).then(pl.lit("no_data")).otherwise(pl.lit("dispatched")),
                    data=pl.col("data").fill_null(""),
                )
                .select(*FRAME_COLUMNS, "_line", *(k for k in READ_AHEAD if k in fast.columns))
                .collect()
            )
            got = b.coded(got)
            # the per-line reader's events of this batch and these, in line order: as it would have appended them all
            b.flush_values()
            mine = b.event_frames[frames_before:]
            if mine and got.width > mine[0].width:  # (digests and methods the compiled reader read ahead: none for these)
                mine = [f.with_columns(**{k: pl.lit(None, t) for k, t in READ_AHEAD.items() if k in got.columns}) for f in mine]
            got = got.cast(mine[0].schema) if mine else got
            b.event_frames[frames_before:] = [pl.concat([*mine, got]).sort("_line", maintain_order=True) if mine else got]
        first += len(batch)
