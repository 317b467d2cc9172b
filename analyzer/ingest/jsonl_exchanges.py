"""The exchange lines of a proxy JSONL log column-wise: request, response, body and close records that the per-line
reader would read without an anomaly become the exchange rows and the bodies' messages of a batch at once.

Issue #42 (bench/SCALE.md, 2026-12-06): after the ``sse`` lines went column-wise, the main thread's floor was the
per-line reader's connection state machine over the other fifth of a log's lines (1M events: 205k lines, 4.4 CPU-s,
19 µs a line).  Here, in two halves:

* :func:`vet` (in the worker that decodes the next batch, with :func:`analyzer.ingest.jsonl_typed.decode`): each
  line that is not a plain ``sse`` record is decoded by msgspec's tagged Structs, and a request/response/body/close
  record is *vetted* when the per-line reader would read it without any anomaly and without a rule that depends on
  more than its connection's exchange: UTF-8, no lone-surrogate escape, a time Python and Polars read alike (or none),
  a request body that is JSON-RPC (or none), a response without ``Content-Encoding``, a body that is not
  ``base64``, a close with a known reason and no ``decoding``.  Its values are what the per-line reader derives from
  it (lower-cased headers, the redacted URL and body, the media type, the body's JSON-RPC messages).  Every other line
  is parsed as the per-line reader parses it only to learn which connection it touches: such a connection is *slow*
  for the batch.
* :func:`take` (on the main thread, between the slow lines and the as-of join of the ``sse`` records): the vetted
  records of the connections that are not slow become exchange rows by their connection's request count
  (``seg``: the request that opens the exchange each record belongs to), joined column-wise to their response and
  close.  What the state machine would decide differently stays with it: a connection's records before its first
  request of the batch (they belong to an exchange opened before), and every record of a connection where one
  would be an orphan (after a close), a second response, or a body whose JSON-RPC is invalid where it is read.

The per-line reader reads the slow lines first, in order (``jsonl._hand_out``); its exchanges take the next xids, and
these the ones after; when that puts a batch's exchanges out of line order, the reader renumbers them once at the end
(``Builder.renumber``), so every xid is the one the per-line reader would have given.  The bodies' messages of a batch,
both paths', are put in line order (the per-line reader appends them as it meets them).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import polars as pl
import pyarrow as pa

from analyzer import redact
from analyzer.decode import jsonrpc
from analyzer.decode.jsonrpc import loads, text_safe
from analyzer.ingest import jsonl_typed
from analyzer.ingest.jsonl_columns import _TS
from analyzer.tables import _HEADERS_JSON, EXCHANGES, MESSAGES, media_type

REQUEST, RESPONSE, BODY, CLOSE = 0, 1, 2, 3
_KIND_CODE = {jsonl_typed.Request: REQUEST, jsonl_typed.Response: RESPONSE, jsonl_typed.Body: BODY, jsonl_typed.Close: CLOSE}
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_TS_RX = re.compile(r"\A" + _TS + r"\Z")
_SCHEMA = {"k": pl.UInt32, "pos": pl.UInt32, "kind": pl.UInt8, "conn": pl.String, "ts": pl.String, "method": pl.String, "url": pl.String,
           "req_session_id": pl.String, "last_event_id": pl.String, "protocol_version": pl.String, "user_agent": pl.String,
           "request_body": pl.String, "req_headers": pl.String, "status": pl.Int32, "resp_session_id": pl.String,
           "content_type": pl.String, "replay_epoch": pl.String, "resp_headers": pl.String, "reason": pl.String, "end_by": pl.String,
           "bad_json": pl.Boolean}


@dataclass
class Vetted:
    """A batch's vetted exchange records (``frame``: ``k`` indexes ``messages``, each record's JSON-RPC messages or
    None), the connections its other lines touch (``slow``), and ``unsafe``: a line the per-line reader reads may
    make a coded event stream suspect (its later records then depend on the first one: the batch goes line by line)."""

    frame: pl.DataFrame
    messages: list = field(default_factory=list)
    slow: set = field(default_factory=set)
    unsafe: bool = False


def _touched(raw: bytes) -> tuple[object, dict | None]:
    """The line parsed as the per-line reader parses it (a byte order mark stripped wherever it is: the set of
    connections found is a superset): its record, or None."""
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    text = raw.decode("utf-8", "replace")
    try:
        rec = loads(text)
    except (ValueError, RecursionError):
        return None
    return rec if isinstance(rec, dict) else None


def vet(lines: list, taken: list[int], redact_secrets: bool, compact: bool) -> Vetted:
    """The vetted exchange records among ``lines`` (those not at ``taken``: the plain ``sse`` records)."""
    from analyzer.ingest.jsonl import _DECODING, CLOSE_REASONS, _headers

    skip = set(taken)
    decode = jsonl_typed._DECODE
    refused = jsonl_typed._REFUSED
    cols: dict[str, list] = {name: [] for name in _SCHEMA}
    messages: list = []
    slow: set = set()
    unsafe = False
    deep = jsonl_typed._DEEP
    for i, raw in enumerate(lines):
        if i in skip or type(raw) is not bytes or not raw.strip():
            continue
        got = None
        try:
            got = decode(raw)
        except refused:
            pass
        kind = _KIND_CODE.get(type(got))
        ok = kind is not None
        if ok:
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                ok = False
        if ok and (raw.count(b"[") + raw.count(b"{") >= deep or (b"\\u" in raw and _SURROGATE_ESCAPE.search(raw))):
            ok = False
        ts = got.ts if ok else None
        if ts is not None and not _TS_RX.match(ts):
            ok = False
        msgs = None
        bad_json = False
        row = None
        if ok:
            if kind == REQUEST:
                h = _headers(got.headers)
                body = got.body
                if body:
                    try:
                        msgs = jsonrpc.extract(body)
                    except jsonrpc.NotJsonRpc:
                        ok = False
                url = got.url if isinstance(got.url, str) else None
                row = {"method": (got.method or "").upper() or None, "url": redact.url(url, redact_secrets),
                       "req_session_id": h.get("mcp-session-id"), "last_event_id": h.get("last-event-id"),
                       "protocol_version": h.get("mcp-protocol-version"), "user_agent": h.get("user-agent"),
                       "request_body": redact.text(body, redact_secrets),
                       "req_headers": None if compact else _HEADERS_JSON(redact.headers(h, redact_secrets))}
            elif kind == RESPONSE:
                h = _headers(got.headers)
                if h.get("content-encoding"):  # (its stream may be suspect; its base64 bodies are decoded by it)
                    ok = False
                else:
                    row = {"status": got.status, "resp_session_id": h.get("mcp-session-id"),
                           "content_type": media_type(h.get("content-type")), "replay_epoch": h.get("x-mcp-replay-epoch"),
                           "resp_headers": None if compact else _HEADERS_JSON(redact.headers(h, redact_secrets))}
            elif kind == BODY:
                if got.base64 is True:
                    ok = False
                else:
                    try:
                        msgs = jsonrpc.extract(got.data)
                    except jsonrpc.NotJsonRpc:
                        bad_json = True  # (an anomaly only where its exchange's content type is read as JSON)
                    row = {}
            else:
                reason = got.reason
                decoding = got.decoding
                if not isinstance(reason, str) or reason not in CLOSE_REASONS or (isinstance(decoding, str) and decoding in _DECODING):
                    ok = False
                else:
                    by = got.by
                    row = {"reason": reason, "end_by": by if by in ("client", "server") else None}
        if not ok:
            rec = _touched(raw)
            if rec is not None:
                conn = rec.get("conn")
                if isinstance(conn, int) and not isinstance(conn, bool):
                    conn = str(conn)
                if isinstance(conn, str):
                    slow.add(conn)
                    slow.add(text_safe(conn))
                if rec.get("kind") == "response" and isinstance(rec.get("headers"), dict):
                    unsafe = unsafe or any(str(k).lower() == "content-encoding" for k in rec["headers"])
            continue
        cols["k"].append(len(messages))
        messages.append(msgs)
        cols["pos"].append(i)
        cols["kind"].append(kind)
        cols["conn"].append(got.conn)
        cols["ts"].append(ts)
        cols["bad_json"].append(bad_json)
        for name in ("method", "url", "req_session_id", "last_event_id", "protocol_version", "user_agent", "request_body", "req_headers",
                     "status", "resp_session_id", "content_type", "replay_epoch", "resp_headers", "reason", "end_by"):
            cols[name].append(row.get(name))
    frame = pl.DataFrame(cols, schema=_SCHEMA).with_columns(
        ts=pl.col("ts").str.to_datetime("%Y-%m-%dT%H:%M:%S%.fZ", time_unit="us", time_zone="UTC", strict=False))
    # a date that does not exist (Feb 30): the per-line reader flags it, so its connection is slow
    nodate = frame.filter(pl.col("ts").is_null() & pl.lit(pl.Series(cols["ts"], dtype=pl.String)).is_not_null())
    if nodate.height:
        slow.update(nodate.get_column("conn").to_list())
        frame = frame.filter(~pl.col("pos").is_in(nodate.get_column("pos").implode()))
    return Vetted(frame, messages, slow, unsafe)


def _bad_conns(f: pl.DataFrame) -> pl.Series:
    """The connections of ``f`` (records from each one's first request on, ``seg`` > 0) whose records the state
    machine would read otherwise than one exchange per request: a record after its exchange's close (an orphan),
    a second response, a body whose JSON-RPC is invalid and read as JSON (an anomaly)."""
    kind = pl.col("kind")
    grp = ["conn", "seg"]
    ct = pl.col("content_type").filter(kind == RESPONSE).first().over(grp)
    response_before = ((kind == RESPONSE).cum_sum().over(grp) - (kind == RESPONSE).cast(pl.UInt32)) > 0
    read_as_json = ~response_before | ct.is_null() | ct.is_in(["application/json"]) | ct.str.ends_with("+json")
    bad = (
        (((kind == CLOSE).cum_sum().over(grp) - (kind == CLOSE).cast(pl.UInt32)) > 0)
        | ((kind == RESPONSE).sum().over(grp) > 1)
        | ((kind == BODY) & pl.col("bad_json") & read_as_json)
    )
    return f.filter(bad).get_column("conn").unique()


def plan(r, ex: Vetted) -> pl.DataFrame:
    """The vetted records this batch takes column-wise, with ``seg``: those of connections no slow line touches,
    from each one's first request on, and not of a connection :func:`_bad_conns` names."""
    f = ex.frame
    if ex.slow:
        f = f.filter(~pl.col("conn").is_in(pl.Series(list(ex.slow), dtype=pl.String).implode()))
    if r.suspect:  # (not reached: a batch read while a stream is suspect goes line by line)
        return f.clear().with_columns(seg=pl.lit(0, pl.UInt32))
    f = f.with_columns(seg=(pl.col("kind") == REQUEST).cast(pl.UInt32).cum_sum().over("conn")).filter(pl.col("seg") > 0)
    bad = _bad_conns(f)
    if bad.len():
        f = f.filter(~pl.col("conn").is_in(bad.implode()))
    return f


def take(r, f: pl.DataFrame, ex: Vetted, first: int) -> list[tuple[int, str, int]]:
    """The exchanges of ``f`` (:func:`plan`; read after the batch's slow lines) into the Builder, the reader's
    connection state and its request lines (``r.xid_lines``); returns the state's changes (line, conn, xid or -1
    at a close) for the as-of join of the ``sse`` records.  Body messages are put in ``r.b.messages`` in line
    order with the slow lines' ones by the caller (their lines come back in ``r.b.message_lines``)."""
    b, current = r.b, r.current
    if f.height == 0:
        return []
    kind = pl.col("kind")
    base = len(b.exchanges)
    reqs = f.filter(kind == REQUEST).with_columns(xid=pl.int_range(base, base + pl.len(), dtype=pl.Int64),
                                                 last=pl.col("seg") == pl.col("seg").max().over("conn"))
    resp = f.filter(kind == RESPONSE).select("conn", "seg", "status", "resp_session_id", "content_type", "replay_epoch", "resp_headers")
    close = f.filter(kind == CLOSE).select("conn", "seg", "reason", pl.col("end_by").alias("by"), pl.col("ts").alias("ended"),
                                           pl.col("pos").alias("close_pos"))
    rows = (
        reqs.select("k", "pos", "conn", "seg", "xid", "last", "ts", "method", "url", "req_session_id", "last_event_id", "protocol_version",
                    "user_agent", "request_body", "req_headers")
        .join(resp, on=["conn", "seg"], how="left", maintain_order="left")
        .join(close, on=["conn", "seg"], how="left", maintain_order="left")
        .with_columns(
            end_reason=pl.when(pl.col("reason").is_not_null()).then(pl.col("reason"))
            .when(~pl.col("last") & pl.col("status").is_not_null()).then(pl.lit("complete"))
            .otherwise(pl.lit("open")),
            open=pl.col("last") & pl.col("reason").is_null(),
        )
    )
    table = rows.select(
        source=pl.lit(b.source, pl.String), xid="xid", conn="conn", location=pl.format("line {}", pl.col("pos").cast(pl.Int64) + first),
        started="ts", ended="ended", method="method", url="url", status="status", req_session_id="req_session_id",
        resp_session_id="resp_session_id", last_event_id="last_event_id", protocol_version="protocol_version",
        content_type="content_type", replay_epoch="replay_epoch", end_reason="end_reason", end_by="by",
        body_recorded=pl.lit(True), request_body="request_body", req_headers="req_headers", resp_headers="resp_headers",
        user_agent="user_agent", _open="open",
    )
    # the exchange that was open on each conn before its first request here: ended by it (keep-alive), as the state
    # machine ends it; then each conn's last exchange is its open one, or none when it closed
    exchanges = b.exchanges
    sealed = table.filter(~pl.col("_open")).drop("_open")
    still = table.filter(pl.col("_open")).drop("_open").to_dicts()
    firsts = reqs.filter(pl.col("seg") == 1).get_column("conn").to_list()
    for conn in firsts:
        prev = current.pop(conn, None)
        if prev is not None:
            if prev["end_reason"] == "open" and prev["status"] is not None:
                prev["end_reason"] = "complete"
            b.seal(prev)
    exchanges.extend([None] * reqs.height)
    for row in still:
        exchanges[row["xid"]] = row
        current[row["conn"]] = row
    if sealed.height:
        b.add_exchange_chunk(sealed.to_arrow().cast(EXCHANGES))
    r.xid_lines.extend((reqs.get_column("pos").cast(pl.Int64) + first).to_list())
    r.records += f.height
    r.paths["exchanges"] += f.height
    # the bodies' messages (a request's body, and a body read as JSON: the content type of its exchange's response
    # before it, or none yet), in line order
    bodies = f.filter(kind == BODY).select("k", "pos", "conn", "seg").join(
        f.filter(kind == RESPONSE).select("conn", "seg", rpos="pos", ct="content_type"), on=["conn", "seg"], how="left",
        maintain_order="left").join(reqs.select("conn", "seg", "xid"), on=["conn", "seg"], how="left", maintain_order="left").with_columns(
        ct=pl.when(pl.col("rpos") < pl.col("pos")).then(pl.col("ct")))
    bodies = bodies.filter(pl.col("ct").is_null() | (pl.col("ct") == "application/json") | pl.col("ct").str.ends_with("+json"))
    with_msgs = pl.concat([
        reqs.filter(pl.col("request_body").is_not_null() & (pl.col("request_body") != "")).select("k", "pos", "xid", body=pl.lit(False)),
        bodies.select("k", "pos", "xid", body=pl.lit(True)),
    ]).sort("pos")
    msgs = ex.messages
    cols, lines = b.messages, b.message_lines
    source = b.source
    for k, pos, xid, body in with_msgs.iter_rows():
        found = msgs[k]
        if not found:
            continue
        origin, direction = ("response_body", "server_to_client") if body else ("request_body", "client_to_server")
        line = pos + first
        for m in found:
            cols["source"].append(source)
            cols["xid"].append(xid)
            cols["origin"].append(origin)
            cols["ordinal"].append(None)
            cols["direction"].append(direction)
            cols["kind"].append(m.kind)
            cols["rpc_id"].append(m.rpc_id)
            cols["method"].append(m.method)
            cols["error_code"].append(m.error_code)
            cols["error_message"].append(m.error_message)
            cols["protocol_version"].append(m.protocol_version)
            cols["params_digest"].append(m.params_digest)
            lines.append(line)
    moves = pl.concat([
        reqs.select(pos="pos", conn="conn", xid="xid"),
        close.join(reqs.select("conn", "seg"), on=["conn", "seg"]).select(pos="close_pos", conn="conn", xid=pl.lit(-1, pl.Int64)),
    ])
    return list(zip((moves.get_column("pos").cast(pl.Int64) + first).to_list(), moves.get_column("conn").to_list(),
                    moves.get_column("xid").to_list()))


def messages_in_line_order(b) -> None:
    """The batch's body messages (``b.messages``, both paths', each with its line in ``b.message_lines``) into one
    Arrow chunk in line order: the order the per-line reader appends them in."""
    cols, lines = b.messages, b.message_lines
    b.message_lines = None
    if not cols["xid"]:
        return
    table = pa.Table.from_pydict(cols, schema=MESSAGES)
    if any(a > c for a, c in zip(lines, lines[1:])):
        table = table.take(pa.array(np.argsort(np.asarray(lines, dtype=np.int64), kind="stable")))
    b._message_chunks.append(table)
    for column in cols.values():
        column.clear()
