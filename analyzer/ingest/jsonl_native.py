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

from analyzer import compiled

# the columns of jsonl_columns.COLUMNS, and the two the compiled pass adds: ``digest`` (the compact digest, UInt64)
# and ``_method`` (a notification's method; null where event_rpc is to read the data)
COLUMNS = {"pos": pl.UInt32, "conn": pl.String, "ts": pl.Datetime("us", "UTC"), "id": pl.String, "event": pl.String,
           "data": pl.String, "retry": pl.Int64, "digest": pl.UInt64, "_method": pl.String}



def sse_frame(lines: list) -> tuple[pl.DataFrame, list[int]]:
    """The plain ``sse`` records among ``lines`` (bytes, or an int for a line too long to hold) as :data:`COLUMNS`
    (``pos``: index in ``lines``), and the positions of the other lines that may be ``sse`` records (they hold
    ``"sse"``), as :func:`analyzer.ingest.jsonl_columns.sse_frame` gives them."""
    frame, maybe, _ = read_batch(lines, False)
    return frame, maybe


def read_batch(lines: list, exchanges: bool) -> tuple[pl.DataFrame, list[int], dict[int, tuple] | None]:
    """:func:`sse_frame`'s two, and with ``exchanges`` (the compact reading: no header objects) the exchange records
    among the other lines that the per-line reader would read without an anomaly, by position: each a tuple of the
    values its state machine reads (``jsonl._Reader.compiled``), parsed here in the same pass, off the GIL.  A line
    the core declines (a header given twice, a coded response, a raw body, a bad field, a lone surrogate escape, a
    time it does not vet ...) is not there, and goes to the per-line reader as before.  None without ``exchanges``."""
    n, pos, conn, ts, eid, event, data, retry, digest, method, maybe, taken = compiled.core.sse_lines(lines, exchanges)
    values, valid, nulls = retry
    table = pa.table({
        "pos": pa.Array.from_buffers(pa.uint32(), n, [None, pa.py_buffer(pos)]),
        "conn": compiled.strings(n, conn),
        "ts": pa.Array.from_buffers(pa.timestamp("us", "UTC"), n, [None, pa.py_buffer(ts)]),
        "id": compiled.strings(n, eid),
        "event": compiled.strings(n, event),
        "data": compiled.strings(n, data),
        "retry": pa.Array.from_buffers(pa.int64(), n, [pa.py_buffer(valid) if nulls else None, pa.py_buffer(values)],
                                       null_count=nulls),
        "digest": pa.Array.from_buffers(pa.uint64(), n, [None, pa.py_buffer(digest)]),
        "_method": compiled.strings(n, method),
    })
    return pl.from_arrow(table).cast(COLUMNS), maybe, taken
