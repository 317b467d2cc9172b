"""The ``mcp-sse-audit`` command (and ``python -m analyzer``).

It only sets the allocator's defaults before Polars loads (and OpenBLAS's threads before NumPy loads), then runs
``analyzer.cli.main``.  Nothing here imports Polars: jemalloc, Polars' allocator, reads its options once, when Polars
first allocates.
"""
from __future__ import annotations

import os
import sys

# Polars' jemalloc keeps a separate arena per thread group (8 on 2 cores); memory one thread freed is then
# not reused by a thread of another arena.  One arena: peak RSS 712-718 -> 659-675 MB on the 2M tiny
# records and 2,131-2,141 -> 2,017-2,022 MB on 1M events, wall time unchanged (bench/README.md).
# Freed pages: Polars 2.1 asks jemalloc to keep them 0.5 s (dirty) and then 1 s more (muzzy) before they go back
# to the system; a phase that frees and allocates a table's worth of columns within that time (joining the
# read's chunks into one table) then holds both.  Returned after 100 ms, muzzy not kept: 2M tiny records peak
# 486-502 -> 403-423 MB, 250k events 696-722 -> 622-643 MB, 1M events 1,923 -> 1,834-1,859 MB, wall time within
# the runs' spread (alternating runs, bench/SCALE.md; 0 ms costs 2.5x the system time at 1M).
# No background threads: when memory runs out (a container's limit) each of them failed to start with a line on
# stderr, 5,883 lines before the abort under `prlimit --as=800M`, 4 without; the purging they did happens on the
# allocating threads instead (250k events, two alternating pairs on a busy machine: 23.3 and 27.3 s without them,
# 29.0 and 30.5 s with; peak RSS within 2%).
JEMALLOC_DEFAULTS = "narenas:1,dirty_decay_ms:100,muzzy_decay_ms:0,background_thread:false"
JEMALLOC_VARIABLE = "_RJEM_MALLOC_CONF"  # the prefixed name of the jemalloc that Polars links


def tune_allocator() -> None:
    """The defaults above, then the user's own options (jemalloc takes the last value of an option), and
    only before Polars loads.  Polars then puts its own decay options in front of the whole
    (``dirty_decay_ms:500,muzzy_decay_ms:1000`` in Polars 2.1), which ours and the user's follow.  And OpenBLAS one
    thread, before NumPy loads (below)."""
    if "polars" not in sys.modules:
        user = os.environ.get(JEMALLOC_VARIABLE)
        os.environ[JEMALLOC_VARIABLE] = JEMALLOC_DEFAULTS + ("," + user if user else "")
    if "numpy" not in sys.modules:
        # NumPy is loaded (by PyArrow) but never computes here; its OpenBLAS starts a thread per core that spins
        # before it sleeps: 0.07-0.09 CPU-s of every run, on the cores the read is about to use (perf: 2.75 % of a
        # read's samples).  One thread: none started.  A user's own setting is kept.
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


CANNOT_LOAD = ("error: internal error: the program could not load ({}: {}); when its memory is limited (ulimit -v, "
               "prlimit --as, a container's limit) this is the limit being too low to start: raise it\n")


def main() -> int:
    tune_allocator()
    import warnings

    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("default")
        try:
            from analyzer.cli import main as cli_main
        except Exception as exc:  # noqa: BLE001
            # Before the command line exists, whose own handler makes every internal error exit 3 in one line, so
            # must this: under a low memory limit the loading fails as MemoryError, as an ImportError of a native
            # module ("failed to map segment"), or as Polars half-loaded (a NameError later) -- never a
            # traceback that exits 1, which reads as "findings".
            first = str(exc).splitlines()[0] if str(exc) else ""
            sys.stderr.write(CANNOT_LOAD.format(type(exc).__name__, first[:200]))
            return 3
    for w in said:  # the loading went well: what it warned about is said as before
        warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    return cli_main()


if __name__ == "__main__":
    sys.exit(main())
