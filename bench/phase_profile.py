"""Where the analysis time goes, function by function (wall time, cumulative, nested calls included).

    python bench/phase_profile.py bench/out/traffic-1000k.jsonl [--top 40]

Wraps every module-level function of the analyzer's modules with a timer (the analyzer's files are
not touched: the wrappers live in this process only), runs ``pipeline.run`` + the CLI's
``json.dumps(indent=2)`` once, and prints the functions by cumulative wall time with their call
counts.  Unlike cProfile it adds almost no overhead, so the figures are those of a normal run;
Polars' time shows under the analyzer function that collected the frame.
"""
from __future__ import annotations

import argparse
import functools
import inspect
import json
import resource
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--out", help="also write the table as JSON here")
    a = ap.parse_args()

    from analyzer import document, pipeline, tables
    import importlib
    import pkgutil

    import analyzer.rules

    # every module of rules/, whatever its layout (the registry's lambdas look the rules up on their modules)
    rule_mods = [importlib.import_module(f"analyzer.rules.{m.name}") for m in pkgutil.iter_modules(analyzer.rules.__path__)]
    from analyzer.signals import boundaries, eras, idschemes, progress, rpc, streams, views
    from analyzer.document import build as findings
    from analyzer.ingest import har as ingest_har, jsonl as ingest_jsonl, inputs
    from analyzer.decode import jsonrpc
    from analyzer.outputs import document_json
    from analyzer.document import records

    stats: dict[str, list] = {}

    def wrap(mod, name, fn):
        key = f"{mod.__name__.split('.')[-1]}.{name}"

        @functools.wraps(fn)
        def w(*args, **kw):
            t = time.perf_counter()
            try:
                return fn(*args, **kw)
            finally:
                s = stats.setdefault(key, [0, 0.0])
                s[0] += 1
                s[1] += time.perf_counter() - t

        return w

    for mod in (boundaries, document, eras, findings, idschemes, progress, ingest_har, ingest_jsonl, inputs, jsonrpc, pipeline, rpc, streams, tables,
                views, *rule_mods):
        for name, fn in list(vars(mod).items()):
            if inspect.isfunction(fn) and fn.__module__ == mod.__name__ and name not in ("digest", "parse_ts", "media_type", "_opt_str", "_headers", "id_text", "_one", "extract"):
                setattr(mod, name, wrap(mod, name, fn))
    t = time.perf_counter()
    doc = pipeline.run([a.path], columnar=True).document  # as `analyze` runs it
    t_run = time.perf_counter() - t
    t2 = time.perf_counter()
    document_json(doc)  # what --json writes past outputs.PRETTY_UP_TO exchanges (its large arrays by Polars)
    t_json_c = time.perf_counter() - t2
    t1 = time.perf_counter()
    text = json.dumps(records.plain(doc), indent=2, ensure_ascii=False)  # (the dicts made here are not counted above)
    t_json = time.perf_counter() - t1
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rows = sorted(stats.items(), key=lambda kv: -kv[1][1])[: a.top]
    print(f"pipeline.run {t_run:.2f}s; json.dumps(indent=2) {t_json:.2f}s ({len(text) / 1e6:.0f} MB); "
          f"compact JSON as --json writes it {t_json_c:.2f}s; peak RSS {peak:.0f} MiB")
    print(f"{'function':44s} {'calls':>7s} {'seconds':>8s}")
    for k, (n, s) in rows:
        print(f"{k:44s} {n:7d} {s:8.2f}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"run": t_run, "json_indent": t_json, "json_plain": t_json_c, "peak_mib": peak,
                       "functions": {k: {"calls": n, "seconds": s} for k, (n, s) in stats.items()}}, f, indent=1)


if __name__ == "__main__":
    main()
