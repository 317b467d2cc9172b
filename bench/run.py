"""The scale benchmark of issue 5: one command, the same files for every measurement.

    /work/venv/bin/python bench/run.py                       # sizes 125k,250k,500k,1000k events
    python bench/run.py --sizes 125k,250k --pcap-size 125k   # smaller; pcap ingest at 125k only
    python bench/run.py --sizes 1000k --profile 1000k        # + cProfile of one full run

For every size it generates (once; cached under bench/out/ by generator source hash) the JSONL and
HAR of the same synthetic traffic with ``bench/generate.py``, then runs each measured step in a
**fresh subprocess**, so its peak RSS is its own (``os.wait4`` → ``ru_maxrss``):

* ``full``          ``analyzer.pipeline.run([jsonl])`` + the JSON text ``mcp-sse-audit analyze X --json F`` writes
                    (``outputs.document_json``: indented up to 20,000 exchanges, compact past that) written to a file; per-phase times
                    by wrapping the pipeline's module functions (ingest, streams, eras, verdicts, findings)
* ``read_ndjson``   bare ``polars.read_ndjson(jsonl)`` (default schema inference, as a user calls it)
* ``read_ndjson_all`` the same with ``infer_schema_length=None`` (every field of every line kept)
* ``naive``         ``bench/naive_baseline.py`` (per-line ``json.loads``, the reference's four cases)
* ``ingest_<fmt>``  ``analyzer.ingest.inputs.read_one`` only → MB/s per format (JSONL, HAR; pcap at ``--pcap-size``)
* ``full_har``      the full analysis of the HAR (its peak RSS against the HAR's size)
* ``idle``          ``import polars, analyzer.pipeline`` and nothing else: the RSS floor of every step
* ``--shared``      the full analysis again on the ``--shared-payloads`` variant (sessions sending the
                    same (id, payload)), which the cross-session check pays for (bench/SCALE.md)
* ``--profile``     a cProfile of one full run → bench/out/profile-<size>.txt
* ``--spaced``      the JSONL also written as Python's default ``json.dumps`` writes it (``", "`` / ``": "``
                    separators, ASCII escapes: ``traffic-<size>-spaced.jsonl``, the same records), and ``full``,
                    ``read_ndjson`` and ``ingest_jsonl`` measured on it too (``*_spaced``; issue [4/5]: another
                    writer's JSON must take the reader's fast path)
* ``--quiet-wait``  seconds to wait at most, before each step, for the machine to be idle (default 900)

``--table-only`` prints the table of bench/out/results.json again.  Results: bench/SCALE.md.

Times are measured inside the child around the operation (interpreter start and imports excluded, the
same for every step); ``wall`` in results.json includes them.  Then every boundary of the JSONL and HAR
analyses is checked against ``truth-<size>.json`` (``bench/truthcheck.py``), and so are the naive
loop's verdicts.  Prints a markdown table of ratios and raw figures; writes bench/out/results.json.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from machine_info import cpu_model  # bench/ is on sys.path when a script here runs

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT = HERE / "out"
sys.path.insert(0, str(HERE))

import truthcheck  # noqa: E402

DEFAULT_SIZES = "125k,250k,500k,1000k"
TARGETS = {"full/read_ndjson time": 2.0, "naive/full time": 3.0, "full/read_ndjson peak RSS": 2.0}


# ------------------------------------------------------------------------------------- child steps


def _step(args: argparse.Namespace) -> None:
    """Runs inside the measured subprocess; prints one JSON line on stdout."""
    res: dict = {}
    if args.step == "idle":
        import polars  # noqa: F401

        import analyzer.pipeline  # noqa: F401
    elif args.step in ("read_ndjson", "read_ndjson_all"):
        import polars as pl

        t = time.perf_counter()
        df = pl.read_ndjson(args.path, infer_schema_length=None) if args.step == "read_ndjson_all" else pl.read_ndjson(args.path)
        res["seconds"] = time.perf_counter() - t
        res["shape"] = list(df.shape)
    elif args.step == "ingest":
        from analyzer.ingest import inputs

        t = time.perf_counter()
        got = inputs.read_one(args.path)
        res["seconds"] = time.perf_counter() - t
        res.update(format=got.format, records=got.records, rejected=got.rejected, exchanges=got.exchanges.num_rows,
                   events=got.events.num_rows, messages=got.messages.num_rows)
    elif args.step in ("full", "profile"):
        from analyzer.__main__ import tune_allocator

        tune_allocator()  # as the command does, before Polars loads (one jemalloc arena)
        from analyzer.signals import eras, streams
        from analyzer.document import build as findings
        from analyzer.rules import cursors, verdicts
        from analyzer.ingest import inputs
        from analyzer import pipeline
        from analyzer.outputs import document_json
        from analyzer.tables import keep_pandas_out

        keep_pandas_out()  # as `analyze` does (pyarrow would import pandas, when installed, for nothing)
        phases: dict[str, float] = {}

        def timed(mod, name, label):
            fn = getattr(mod, name)

            def wrapper(*a, **kw):
                t0 = time.perf_counter()
                try:
                    return fn(*a, **kw)
                finally:
                    phases[label] = phases.get(label, 0.0) + time.perf_counter() - t0

            setattr(mod, name, wrapper)

        if args.step == "full":
            for mod, name, label in [(inputs, "read_one", "ingest"), (inputs, "concat", "concat"), (streams, "build", "streams"),
                                     (eras, "revisions", "eras"), (verdicts, "judge", "verdicts"),
                                     (findings, "build_document", "findings"),
                                     (cursors, "cross_session", "findings.cross_session")]:  # nested in findings
                timed(mod, name, label)
        prof = None
        if args.step == "profile":
            import cProfile

            prof = cProfile.Profile()
            prof.enable()
        t = time.perf_counter()
        doc = pipeline.run([args.path], columnar=True).document  # as `analyze` runs it
        t_run = time.perf_counter() - t
        t1 = time.perf_counter()
        text = document_json(doc)  # the CLI's own writer: compact past outputs.PRETTY_UP_TO exchanges, as --json writes it
        with open(args.out, "wb") as f:  # (UTF-8 bytes, as the CLI writes them)
            f.write(text)
        t_json = time.perf_counter() - t1
        if prof is not None:
            prof.disable()
            import io
            import pstats

            buf = io.StringIO()
            st = pstats.Stats(prof, stream=buf)
            buf.write(f"# cProfile of pipeline.run + json.dumps on {args.path} (profiling slows Python code ~1.5-2x)\n")
            buf.write(f"# run {t_run:.2f}s, json {t_json:.2f}s under the profiler\n\n## by cumulative time\n")
            st.sort_stats("cumulative").print_stats(45)
            buf.write("\n## by own time\n")
            st.sort_stats("tottime").print_stats(35)
            Path(args.profile_out).write_text(buf.getvalue())
        res.update(seconds=t_run + t_json, run_seconds=t_run, json_seconds=t_json, json_bytes=len(text),
                   phases=phases, summary={k: doc["summary"][k] for k in ("records", "sessions", "exchanges", "events", "messages", "boundaries")},
                   findings=len(doc["findings"]), rules=_count(f["rule"] for f in doc["findings"]))
    print(json.dumps(res))


def _count(items) -> dict:
    out: dict = {}
    for x in items:
        out[x] = out.get(x, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


# ---------------------------------------------------------------------------------------- parent


def measure(cmd: list[str], label: str, repeat: int = 1) -> dict:
    """Run ``cmd`` in a fresh process ``repeat`` times; keep the fastest run and its own peak RSS.

    The child is reaped with ``os.wait4``, whose rusage is that child's alone (``ru_maxrss``: its
    peak resident set, KiB on Linux)."""
    import tempfile

    best = None
    for _ in range(repeat):
        busy = wait_quiet()
        with tempfile.TemporaryFile() as fo, tempfile.TemporaryFile() as fe:
            t = time.perf_counter()
            p = subprocess.Popen(cmd, stdout=fo, stderr=fe, cwd=ROOT)
            _pid, status, ru = os.wait4(p.pid, 0)
            wall = time.perf_counter() - t
            p.returncode = os.waitstatus_to_exitcode(status)
            fo.seek(0)
            fe.seek(0)
            out, err = fo.read().decode(), fe.read().decode()
        if p.returncode != 0:
            raise RuntimeError(f"{label} failed ({p.returncode}): {err[-2000:]}")
        lines = [ln for ln in out.splitlines() if ln.startswith("{")]
        res = json.loads(lines[-1]) if lines else {}
        res["wall"] = wall
        res["cpu_seconds"] = ru.ru_utime + ru.ru_stime
        res["maxrss_mb"] = ru.ru_maxrss / 1024
        res["machine_busy_before"] = busy
        if best is None or res.get("seconds", wall) < best.get("seconds", best["wall"]):
            best = res
    return best


def _cpu_busy(seconds: float = 2.0) -> float:
    """Fraction of all CPUs busy over ``seconds`` (from /proc/stat)."""
    def snap():
        f = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
        return sum(f), f[3] + f[4]  # total, idle + iowait

    t1, i1 = snap()
    time.sleep(seconds)
    t2, i2 = snap()
    return 0.0 if t2 == t1 else 1 - (i2 - i1) / (t2 - t1)


QUIET_WAIT = 900  # seconds at most to wait for other work on the machine to end before a step


def wait_quiet(threshold: float = 0.15) -> float:
    """Wait (bounded) until the machine is idle, so no other process shares the cores with a step.
    Returns the busy fraction seen last (recorded with the step: > threshold means it ran contended)."""
    try:
        busy = _cpu_busy()
    except OSError:
        return -1.0
    deadline = time.monotonic() + QUIET_WAIT
    warned = False
    while busy > threshold and time.monotonic() < deadline:
        if not warned:
            print(f"  (machine {busy:.0%} busy with other work: waiting up to {QUIET_WAIT}s)", flush=True)
            warned = True
        time.sleep(8)
        busy = _cpu_busy()
    return round(busy, 3)


def py(*args: str) -> list[str]:
    return [sys.executable, *args]


def parse_size(s: str) -> int:
    s = s.strip().lower()
    if s.endswith("k"):
        return int(float(s[:-1]) * 1000)
    if s.endswith("m"):
        return int(float(s[:-1]) * 1_000_000)
    return int(s)


def machine() -> dict:
    cpu = cpu_model()
    mem = ""
    try:
        mem = Path("/proc/meminfo").read_text().splitlines()[0].split(":", 1)[1].strip()
    except OSError:
        pass
    import polars
    import pyarrow

    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    import hashlib

    src = hashlib.sha256(b"".join(p.read_bytes() for p in sorted((ROOT / "analyzer").glob("*.py")))).hexdigest()[:16]
    analyzer_state = {"head": git("rev-parse", "--short", "HEAD"), "dirty_files": git("status", "--porcelain", "analyzer/").splitlines(),
                      "analyzer_sources_sha256": src}
    return {"analyzer": analyzer_state, "nproc": os.cpu_count(), "cpu": cpu, "memory": mem, "python": platform.python_version(),
            "polars": polars.__version__, "pyarrow": pyarrow.__version__, "platform": platform.platform(),
            "polars_threads": polars.thread_pool_size()}


def fmt_s(x: float | None) -> str:
    return "–" if x is None else (f"{x:.2f}" if x < 100 else f"{x:.0f}")


def ratio(a, b) -> float | None:
    return None if not a or not b else a / b


def main() -> None:
    global QUIET_WAIT
    ap = argparse.ArgumentParser(description="scale benchmark (issue 5)", formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__)
    ap.add_argument("--sizes", default=DEFAULT_SIZES, help=f"comma list of SSE event counts (default {DEFAULT_SIZES})")
    ap.add_argument("--pcap-size", default="125k", help="size at which the pcap is written and ingested ('' = never)")
    ap.add_argument("--har-full", default="all", help="sizes at which the HAR is fully analyzed: all | none | comma list")
    ap.add_argument("--profile", default="", help="size at which to cProfile one full run (e.g. 500k)")
    ap.add_argument("--shared", default="125k,250k,500k",
                    help="sizes of the --shared-payloads variant (same (id, payload) in several sessions) to analyze ('' = none)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per step, fastest kept")
    ap.add_argument("--spaced", action="store_true", help="also measure a copy of the JSONL written with ', ' / ': ' separators")
    ap.add_argument("--quiet-wait", type=int, default=QUIET_WAIT, help="seconds to wait at most for an idle machine before a step")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--step", help=argparse.SUPPRESS)
    ap.add_argument("--path", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--profile-out", help=argparse.SUPPRESS)
    ap.add_argument("--table-only", action="store_true", help="print the table of bench/out/results.json again, measure nothing")
    a = ap.parse_args()
    QUIET_WAIT = a.quiet_wait
    if a.step:
        _step(a)
        return
    if a.table_only:
        results = json.loads((OUT / "results.json").read_text())
        results["table"] = table(results)
        (OUT / "results.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
        print(results["table"])
        return

    OUT.mkdir(exist_ok=True)
    sizes = [parse_size(s) for s in a.sizes.split(",") if s]
    pcap_size = parse_size(a.pcap_size) if a.pcap_size else None
    har_full = set() if a.har_full in ("none", "") else (set(sizes) if a.har_full == "all" else {parse_size(s) for s in a.har_full.split(",")})
    results = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "machine": machine(), "sizes": []}
    print(f"# machine: {results['machine']}", flush=True)
    idle = measure(py("bench/run.py", "--step", "idle"), "idle")
    results["idle_rss_mb"] = idle["maxrss_mb"]
    print(f"# idle (python + polars + analyzer imported): {idle['maxrss_mb']:.0f} MiB", flush=True)

    for n in sizes:
        label = f"{n // 1000}k" if n % 1000 == 0 else str(n)
        fmts = "jsonl,har" + (",pcap" if pcap_size == n else "")
        gen = ["bench/generate.py", "--events", str(n), "--formats", fmts] + (["--seed", str(a.seed)] if a.seed else [])
        t = time.perf_counter()
        subprocess.run(py(*gen), cwd=ROOT, check=True)
        print(f"## {label}: generated/checked in {time.perf_counter() - t:.0f}s", flush=True)
        truth_doc = json.loads((OUT / f"truth-{label}.json").read_text())
        jsonl, har, pcap = (OUT / f"traffic-{label}.{x}" for x in ("jsonl", "har", "pcap"))
        row: dict = {"label": label, "events": truth_doc["events"], "sessions": truth_doc["sessions"],
                     "boundaries": truth_doc["boundaries"], "truth_verdicts": truth_doc["verdicts"],
                     "bytes": {"jsonl": jsonl.stat().st_size, "har": har.stat().st_size}, "steps": {}}
        steps = row["steps"]

        def run_step(name, cmd):
            r = measure(cmd, name, a.repeat)
            steps[name] = r
            print(f"  {name:16s} {fmt_s(r.get('seconds')):>8s} s  (wall {r['wall']:.2f} s, cpu {r['cpu_seconds']:.2f} s)"
                  f"  peak {r['maxrss_mb']:.0f} MiB{'  CONTENDED' if r['machine_busy_before'] > 0.15 else ''}", flush=True)
            return r

        full_out = OUT / f"findings-{label}-jsonl.json"
        run_step("full", py("bench/run.py", "--step", "full", "--path", str(jsonl), "--out", str(full_out)))
        run_step("read_ndjson", py("bench/run.py", "--step", "read_ndjson", "--path", str(jsonl)))
        run_step("read_ndjson_all", py("bench/run.py", "--step", "read_ndjson_all", "--path", str(jsonl)))
        naive_out = OUT / f"naive-{label}.json"
        run_step("naive", py("bench/naive_baseline.py", str(jsonl), "--out", str(naive_out)))
        run_step("ingest_jsonl", py("bench/run.py", "--step", "ingest", "--path", str(jsonl)))
        run_step("ingest_har", py("bench/run.py", "--step", "ingest", "--path", str(har)))
        truth = truth_doc["truth"]
        row["truth"] = {"jsonl": truthcheck.check(json.loads(full_out.read_text())["boundaries"], truth)}
        if n in har_full:
            har_out = OUT / f"findings-{label}-har.json"
            run_step("full_har", py("bench/run.py", "--step", "full", "--path", str(har), "--out", str(har_out)))
            row["truth"]["har"] = truthcheck.check(json.loads(har_out.read_text())["boundaries"], truth, "har")
        if a.spaced:
            spaced = spaced_copy(jsonl)
            row["bytes"]["jsonl_spaced"] = spaced.stat().st_size
            run_step("full_spaced", py("bench/run.py", "--step", "full", "--path", str(spaced), "--out", str(OUT / f"findings-{label}-spaced.json")))
            run_step("read_ndjson_spaced", py("bench/run.py", "--step", "read_ndjson", "--path", str(spaced)))
            run_step("ingest_jsonl_spaced", py("bench/run.py", "--step", "ingest", "--path", str(spaced)))
            row["truth"]["jsonl_spaced"] = truthcheck.check(json.loads((OUT / f"findings-{label}-spaced.json").read_text())["boundaries"], truth)
        if pcap_size == n and pcap.exists():
            row["bytes"]["pcap"] = pcap.stat().st_size
            run_step("ingest_pcap", py("bench/run.py", "--step", "ingest", "--path", str(pcap)))
            pcap_out = OUT / f"findings-{label}-pcap.json"
            run_step("full_pcap", py("bench/run.py", "--step", "full", "--path", str(pcap), "--out", str(pcap_out)))
            row["truth"]["pcap"] = truthcheck.check(json.loads(pcap_out.read_text())["boundaries"], truth, "pcap")
        row["naive_truth"] = naive_check(json.loads(naive_out.read_text())["boundaries"], truth)
        for fmt, chk in row["truth"].items():
            print(f"  truth {fmt}: {chk['right']} right, {chk['wrong']} wrong of {chk['boundaries_expected']}"
                  f" (reported {chk['boundaries_reported']}); handled_correctly {chk['handled']['right']} right,"
                  f" {chk['handled']['wrong']} wrong", flush=True)
        nt = row["naive_truth"]
        print(f"  naive: {nt['right']} right, {nt['wrong']} wrong, {nt['not_judged']} not judged (no Last-Event-ID)", flush=True)
        results["sizes"].append(row)
        (OUT / "results.json").write_text(json.dumps(results, indent=1, default=str) + "\n")

    results["shared"] = []
    for n in [parse_size(x) for x in a.shared.split(",") if x]:
        label = (f"{n // 1000}k" if n % 1000 == 0 else str(n)) + "-shared"
        gen = ["bench/generate.py", "--events", str(n), "--formats", "jsonl", "--shared-payloads"] + (["--seed", str(a.seed)] if a.seed else [])
        subprocess.run(py(*gen), cwd=ROOT, check=True)
        jsonl = OUT / f"traffic-{label}.jsonl"
        out = OUT / f"findings-{label}-jsonl.json"
        r = measure(py("bench/run.py", "--step", "full", "--path", str(jsonl), "--out", str(out)), label, a.repeat)
        truth = json.loads((OUT / f"truth-{label}.json").read_text())
        chk = truthcheck.check(json.loads(out.read_text())["boundaries"], truth["truth"])
        results["shared"].append({"label": label, "events": truth["events"], "sessions": truth["sessions"], "full": r,
                                  "truth": {k: chk[k] for k in ("right", "wrong", "boundaries_expected")}})
        print(f"## {label}: full {r['seconds']:.2f}s (cross_session {r['phases'].get('findings.cross_session', 0):.2f}s), "
              f"peak {r['maxrss_mb']:.0f} MiB, cross_session_replay findings {r['rules'].get('cross_session_replay', 0)}, "
              f"truth {chk['right']}/{chk['boundaries_expected']}", flush=True)
        (OUT / "results.json").write_text(json.dumps(results, indent=1, default=str) + "\n")

    if a.profile:
        n = parse_size(a.profile)
        label = f"{n // 1000}k" if n % 1000 == 0 else str(n)
        prof_txt = OUT / f"profile-{label}.txt"
        r = measure(py("bench/run.py", "--step", "profile", "--path", str(OUT / f"traffic-{label}.jsonl"),
                       "--out", str(OUT / f"findings-{label}-profiled.json"), "--profile-out", str(prof_txt)), "profile")
        results["profile"] = {"size": label, "file": str(prof_txt.relative_to(ROOT)), "seconds": r.get("seconds")}
        print(f"## profile written to {prof_txt}", flush=True)

    results["table"] = table(results)
    (OUT / "results.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    print()
    print(results["table"])


def spaced_copy(jsonl: Path) -> Path:
    """``jsonl`` as Python's default ``json.dumps`` writes the same records (``", "`` / ``": "``, ASCII escapes),
    written once next to it (kept while it is newer than ``jsonl``)."""
    out = jsonl.with_name(jsonl.stem + "-spaced.jsonl")
    if out.exists() and out.stat().st_mtime >= jsonl.stat().st_mtime:
        return out
    tmp = out.with_suffix(".tmp")
    with open(jsonl, "rb") as src, open(tmp, "w", encoding="ascii") as dst:
        for line in src:
            dst.write(json.dumps(json.loads(line)) + "\n")
    tmp.replace(out)
    return out


def naive_check(naive: list[dict], truth: list[dict]) -> dict:
    """The naive loop's verdicts against the truth (it only sees reconnects with Last-Event-ID)."""
    from collections import Counter, defaultdict

    got = defaultdict(list)
    for b in naive:
        got[b["session_id"]].append(b)
    right, wrong, not_judged = Counter(), Counter(), Counter()
    confusion = Counter()
    by_sid = defaultdict(list)
    for t in truth:
        by_sid[t["session_id"]].append(t)
    for sid, ts in by_sid.items():
        with_header = [t for t in ts if t["last_event_id"] is not None]
        for t in ts:
            if t["last_event_id"] is None:
                not_judged[t["verdict"]] += 1
        gs = got.get(sid, [])
        for i, t in enumerate(with_header):
            g = gs[i] if i < len(gs) else None
            if g is None or g["last_event_id"] != t["last_event_id"]:
                wrong[t["verdict"]] += 1
                continue
            if g["verdict"] == t["verdict"]:
                right[t["verdict"]] += 1
            else:
                wrong[t["verdict"]] += 1
                confusion[f"{t['verdict']} -> {g['verdict']}"] += 1
    verdicts = sorted(set(right) | set(wrong) | set(not_judged))
    return {"right": sum(right.values()), "wrong": sum(wrong.values()), "not_judged": sum(not_judged.values()),
            "per_verdict": {v: {"right": right[v], "wrong": wrong[v], "not_judged": not_judged[v]} for v in verdicts},
            "confusion": dict(sorted(confusion.items()))}


def table(results: dict) -> str:
    rows = results["sizes"]
    if not rows:
        return ""
    lines = []
    lines.append("| events | sessions | reconnects | JSONL MB | full / read_ndjson time | (all fields) | naive / full time | full / read_ndjson peak RSS | full µs per event | µs/event vs smallest |")
    lines.append("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    base = None
    for r in rows:
        s = r["steps"]
        full, nd, naive = s["full"]["seconds"], s["read_ndjson"]["seconds"], s["naive"]["seconds"]
        per_ev = full / r["events"] * 1e6
        base = base or per_ev
        lines.append(
            f"| {r['events']:,} | {r['sessions']:,} | {r['boundaries']:,} | {r['bytes']['jsonl'] / 1e6:.0f} | "
            f"{ratio(full, nd):.1f}× (target ≤ 2×) | {ratio(full, s['read_ndjson_all']['seconds']):.1f}× | {ratio(naive, full):.2f}× (target ≥ 3×) | "
            f"{ratio(s['full']['maxrss_mb'], s['read_ndjson']['maxrss_mb']):.1f}× (target ≤ 2×) | {per_ev:.1f} | {per_ev / base:.2f} |"
        )
    lines.append("")
    lines.append("Raw figures (seconds of the operation itself; peak RSS of its own process, MiB):")
    lines.append("")
    lines.append("| events | full s | full peak | read_ndjson s | read_ndjson peak | read_ndjson (all fields) s / peak | naive s | naive peak | full: ingest / streams / verdicts / findings / json s |")
    lines.append("|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        s = r["steps"]
        ph = s["full"].get("phases", {})
        lines.append(
            f"| {r['events']:,} | {fmt_s(s['full']['seconds'])} | {s['full']['maxrss_mb']:.0f} | {fmt_s(s['read_ndjson']['seconds'])} | "
            f"{s['read_ndjson']['maxrss_mb']:.0f} | {fmt_s(s['read_ndjson_all']['seconds'])} / {s['read_ndjson_all']['maxrss_mb']:.0f} | "
            f"{fmt_s(s['naive']['seconds'])} | {s['naive']['maxrss_mb']:.0f} | "
            f"{fmt_s(ph.get('ingest'))} / {fmt_s(ph.get('streams'))} / {fmt_s(ph.get('verdicts'))} / {fmt_s(ph.get('findings'))} / {fmt_s(s['full'].get('json_seconds'))} |"
        )
    lines.append("")
    lines.append("Ingest only (`analyzer.ingest.inputs.read_one`), MB/s of input and peak RSS; full analysis of the HAR:")
    lines.append("")
    lines.append("| events | JSONL MB/s | JSONL peak | HAR MB | HAR MB/s | HAR ingest peak | HAR full s | HAR full peak / HAR size | pcap MB | pcap MB/s | pcap full s |")
    lines.append("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        s, b = r["steps"], r["bytes"]
        fh = s.get("full_har")
        ip = s.get("ingest_pcap")
        fp = s.get("full_pcap")
        lines.append(
            f"| {r['events']:,} | {b['jsonl'] / 1e6 / s['ingest_jsonl']['seconds']:.1f} | {s['ingest_jsonl']['maxrss_mb']:.0f} | "
            f"{b['har'] / 1e6:.0f} | {b['har'] / 1e6 / s['ingest_har']['seconds']:.1f} | {s['ingest_har']['maxrss_mb']:.0f} | "
            f"{fmt_s(fh['seconds']) if fh else '–'} | {(fh['maxrss_mb'] * 2**20 / b['har']):.1f}× "
            f"({((fh['maxrss_mb'] - results['idle_rss_mb']) * 2**20 / b['har']):.1f}× above idle) |" if fh else
            f"| {r['events']:,} | {b['jsonl'] / 1e6 / s['ingest_jsonl']['seconds']:.1f} | {s['ingest_jsonl']['maxrss_mb']:.0f} | "
            f"{b['har'] / 1e6:.0f} | {b['har'] / 1e6 / s['ingest_har']['seconds']:.1f} | {s['ingest_har']['maxrss_mb']:.0f} | – | – |"
        )
        lines[-1] += (f" {b['pcap'] / 1e6:.0f} | {b['pcap'] / 1e6 / ip['seconds']:.1f} | {fmt_s(fp['seconds'])} |" if ip else " – | – | – |")
    lines.append("")
    if any("full_spaced" in r["steps"] for r in rows):
        lines.append("The read (the full run's ingest phase: records, tables, the events' JSON-RPC) against `read_ndjson` of the")
        lines.append("same file, the compact JSONL and its `--spaced` copy (`\", \"` / `\": \"` separators):")
        lines.append("")
        lines.append("| events | file | MB | read s | read_ndjson s | read / read_ndjson | full s | full / read_ndjson | full peak / read_ndjson peak | ingest alone MB/s |")
        lines.append("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            s = r["steps"]
            for name, suffix, size in (("compact", "", r["bytes"]["jsonl"]), ("spaced", "_spaced", r["bytes"].get("jsonl_spaced"))):
                full, nd, ing = s.get("full" + suffix), s.get("read_ndjson" + suffix), s.get("ingest_jsonl" + suffix)
                if not (full and nd and ing):
                    continue
                read = full.get("phases", {}).get("ingest")
                lines.append(f"| {r['events']:,} | {name} | {size / 1e6:.0f} | {fmt_s(read)} | {fmt_s(nd['seconds'])} | {ratio(read, nd['seconds']):.1f}× | "
                             f"{fmt_s(full['seconds'])} | {ratio(full['seconds'], nd['seconds']):.1f}× | "
                             f"{ratio(full['maxrss_mb'], nd['maxrss_mb']):.2f}× ({full['maxrss_mb']:.0f} / {nd['maxrss_mb']:.0f} MiB) | "
                             f"{size / 1e6 / ing['seconds']:.1f} |")
        lines.append("")
    if results.get("shared"):
        lines.append("Same traffic with `--shared-payloads` (message notifications carry nothing session-specific, so")
        lines.append("different sessions send the same (id, payload)); the normal rows for comparison:")
        lines.append("")
        lines.append("| events | variant | full s | µs/event | cross_session s | cross_session_replay findings | peak MiB |")
        lines.append("|---:|---|---:|---:|---:|---:|---:|")
        normal = {r["events"]: r for r in rows}
        for sh in results["shared"]:
            f = sh["full"]
            n = next((r for r in rows if abs(r["events"] - sh["events"]) < 1000), None) or normal.get(sh["events"])
            for variant, ff, ev in ((("normal", n["steps"]["full"], n["events"]) if n else (None, None, None)),
                                    ("shared payloads", f, sh["events"])):
                if ff is None:
                    continue
                lines.append(f"| {ev:,} | {variant} | {fmt_s(ff['seconds'])} | {ff['seconds'] / ev * 1e6:.1f} | "
                             f"{fmt_s(ff.get('phases', {}).get('findings.cross_session'))} | {ff.get('rules', {}).get('cross_session_replay', 0)} | "
                             f"{ff['maxrss_mb']:.0f} |")
        lines.append("")
    lines.append("Injected reconnects judged right, right/expected (analyzer on JSONL, HAR, pcap; naive loop on JSONL).")
    lines.append("In a HAR an empty event stream reads as a body that was not recorded, so a reopen without")
    lines.append("Last-Event-ID after it is expected `unverifiable` there (`verdict_har` in the truth file).")
    lines.append("")
    lines.append("| events | verdict | JSONL | HAR | pcap | naive | naive: no Last-Event-ID, not judged |")
    lines.append("|---:|---|---:|---:|---:|---:|---:|")

    def cell(chk, v):
        if not chk:
            return "–"
        pv = chk["per_verdict"].get(v, {"right": 0, "wrong": 0})
        return f"{pv['right']}/{pv['right'] + pv['wrong']}"

    for r in rows:
        tj, th, tp = r["truth"]["jsonl"], r["truth"].get("har"), r["truth"].get("pcap")
        nv = r["naive_truth"]["per_verdict"]
        for v in sorted(r["truth_verdicts"]):
            n = nv.get(v, {"right": 0, "wrong": 0, "not_judged": 0})
            lines.append(f"| {r['events']:,} | {v} | {cell(tj, v)} | {cell(th, v)} | {cell(tp, v)} | "
                         f"{n['right']}/{n['right'] + n['wrong']} | {n['not_judged']} |")
        hc = [c["handled"] if c else None for c in (tj, th, tp)]
        lines.append(f"| {r['events']:,} | *handled_correctly* | " + " | ".join(
            "–" if h is None else f"{h['right']}/{h['right'] + h['wrong']}" for h in hc) + " | – | – |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
