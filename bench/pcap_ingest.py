"""pcap ingest speed: our ingester (and the whole analysis) against tshark on the same capture.

    /work/venv/bin/python bench/pcap_ingest.py            # makes bench/out/mcp-sse-120mb.pcap if missing
    python bench/pcap_ingest.py --mb 300 --runs 5
    python bench/pcap_ingest.py --capture some.pcap --no-profile

Every measured run is its own process, started from here and bounded by ``--timeout``; its peak RSS
comes from ``wait4`` (the kernel's ru_maxrss of that one child).  Runs are interleaved (ours, tshark,
tshark, ours, ...) so drift of the machine hits all of them alike; the file is read once before the
first run so every run starts with it in the page cache.

Measured, ``--runs`` times each, medians reported:

* ``ingest``: ``analyzer.ingest.pcap.read`` on the file (the timer around the call; the process's own
  wall time, with interpreter start and imports, is reported too);
* ``pipeline``: ``analyzer.pipeline.run([file]).document`` -- ingest plus sessions, streams, verdicts,
  findings;
* ``tshark -r F -Y http -T fields -e http.file_data`` (T1, default preferences: TCP reassembly, HTTP
  body reassembly and de-chunking on -- a body is printed once its message is complete, so the bodies
  of streams cut by an RST are never printed);
* ``tshark -r F -o http.desegment_body:FALSE -Y http -T fields -e http.file_data`` (T2, closer to reading
  SSE bodies as they stream: headers are still reassembled, every body segment is printed as it arrives,
  including those of reset streams, still chunk-encoded).

tshark's output goes to a file in bench/out (deleted afterwards); its size and the SSE events visible
whole in it are reported.  One more run of ours (not in the medians) splits the ingest into stages,
and with ``--profile`` (default on) a cProfile run lists where the time goes.

Results: a markdown table on stdout, everything in ``bench/out/pcap_ingest.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from machine_info import cpu_model  # bench/ is on sys.path when a script here runs

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT = HERE / "out"
sys.path.insert(0, str(HERE))

TSHARK_VARIANTS = {
    "T1": ["-Y", "http", "-T", "fields", "-e", "http.file_data"],
    "T2": ["-o", "http.desegment_body:FALSE", "-Y", "http", "-T", "fields", "-e", "http.file_data"],
}
# a whole SSE event in tshark's field output: fields escape CR LF as the four characters \r\n
_TSHARK_EVENT = re.compile(rb"id: \d+\\r\\nevent: message\\r\\ndata: .*?\\r\\n\\r\\n")


# ---------------------------------------------------------------------------- child side (one measured process)


def child(mode: str, path: str, out: str | None) -> None:
    t_start = time.perf_counter()
    from analyzer.ingest import pcap as ingest_pcap

    t_imported = time.perf_counter()
    res: dict = {"import_s": t_imported - t_start}
    if mode == "ingest":
        with open(path, "rb") as f:
            t0 = time.perf_counter()
            ing = ingest_pcap.read(path, f)
            res["work_s"] = time.perf_counter() - t0
        res.update(packets=ing.records, exchanges=ing.exchanges.num_rows, events=ing.events.num_rows,
                   messages=ing.messages.num_rows, anomalies=ing.anomalies.num_rows)
    elif mode == "pipeline":
        from analyzer import pipeline

        res["import_s"] = time.perf_counter() - t_start
        t0 = time.perf_counter()
        doc = pipeline.run([path]).document
        res["work_s"] = time.perf_counter() - t0
        s = doc["summary"]
        res.update(packets=s["records"], exchanges=s["exchanges"], events=s["events"], messages=s["messages"],
                   sessions=s["sessions"], boundaries=s["boundaries"], verdicts=s["verdicts"],
                   findings_by_severity=s["findings_by_severity"], anomalies=s["anomalies"],
                   findings_by_rule=_count(f["rule"] for f in doc["findings"]))
    elif mode == "stages":
        res.update(_stages(path))
    elif mode == "profile":
        res.update(_profile(path, out))
    else:
        raise SystemExit(f"unknown child mode {mode}")
    print(json.dumps(res))


def _count(items) -> dict:
    got: dict = {}
    for x in items:
        got[x] = got.get(x, 0) + 1
    return got


def _stages(path: str) -> dict:
    """Wall time of the layers, without a profiler: (1) container + link/IP/TCP decoding alone; then one
    full ``read`` with ``_build`` and the parts inside it timed by wrappers: waiting for the SSE parse
    (it runs in a worker thread during the packet loop; what is left at the end is waited for),
    ``_events`` (events to packets and rows) and ``Builder.finish`` (JSON-RPC of the events, their digests
    in a thread meanwhile, Arrow tables)."""
    import gc

    from analyzer.ingest import pcap as ingest_pcap
    from analyzer import tables
    from analyzer.decode import tcp
    from analyzer.decode.capture import CaptureReader

    gc.disable()  # as read() does
    with open(path, "rb") as f:
        t0 = time.perf_counter()
        reader = CaptureReader(path, f, lambda *a, **k: None)
        decode = tcp.decode
        n = 0
        for _pkt, _ts, linktype, data, wirelen in reader.packets():
            decode(linktype, data, wirelen)
            n += 1
        read_decode = time.perf_counter() - t0
    gc.enable()

    acc = {"build": 0.0, "sse_wait": 0.0, "events": 0.0, "finish": 0.0}

    def timed(key, fn):
        def wrapper(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                acc[key] += time.perf_counter() - t
        return wrapper

    ingest_pcap._build = timed("build", ingest_pcap._build)
    ingest_pcap._Parsing.results = timed("sse_wait", ingest_pcap._Parsing.results)
    ingest_pcap._events = timed("events", ingest_pcap._events)
    tables.Builder.finish = timed("finish", tables.Builder.finish)
    with open(path, "rb") as f:
        t0 = time.perf_counter()
        ingest_pcap.read(path, f)
        total = time.perf_counter() - t0
    return {
        "packets": n,
        "total_s": total,
        "read_decode_s": read_decode,
        "reassembly_http_sse_s": total - acc["build"] - read_decode,
        "exchange_rows_s": acc["build"] - acc["sse_wait"] - acc["events"] - acc["finish"],
        "sse_parse_wait_s": acc["sse_wait"],
        "event_rows_s": acc["events"],
        "finish_s": acc["finish"],
        "note": "read_decode_s measured in a separate pass; reassembly_http_sse_s = total - build - read_decode (the SSE "
                "parse runs in a worker thread during it); exchange_rows_s = build minus the three timed parts",
    }


def _profile(path: str, out: str | None) -> dict:
    import cProfile
    import io
    import pstats

    from analyzer.ingest import pcap as ingest_pcap

    prof = cProfile.Profile()
    with open(path, "rb") as f:
        prof.enable()
        ingest_pcap.read(path, f)
        prof.disable()
    st = pstats.Stats(prof)
    total = st.total_tt
    rows = []
    for (file, line, fn), (cc, nc, tt, ct, _callers) in st.stats.items():  # type: ignore[attr-defined]
        name = f"{Path(file).name}:{line}({fn})" if line else fn
        rows.append({"function": name, "calls": nc, "tottime_s": round(tt, 3), "cumtime_s": round(ct, 3)})
    by_tot = sorted(rows, key=lambda r: -r["tottime_s"])[:20]
    by_cum = sorted(rows, key=lambda r: -r["cumtime_s"])[:25]
    if out:
        buf = io.StringIO()
        ps = pstats.Stats(prof, stream=buf)
        ps.sort_stats("tottime").print_stats(30)
        ps.sort_stats("cumulative").print_stats(30)
        Path(out).write_text(buf.getvalue())
    return {"profiled_total_s": total, "top_tottime": by_tot, "top_cumtime": by_cum}


# ---------------------------------------------------------------------------- parent side


class Timeout(Exception):
    pass


def run_bounded(cmd: list[str], timeout: float, stdout, env=None) -> tuple[float, int, int, str, float]:
    """Run ``cmd``; returns (wall seconds, exit status, peak RSS KiB of that process, stderr tail, CPU seconds).
    Killed (by its own pid) when ``timeout`` passes."""
    err_path = OUT / ".stderr.tmp"
    with open(err_path, "wb") as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=stdout, stderr=err, env=env, cwd=ROOT)
        deadline = t0 + timeout
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                wall = time.perf_counter() - t0
                p.returncode = os.waitstatus_to_exitcode(status)
                break
            if time.perf_counter() > deadline:
                p.kill()
                os.wait4(p.pid, 0)
                p.returncode = -9
                raise Timeout(f"{cmd[0]} … killed after {timeout:.0f} s")
            time.sleep(0.01)
    tail = err_path.read_bytes()[-2000:].decode("utf-8", "replace")
    err_path.unlink()
    return wall, p.returncode, ru.ru_maxrss, tail, ru.ru_utime + ru.ru_stime


def ours(mode: str, path: Path, timeout: float, extra_out: str | None = None) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", mode, str(path)]
    if extra_out:
        cmd += ["--child-out", extra_out]
    out_path = OUT / f".child-{mode}.json"
    with open(out_path, "wb") as out:
        wall, rc, rss, err, cpu = run_bounded(cmd, timeout, out)
    text = out_path.read_text()
    out_path.unlink()
    if rc != 0:
        raise RuntimeError(f"our {mode} run failed (exit {rc}):\n{err}")
    res = json.loads(text.strip().splitlines()[-1])
    res.update(process_wall_s=wall, process_cpu_s=cpu, peak_rss_mib=rss / 1024)
    return res


def tshark_run(exe: str, variant: str, path: Path, timeout: float) -> dict:
    out_path = OUT / f".tshark-{variant}.out"
    cmd = [exe, "-r", str(path), *TSHARK_VARIANTS[variant]]
    with open(out_path, "wb") as out:
        wall, rc, rss, err, cpu = run_bounded(cmd, timeout, out)
    size = out_path.stat().st_size
    events = 0
    with open(out_path, "rb") as f:
        for line in f:
            events += len(_TSHARK_EVENT.findall(line))
    out_path.unlink()
    if rc != 0:
        raise RuntimeError(f"tshark {variant} failed (exit {rc}):\n{err}")
    return {"process_wall_s": wall, "process_cpu_s": cpu, "peak_rss_mib": rss / 1024, "output_bytes": size, "sse_events_whole_in_output": events,
            "command": " ".join(["tshark", "-r", "F", *TSHARK_VARIANTS[variant]])}


def machine(tshark: str | None) -> dict:
    cpu = cpu_model() or "unknown"
    info = {"nproc": len(os.sched_getaffinity(0)), "cpu_model": cpu, "python": platform.python_version(),
            "platform": platform.platform()}
    try:
        import polars
        import pyarrow

        info.update(polars=polars.__version__, pyarrow=pyarrow.__version__)
    except ImportError:
        pass
    if tshark:
        try:
            v = subprocess.run([tshark, "--version"], capture_output=True, text=True, timeout=60)
            info["tshark"] = v.stdout.splitlines()[0].rstrip(".") if v.stdout else "?"
        except (subprocess.TimeoutExpired, OSError) as exc:
            info["tshark"] = f"unknown ({exc})"
    try:  # which code was measured (read-only git queries)
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=30, cwd=ROOT).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "analyzer"], capture_output=True, text=True, timeout=30, cwd=ROOT).stdout.split("\n")
        info["code"] = head + (f" + uncommitted changes in {sum(1 for x in dirty if x.strip())} analyzer file(s)" if any(x.strip() for x in dirty) else "")
    except (subprocess.TimeoutExpired, OSError):
        pass
    try:
        mem = Path("/proc/meminfo").read_text().splitlines()[0].split()[1]
        info["mem_gib"] = round(int(mem) / 2**20, 1)
    except (OSError, IndexError, ValueError):
        pass
    return info


def ensure_capture(args) -> tuple[Path, dict]:
    import make_capture as mc

    if args.capture:
        p = Path(args.capture)
        meta_path = p.with_suffix(p.suffix + ".json")
        return p, (json.loads(meta_path.read_text()) if meta_path.exists() else {})
    p = mc.default_path(args.mb)
    meta_path = p.with_suffix(p.suffix + ".json")
    if p.exists() and meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if (meta.get("generator_version") == mc.GENERATOR_VERSION and meta.get("mb") == args.mb
                and meta.get("seed") == mc.DEFAULT_SEED and p.stat().st_size == meta.get("bytes")):
            return p, meta
    print(f"making {p} ({args.mb} MB) ...", file=sys.stderr)
    t0 = time.perf_counter()
    meta = mc.make(p, args.mb)
    print(f"  done in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return p, meta


def med(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=120, help="size of the generated capture (default %(default)s)")
    ap.add_argument("--capture", help="use this capture instead of generating one")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=900, help="seconds allowed to each measured process")
    ap.add_argument("--no-pipeline", action="store_true", help="skip the pipeline.run timing")
    ap.add_argument("--no-tshark", action="store_true")
    ap.add_argument("--no-profile", action="store_true", help="skip the cProfile run")
    ap.add_argument("--json", type=Path, default=OUT / "pcap_ingest.json")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--child-out", help=argparse.SUPPRESS)
    ap.add_argument("path", nargs="?", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        child(a.child, a.path, a.child_out)
        return 0
    if not 1 <= a.runs <= 50:
        ap.error("--runs: 1..50")

    OUT.mkdir(parents=True, exist_ok=True)
    path, meta = ensure_capture(a)
    size = path.stat().st_size
    mb = size / 1e6
    tshark = None if a.no_tshark else shutil.which("tshark")
    if not tshark and not a.no_tshark:
        print("tshark is not installed: only our own timings are reported", file=sys.stderr)
    info = machine(tshark)

    with open(path, "rb") as f:  # warm the page cache: every run reads from memory
        while f.read(1 << 24):
            pass

    results: dict = {"ingest": [], "pipeline": [], "T1": [], "T2": []}
    for i in range(a.runs):
        print(f"run {i + 1}/{a.runs}", file=sys.stderr)
        results["ingest"].append(ours("ingest", path, a.timeout))
        if tshark:
            for v in TSHARK_VARIANTS:
                results[v].append(tshark_run(tshark, v, path, a.timeout))
        if not a.no_pipeline:
            results["pipeline"].append(ours("pipeline", path, a.timeout))
    print("stages run", file=sys.stderr)
    stages = ours("stages", path, a.timeout)
    profile = None
    if not a.no_profile:
        print("profile run", file=sys.stderr)
        profile = ours("profile", path, a.timeout, str(OUT / "pcap_ingest.profile.txt"))

    # ---- summarise
    summary: dict = {}

    def add(name: str, runs: list[dict], key: str, extra: dict) -> None:
        if not runs:
            return
        t = med(runs, key)
        summary[name] = {"median_s": round(t, 3), "runs_s": [round(r[key], 3) for r in runs], "mb_per_s": round(mb / t, 2),
                         "process_cpu_s_median": round(med(runs, "process_cpu_s"), 3),
                         "peak_rss_mib": round(max(r["peak_rss_mib"] for r in runs), 1), **extra}

    ing = results["ingest"]
    if ing:
        ev = ing[0]["events"]
        add("ours: ingest_pcap.read (in-process)", ing, "work_s", {"events": ev, "events_per_s": round(ev / med(ing, "work_s"))})
        add("ours: ingest process (python start to exit)", ing, "process_wall_s", {"events": ev, "events_per_s": round(ev / med(ing, "process_wall_s"))})
    pl_runs = results["pipeline"]
    if pl_runs:
        ev = pl_runs[0]["events"]
        add("ours: pipeline.run (in-process)", pl_runs, "work_s", {"events": ev, "events_per_s": round(ev / med(pl_runs, "work_s"))})
        add("ours: pipeline process (python start to exit)", pl_runs, "process_wall_s", {"events": ev, "events_per_s": round(ev / med(pl_runs, "process_wall_s"))})
    for v in TSHARK_VARIANTS:
        r = results[v]
        if r:
            ev = r[0]["sse_events_whole_in_output"]
            add(f"tshark {v}", r, "process_wall_s", {"events": ev, "events_per_s": round(ev / med(r, "process_wall_s")),
                                                    "command": r[0]["command"], "output_bytes": r[0]["output_bytes"]})
    for name, s in summary.items():
        for v in TSHARK_VARIANTS:
            ref = summary.get(f"tshark {v}")
            if ref and name.startswith("ours"):
                s[f"speed_vs_{v}"] = round(ref["median_s"] / s["median_s"], 3)  # > 1: faster than tshark

    doc = {"capture": {"path": str(path), "bytes": size, **{k: v for k, v in meta.items() if k not in ("bytes",)}},
           "machine": info, "runs": a.runs, "summary": summary, "raw": results, "stages": stages,
           "profile": profile, "tshark": bool(tshark)}
    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.json.write_text(json.dumps(doc, indent=1, default=str) + "\n")

    # ---- print
    print(f"\ncapture: {path} — {mb:.1f} MB, {meta.get('packets', '?')} packets, {meta.get('events', '?')} SSE events delivered "
          f"({meta.get('streams', '?')} streams, {meta.get('resets', '?')} reset)")
    print(f"machine: {info['nproc']} CPU ({info['cpu_model']}), Python {info['python']}, polars {info.get('polars', '?')}, "
          f"{info.get('tshark', 'no tshark')}; code {info.get('code', '?')}\n")
    cols = ["what", f"median s ({a.runs} runs)", "min–max s", "MB/s", "events/s", "process CPU s", "peak RSS MiB"] + [f"speed vs {v}" for v in TSHARK_VARIANTS if tshark]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for name, s in summary.items():
        row = [name, f"{s['median_s']:.2f}", f"{min(s['runs_s']):.2f}–{max(s['runs_s']):.2f}", f"{s['mb_per_s']:.1f}",
               f"{s['events_per_s']:,}", f"{s['process_cpu_s_median']:.2f}", f"{s['peak_rss_mib']:.0f}"]
        for v in TSHARK_VARIANTS:
            if tshark:
                row.append(f"{s[f'speed_vs_{v}']:.2f}×" if f"speed_vs_{v}" in s else "")
        print("| " + " | ".join(row) + " |")
    print("\nspeed vs T: tshark's median wall time / ours (> 1: faster than tshark).  tshark events/s counts the SSE events"
          " visible whole in its output.  process CPU s: user+sys of the whole process (median).")
    for v in TSHARK_VARIANTS:
        if tshark:
            print(f"{v}: {summary[f'tshark {v}']['command']}")
    st = stages
    print(f"\nstages (one run): total {st['total_s']:.2f} s = read+decode {st['read_decode_s']:.2f} + reassembly/HTTP "
          f"(SSE parsed meanwhile in a thread) {st['reassembly_http_sse_s']:.2f} + exchange rows {st['exchange_rows_s']:.2f} "
          f"+ waiting for the SSE parse {st['sse_parse_wait_s']:.2f} + event rows {st['event_rows_s']:.2f} "
          f"+ JSON-RPC/digests/Arrow {st['finish_s']:.2f}")
    if profile:
        print(f"\ncProfile (profiled total {profile['profiled_total_s']:.1f} s; full listing in bench/out/pcap_ingest.profile.txt), top by own time:")
        for r in profile["top_tottime"][:12]:
            print(f"  {r['tottime_s']:7.2f} s  {r['calls']:>9}  {r['function']}")
    print(f"\nresults: {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
