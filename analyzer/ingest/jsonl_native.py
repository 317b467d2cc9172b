"""The proxy JSONL's plain ``sse`` lines by the compiled reader (``analyzer._native``, built from analyzer/native).

One pass in Rust over a batch's lines (:func:`sse_frame`), off the GIL, takes each ``sse`` record the per-line reader
(:class:`analyzer.ingest.jsonl._Reader`) would read without an anomaly -- any writer's spacing, key order or escapes
-- and gives its columns, its compact digest (the first 64 bits of sha256 of ``<id>:<data>``, as
:func:`analyzer.tables.digest_expr`) and, when its data is a JSON-RPC notification, the method
(:func:`analyzer.decode.jsonrpc.event_rpc` reads the same with two ``json_path_match`` per event, each a serde_json
parse).  It replaces :func:`analyzer.ingest.jsonl_columns.sse_frame` (a grammar, then ``read_ndjson``) and, for
those events, the Builder's digest and JSON-RPC passes at the end of the read.  What it does not take goes on as
before: a line holding ``"sse"`` to msgspec (:func:`analyzer.ingest.jsonl_typed.typed`), every other line to the
per-line reader; and an event without a method from here goes through ``event_rpc``.  tests/test_native.py
compares the two readers' tables on every kind of line.

Without the compiled module (an install without cargo: pyproject.toml builds it as optional) or with
``MCP_SSE_AUDIT_NATIVE=0`` in the environment (:mod:`analyzer.compiled`), the Python paths read every line, to the
same tables.
"""
from __future__ import annotations

import polars as pl
import pyarrow as pa

from analyzer import compiled, redact

# the columns of jsonl_columns.COLUMNS, and the two the compiled pass adds: ``digest`` (the compact digest, UInt64)
# and ``_method`` (a notification's method; null where event_rpc is to read the data)
COLUMNS = {"pos": pl.UInt32, "conn": pl.String, "ts": pl.Datetime("us", "UTC"), "id": pl.String, "event": pl.String,
           "data": pl.String, "retry": pl.Int64, "digest": pl.UInt64, "_method": pl.String}



def sse_frame(lines: list) -> tuple[pl.DataFrame, list[int]]:
    """The plain ``sse`` records among ``lines`` (bytes, or an int for a line too long to hold) as :data:`COLUMNS`
    (``pos``: index in ``lines``), and the positions of the other lines that may be ``sse`` records (they hold
    ``"sse"``), as :func:`analyzer.ingest.jsonl_columns.sse_frame` gives them."""
    n, pos, conn, ts, eid, event, data, retry, digest, method, maybe = compiled.core.sse_lines(lines)
    table = pa.table({
        "pos": pa.Array.from_buffers(pa.uint32(), n, [None, pa.py_buffer(pos)]),
        "conn": compiled.strings(n, conn),
        "ts": pa.Array.from_buffers(pa.timestamp("us", "UTC"), n, [None, pa.py_buffer(ts)]),
        "id": compiled.strings(n, eid),
        "event": compiled.strings(n, event),
        "data": compiled.strings(n, data),
        "retry": compiled.ints(n, retry, pa.int64()),
        "digest": pa.Array.from_buffers(pa.uint64(), n, [None, pa.py_buffer(digest)]),
        "_method": compiled.strings(n, method),
    })
    return pl.from_arrow(table).cast(COLUMNS), maybe


def exchange_records(lines: list, positions: list[int], redact_bodies: bool) -> dict[int, tuple]:
    """Of the lines at ``positions`` (those the ``sse`` pass did not take), the exchange records the per-line reader
    would read without an anomaly in the compact reading (no header objects), by position: each a tuple of the values
    its connection state machine reads (``jsonl._Reader.compiled``), parsed by the core without the GIL.  A line the
    core declines (a header it keeps given twice, a coded response, a raw body, a field of another type, a lone
    surrogate escape, a time it does not vet ...) is not there and goes to the per-line reader as before.

    A request's last value is its body as the exchange table shows it: with ``redact_bodies``, the batch's bodies
    redacted by one ``redact.column`` (value by value the ``redact.text`` the Builder applies; its regex passes
    without the GIL), else None (the Builder's ``redact.text``, a no-op without redaction)."""
    got = compiled.core.exchange_lines(lines, positions)
    if not redact_bodies or not got:
        return got
    keys = [k for k, t in got.items() if t[0] == 0 and t[5]]
    if not keys:
        return got
    bodies = pl.Series([got[k][5] for k in keys], dtype=pl.String)
    done = redact.column(bodies)
    changed = {}
    if done is not bodies:
        differ = done.ne_missing(bodies)
        changed = dict(zip((keys[i] for i in differ.arg_true().to_list()), done.filter(differ).to_list()))
    for k in keys:
        t = got[k]
        got[k] = (*t[:10], changed.get(k, t[5]))
    return got


# what exchange_frame gives: exchange_columns' columns, and ``shown``, a request's body as the exchange table shows it
EXCHANGE_COLUMNS = {"pos": pl.UInt32, "kind": pl.UInt8, "conn": pl.String, "ts": pl.Datetime("us", "UTC"), "method": pl.String,
                    "url": pl.String, "body": pl.String, "session": pl.String, "last_event_id": pl.String,
                    "protocol": pl.String, "user_agent": pl.String, "status": pl.Int64, "content_type": pl.String,
                    "epoch": pl.String, "data": pl.String, "reason": pl.String, "by": pl.String, "shown": pl.String}


def exchange_frame(lines: list, positions: list[int], redact_bodies: bool) -> pl.DataFrame:
    """The records :func:`exchange_records` takes, as one frame of :data:`EXCHANGE_COLUMNS` in line order (a row per
    record, every kind's columns, null where its kind has none: ``kind`` 0 request, 1 response, 2 body, 3 close),
    parsed by the core without the GIL and made Arrow from its buffers: no Python object per value.  ``shown``: a
    request's body redacted by one ``redact.column`` when ``redact_bodies`` (value by value the Builder's
    ``redact.text``), else the body."""
    got = compiled.core.exchange_columns(lines, positions)
    n = got[0]
    names = ["conn", "method", "url", "body", "session", "last_event_id", "protocol", "user_agent"]
    table = pa.table({
        "pos": pa.Array.from_buffers(pa.uint32(), n, [None, pa.py_buffer(got[1])]),
        "kind": pa.Array.from_buffers(pa.uint8(), n, [None, pa.py_buffer(got[2])]),
        "conn": compiled.strings(n, got[3]),
        "ts": compiled.ints(n, got[4], pa.timestamp("us", "UTC")),
        **{name: compiled.strings(n, got[5 + i]) for i, name in enumerate(names[1:])},
        "status": compiled.ints(n, got[12], pa.int64()),
        **{name: compiled.strings(n, got[13 + i]) for i, name in enumerate(["content_type", "epoch", "data", "reason", "by"])},
    })
    frame = pl.from_arrow(table)
    body = frame.get_column("body")
    shown = redact.column(body) if redact_bodies and body.null_count() < n else body
    return frame.with_columns(shown.alias("shown")).cast(EXCHANGE_COLUMNS)


# what message_frame gives per message: the text's index, and the JSON-RPC columns of analyzer.tables.MESSAGES
MESSAGE_COLUMNS = {"_text": pl.UInt32, "kind": pl.String, "rpc_id": pl.String, "method": pl.String, "error_code": pl.Int64,
                   "error_message": pl.String, "protocol_version": pl.String, "params_digest": pl.String}


def message_frame(texts: pl.Series) -> tuple[pl.DataFrame, list[int]]:
    """The JSON-RPC messages of each text (bodies: a request's, a response's), as ``jsonrpc.extract_rows`` reads them
    with the core (``rpc_message``, the same function), as one frame of :data:`MESSAGE_COLUMNS` in text order; and the
    indexes of the texts it leaves to the Python path (``extract_rows`` reads those, and says why one is not
    JSON-RPC).  A null text has none."""
    n, idx, kind, rpc_id, method, code, message, version, digest, declined = compiled.core.rpc_message_columns(*compiled.buffers(texts))
    table = pa.table({
        "_text": pa.Array.from_buffers(pa.uint32(), n, [None, pa.py_buffer(idx)]),
        "kind": compiled.strings(n, kind),
        "rpc_id": compiled.strings(n, rpc_id),
        "method": compiled.strings(n, method),
        "error_code": compiled.ints(n, code, pa.int64()),
        "error_message": compiled.strings(n, message),
        "protocol_version": compiled.strings(n, version),
        "params_digest": compiled.strings(n, digest),
    })
    return pl.from_arrow(table).cast(MESSAGE_COLUMNS), declined
