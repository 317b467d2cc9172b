"""The compiled core (``analyzer._native``, built from analyzer/native, Rust through PyO3), where the install built it.

pyproject.toml builds it with setuptools-rust when cargo is on PATH, as an optional extension: an install without
cargo has none, and every reader then takes its Python paths, to the same tables (analyzer/native/README.md).
``MCP_SSE_AUDIT_NATIVE=0`` in the environment turns it off for a run; tests turn :data:`ENABLED` off to compare.
"""
from __future__ import annotations

import os
import warnings

# what this code expects of the build (analyzer/native/src/lib.rs ABI): an editable install whose Rust was built
# before a pull has an older core, whose functions this code would call wrongly or miss
ABI = 9

try:
    from analyzer import _native as core
except ImportError:  # pragma: no cover - an install without cargo
    core = None

STALE = None  # why a core that is there is not used, or None


def usable(module) -> str | None:
    """None when ``module`` is a core this code can call; else why not (said once on stderr, and the Python paths read)."""
    got = getattr(module, "ABI", None)
    if got != ABI:
        return (f"the compiled core (analyzer/_native) is build {got}, this code needs build {ABI}: reading with the "
                f"Python paths (same results, slower); rebuild it with `pip install -e .` (cargo on PATH)")
    return None


if core is not None and (STALE := usable(core)) is not None:
    warnings.warn(STALE, RuntimeWarning, stacklevel=2)
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


def ints(n: int, got: tuple, typ):
    """An Arrow array of ``n`` 64-bit values of type ``typ`` (int64, a timestamp) from the compiled core's (values,
    validity, null count)."""
    import pyarrow as pa

    values, valid, nulls = got
    return pa.Array.from_buffers(typ, n, [pa.py_buffer(valid) if nulls else None, pa.py_buffer(values)], null_count=nulls)
