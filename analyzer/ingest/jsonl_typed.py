"""Typed decoding of the proxy JSONL records with msgspec: the fast half of :mod:`analyzer.ingest.jsonl`.

The ``sse`` lines of a batch that the recorder's grammar does not take (another key order, escapes it leaves out:
:func:`decode`) are decoded by one msgspec ``Decoder`` of five ``Struct`` s tagged by ``kind`` (schemas/
proxy-jsonl.schema.json), in C, whatever the writer's JSON formatting: spacing (``", "`` / ``": "``), key order,
escapes, CRLF.  msgspec is strict where Python's ``json`` is strict and stricter elsewhere (``"id": 5`` is no
string, ``retry: 1.0`` no integer, a lone surrogate escape, ``NaN``, a number past a float are errors), and it
never coerces; a line it refuses -- and a line whose reading needs one of the per-line reader's rules (a flag,
a NUL in an id, a time Polars and Python would read differently, a line that is not UTF-8) -- goes through the
per-line reader (``jsonl._Reader.line``) as before, so every anomaly and its line number stay the per-line
reader's (tests/test_jsonl_columns.py compares the readers).

* ``sse`` records become columns (one C-level ``map`` per field over the batch's Structs: a ``zip(*rows)``
  transpose was 8x slower) and reach the tables column-wise, as the recorder's compact ones did before through
  a regular expression (:func:`analyzer.ingest.jsonl_columns.sse_rows`, kept for the tests).
* the other kinds (request, response, body, close: a fifth of a log's lines) come back from :func:`typed` as the
  dict ``json.loads`` would have given, for the per-line reader's connection state machine; :func:`decode` leaves
  them to the per-line reader's ``json.loads`` (cheaper there, bench/SCALE.md 2026-12-05), and the tests keep
  :func:`typed` equal to the per-line reader.

Why not ``Decoder.decode_lines`` over the batch's bytes: it skips blank lines and accepts two objects on one line,
so its rows would need recounting to keep line numbers true, and it was no faster than a ``map`` of ``decode``
over the lines the block reader has already split (0.9 µs a line either way).  A batch whose map raises is decoded
again line by line.

Two differences from ``json.loads`` decide what may be taken here.  A field a Struct does not name is skipped
unread, and a skipped string's UTF-8 is not checked: ``sse`` Structs forbid unknown fields (a line with one goes
to the per-line reader), and the other kinds' lines are checked as UTF-8 here (the schema lets them carry extra
fields, the recorder's ``client_addr``).  And the per-line reader keeps a field that is absent apart from one that
is null in one place (a response's ``decoded``): that one field is ``UNSET`` when absent, and left out of the dict.
"""
from __future__ import annotations

from itertools import compress, repeat
from operator import attrgetter
from typing import Annotated, Any, Union

import msgspec
import polars as pl

from analyzer import compiled
from analyzer.ingest import jsonl_columns, jsonl_native
from analyzer.tables import READ_AHEAD
from analyzer.ingest.jsonl_columns import COLUMNS, _TS

UNSET = msgspec.UNSET


class Sse(msgspec.Struct, tag_field="kind", tag="sse", forbid_unknown_fields=True):
    conn: str
    ts: Union[str, None] = None
    id: Union[str, None] = None
    event: Union[str, None] = None
    data: Union[str, None] = None
    retry: Union[Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)], None] = None
    # ``truncated: true`` or ``dispatched: false``: the per-line reader reads the record (cut off: an anomaly; not
    # dispatched: another fate); null is read as absent there too, and a value of another type is refused here
    truncated: Union[bool, None] = None
    dispatched: Union[bool, None] = None


class Request(msgspec.Struct, tag_field="kind", tag="request"):
    conn: str
    method: str
    ts: Union[str, None] = None
    url: Any = None  # (the per-line reader keeps a URL that is text, and reads anything else as none)
    headers: Union[dict[str, Union[str, list[str]]], None] = None
    body: Union[str, None] = None


class Response(msgspec.Struct, tag_field="kind", tag="response"):
    conn: str
    status: Annotated[int, msgspec.Meta(ge=0, le=2**31 - 1)]
    ts: Union[str, None] = None
    headers: Union[dict[str, Union[str, list[str]]], None] = None
    decoded: Any = UNSET  # (absent and null differ here: "decoded" not in rec)


class Body(msgspec.Struct, tag_field="kind", tag="body"):
    conn: str
    data: str
    ts: Union[str, None] = None
    base64: Any = None


class Close(msgspec.Struct, tag_field="kind", tag="close"):
    conn: str
    ts: Union[str, None] = None
    reason: Any = None
    by: Any = None
    decoding: Any = None
    decoding_detail: Any = None


_DECODE = msgspec.json.Decoder(Union[Sse, Request, Response, Body, Close]).decode
# what a line msgspec refuses raises (a too-long line is its length, an int: TypeError)
_REFUSED = (msgspec.DecodeError, RecursionError, TypeError)
_OTHER = (Request, Response, Body, Close)
_KIND = {Request: "request", Response: "response", Body: "body", Close: "close"}
_ASDICT = msgspec.structs.asdict
_SSE_FIELDS = ("conn", "ts", "id", "event", "data", "retry", "truncated", "dispatched")
# Python's json and msgspec both refuse nesting past the recursion limit, counted from the depth of the thread's
# stack, which differs between the worker that decodes here and the per-line reader: a line that may nest this
# deep (brackets counted, in strings too) is left to the per-line reader.  (An accepted sse line nests no value.)
_DEEP = 500


def _decoded(lines: list) -> list:
    """Each line's Struct, or None where msgspec refuses it."""
    try:
        return list(map(_DECODE, lines))
    except _REFUSED:
        pass
    out = []
    for raw in lines:
        try:
            out.append(_DECODE(raw))
        except _REFUSED:
            out.append(None)
    return out


def _record(got, raw: bytes) -> dict | None:
    """A request/response/body/close Struct as the dict ``json.loads`` gives for its line (the fields the
    per-line reader reads), or None when the line is not UTF-8 (msgspec skipped an unknown field unchecked)."""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if raw.count(b"[") + raw.count(b"{") >= _DEEP:
        return None
    rec = _ASDICT(got)
    rec["kind"] = _KIND[type(got)]
    if rec.get("decoded", None) is UNSET:
        del rec["decoded"]
    return rec


_SSE_SCHEMA = {"pos": pl.UInt32, "conn": pl.String, "ts": pl.String, "id": pl.String, "event": pl.String, "data": pl.String,
               "retry": pl.Int64, "truncated": pl.Boolean, "dispatched": pl.Boolean}


def decode(lines: list) -> tuple[pl.DataFrame, dict[int, dict]]:
    """The batch decoded: the ``sse`` lines by the compiled reader where it is built (:mod:`analyzer.ingest.jsonl_native`:
    any writer's JSON, with each event's digest and notification method: :data:`analyzer.tables.READ_AHEAD`), else the
    ``sse`` lines in the recorder's key order, with any spacing, by its grammar and one
    ``read_ndjson``, column-wise in Polars (:func:`analyzer.ingest.jsonl_columns.sse_frame`: off the GIL, while the
    per-line reader runs), every other line that may be an ``sse`` record by msgspec (:func:`typed`).  On the recorder's logs msgspec alone cost 15 % more CPU than this
    (1M events: 14.9-15.5 against 12.9-13.4 CPU-seconds for the read), its Python work on the GIL; another writer's
    ``sse`` lines (spacing, key order) are msgspec's.  The other kinds' lines are left to the per-line reader."""
    # (where: the lines that may be sse records of another shape; the other kinds go to the per-line reader as they are
    # (its json.loads of a request or response line is cheap beside its state machine: typing them by msgspec cost 1.5 s
    # of CPU and saved the per-line reader 0.3 s on the 1M-event log)
    native = compiled.ENABLED
    fast, where = jsonl_native.sse_frame(lines) if native else jsonl_columns.sse_frame(lines)
    if not where:
        return fast, {}
    more, records = typed([lines[i] for i in where])
    if more.height:
        more = more.with_columns(pos=pl.Series(where, dtype=pl.UInt32).gather(more["pos"]))
        if native:  # (their digests and JSON-RPC: the Builder's, at the end)
            more = more.with_columns(**{k: pl.lit(None, READ_AHEAD[k]) for k in ("digest", "_method")})
        fast = pl.concat([fast, more]).sort("pos")
    return fast, {where[i]: rec for i, rec in records.items()}


def typed(lines: list) -> tuple[pl.DataFrame, dict[int, dict]]:
    """The batch's plain ``sse`` records as columns (``pos``: index in ``lines``, and :data:`COLUMNS`), and the
    other records msgspec read, by index, as dicts for the per-line reader's state machine.  Every line in
    neither goes through the per-line reader whole."""
    got = _decoded(lines)
    # (sorted by type with C-level maps: a Python loop over the lines cost as much as their decoding)
    is_sse = list(map(isinstance, got, repeat(Sse)))
    sse = list(compress(got, is_sse))
    sse_pos = list(compress(range(len(got)), is_sse))
    records = {i: rec for i in compress(range(len(got)), map(isinstance, got, repeat(_OTHER)))
               if (rec := _record(got[i], lines[i])) is not None}
    del got, is_sse
    cols = {name: list(map(attrgetter(name), sse)) for name in _SSE_FIELDS}
    del sse
    ts = pl.col("ts")
    frame = (
        pl.DataFrame({"pos": sse_pos, **cols}, schema=_SSE_SCHEMA)
        .lazy()
        # a time in the range where Python's fromisoformat and Polars read it alike; an id without NUL (an anomaly);
        # not cut off, not undispatched (the per-line reader's rules)
        .filter(ts.str.contains(r"\A" + _TS + r"\z") & ~pl.col("id").str.contains("\x00", literal=True).fill_null(False)
                & ~pl.col("truncated").fill_null(False) & pl.col("dispatched").fill_null(True))
        .with_columns(ts=ts.str.to_datetime("%Y-%m-%dT%H:%M:%S%.fZ", time_unit="us", time_zone="UTC", strict=False))
        .filter(ts.is_not_null())  # a date that does not exist (Feb 30): the per-line reader flags it
        .select(list(COLUMNS))
        .collect()
        .cast(COLUMNS)
    )
    return frame, records
