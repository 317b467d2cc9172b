"""The exchange lines of a proxy JSONL log vetted ahead: request, response, body and close records whose reading
needs none of the per-line reader's rules, with every value it derives from them made beforehand, in the worker that
decodes the next batch.

Issue #42 (bench/SCALE.md, 2026-12-06): after the ``sse`` lines went column-wise, the main thread's floor was the
per-line reader over the other fifth of a log's lines (1M events: 205k lines, 4.4 CPU-s, 19 µs a line).  Of those
19 µs the connection state machine is little; the rest is the record's parsing and what is derived from it: the
time, the lower-cased headers, the redacted URL and body, the media type, the bodies' JSON-RPC messages.

:func:`vet` decodes each line that is not a plain ``sse`` record by msgspec's tagged Structs (``jsonl_typed``), and a
request/response/body/close record is *vetted* when the per-line reader would read it without a rule of its own: UTF-8,
no lone-surrogate escape, no nesting near the recursion guard, a time Python and Polars read alike (or none; the
times of a batch are read by one Polars pass), a response without ``Content-Encoding`` (its stream may be suspect,
its base64 bodies are decoded by it), a body that is not ``base64``, a close with a known reason and no
``decoding``.  Its derived values come back as one tuple per line (:data:`REQUEST` ...), and the main thread's state
machine (``jsonl._Reader.vetted``) reads it where it reads the line, in line order with every other line: the same
state, the same xids, messages and anomalies (an orphan, a body's invalid JSON-RPC) in the same order as
``_Reader.line``, which still reads every line that is not vetted.
"""
from __future__ import annotations

import re
from itertools import repeat
from operator import attrgetter

import polars as pl

from analyzer import redact
from analyzer.decode import jsonrpc
from analyzer.ingest import jsonl_typed
from analyzer.ingest.jsonl_columns import _TS
from analyzer.tables import _HEADERS_JSON, media_type

REQUEST, RESPONSE, BODY, CLOSE = 0, 1, 2, 3
_KIND_CODE = {jsonl_typed.Request: REQUEST, jsonl_typed.Response: RESPONSE, jsonl_typed.Body: BODY, jsonl_typed.Close: CLOSE}
_CONN, _TS_GET, _HEADERS, _BODY, _URL, _METHOD = map(attrgetter, ("conn", "ts", "headers", "body", "url", "method"))
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _ok_text(raws: list) -> list[bool]:
    """Each line UTF-8, nesting below the recursion guard (brackets counted), no lone-surrogate escape: what the
    per-line reader reads as msgspec reads it (all the lines checked at once first, in C)."""
    joined = b"\n".join(raws)
    try:
        joined.decode("utf-8")
        utf8 = True
    except UnicodeDecodeError:
        utf8 = False
    deep = jsonl_typed._DEEP
    ok = [a + c < deep for a, c in zip(map(bytes.count, raws, repeat(b"[")), map(bytes.count, raws, repeat(b"{")))]
    if not utf8 or _SURROGATE_ESCAPE.search(joined):
        for i, raw in enumerate(raws):
            if ok[i]:
                try:
                    raw.decode("utf-8")
                    ok[i] = _SURROGATE_ESCAPE.search(raw) is None
                except UnicodeDecodeError:
                    ok[i] = False
    return ok


def _extract(text: str) -> list | str:
    """A body's JSON-RPC messages, or why it is none (the ``jsonrpc_invalid`` detail)."""
    try:
        return jsonrpc.extract(text)
    except jsonrpc.NotJsonRpc as exc:
        return str(exc)


def vet(lines: list, taken: list[int], redact_secrets: bool, compact: bool) -> dict[int, tuple]:
    """The vetted exchange records among ``lines`` (not at ``taken``: the plain ``sse`` records), by position:

    * ``(REQUEST, conn, ts, method, url, session id, Last-Event-ID, protocol version, User-Agent, body, header object,
      messages)``: method upper-cased, URL and body redacted, header object None when ``compact``; messages None
      without a body, else the body's (a str: why it is no JSON-RPC);
    * ``(RESPONSE, conn, ts, status, session id, media type, replay epoch, header object)``;
    * ``(BODY, conn, ts, messages)``; ``(CLOSE, conn, ts, reason, by)``."""
    from analyzer.ingest.jsonl import _DECODING, CLOSE_REASONS, _headers

    n = len(lines)
    if taken:
        cand = pl.repeat(True, n, eager=True).scatter(pl.Series(taken, dtype=pl.UInt32), False).arg_true().to_list()
    else:
        cand = list(range(n))
    cand = [i for i in cand if type(lines[i]) is bytes]
    raws = [lines[i] for i in cand]
    got = jsonl_typed._decoded(raws)
    kinds = list(map(_KIND_CODE.get, map(type, got)))
    by_kind: dict[int | None, list[int]] = {REQUEST: [], RESPONSE: [], BODY: [], CLOSE: [], None: []}
    for j, (k, o) in enumerate(zip(kinds, _ok_text(raws))):
        by_kind[k if o else None].append(j)
    # the times, by one Polars pass: the recorder's grammar (where Python and Polars read a time alike), else not vetted
    idx = [j for k in (REQUEST, RESPONSE, BODY, CLOSE) for j in by_kind[k]]
    texts = pl.Series(list(map(_TS_GET, (got[j] for j in idx))), dtype=pl.String)
    times = pl.select(pl.when(pl.lit(texts).str.contains(r"\A" + _TS + r"\z")).then(
        pl.lit(texts).str.to_datetime("%Y-%m-%dT%H:%M:%S%.fZ", time_unit="us", time_zone="UTC", strict=False))).to_series()
    timed = (times.is_not_null() | texts.is_null()).to_list()
    ts_of = dict(zip(idx, times.to_list()))
    out: dict[int, tuple] = {}

    def keep(code: int) -> tuple[list[int], list]:
        js = [j for j in by_kind[code] if timed_at[j]]
        return js, [got[j] for j in js]

    timed_at = dict(zip(idx, timed))
    js, structs = keep(REQUEST)
    if js:
        hs = list(map(_headers, map(_HEADERS, structs)))
        bodies = list(map(_BODY, structs))
        for j, s, h, body in zip(js, structs, hs, bodies):
            url = s.url if isinstance(s.url, str) else None
            out[cand[j]] = (REQUEST, s.conn, ts_of[j], (s.method or "").upper() or None, redact.url(url, redact_secrets),
                            h.get("mcp-session-id"), h.get("last-event-id"), h.get("mcp-protocol-version"), h.get("user-agent"),
                            redact.text(body, redact_secrets),
                            None if compact else _HEADERS_JSON(redact.headers(h, redact_secrets)),
                            _extract(body) if body else None)
    js, structs = keep(RESPONSE)
    for j, s in zip(js, structs):
        h = _headers(s.headers)
        if h.get("content-encoding"):
            continue
        out[cand[j]] = (RESPONSE, s.conn, ts_of[j], s.status, h.get("mcp-session-id"), media_type(h.get("content-type")),
                        h.get("x-mcp-replay-epoch"), None if compact else _HEADERS_JSON(redact.headers(h, redact_secrets)))
    js, structs = keep(BODY)
    for j, s in zip(js, structs):
        if s.base64 is not True:
            out[cand[j]] = (BODY, s.conn, ts_of[j], _extract(s.data))
    js, structs = keep(CLOSE)
    for j, s in zip(js, structs):
        reason, decoding = s.reason, s.decoding
        if isinstance(reason, str) and reason in CLOSE_REASONS and not (isinstance(decoding, str) and decoding in _DECODING):
            out[cand[j]] = (CLOSE, s.conn, ts_of[j], reason, s.by if s.by in ("client", "server") else None)
    return out
