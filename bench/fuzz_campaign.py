"""A long fuzz campaign over the properties of tests/test_fuzz.py, bounded by a time budget.

    /work/venv/bin/python bench/fuzz_campaign.py --minutes 25            # what bench/README.md reports
    nice -n 10 python bench/fuzz_campaign.py --minutes 5 --only sse      # a quick one, SSE properties only
    nice -n 10 python bench/fuzz_campaign.py --minutes 20 --damage-only  # damaged captures only (round three)
    nice -n 10 python bench/fuzz_campaign.py --minutes 0 --damage-only --header-sweep   # every bit of every record header

The CI run of tests/test_fuzz.py takes its ``ci`` profile (tens of examples per property).  This script
imports the same module under ``HYPOTHESIS_PROFILE=long`` and runs every hypothesis property again and
again (each call a fresh random seed, in batches sized to about 30 s) until the property's share of the
budget is used, then sweeps truncation points of every file in sample_logs/ (all offsets of a file, in a
seeded random order, round-robin over the files) with the same invariants as the CI sweep.

The damage phase (``--damage-share`` of the budget, or all of it with ``--damage-only``) damages the
committed captures one record at a time -- every sample_logs/**/*.pcap and *.pcapng, the TLS ones with
their key logs -- in three families taking turns: classic pcap record headers (12 or 16 bytes zeroed,
a bit of the time, sub-second, captured or wire length flipped, 16 random bytes), pcapng blocks (the
same over an Enhanced Packet Block: type, head and trailer lengths, interface, time, lengths) and TLS
records (one bit or byte of a record's ciphertext, or of its 5-byte header).  Each input runs through
the CLI in-process (``analyze --json-lines``, bounded by an alarm) and is judged per TCP flow against
the undamaged run (tests/capture_damage.py): the exit code, the time, the flows the damage did not
touch that came out different ("lost": must be 0), the touched flows that changed, and the inputs
where something changed with no anomaly row ("silent": must be 0).  A failing input is listed with its
sample, kind and seed: ``python tests/capture_damage.py SAMPLE KIND SEED out.pcap`` writes it again.

``--header-sweep`` adds a deterministic pass that is not part of the budget: every bit of every field
of every record header of every sample (pcapng: of every Enhanced Packet Block, its trailer too), and
each header zeroed, set to 0xff or random, through the reader alone -- each time, every other record's
packet must still be read.

A property that fails is recorded (hypothesis' shrunk falsifying example and the error) and not run
again; the campaign goes on with the others.  Failures are also kept in hypothesis' example database
(``.hypothesis/``), so the next ``pytest tests/test_fuzz.py`` replays them first.

Writes ``bench/out/fuzz_campaign.json`` (``--out``) and prints a markdown table: per property the test
cases run (hypothesis' generated, replayed and shrinking calls of the test body), the time, and the
result; per format the truncation points checked.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import random
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out" / "fuzz_campaign.json"
BATCH_SECONDS = 30.0  # aim of one hypothesis call; a failure is reported at most this late


def load_module(profile: str):
    os.environ["HYPOTHESIS_PROFILE"] = profile
    sys.path.insert(0, str(ROOT / "tests"))
    sys.path.insert(0, str(ROOT))
    return importlib.import_module("test_fuzz")


def properties(mod, only: str | None) -> list[tuple[str, object]]:
    found = [(name, fn) for name, fn in vars(mod).items() if name.startswith("test_") and hasattr(fn, "hypothesis")]
    return [(n, f) for n, f in sorted(found) if not only or only in n]


def run_property(name: str, fn, budget: float, log) -> dict:
    """Call the property in batches until ``budget`` seconds are used; count the test cases run."""
    from hypothesis import settings

    count = [0]
    inner = fn.hypothesis.inner_test

    def counted(*a, **kw):
        count[0] += 1
        return inner(*a, **kw)

    fn.hypothesis.inner_test = counted
    base = fn._hypothesis_internal_use_settings
    started = time.monotonic()
    batch, calls, failure = 50, 0, None
    try:
        while time.monotonic() - started < budget:
            fn._hypothesis_internal_use_settings = settings(base, max_examples=batch)
            t0, c0 = time.monotonic(), count[0]
            try:
                fn()
            except Exception as exc:  # a falsifying example: hypothesis has shrunk it and put it in the message
                failure = {"error": f"{type(exc).__name__}: {exc}"[:4000], "traceback": traceback.format_exc(limit=-8)[-6000:]}
                log(f"  FAILED {name}: {type(exc).__name__}: {str(exc)[:300]}")
                break
            calls += 1
            spent, ran = time.monotonic() - t0, max(1, count[0] - c0)
            left = budget - (time.monotonic() - started)
            # next batch: about BATCH_SECONDS, never past the budget (at least one example)
            per = spent / ran
            batch = max(1, min(int(min(BATCH_SECONDS, left) / per) if per > 0 else 10_000, 100_000))
    finally:
        fn.hypothesis.inner_test = inner
        fn._hypothesis_internal_use_settings = base
    secs = time.monotonic() - started
    return {"property": name, "test_cases": count[0], "calls": calls, "seconds": round(secs, 1),
            "per_second": round(count[0] / secs, 1) if secs else None, "failure": failure}


def truncation_phase(mod, budget: float, log) -> dict:
    """Every offset of every sample file, in a seeded random order, round-robin over the files, until the budget is used."""
    rng = random.Random(2026)
    plans = []
    for path in mod.SAMPLES:
        n = len(path.read_bytes())
        pts = list(range(n + 1))
        rng.shuffle(pts)
        plans.append([path, pts, 0])
    started = time.monotonic()
    per_kind: dict[str, dict] = {}
    failures = []
    step = 25
    while plans and time.monotonic() - started < budget:
        for plan in list(plans):
            path, pts, done = plan
            chunk = sorted(pts[done : done + step])
            kind = "gz" if path.name.endswith(".gz") else mod._kind(path)
            stat = per_kind.setdefault(kind, {"files": 0, "points": 0, "offsets": 0, "seconds": 0.0})
            if done == 0:
                stat["files"] += 1
                stat["offsets"] += len(pts)
            t0 = time.monotonic()
            try:
                mod.truncation_sweep(path, chunk)
            except Exception as exc:
                failures.append({"file": str(path.relative_to(ROOT)), "error": f"{type(exc).__name__}: {exc}"[:2000]})
                log(f"  FAILED truncation {path.name}: {type(exc).__name__}: {str(exc)[:300]}")
                plans.remove(plan)
                continue
            stat["seconds"] += time.monotonic() - t0
            stat["points"] += len(chunk)
            plan[2] = done + step
            if plan[2] >= len(pts):
                plans.remove(plan)
            if time.monotonic() - started >= budget:
                break
    for stat in per_kind.values():
        stat["seconds"] = round(stat["seconds"], 1)
        stat["coverage"] = round(stat["points"] / stat["offsets"], 4) if stat["offsets"] else None
    return {"seconds": round(time.monotonic() - started, 1), "per_format": per_kind, "failures": failures}


def damage_phase(budget: float, log, max_inputs: int = 0, seed: int = 2026) -> dict:
    """Damaged captures (tests/capture_damage.py) until ``budget`` seconds are used (or ``max_inputs`` run)."""
    sys.path.insert(0, str(ROOT / "tests"))
    sys.path.insert(0, str(ROOT))
    import capture_damage

    started = time.monotonic()
    camp = capture_damage.Campaign(seed=seed)
    s = camp.stats
    log(f"damage: {len(camp.layouts)} captures ({sum(1 for lay in camp.layouts if lay.tls)} with TLS records and a key log), "
        f"{sum(len(p) for _f, p in camp.plan)} (sample, kind) pairs in {len(camp.plan)} families; undamaged runs took "
        f"{time.monotonic() - started:.0f} s")
    while time.monotonic() - started < budget and not (max_inputs and s["inputs"] >= max_inputs):
        camp.step()
        if s["inputs"] % 250 == 0:
            log(f"  {s['inputs']} inputs, exits {s['exits']}, lost flows {s['lost_flows']} of {s['untouched_flows']} untouched, "
                f"worst {s['worst_seconds']} s")
    s["seconds"] = round(time.monotonic() - started, 1)
    s["seed"] = seed
    s["samples"] = [str(lay.path.relative_to(ROOT)) for lay in camp.layouts]
    families: dict[str, dict] = {}
    for key, k in s["per_kind"].items():
        f = families.setdefault(key.split(": ")[0], {"inputs": 0, "lost_flows": 0, "bad_exits": 0, "kinds": 0})
        f["inputs"] += k["inputs"]
        f["lost_flows"] += k["lost_flows"]
        f["bad_exits"] += k["bad_exits"]
        f["kinds"] += 1
    s["families"] = families
    return s


def header_sweep_phase(log) -> dict:
    """Every bit of every record header of every sample capture, through the reader (tests/capture_damage.py)."""
    sys.path.insert(0, str(ROOT / "tests"))
    sys.path.insert(0, str(ROOT))
    import capture_damage

    started = time.monotonic()
    total: dict = {"samples": 0, "records": 0, "mutations": 0, "others_lost": 0, "silent": 0, "per_field": {}, "failures": []}
    for path in capture_damage.SAMPLES:
        lay = capture_damage.Layout.of(path)
        got = capture_damage.header_sweep(lay)
        total["samples"] += 1
        total["records"] += len(lay.records)
        for key in ("mutations", "others_lost", "silent"):
            total[key] += got[key]
        for field, f in got["per_field"].items():
            t = total["per_field"].setdefault(f"{lay.kind}: {field}", {"mutations": 0, "others_lost": 0})
            t["mutations"] += f["mutations"]
            t["others_lost"] += f["others_lost"]
        total["failures"] += got["failures"][:20]
        log(f"  header sweep {path.name}: {got['mutations']} mutations, {got['others_lost']} cost another record")
    total["seconds"] = round(time.monotonic() - started, 1)
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=25.0, help="total time budget (default 25)")
    ap.add_argument("--truncation-share", type=float, default=0.2, help="share of the budget for the truncation sweeps (default 0.2)")
    ap.add_argument("--only", help="only properties whose name contains this (the truncation sweeps still run, unless --no-truncation)")
    ap.add_argument("--no-truncation", action="store_true")
    ap.add_argument("--damage-share", type=float, default=0.2, help="share of the budget for the damaged captures (default 0.2)")
    ap.add_argument("--damage-only", action="store_true", help="only the damaged captures, for the whole budget")
    ap.add_argument("--damage-inputs", type=int, default=0, help="stop the damage phase after this many inputs (default: the budget)")
    ap.add_argument("--seed", type=int, default=2026, help="seed of the damage phase (default 2026)")
    ap.add_argument("--header-sweep", action="store_true", help="also every bit of every record header of every sample, "
                    "through the reader (deterministic; not in the budget: about 2 min)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    total = args.minutes * 60
    damage_budget = total if args.damage_only else total * args.damage_share
    started = time.monotonic()
    results: list[dict] = []
    trunc = None
    if not args.damage_only:
        mod = load_module("long")
        props = properties(mod, args.only)
        trunc_budget = 0 if args.no_truncation else total * args.truncation_share
        each = (total - trunc_budget - damage_budget) / max(1, len(props))
        log(f"{len(props)} properties, {each:.0f} s each; truncation sweeps {trunc_budget:.0f} s; damaged captures {damage_budget:.0f} s")
        for name, fn in props:
            log(f"{name} ...")
            r = run_property(name, fn, each, log)
            log(f"  {r['test_cases']} test cases in {r['seconds']} s")
            results.append(r)
        trunc = truncation_phase(mod, trunc_budget, log) if trunc_budget else None
    damage = damage_phase(damage_budget, log, args.damage_inputs, args.seed) if damage_budget else None
    sweep = header_sweep_phase(log) if args.header_sweep else None
    report = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - (time.monotonic() - started))),
        "minutes_budget": args.minutes,
        "seconds": round(time.monotonic() - started, 1),
        "python": platform.python_version(),
        "hypothesis": importlib.import_module("hypothesis").__version__,
        "cpus": os.cpu_count(),
        "properties": results,
        "truncation": trunc,
        "damage": damage,
        "header_sweep": sweep,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(table(report))
    log(f"wrote {args.out}")
    failed = (trunc and trunc["failures"]) or (damage and damage["failures"]) or (sweep and sweep["failures"])
    sys.exit(1 if any(r["failure"] for r in results) or failed else 0)


def table(report: dict) -> str:
    lines = ["| property | test cases | seconds | cases/s | result |", "|---|---:|---:|---:|---|"] if report["properties"] else []
    for r in report["properties"]:
        result = "ok" if not r["failure"] else "FAILED: " + r["failure"]["error"].splitlines()[0][:120]
        lines.append(f"| `{r['property']}` | {r['test_cases']:,} | {r['seconds']:.0f} | {r['per_second']:,.0f} | {result} |")
    t = report.get("truncation")
    if t:
        lines += ["", "| truncation sweep | files | points checked | of offsets | seconds |", "|---|---:|---:|---:|---:|"]
        for kind, s in sorted(t["per_format"].items()):
            lines.append(f"| {kind} | {s['files']} | {s['points']:,} | {s['offsets']:,} ({s['coverage']:.1%}) | {s['seconds']:.0f} |")
        for f in t["failures"]:
            lines.append(f"\nFAILED truncation {f['file']}: {f['error'][:300]}")
    d = report.get("damage")
    if d:
        lines += ["", "| damaged captures | kinds | inputs | exit 3 or timeout | flows lost (untouched by the damage) |", "|---|---:|---:|---:|---:|"]
        for fam, f in sorted(d["families"].items()):
            lines.append(f"| {fam} | {f['kinds']} | {f['inputs']:,} | {f['bad_exits']} | {f['lost_flows']} |")
        exits = ", ".join(f"{code}: {n:,}" for code, n in sorted(d["exits"].items()))
        lines.append(f"\n{d['inputs']:,} damaged inputs of {len(d['samples'])} captures in {d['seconds'] / 60:.1f} min; exits {exits}; "
                     f"worst time per input {d['worst_seconds']} s ({d['worst_input']}); flows the damage did not touch: "
                     f"{d['untouched_flows']:,}, lost {d['lost_flows']}; flows it touched: {d['touched_flows']:,}, changed "
                     f"{d['touched_flows_changed']:,}; changed with no anomaly row: {d['silent']}")
        for f in d["failures"][:20]:
            lines.append(f"\nFAILED damage {f['sample']} {f['kind']} seed {f['seed']}: exit {f['exit']} {f['error'][:200]} "
                         f"lost {f['lost_flows']} silent {f['silent']}")
    h = report.get("header_sweep")
    if h:
        lines += ["", "| header sweep (reader) | mutations | another record lost |", "|---|---:|---:|"]
        for field, f in sorted(h["per_field"].items()):
            lines.append(f"| {field} | {f['mutations']:,} | {f['others_lost']} |")
        lines.append(f"\n{h['mutations']:,} header mutations over {h['records']:,} records of {h['samples']} captures in "
                     f"{h['seconds'] / 60:.1f} min: {h['others_lost']} cost another record ({h['silent']} without an anomaly row)")
        for f in h["failures"][:20]:
            lines.append(f"\nFAILED header sweep {f['sample']} record {f['record']} {f['damage']}: {f['packets_lost']} other packets lost")
    n = sum(r["test_cases"] for r in report["properties"])
    if report["properties"] or t:
        lines.append(f"\n{n:,} property test cases and {sum(s['points'] for s in (t or {}).get('per_format', {}).values()):,} "
                     f"truncation points in {report['seconds'] / 60:.1f} min")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
