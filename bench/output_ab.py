"""The document's last steps, each against the way it was done before, in one process, taking turns.

    python bench/output_ab.py FILE [--rounds 8]

Reads FILE and analyzes it once (``pipeline.analyze_tables`` with ``columnar=True``, as ``analyze`` does), then, each
round, taking turns (A B, B A, ...), times two steps of what follows the rules, each against its earlier form kept
here as the baseline:

- **findings read**: what the summary (``Summary.add_body``: each finding's severity) and ``calls_hit.of`` (the keys
  ``add_finding`` reads) take of the findings.  Before: every finding made as a dict for each of the two.  Now:
  ``FindingRecords.column`` of a plain key, and ``some`` with a keep by rule (finding_rows.py).
- **records JSON**: ``Records.write_json`` of the exchanges and the boundaries.  Before: one slice's text at a time.
  Now: two at a time, one in a worker thread (records.py).

Both forms' outputs are compared (the same values, the same bytes) before anything is timed.  Prints the medians
and the ratio of the medians; a noisy machine moves both forms alike, since they run in the same minutes and
process (two processes of the same code differed by 30 % here).
"""
from __future__ import annotations

import argparse
import dataclasses
import io
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("path")
    ap.add_argument("--rounds", type=int, default=8)
    args = ap.parse_args()

    from analyzer.__main__ import tune_allocator

    tune_allocator()  # as the command does, before Polars loads
    import polars as pl

    from analyzer import pipeline
    from analyzer.document import calls_hit, records
    from analyzer.ingest import inputs
    from analyzer.tables import keep_pandas_out

    keep_pandas_out()
    got = pipeline.read_inputs([args.path], dataclasses.replace(pipeline.Reading(), compact=True), None)
    tables = inputs.concat(got.parts)
    doc = pipeline.analyze_tables(tables, got.input_rows, got.errors, got.skipped, got.readable, consume=True, columnar=True).document
    found = doc["findings"]

    def findings_before():
        severities = [r.get("severity") for piece in found._slices() for r in piece]
        read = [{k: r[k] for k in calls_hit._READ_FINDING if k in r} for piece in found._slices() for r in piece]
        return severities, [r for r in read if r.get("rule") in calls_hit._RAN_TWICE]

    def findings_now():
        return found.column("severity"), list(found.some(calls_hit._READ_FINDING, pl.col("rule").is_in(list(calls_hit._RAN_TWICE))))

    def slice_at_a_time(rec, out) -> None:  # Records.write_json before, for frames larger than a slice
        whole = rec._frame if rec._frame is not None else rec._plan
        height, step = len(rec), rec._slice_rows()
        if rec._frame is not None and height <= step:
            whole.write_json(out)
            return
        out.write(b"[")
        for at in range(0, height, step):
            piece = whole.slice(at, step)
            text = (piece if rec._frame is not None else piece.collect()).write_json().encode("utf-8")
            out.write(b"," if at else b"")
            out.write(memoryview(text)[1:-1])
        out.write(b"]")

    def json_with(write):
        texts = []
        for key in ("exchanges", "boundaries"):
            buf = io.BytesIO()
            write(doc[key], buf)
            texts.append(buf.getvalue())
        return texts

    steps = {
        "findings read": (findings_before, findings_now),
        "records JSON": (lambda: json_with(slice_at_a_time), lambda: json_with(records.Records.write_json)),
    }
    for name, (before, now) in steps.items():
        if before() != now():
            sys.exit(f"{name}: the two forms give different output")
    print(f"{args.path}: {len(found):,} findings, {len(doc['exchanges']):,} exchanges, {len(doc['boundaries']):,} boundaries; "
          f"both forms' outputs equal; {args.rounds} rounds, taking turns")
    print("| step | before: median s | now: median s | now / before | before, each round | now, each round |")
    print("|---|---:|---:|---:|---|---|")
    for name, (before, now) in steps.items():
        times: dict[str, list[float]] = {"before": [], "now": []}
        for r in range(args.rounds):
            for label, fn in (("before", before), ("now", now)) if r % 2 == 0 else (("now", now), ("before", before)):
                t = time.perf_counter()
                fn()
                times[label].append(time.perf_counter() - t)
        b, n = statistics.median(times["before"]), statistics.median(times["now"])
        print(f"| {name} | {b:.3f} | {n:.3f} | {n / b:.2f} | {', '.join(f'{x:.3f}' for x in times['before'])} | "
              f"{', '.join(f'{x:.3f}' for x in times['now'])} |")


if __name__ == "__main__":
    main()
