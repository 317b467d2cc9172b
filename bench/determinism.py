"""Run-to-run determinism of the whole command on one input: the CLI run K times, each in a fresh process with
another ``POLARS_MAX_THREADS`` (1, 2, 3, 8, cycling) and ``PYTHONHASHSEED``, ``SOURCE_DATE_EPOCH`` fixed; the
findings JSON must be byte-identical.  Where a run differs from the first, the fields that differ are counted per
rule (a finding's message, fingerprint ...), so the rule that depends on an order Polars does not promise is named.

    python bench/determinism.py bench/out/damaged-1000k.jsonl --runs 8

Exit 0 when every run wrote the same bytes, 1 otherwise.  tests/test_determinism.py runs the same comparison on
the samples and a 4,000-event capture; the orders that a join or a group-by of many threads leaves (and the panics
of several chunks: analyzer/formatted.py) show at 1M events, which a test does not generate.
"""
from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
THREADS = (1, 2, 3, 8)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path")
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=900, help="seconds one run may take")
    a = ap.parse_args()
    path = str(Path(a.path).resolve())
    with tempfile.TemporaryDirectory() as tmp:
        outs = []
        for i in range(a.runs):
            threads = THREADS[i % len(THREADS)]
            env = dict(os.environ, SOURCE_DATE_EPOCH="1800000000", POLARS_MAX_THREADS=str(threads), PYTHONHASHSEED=str(i))
            out = Path(tmp) / f"run-{i}.json"
            r = subprocess.run([sys.executable, "-m", "analyzer", "analyze", "-q", path, "--json", str(out)], cwd=ROOT, env=env,
                               capture_output=True, text=True, timeout=a.timeout)
            if r.returncode not in (0, 1) or not out.exists():
                print(f"run {i} ({threads} threads): exit {r.returncode}: {r.stderr.strip()[-400:]}")
                return 1
            digest = hashlib.sha256(out.read_bytes()).hexdigest()[:16]
            outs.append((threads, out, digest))
            print(f"run {i}: {threads} thread(s), sha256 {digest}", flush=True)
        first = json.loads(outs[0][1].read_bytes())
        differs = 0
        for i, (threads, out, digest) in enumerate(outs[1:], start=1):
            if digest == outs[0][2]:
                continue
            differs += 1
            doc = json.loads(out.read_bytes())
            for key in first:
                if first[key] == doc.get(key):
                    continue
                if isinstance(first[key], list) and isinstance(doc.get(key), list) and len(first[key]) == len(doc[key]):
                    fields: collections.Counter = collections.Counter()
                    for x, y in zip(first[key], doc[key]):
                        if x != y and isinstance(x, dict):
                            for name in x:
                                if x.get(name) != y.get(name):
                                    fields[(x.get("rule") or x.get("verdict") or "", name)] += 1
                    print(f"  run {i} differs in {key}: " + ", ".join(f"{rule or '-'}.{name} x{n}" for (rule, name), n in fields.most_common()))
                else:
                    print(f"  run {i} differs in {key}")
        print("the same bytes in every run" if not differs else f"{differs} of {len(outs) - 1} runs differ from the first")
        return 1 if differs else 0


if __name__ == "__main__":
    sys.exit(main())
