"""CPU time of the rule phases, function by function, two code trees taking turns on one machine.

    python bench/rule_phases.py FILE --trees /work/wt-base /work/wt-facts [--rounds 4] [--only judge] [--top 60]

One long-lived worker process per tree (``PYTHONPATH`` and the working folder on the tree) reads FILE once
(``pipeline.read_inputs`` with ``Reading(compact=True)``, then ``inputs.concat``), and then, each round, taking
turns (A B B A A B ...), times ``pl.read_ndjson`` of FILE and runs ``pipeline.analyze_tables`` (``columnar=True``)
with every module-level function of ``signals/``, ``rules/``, ``document/build.py`` and ``pipeline.py`` wrapped with
a wall and a CPU timer (``time.process_time``: the process's CPU, all of Polars' threads; a function's figure
includes what runs beside it in another thread, and nested calls count in their callers).  ``--only judge``: the
frames are built once (``streams.build``, ``eras.revisions``) and each round runs ``verdicts.judge`` alone (a
quicker loop for ``boundaries.facts``).  Prints the medians per tree, and "rule phases" = ``streams.build`` +
``eras.revisions`` + ``verdicts.judge`` + ``build_document`` against ``read_ndjson``'s CPU.  Each round's number of
findings and reconnects is printed, so both trees can be seen to do the same work.
"""
from __future__ import annotations

import argparse
import functools
import importlib
import inspect
import json
import os
import pkgutil
import statistics
import subprocess
import sys
import time

RULE_PHASES = ("streams.build", "eras.revisions", "verdicts.judge", "build.build_document")


def _wrap_all(stats: dict) -> None:
    import analyzer.document.build as build
    import analyzer.rules
    import analyzer.signals
    from analyzer import pipeline

    mods = [build, pipeline]
    for pkg in (analyzer.signals, analyzer.rules):
        mods += [importlib.import_module(f"{pkg.__name__}.{m.name}") for m in pkgutil.iter_modules(pkg.__path__)]

    def wrap(mod, name, fn):
        key = f"{mod.__name__.split('.')[-1]}.{name}"

        @functools.wraps(fn)
        def w(*args, **kw):
            c, t = time.process_time(), time.perf_counter()
            try:
                return fn(*args, **kw)
            finally:
                s = stats.setdefault(key, [0, 0.0, 0.0])
                s[0] += 1
                s[1] += time.process_time() - c
                s[2] += time.perf_counter() - t

        return w

    for mod in mods:
        for name, fn in list(vars(mod).items()):
            if inspect.isfunction(fn) and fn.__module__ == mod.__name__:
                setattr(mod, name, wrap(mod, name, fn))
    # callers that imported a function by name keep the unwrapped one: rebind those too
    for mod in mods:
        for name, obj in list(vars(mod).items()):
            if inspect.isfunction(obj) and obj.__module__ != mod.__name__ and obj.__module__.startswith("analyzer."):
                src = sys.modules.get(obj.__module__)
                if src is not None and getattr(src, name, None) is not obj and src in mods:
                    setattr(mod, name, getattr(src, name))


def worker(path: str, only: str) -> None:
    import dataclasses

    import polars as pl

    from analyzer import pipeline
    from analyzer.ingest import inputs
    from analyzer.ingest.reading import Reading
    from analyzer.signals import eras, streams

    got = pipeline.read_inputs([path], dataclasses.replace(Reading(), compact=True))
    tables = inputs.concat(got.parts)
    got.parts = []
    frames = links = rev = None
    if only == "judge":
        frames, links = streams.build(tables)
        rev = eras.revisions(frames)
    stats: dict = {}
    _wrap_all(stats)
    from analyzer.rules import verdicts  # (wrapped now)

    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if line.strip() != "go":
            break
        stats.clear()
        c = time.process_time()
        pl.read_ndjson(path)
        nd = time.process_time() - c
        if only == "judge":
            b = verdicts.judge(frames, links, rev)
            counts = {"reconnects": b.height}
        else:
            res = pipeline.analyze_tables(tables, got.input_rows, got.errors, got.skipped, got.readable, columnar=True)
            summ = res.document.get("summary", {}) if isinstance(res.document, dict) else {}
            counts = {"findings": len(res.document.get("findings", [])) if isinstance(res.document, dict) else None,
                      "summary": {k: v for k, v in summ.items() if isinstance(v, int)}}
        print(json.dumps({"read_ndjson": nd, "stats": stats, "counts": counts}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--trees", nargs=2, required=True)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--only", choices=["all", "judge"], default="all")
    ap.add_argument("--top", type=int, default=60)
    ap.add_argument("--worker", action="store_true")
    a = ap.parse_args()
    if a.worker:
        worker(a.path, a.only)
        return
    path = os.path.abspath(a.path)
    procs = []
    for tree in a.trees:
        env = dict(os.environ, PYTHONPATH=tree)
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), path, "--trees", *a.trees, "--only", a.only, "--worker"],
                                      cwd=tree, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
    for p in procs:  # read the file one tree at a time
        json.loads(p.stdout.readline())
    runs: list[list[dict]] = [[], []]
    order = [0, 1, 1, 0] * ((a.rounds + 1) // 2)
    order = order[: 2 * a.rounds]
    for i in order:
        p = procs[i]
        p.stdin.write("go\n")
        p.stdin.flush()
        r = json.loads(p.stdout.readline())
        runs[i].append(r)
        print(f"{a.trees[i]}: read_ndjson {r['read_ndjson']:.2f} CPU s, counts {json.dumps(r['counts'])[:200]}", file=sys.stderr, flush=True)
    for p in procs:
        p.stdin.close()
        p.wait()

    def med(i, key, field):
        return statistics.median(r["stats"].get(key, [0, 0.0, 0.0])[field] for r in runs[i])

    keys = sorted({k for rs in runs for r in rs for k in r["stats"]}, key=lambda k: -max(med(0, k, 1), med(1, k, 1)))[: a.top]
    print(f"medians of {a.rounds} rounds; CPU s (wall s); A = {a.trees[0]}, B = {a.trees[1]}")
    print(f"| function | calls | A CPU s | B CPU s | B/A | A wall s | B wall s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for k in keys:
        ca, cb = med(0, k, 1), med(1, k, 1)
        print(f"| `{k}` | {int(med(1, k, 0))} | {ca:.2f} | {cb:.2f} | {cb / ca if ca else float('nan'):.2f} | {med(0, k, 2):.2f} | {med(1, k, 2):.2f} |")
    nd = [statistics.median(r["read_ndjson"] for r in runs[i]) for i in (0, 1)]
    phases = [[sum(r["stats"].get(k, [0, 0.0])[1] for k in RULE_PHASES) for r in runs[i]] for i in (0, 1)]
    allnd = statistics.median([r["read_ndjson"] for rs in runs for r in rs])
    for i in (0, 1):
        print(f"{a.trees[i]}: rule phases CPU s per round {', '.join(f'{x:.2f}' for x in phases[i])}; median {statistics.median(phases[i]):.2f}; "
              f"read_ndjson median {nd[i]:.2f} (all runs {allnd:.2f}); ratio {statistics.median(phases[i]) / allnd:.2f}x")


if __name__ == "__main__":
    main()
