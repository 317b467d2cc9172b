"""Local engine vs Spark local[N] on the benchmark traffic: wall time, peak memory, identical output.

    /work/venv/bin/python bench/spark_bench.py                       # the sets in bench/SPARK.md
    /work/venv/bin/python bench/spark_bench.py --sets one-125k --runs 1

Sets (made with bench/generate.py when missing, each ingested once into its own store under
bench/out/spark/, the ingest not timed):

* ``one-125k``, ``one-500k``: the generator's single JSONL file, i.e. one input, so one component and
  one Spark group (the whole file is the unit: cross-session rules compare its sessions).
* ``fleet-4x125k``: four JSONL files of 125k events from seeds 1-4, as four proxies of a fleet would
  log them: four inputs with no session id in common, so four components and four Spark groups.

Every measured run is its own process: ``mcp-sse-audit analyze --store S --json F`` (the local
engine, one pass) and the same with ``--engine spark --spark-master local[N]``.  Wall time is taken by
this parent; memory by sampling /proc every 0.1 s over the whole process tree (the Python driver, the
JVM it starts, the Python workers the JVM starts): the peak of the tree's summed RSS, and the peak RSS
of a single Python worker, which is what one group needs on an executor (plus the JVM's share).  Both
runs set SOURCE_DATE_EPOCH and the two findings files are compared byte for byte.  The load average
before each run is recorded: this machine is shared, so other work may run beside a measurement.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out" / "spark"
PY = sys.executable
EPOCH = "1767225600"


def _tree(root: int) -> list[int]:
    kids: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def _rss_kib(pid: int) -> tuple[int, str]:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return 0, ""
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]), cmd
    return 0, cmd


def measure(cmd: list[str], env: dict) -> dict:
    """Run ``cmd``; wall time and the process tree's memory, sampled."""
    load = os.getloadavg()[0]
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak_tree = peak_worker = peak_jvm = peak_driver = 0
    while proc.poll() is None:
        total = 0
        for pid in _tree(proc.pid):
            kib, c = _rss_kib(pid)
            total += kib
            if "java" in c.split(" ")[0]:
                peak_jvm = max(peak_jvm, kib)
            elif "pyspark.daemon" in c or "pyspark/daemon" in c or "pyspark.worker" in c:
                peak_worker = max(peak_worker, kib)
            elif pid == proc.pid:
                peak_driver = max(peak_driver, kib)
        peak_tree = max(peak_tree, total)
        time.sleep(0.1)
    wall = time.perf_counter() - t
    err = proc.stderr.read().decode(errors="replace")
    return {"rc": proc.returncode, "wall_s": round(wall, 2), "peak_tree_mib": round(peak_tree / 1024), "peak_driver_mib": round(peak_driver / 1024),
            "peak_jvm_mib": round(peak_jvm / 1024), "peak_worker_mib": round(peak_worker / 1024), "load_before": round(load, 2), "stderr": err[-2000:]}


def make_set(name: str) -> Path:
    """The set's store (generate and ingest when missing)."""
    store = OUT / f"store-{name}"
    if (store / "inputs.parquet").exists():
        return store
    if name.startswith("one-"):
        events = int(name.split("-")[1].rstrip("k")) * 1000
        subprocess.run([PY, str(ROOT / "bench" / "generate.py"), "--events", str(events), "--formats", "jsonl"], check=True)
        files = [ROOT / "bench" / "out" / f"traffic-{events // 1000}k.jsonl"]
    else:  # fleet-<k>x<n>k
        k, n = name.split("-")[1].split("x")
        files = []
        for seed in range(1, int(k) + 1):
            d = OUT / name / f"proxy{seed}"
            subprocess.run([PY, str(ROOT / "bench" / "generate.py"), "--events", str(int(n.rstrip("k")) * 1000), "--seed", str(seed),
                            "--formats", "jsonl", "--out", str(d)], check=True)
            files.append(d / f"traffic-{n}.jsonl")
    t = time.perf_counter()
    subprocess.run([PY, "-c", "import sys; from analyzer.cli import main; main()", "ingest", *map(str, files), "--store", str(store), "-q"], check=True, cwd=ROOT)
    print(f"ingested {name} in {time.perf_counter() - t:.1f}s", flush=True)
    return store


def describe(store: Path) -> dict:
    """Inputs, components (= Spark groups), sessions, and the largest group in rows and Parquet bytes."""
    import polars as pl

    from analyzer.scale import partitions, store as st

    comps = partitions.components(store)
    ev = st.scan(store, "events").group_by("input").agg(pl.len().alias("events")).collect()
    sess = (st.scan(store, "exchanges").select("input", sid=pl.coalesce("req_session_id", "resp_session_id"))
            .filter(pl.col("sid").is_not_null()).group_by("input").agg(pl.col("sid").n_unique().alias("sessions")).collect())
    g = (comps.join(ev, on="input", how="left").join(sess, on="input", how="left").group_by("label")
         .agg(pl.len().alias("inputs"), pl.col("bytes").sum(), pl.col("events").sum(), pl.col("sessions").sum()).sort("bytes", descending=True))
    return {"inputs": comps.height, "groups": g.height, "sessions": int(g["sessions"].sum()), "events": int(g["events"].sum()),
            "largest_group": {"inputs": int(g["inputs"][0]), "parquet_mb": round(g["bytes"][0] / 1e6, 1), "events": int(g["events"][0]),
                              "sessions": int(g["sessions"][0])}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", default="one-125k,fleet-4x125k,one-500k")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--runs", type=int, default=1, help="runs of each engine (interleaved); the table shows the fastest")
    a = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, SOURCE_DATE_EPOCH=EPOCH, PYTHONPATH=str(ROOT))
    results = {"machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]}, "sets": {}}
    if (OUT / "results.json").exists():  # keep the other sets' figures: one table for every set measured
        results["sets"] = json.loads((OUT / "results.json").read_text())["sets"]
    for name in a.sets.split(","):
        store = make_set(name)
        info = describe(store)
        runs: dict[str, list[dict]] = {"local": [], "spark": []}
        for _ in range(a.runs):
            for engine in ("local", "spark"):
                out = OUT / f"findings-{name}-{engine}.json"
                cmd = [PY, "-c", "import sys; from analyzer.cli import main; main()", "analyze", "--store", str(store), "--json", str(out), "-q"]
                if engine == "spark":
                    cmd += ["--engine", "spark", "--spark-master", a.master]
                r = measure(cmd, env)
                r["sha256"] = hashlib.sha256(out.read_bytes()).hexdigest() if out.exists() else None
                runs[engine].append(r)
                print(name, engine, {k: v for k, v in r.items() if k != "stderr"}, flush=True)
        identical = runs["local"][-1]["sha256"] == runs["spark"][-1]["sha256"] is not None
        results["sets"][name] = {**info, "runs": runs, "identical": identical}
        (OUT / "results.json").write_text(json.dumps(results, indent=1))
    print("| set | inputs | groups | sessions | events | largest group | engine | wall s | peak RSS, tree MiB | driver MiB | JVM MiB | largest Python worker MiB | identical |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, s in sorted(results["sets"].items()):
        lg = s["largest_group"]
        for engine, rs in s["runs"].items():
            r = min(rs, key=lambda r: r["wall_s"])
            print(f"| {name} | {s['inputs']} | {s['groups']} | {s['sessions']} | {s['events']} | {lg['parquet_mb']} MB, {lg['events']} events | {engine} | "
                  f"{r['wall_s']} | {r['peak_tree_mib']} | {r['peak_driver_mib']} | {r['peak_jvm_mib'] or ''} | {r['peak_worker_mib'] or ''} | {'yes' if s['identical'] else 'NO'} |")


if __name__ == "__main__":
    main()
