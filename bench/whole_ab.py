"""The whole single pass of two code trees on one file, taking turns, as `analyze --json` runs it: read, rules,
findings document and its JSON, with ``pl.read_ndjson`` of the same file timed before each run as the yardstick.

    python bench/whole_ab.py FILE --trees /work/wt-base /work/main [--rounds 6]

One long-lived worker process per tree (``PYTHONPATH`` and the working folder on the tree; the allocator's and
OpenBLAS's settings and the pandas block of the command, set before anything loads), each run in the order A B B A
A B ...: so the machine's drift moves both trees alike, which separate ``bench/run.py`` runs of each tree did not
(one tree's whole run moved 5.3-6.6 s between runs there).  Each round prints both trees' wall and CPU seconds, the
ratio to that round's ``read_ndjson``, and a sha256 of the JSON text, which must be the same for both trees
(``SOURCE_DATE_EPOCH`` is set, so the document's time is fixed); the end prints the medians and B/A.  Peak memory is
not measured here (each worker runs many rounds): ``bench/run.py`` and ``bench/memory_faults.py`` measure it.
"""
from __future__ import annotations

import argparse
import json
import os
import select
import statistics
import subprocess
import sys


def worker(path: str) -> None:
    from analyzer.__main__ import tune_allocator

    tune_allocator()  # as the command does, before Polars and NumPy load
    import hashlib
    import time

    import polars as pl

    from analyzer import pipeline
    from analyzer.outputs import document_json
    from analyzer.tables import keep_pandas_out

    keep_pandas_out()
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if line.strip() != "go":
            break
        t, c = time.perf_counter(), time.process_time()
        pl.read_ndjson(path)
        nd = time.perf_counter() - t, time.process_time() - c
        t, c = time.perf_counter(), time.process_time()
        doc = pipeline.run([path], columnar=True).document
        text = document_json(doc)
        wall, cpu = time.perf_counter() - t, time.process_time() - c
        del doc
        print(json.dumps({"read_ndjson": nd[0], "read_ndjson_cpu": nd[1], "wall": wall, "cpu": cpu,
                          "sha256": hashlib.sha256(text if isinstance(text, bytes) else text.encode()).hexdigest()[:16]}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--trees", nargs=2, required=True)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--timeout", type=float, default=900, help="seconds one run may take before both workers are stopped")
    ap.add_argument("--worker", action="store_true")
    a = ap.parse_args()
    if a.worker:
        worker(a.path)
        return
    path = os.path.abspath(a.path)
    procs = []
    for tree in a.trees:
        env = dict(os.environ, PYTHONPATH=tree, SOURCE_DATE_EPOCH="1780000000")
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), path, "--trees", *a.trees, "--worker"],
                                      cwd=tree, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
    for p in procs:
        json.loads(p.stdout.readline())
    runs: list[list[dict]] = [[], []]
    order = ([0, 1, 1, 0] * ((a.rounds + 1) // 2))[: 2 * a.rounds]
    try:
        for i in order:
            p = procs[i]
            p.stdin.write("go\n")
            p.stdin.flush()
            if not select.select([p.stdout], [], [], a.timeout)[0]:  # (one line a run: nothing is left buffered)
                for q in procs:
                    q.kill()
                raise SystemExit(f"a run of {a.trees[i]} took over {a.timeout:.0f} s: both workers stopped")
            line = p.stdout.readline()
            if not line:
                raise SystemExit(f"the worker of {a.trees[i]} ended (exit {p.wait()})")
            r = json.loads(line)
            runs[i].append(r)
            print(f"{a.trees[i]}: {r['wall']:.2f} s wall, {r['cpu']:.2f} CPU-s; read_ndjson {r['read_ndjson']:.2f} s "
                  f"({r['wall'] / r['read_ndjson']:.1f}x); sha256 {r['sha256']}", flush=True)
    finally:
        for p in procs:
            if p.stdin and not p.stdin.closed:
                try:
                    p.stdin.close()
                except BrokenPipeError:  # (a worker that ended)
                    pass
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    shas = {r["sha256"] for rs in runs for r in rs}
    med = [{k: statistics.median(r[k] for r in runs[i]) for k in ("wall", "cpu", "read_ndjson")} for i in (0, 1)]
    ratio = [statistics.median(r["wall"] / r["read_ndjson"] for r in runs[i]) for i in (0, 1)]
    print(f"medians of {a.rounds} rounds each, taking turns:")
    for i in (0, 1):
        print(f"  {a.trees[i]}: {med[i]['wall']:.2f} s wall ({min(r['wall'] for r in runs[i]):.2f}-{max(r['wall'] for r in runs[i]):.2f}), "
              f"{med[i]['cpu']:.2f} CPU-s, {ratio[i]:.2f}x read_ndjson (its own rounds' median)")
    print(f"  B/A: wall {med[1]['wall'] / med[0]['wall']:.3f}, CPU {med[1]['cpu'] / med[0]['cpu']:.3f}; "
          f"the same JSON in every run: {'yes' if len(shas) == 1 else 'NO: ' + ', '.join(sorted(shas))}")


if __name__ == "__main__":
    main()
