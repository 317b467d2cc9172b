"""The proxy JSONL reader's connection state machine over a batch's columns (the single pass's compact reading, with the
compiled core): the batch's exchange records as the core parsed them (:func:`analyzer.ingest.jsonl_native.exchange_frame`:
Arrow columns, no Python object per value), read by the same steps in the same order as the per-record state machine
(:meth:`analyzer.ingest.jsonl._Reader.compiled`, one tuple at a time), where every other slow line of the batch
changes no connection's state (:func:`settled`).  The exchanges that end within the batch become one Arrow chunk by
gathers, the bodies' JSON-RPC messages another by the core; :func:`analyzer.ingest.jsonl._hand_out` calls :func:`run`.
tests/test_native.py compares the two state machines' tables.
"""
from __future__ import annotations

from datetime import datetime, timezone

import polars as pl

from analyzer import redact
from analyzer.decode.jsonrpc import NotJsonRpc, extract_rows, loads
from analyzer.formatted import formatted
from analyzer.ingest import jsonl_native
from analyzer.tables import Builder, media_type

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


_EXCHANGE_KINDS = ("request", "response", "body", "close")


def settled(batch, slow: list[int], vetted: list[int], records: dict) -> bool:
    """Is every slow line of the batch that the compiled core did not vet (``vetted``: positions, in order) one that
    changes no connection's state when the per-line reader (:meth:`analyzer.ingest.jsonl._Reader.line`) reads it: a
    blank line, a line too long to hold, a JSON object of another kind than the exchange records' (an ``sse`` record:
    a cut-off event, an event whose fields the core leaves to msgspec or to the per-line reader)?  Then :func:`run`
    reads the batch.  A line this cannot parse as it stands (not UTF-8, a byte order mark) or an exchange record the
    core declined (a coded response, a raw body, a field of another type) is not: the batch is read one record at a
    time."""
    vet = set(vetted)
    for p in slow:
        if p in vet:
            continue
        rec = records.get(p)
        if rec is None:
            raw = batch[p]
            if type(raw) is int or not raw.strip():
                continue
            try:
                rec = loads(raw.decode("utf-8"))
            except (ValueError, RecursionError):
                return False
        if type(rec) is not dict or rec.get("kind") in _EXCHANGE_KINDS:
            return False
    return True


def run(r, batch, slow: list[int], xs: pl.DataFrame, records: dict, first: int, deferred) -> None:
    """The connection state machine over a batch's slow lines (``r``: the JSONL reader, its anomaly log the batch's
    ``deferred`` one), its exchange records read as columns (``xs``: :func:`analyzer.ingest.jsonl_native.exchange_frame`,
    the records ``_Reader.compiled`` reads one tuple at a time), the same steps in the same order: a request opens an
    exchange (and ends the one before it on its conn, complete when answered: keep-alive), a response, a body and a
    close go to their conn's current exchange or are orphans, a body's and a request's JSON-RPC messages are taken as
    they come.  Every other slow line changes no state (:func:`settled`) and is read by the per-line reader
    (``_Reader.line``) where it stands.

    An exchange this batch opens is a small dict (its xid, its row among the batch's new ones, its content type: what
    a body and an ``sse`` line read of it; whether it was answered is ``resp_of``) while it is read; once ended (closed, or the next request on its conn began) its row is
    made by gathers from ``xs``, all of the batch's at once, and joins the Builder's sealed chunks as Arrow; one still
    open at the batch's end becomes the Builder's row (a dict), as the per-record reader leaves it.  Exchanges opened
    before the batch are the Builder's dicts, changed by the Builder's own steps.  No Python object per value: rpc-post's
    2M exchange records (bench/SCALE.md)."""
    b, current, line, moves = r.b, r.current, r.line, r.moves
    log = r.log
    paths = r.paths
    pos = xs.get_column("pos").to_list()
    kinds = xs.get_column("kind").to_list()
    conns = xs.get_column("conn").to_list()
    bodies = xs.get_column("body").to_list()
    datas = xs.get_column("data").to_list()
    types = xs.get_column("content_type").to_list()
    media: dict = {}  # content type -> media_type of it (a log repeats a handful)
    base = len(b.exchanges)
    new_req: list[int] = []  # the request (row of xs) of each exchange the batch opens, in xid order
    resp_of: dict[int, int] = {}  # new exchange -> its last response (row of xs)
    close_of: dict[int, int] = {}  # new exchange -> its close
    # the texts whose messages are taken, in record order: (row of xs, xid, origin, position in the batch)
    jobs: list[tuple[int, int, int, int]] = []
    j, nx = 0, len(pos)
    for p in slow:
        deferred.at = p
        if j >= nx or pos[j] != p:  # a line that changes no state (settled): the per-line reader's, where it stands
            rec = records.get(p)
            line(first + p, batch[p] if rec is None else None, rec)
            continue
        k, c, lineno = kinds[j], conns[j], first + p
        r.records += 1
        paths["compiled"] += 1
        if k == 0:
            xid = base + len(new_req)
            row = {"xid": xid, "_new": len(new_req), "content_type": None}
            new_req.append(j)
            prev = current.get(c)
            current[c] = row
            if prev is not None and "_new" not in prev:  # an exchange of an earlier batch ends (_began)
                if prev["end_reason"] == "open" and prev["status"] is not None:
                    prev["end_reason"] = "complete"
                b.seal(prev)
            moves.append((lineno, c, xid))
            if bodies[j]:  # (Builder.opened: the messages of the raw text)
                jobs.append((j, xid, 0, p))
            j += 1
            continue
        row = current.get(c)
        if row is None:
            log.add("jsonl_orphan_record", f"line {lineno}", f"conn {c!r}")
            j += 1
            continue
        new = row.get("_new")
        if k == 1:
            if new is None:
                t = xs.row(j, named=True)
                b.answered(row, t["status"], t["session"], t["content_type"], t["epoch"])
            else:
                ct = types[j]
                if ct not in media:
                    media[ct] = media_type(ct)
                row["content_type"] = media[ct]
                resp_of[new] = j
        elif k == 2:  # (Builder.body: a JSON body's messages, or an event stream's or another type's none)
            ct = row["content_type"]
            if ct in ("application/json", None) or (ct or "").endswith("+json"):
                jobs.append((j, row["xid"], 1, p))
        else:
            if new is None:
                t = xs.row(j, named=True)
                row["end_reason"] = t["reason"]
                row["ended"] = _datetime(t["ts"])
                row["end_by"] = t["by"]
                current.pop(c, None)
                b.seal(row)
            else:
                close_of[new] = j
                current.pop(c, None)
            moves.append((lineno, c, -1))
        j += 1
    if jobs:
        _body_messages(b, xs, jobs, first, log)
        deferred.calls.sort(key=lambda call: call[0])  # (the messages' anomalies, among the others in line order)
    if new_req:
        _new_exchanges(b, current, xs, new_req, resp_of, close_of, base, first)


_ORIGINS = (("request_body", "client_to_server"), ("response_body", "server_to_client"))


def _body_messages(b: Builder, xs: pl.DataFrame, jobs: list[tuple[int, int, int, int]], first: int, log) -> None:
    """The JSON-RPC messages of the batch's request and response bodies (``jobs``, in record order: what
    :meth:`Builder._messages` of each gives), read by the core at once (:func:`analyzer.ingest.jsonl_native.message_frame`; a text it leaves, by
    ``jsonrpc.extract_rows``, with its ``jsonrpc_invalid`` at its line), as one chunk of the Builder's messages after
    the ones before it."""
    rows, xids, origins, at = (list(col) for col in zip(*jobs))
    texts = xs.get_column("body").fill_null(xs.get_column("data")).gather(rows)
    got, declined = jsonl_native.message_frame(texts)
    if declined:
        more = []
        for t in declined:
            log.at = at[t]
            try:
                found = extract_rows(texts[t])
            except NotJsonRpc as exc:
                log.add("jsonrpc_invalid", f"line {first + at[t]}", str(exc))
                continue
            more += [(t, *m) for m in found]
        if more:
            extra = pl.DataFrame(more, schema=jsonl_native.MESSAGE_COLUMNS, orient="row")
            got = pl.concat([got, extra]).sort("_text", maintain_order=True)
    if not got.height:
        return
    t = got.get_column("_text")
    origin = pl.Series(origins, dtype=pl.UInt8).gather(t)
    frame = got.select(
        source=pl.lit(b.source, pl.String),
        xid=pl.Series(xids, dtype=pl.Int64).gather(t),
        origin=pl.Series([o for o, _ in _ORIGINS], dtype=pl.String).gather(origin),
        ordinal=pl.lit(None, pl.Int32),
        direction=pl.Series([d for _, d in _ORIGINS], dtype=pl.String).gather(origin),
        kind="kind", rpc_id="rpc_id", method="method", error_code="error_code", error_message="error_message",
        protocol_version="protocol_version", params_digest="params_digest",
    )
    b.add_messages(frame)


def _datetime(v) -> datetime | None:
    """A time of ``xs`` (Polars gives an aware datetime of its own zone object) as parse_ts gives it."""
    return None if v is None else _EPOCH + (v - _EPOCH)


def _new_exchanges(b: Builder, current: dict, xs: pl.DataFrame, new_req: list[int], resp_of: dict, close_of: dict,
                   base: int, first: int) -> None:
    """The exchanges :func:`run` opened: the ended ones as one Arrow chunk of the Builder's sealed rows, made by
    gathers from ``xs`` (the values :meth:`Builder.opened`, :meth:`Builder.answered` and a close give the row); the
    ones still open as the Builder's rows (dicts), current on their conns."""
    n = len(new_req)
    open_at = {row["_new"]: c for c, row in current.items() if "_new" in row}
    b.exchanges.extend([None] * n)
    ended = [i for i in range(n) if i not in open_at]
    if ended:
        req = pl.Series(new_req, dtype=pl.UInt32).gather(ended)
        resp = pl.Series([resp_of.get(i) for i in ended], dtype=pl.UInt32)
        close = pl.Series([close_of.get(i) for i in ended], dtype=pl.UInt32)
        q = xs.select("pos", "conn", "ts", "method", "url", "session", "last_event_id", "protocol", "user_agent",
                      "shown")[req]
        a = xs.select("status", "session", "content_type", "epoch")[resp]
        e = xs.select("ts", "reason", "by")[close]
        method = q.get_column("method")
        url = q.get_column("url")
        ctype = a.get_column("content_type")
        frame = pl.DataFrame({
            "source": pl.repeat(b.source, len(ended), dtype=pl.String, eager=True),
            "xid": pl.Series(ended, dtype=pl.Int64) + base,
            "conn": q.get_column("conn"),
            "location": q.select(formatted("line {}", pl.col("pos").cast(pl.Int64) + first)).to_series(),
            "started": q.get_column("ts"),
            "ended": e.get_column("ts"),
            "method": _mapped(method, lambda m: (m or "").upper() or None),
            "url": _mapped(url, lambda u: redact.url(u, b.redact)),
            "status": a.get_column("status"),
            "req_session_id": q.get_column("session"),
            "resp_session_id": a.get_column("session"),
            "last_event_id": q.get_column("last_event_id"),
            "protocol_version": q.get_column("protocol"),
            "content_type": _mapped(ctype, media_type),
            "replay_epoch": a.get_column("epoch"),
            "end_reason": pl.select(pl.when(e.get_column("reason").is_not_null()).then(e.get_column("reason"))
                                    .when(a.get_column("status").is_not_null()).then(pl.lit("complete"))
                                    .otherwise(pl.lit("open"))).to_series(),
            "end_by": e.get_column("by"),
            "body_recorded": pl.repeat(True, len(ended), dtype=pl.Boolean, eager=True),
            "request_body": q.get_column("shown"),
            "req_headers": pl.repeat(None, len(ended), dtype=pl.String, eager=True),
            "resp_headers": pl.repeat(None, len(ended), dtype=pl.String, eager=True),
            "user_agent": q.get_column("user_agent"),
        })
        b.add_sealed(frame)
    for i, c in open_at.items():
        q = xs.row(new_req[i], named=True)
        lineno = first + q["pos"]
        row = b.request_row(base + i, c, f"line {lineno}", _datetime(q["ts"]), q["method"], q["url"], q["session"],
                            q["last_event_id"], q["protocol"], q["user_agent"], None, q["shown"])
        if i in resp_of:
            t = xs.row(resp_of[i], named=True)
            b.answered(row, t["status"], t["session"], t["content_type"], t["epoch"])
        b.exchanges[base + i] = row
        current[c] = row


def _mapped(values: pl.Series, fn) -> pl.Series:
    """``fn`` of each value (None stays None), called once per distinct value."""
    keys = values.unique(maintain_order=True).drop_nulls().to_list()
    if not keys:
        return values
    return values.replace_strict(keys, [fn(k) for k in keys], default=None, return_dtype=pl.String)
