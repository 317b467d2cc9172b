"""The read of one input alone (``inputs.read_one`` with the single pass's ``Reading(compact=True)``): wall, CPU
and peak, and where the CPU goes, function by function and thread by thread.

    python bench/read_profile.py bench/out/traffic-1000k.jsonl                # wall, process CPU, peak: one JSON line
    python bench/read_profile.py bench/out/traffic-1000k.jsonl --timers       # ... and the reader's functions
    python bench/read_profile.py bench/out/traffic-1000k.jsonl --ndjson       # pl.read_ndjson of the same file
    PYTHONPATH=/path/to/other/tree python bench/read_profile.py ...           # another version of the analyzer

``--timers`` wraps the JSONL reader's functions (and those of the Builder, the redaction and the JSON-RPC pass)
with three clocks each: the calling thread's CPU (``time.thread_time``: what the function itself cost, on its
thread), the process CPU over the call (every thread's, Polars' pool included, so calls that overlap other work
count it too) and the wall time.  On a machine shared with other work, the process CPU (``time.process_time``) is
the steadier figure; compare versions by alternating runs in the same minutes (bench/SCALE.md, 2026-12-06).
A function missing from the version read is skipped.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import threading
import time

# (module, functions) wrapped by --timers: the reader's own, the Builder's, the redaction's and the JSON-RPC pass's
WRAPPED = [
    ("analyzer.ingest.jsonl", ["_read", "_read_batches", "_hand_out", "_in_order"]),
    ("analyzer.ingest.jsonl", ["_Reader.line"]),
    ("analyzer.ingest.jsonl_typed", ["decode", "typed"]),
    ("analyzer.ingest.jsonl_columns", ["sse_frame", "sse_rows"]),
    ("analyzer.ingest.jsonl_native", ["sse_frame"]),
    ("analyzer.decode.jsonrpc", ["sse_messages", "extract", "event_rpc", "assemble"]),
    ("analyzer.redact", ["column", "text", "url"]),
    ("analyzer.tables", ["_sse_messages"]),
    ("analyzer.tables", [f"Builder.{n}" for n in ("finish", "_events", "_exchange_table", "_flush_sealed", "exchange", "response",
                                                 "body", "event", "_messages", "flush_values", "seal")]),
]


def _wrap(timers: dict, owner, name: str, label: str) -> None:
    fn = getattr(owner, name)

    def timed(*a, **kw):
        t0, p0, w0 = time.thread_time(), time.process_time(), time.perf_counter()
        try:
            return fn(*a, **kw)
        finally:
            got = timers.setdefault(label, {"thread": 0.0, "process": 0.0, "wall": 0.0, "calls": 0,
                                            "on": threading.current_thread().name})
            got["thread"] += time.thread_time() - t0
            got["process"] += time.process_time() - p0
            got["wall"] += time.perf_counter() - w0
            got["calls"] += 1

    setattr(owner, name, timed)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--timers", action="store_true", help="CPU and wall time of the reader's functions, by thread")
    ap.add_argument("--ndjson", action="store_true", help="measure pl.read_ndjson of the file instead")
    a = ap.parse_args()

    from analyzer.__main__ import tune_allocator

    tune_allocator()  # as the command does, before Polars loads
    import importlib

    import polars as pl

    import analyzer
    from analyzer.ingest import inputs
    from analyzer.ingest.reading import Reading
    from analyzer.tables import keep_pandas_out

    keep_pandas_out()
    res: dict = {"tree": os.path.dirname(os.path.dirname(analyzer.__file__)), "file": os.path.basename(a.path),
                 "what": "read_ndjson" if a.ndjson else "read_one"}
    timers: dict = {}
    if a.timers:
        for module, names in WRAPPED:
            mod = importlib.import_module(module)
            for name in names:
                owner = mod
                *outer, leaf = name.split(".")
                for part in outer:
                    owner = getattr(owner, part, None)
                if owner is not None and hasattr(owner, leaf):
                    _wrap(timers, owner, leaf, f"{module.rsplit('.', 1)[1]}.{name}")
    p0, w0 = time.process_time(), time.perf_counter()
    if a.ndjson:
        frame = pl.read_ndjson(a.path)
        res.update(wall=time.perf_counter() - w0, cpu=time.process_time() - p0, shape=list(frame.shape))
    else:
        got = inputs.read_one(a.path, Reading(compact=True))
        res.update(wall=time.perf_counter() - w0, cpu=time.process_time() - p0, records=got.records, rejected=got.rejected,
                   exchanges=got.exchanges.num_rows, events=got.events_frame.height, messages=len(got.messages_frame),
                   anomalies=got.anomalies.num_rows)
    res["peak_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if timers:
        res["timers"] = {k: {f: round(v, 3) if isinstance(v, float) else v for f, v in t.items()}
                         for k, t in sorted(timers.items(), key=lambda kv: -kv[1]["thread"])}
    print(json.dumps(res))


if __name__ == "__main__":
    main()
