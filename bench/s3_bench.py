"""The store on a local S3-compatible server vs on local disk: ingest and analyze, both engines.

    python bench/s3_bench.py                          # samples + one-125k (bench/SPARK.md, "Store on S3")
    python bench/s3_bench.py --sets samples --master local[2]

Starts moto's S3 server on 127.0.0.1 (``tests/s3_server.py``, one request at a time), creates a bucket,
and for each set ingests the same inputs into a local store (``bench/out/s3/store-<set>``) and into
``s3://bench/<set>``, each ingest timed.  Then four analyses, each its own process, timed and
sampled as in ``bench/spark_bench.py`` (wall time from this parent, peak RSS of the process tree):
the local engine and ``--engine spark`` over each of the two stores.  The four findings files must be
byte-identical (SOURCE_DATE_EPOCH is set).  Results: ``bench/out/s3/results.json`` and a table.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))
import s3_server  # noqa: E402
from spark_bench import EPOCH, measure  # noqa: E402

OUT = ROOT / "bench" / "out" / "s3"
PY = sys.executable
CLI = [PY, "-c", "from analyzer.cli import main; main()"]


def inputs_of(name: str) -> list[str]:
    if name == "samples":
        return [str(ROOT / "sample_logs")]
    events = int(name.split("-")[1].rstrip("k")) * 1000
    f = ROOT / "bench" / "out" / f"traffic-{events // 1000}k.jsonl"
    if not f.exists():
        subprocess.run([PY, str(ROOT / "bench" / "generate.py"), "--events", str(events), "--formats", "jsonl"], check=True)
    return [str(f)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", default="samples,one-125k")
    ap.add_argument("--master", default="local[2]")
    a = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    srv = s3_server.start()
    try:
        env = dict(os.environ, **srv.env(), SOURCE_DATE_EPOCH=EPOCH, PYTHONPATH=str(ROOT))
        os.environ.update(srv.env())
        import botocore.session

        botocore.session.get_session().create_client("s3", endpoint_url=srv.endpoint, region_name="us-east-1").create_bucket(Bucket="bench")
        results = {"machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]}, "sets": {}}
        for name in a.sets.split(","):
            paths = inputs_of(name)
            local = OUT / f"store-{name}"
            shutil.rmtree(local, ignore_errors=True)
            stores = {"local disk": str(local), "S3 (moto, 127.0.0.1)": f"s3://bench/{name}"}
            row: dict = {"input_mb": round(sum(f.stat().st_size for p in paths for f in ([Path(p)] if Path(p).is_file() else Path(p).rglob("*")) if f.is_file()) / 1e6, 1)}
            for where, st in stores.items():
                t = time.perf_counter()
                r = subprocess.run([*CLI, "ingest", *paths, "--store", st, "-q"], env=env, cwd=ROOT, capture_output=True, text=True)
                assert r.returncode == 0, r.stderr
                row[f"ingest {where} s"] = round(time.perf_counter() - t, 2)
            from analyzer.scale import store as st_mod

            man = st_mod.manifest(str(local))
            row["inputs"] = man.height
            row["events"] = int(man["events_rows"].sum())
            row["parquet_mb"] = round(sum(int(man[f"{t}_bytes"].sum()) for t in st_mod.TABLES) / 1e6, 1)
            runs, shas = {}, set()
            for engine in ("local", "spark"):
                for where, st in stores.items():
                    out = OUT / f"findings-{name}-{engine}-{'s3' if st.startswith('s3') else 'disk'}.json"
                    cmd = [*CLI, "analyze", "--store", st, "--json", str(out), "-q"]
                    if engine == "spark":
                        cmd += ["--engine", "spark", "--spark-master", a.master]
                    r = measure(cmd, env)
                    r["sha256"] = hashlib.sha256(out.read_bytes()).hexdigest() if out.exists() else None
                    shas.add(r["sha256"])
                    runs[f"{engine} / {where}"] = r
                    print(name, engine, where, {k: v for k, v in r.items() if k != "stderr"}, flush=True)
            row["runs"] = runs
            row["identical"] = len(shas) == 1 and None not in shas
            results["sets"][name] = row
            (OUT / "results.json").write_text(json.dumps(results, indent=1))
    finally:
        srv.stop()
    print("| set | inputs | events | Parquet MB | engine / store | wall s | peak RSS, tree MiB | load before | findings identical |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, s in results["sets"].items():
        for label, r in s["runs"].items():
            print(f"| {name} | {s['inputs']} | {s['events']:,} | {s['parquet_mb']} | {label} | {r['wall_s']} | {r['peak_tree_mib']:,} | {r['load_before']} | "
                  f"{'yes' if s['identical'] else 'NO'} (sha256 {r['sha256'][:8]}…) |")
    for name, s in results["sets"].items():
        print(name, {k: v for k, v in s.items() if k.startswith("ingest") or k == "input_mb"})


if __name__ == "__main__":
    main()
