"""The spilling writer alone: ``spill._emit`` of N exchange-like records to both outputs (JSON Lines and JSON) in one pass.

    git show 5ad10e8:analyzer/scale/spill.py > /tmp/old_spill.py      # its own _open/_close (before issue 43)
    PYTHONPATH=$PWD python bench/spill_writer.py old 200000             # OLD_SPILL=/tmp/old_spill.py by default
    PYTHONPATH=$PWD python bench/spill_writer.py new 200000             # through analyzer.outputs.streamed

Prints the seconds, both files' sizes and the peak RSS; the outputs go to bench/out/ (ignored).
"""
from __future__ import annotations

import importlib.util
import os
import resource
import sys
import time
from pathlib import Path

OUT = Path(__file__).resolve().parent / "out" / "spill_writer"


def main() -> None:
    which, n = sys.argv[1], int(sys.argv[2])
    if which == "old":
        spec = importlib.util.spec_from_file_location("old_spill", os.environ.get("OLD_SPILL", "/tmp/old_spill.py"))
        mod = importlib.util.module_from_spec(spec)
        sys.modules["old_spill"] = mod
        spec.loader.exec_module(mod)
    else:
        from analyzer.scale import spill as mod
    rec = {"exchange_id": "x1", "session": "Sabc", "session_id": "0123456789abcdef0123456789abcdef", "stream": "s1",
           "source": "/data/capture-2026-11-13.jsonl", "location": "line 123456", "started": "2026-11-13T09:00:03.000000Z",
           "method": "GET", "url": "http://127.0.0.1:8000/mcp", "status": 200, "events": 12, "first_id": "1", "last_id": "12"}
    sections = [("exchange", "exchanges", ({**rec, "exchange_id": f"x{i}"} for i in range(n)))]  # bounded: n records
    OUT.parent.mkdir(parents=True, exist_ok=True)
    jl, js = f"{OUT}.ndjson", f"{OUT}.json"
    t = time.perf_counter()
    mod._emit({"schema_version": "1"}, {"exchanges": n}, sections, jl, js)
    print(which, n, f"{time.perf_counter() - t:.2f} s", os.path.getsize(jl), os.path.getsize(js),
          f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024} MiB")


if __name__ == "__main__":
    main()
