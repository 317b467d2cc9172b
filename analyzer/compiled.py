"""The compiled core (``analyzer._native``, built from analyzer/native, Rust through PyO3), where the install built it.

pyproject.toml builds it with setuptools-rust when cargo is on PATH, as an optional extension: an install without
cargo has none, and every reader then takes its Python paths, to the same tables (analyzer/native/README.md).
``MCP_SSE_AUDIT_NATIVE=0`` in the environment turns it off for a run; tests turn :data:`ENABLED` off to compare.
"""
from __future__ import annotations

import os

try:
    from analyzer import _native as core
except ImportError:  # pragma: no cover - an install without cargo
    core = None

ENABLED = core is not None and os.environ.get("MCP_SSE_AUDIT_NATIVE", "1") != "0"


def buffers(data) -> tuple:
    """A Polars string Series as the compiled core's functions take it: (n, offset, validity, offsets, values), the
    buffers of its LargeUtf8 Arrow array (validity None when no value is null), as unsigned bytes."""
    import pyarrow as pa

    arr = data.to_arrow()
    arr = (arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr).cast(pa.large_string())
    # (as unsigned bytes: an Arrow buffer's own format is signed char); the array is kept alive by its buffers' views
    validity, offsets, values = (None if b is None else memoryview(b).cast("B") for b in arr.buffers())
    return len(arr), arr.offset, validity, offsets, values


def strings(n: int, got: tuple):
    """A LargeUtf8 Arrow array of ``n`` values from the compiled core's (offsets, values, validity, null count)."""
    import pyarrow as pa

    offsets, values, valid, nulls = got
    return pa.Array.from_buffers(pa.large_string(), n, [pa.py_buffer(valid) if nulls else None, pa.py_buffer(offsets),
                                                        pa.py_buffer(values)], null_count=nulls)
