"""An input set several times larger than the memory the run may use: streaming ingest, then partitions.

    python bench/large_run.py                       # 60 files x 500k events (~10 GB of JSONL), 2 GiB limit
    python bench/large_run.py --files 4 --events 125000 --limit-mb 1024   # a quick look

Steps, each a separate process:

1. ``bench/generate.py --events N --seed S`` for S = 1..distinct, into ``bench/out/large/s<S>/`` (kept, skipped
   when already there).  The other files are copies of those with every ``Mcp-Session-Id`` rewritten
   (its first 8 hex digits become the file's number): other bytes, other sessions, the same traffic
   shape, in seconds instead of the minute a generated file takes.
2. ``mcp-sse-audit ingest bench/out/large --store bench/out/large-store -q`` inside a memory cgroup whose
   limit is ``--limit-mb`` (cgroup v1 ``memory.limit_in_bytes``, or v2 ``memory.max``): the kernel kills the
   process if it ever needs more.  The store is made anew each time.
3. ``mcp-sse-audit analyze --store bench/out/large-store --partitions P --json-lines … -q`` in the same cgroup.

For each step: wall time, peak RSS of the process (``os.wait4``), the cgroup's peak usage (page cache
included, which the kernel may reclaim) and the exit code.  Results go to ``bench/out/large_run.json``
and a markdown table on stdout.  Needs root for the cgroup; without one it says so and runs unlimited.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"
CG_V1 = Path("/sys/fs/cgroup/memory")
CG_V2 = Path("/sys/fs/cgroup/unified")
CG_NAME = "mcp-sse-audit-bench"


def cgroup(limit: int) -> tuple[Path | None, str]:
    """A fresh memory cgroup with the limit; (folder, how) or (None, why not)."""
    for base, limit_file, peak_file in ((CG_V1, "memory.limit_in_bytes", "memory.max_usage_in_bytes"),
                                        (CG_V2, "memory.max", "memory.peak")):
        if not (base / "cgroup.procs").exists():
            continue
        folder = base / CG_NAME
        try:
            if folder.exists():
                folder.rmdir()
            folder.mkdir()
            (folder / limit_file).write_text(str(limit))
        except OSError as exc:
            return None, f"{base}: {exc}"
        return folder, peak_file
    return None, "no cgroup memory controller mounted"


def run(cmd: list[str], cg: Path | None, timeout: float, log: Path) -> dict:
    def enter() -> None:
        if cg is not None:
            (cg / "cgroup.procs").write_text(str(os.getpid()))

    t0 = time.perf_counter()
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, preexec_fn=enter)
        deadline = t0 + timeout
        while True:  # bounded by the timeout
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.5)
    wall = time.perf_counter() - t0
    code = os.waitstatus_to_exitcode(status)
    return {"cmd": " ".join(cmd), "exit": code, "wall_s": round(wall, 1), "peak_rss_mib": round(usage.ru_maxrss / 1024),
            "cpu_s": round(usage.ru_utime + usage.ru_stime, 1), "log": str(log)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=60)
    ap.add_argument("--distinct", type=int, default=6, help="files made by the generator; the rest are session-renamed copies")
    ap.add_argument("--events", type=int, default=500_000, help="SSE events per file")
    ap.add_argument("--limit-mb", type=int, default=2048, help="memory limit for the ingest and analysis processes")
    ap.add_argument("--partitions", type=int, default=0, help="partitions for the analysis (default: one per file)")
    ap.add_argument("--timeout", type=float, default=4 * 3600, help="per step, seconds")
    ap.add_argument("--skip-generate", action="store_true")
    ap.add_argument("--skip-ingest", action="store_true", help="analyze the store of an earlier run again (its ingest figures are kept)")
    a = ap.parse_args()

    data = OUT / "large"
    st = OUT / "large-store"
    data.mkdir(parents=True, exist_ok=True)
    gen_s = 0.0
    if not a.skip_generate:
        t0 = time.perf_counter()
        distinct = max(1, min(a.distinct, a.files))
        for seed in range(1, distinct + 1):
            folder = data / f"s{seed}"
            print(f"generate {seed}/{distinct}", file=sys.stderr, flush=True)
            subprocess.run([sys.executable, str(HERE / "generate.py"), "--events", str(a.events), "--seed", str(seed),
                            "--formats", "jsonl", "--out", str(folder)], check=True, stdout=subprocess.DEVNULL)
        name = f"traffic-{a.events // 1000}k.jsonl"
        sid = re.compile(rb'("mcp-session-id":")[0-9a-f]{8}')
        for n in range(distinct + 1, a.files + 1):
            target = data / f"s{n}" / name
            if target.exists():
                continue
            base = (data / f"s{(n - 1) % distinct + 1}" / name).read_bytes()
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_suffix(".tmp")
            tmp.write_bytes(sid.sub(rb"\g<1>" + f"{n:08x}".encode(), base))
            tmp.rename(target)
            print(f"derived {n}/{a.files}", file=sys.stderr, flush=True)
        gen_s = time.perf_counter() - t0
    files = sorted(data.glob(f"s*/traffic-{a.events // 1000}k.jsonl"))
    total = sum(f.stat().st_size for f in files)
    limit = a.limit_mb << 20
    cg, how = cgroup(limit)
    if cg is None:
        print(f"warning: no memory limit ({how}); the run is not bounded by the kernel", file=sys.stderr)
    exe = shutil.which("mcp-sse-audit") or str(Path(sys.executable).with_name("mcp-sse-audit"))
    steps = {}
    if a.skip_ingest:
        old = json.loads((OUT / "large_run.json").read_text())
        steps["ingest"] = old["steps"]["ingest"]
    else:
        if st.exists():
            shutil.rmtree(st)
        print(f"ingest {len(files)} files, {total / 1e9:.2f} GB, limit {a.limit_mb} MiB", file=sys.stderr, flush=True)
        steps["ingest"] = run([exe, "ingest", str(data), "--store", str(st)], cg, a.timeout, OUT / "large_ingest.log")
    if cg is not None and not a.skip_ingest:
        steps["ingest"]["cgroup_peak_mib"] = round(int((cg / how).read_text()) / 2**20)
        if how == "memory.max_usage_in_bytes":
            (cg / how).write_text("0")  # v1: reset the peak for the next step
    parts = a.partitions or len(files)
    (OUT / "large-findings.ndjson").unlink(missing_ok=True)  # never report an earlier run's summary
    print(f"analyze in {parts} partitions", file=sys.stderr, flush=True)
    steps["analyze"] = run([exe, "analyze", "--store", str(st), "--partitions", str(parts), "--json-lines", str(OUT / "large-findings.ndjson"),
                            "--fail-on", "never", "-q"], cg, a.timeout, OUT / "large_analyze.log")
    if cg is not None:
        steps["analyze"]["cgroup_peak_mib"] = round(int((cg / how).read_text()) / 2**20)
    store_bytes = sum(p.stat().st_size for p in st.rglob("*") if p.is_file()) if st.exists() else 0
    summary = {}
    try:
        with open(OUT / "large-findings.ndjson") as fh:
            summary = json.loads(fh.readline())["summary"]
    except (OSError, ValueError, KeyError):
        pass
    res = {"files": len(files), "events_per_file": a.events, "input_bytes": total, "store_bytes": store_bytes,
           "limit_mib": a.limit_mb, "cgroup": str(cg) if cg else how, "generate_s": round(gen_s, 1), "steps": steps,
           "summary": {k: summary.get(k) for k in ("inputs", "records", "sessions", "exchanges", "events", "boundaries", "verdicts")}}
    (OUT / "large_run.json").write_text(json.dumps(res, indent=2))
    if cg is not None:
        try:
            cg.rmdir()
        except OSError:
            pass
    print(f"\ninput: {len(files)} JSONL files, {total / 1e9:.2f} GB; store {store_bytes / 1e9:.2f} GB; memory limit {a.limit_mb} MiB "
          f"(the input is {total / limit:.1f}x the limit)\n")
    print("| step | exit | wall | CPU | peak RSS | cgroup peak (incl. page cache) |\n|---|---|---|---|---|---|")
    for name, s in steps.items():
        print(f"| {name} | {s['exit']} | {s['wall_s']:.0f} s | {s['cpu_s']:.0f} s | {s['peak_rss_mib']} MiB | {s.get('cgroup_peak_mib', '–')} MiB |")
    print(f"\nanalysis: {json.dumps(res['summary'])}")
    return 0 if all(s["exit"] in (0, 1) for s in steps.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
