"""Peak memory and time of a whole analysis on inputs made of damage: issue [2/6] item 2.

    python bench/memory_faults.py            # ~4 minutes; writes bench/out/memory_faults.json, prints a table
    python bench/memory_faults.py rpc-post   # only the inputs named

Each input is generated here (deterministic) under bench/out/, then analyzed by the CLI in a fresh
subprocess (`os.wait4` gives that child's own peak RSS).  In the same session, as the baseline, a
second subprocess runs plain Python that only reads the file's lines
(`for line in f: pass`): the cost of touching the bytes at all.  Figures are ratios to the input size
and to that baseline, never absolute seconds in a test.

Inputs:
  bad-4mb        4 MB of JSONL lines that are not JSON (2,000,000 bad records) between two good ones
  bad-10mb       10 MB of the same (5,000,000 bad records)
  tiny-160mb     2,000,000 tiny valid `sse` records on one connection (161 MB)
  rpc-sse        2,000,000 tiny `sse` records on one connection, each a JSON-RPC response
                 (`{"jsonrpc":"2.0","id":N,"result":{}}`) under SSE id N (129 bytes a line, 257.8 MB)
  rpc-post       2,000,000 lines of 500,000 tiny POST exchanges, each on its own connection: the request with a
                 JSON-RPC `ping` body, a JSON response, its body record (the result), the close (128 bytes a
                 line, 256.3 MB): issue #40's "2M tiny JSON-RPC lines" as the per-line reader takes them
  gzip-bomb      a 9.8 MB `.jsonl.gz`: one good record, then 10 GB of spaces (stops at --max-gunzip-ratio)
  pcapng-corrupt a pcapng of an SSE stream with 1 MiB of short section headers in the middle (each was a
                 resync that rescanned the rest of the file: quadratic)
"""
from __future__ import annotations

import gzip
import importlib.util
import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
GOOD = '{"kind":"request","ts":"2026-01-01T00:00:00Z","conn":"c1","method":"GET","url":"http://x/mcp","headers":{"mcp-session-id":"s"}}\n'
RESP = '{"kind":"response","ts":"2026-01-01T00:00:00Z","conn":"c1","status":200,"headers":{"content-type":"text/event-stream"}}\n'


def _pcapgen():
    spec = importlib.util.spec_from_file_location("pcapgen", ROOT / "tests" / "pcapgen.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("pcapgen", mod)  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def _rpc_lines(name: str):
    """The lines of the two JSON-RPC inputs, in blocks (written as they are made, never held whole)."""
    if name == "rpc-sse":
        yield GOOD + RESP
        for at in range(1, 2_000_001, 10_000):
            yield "".join('{"kind":"sse","ts":"2026-01-01T00:00:01Z","conn":"c1","id":"%d","data":"{\\"jsonrpc\\":\\"2.0\\",'
                          '\\"id\\":%d,\\"result\\":{}}"}\n' % (i, i) for i in range(at, at + 10_000))
        return
    for at in range(1, 500_001, 2_500):
        yield "".join(
            '{"kind":"request","ts":"2026-01-01T00:00:01Z","conn":"c%d","method":"POST","url":"http://x/mcp","headers":{},'
            '"body":"{\\"jsonrpc\\":\\"2.0\\",\\"id\\":%d,\\"method\\":\\"ping\\"}"}\n'
            '{"kind":"response","ts":"2026-01-01T00:00:01Z","conn":"c%d","status":200,"headers":{"content-type":"application/json"}}\n'
            '{"kind":"body","ts":"2026-01-01T00:00:01Z","conn":"c%d","data":"{\\"jsonrpc\\":\\"2.0\\",\\"id\\":%d,\\"result\\":{}}"}\n'
            '{"kind":"close","ts":"2026-01-01T00:00:01Z","conn":"c%d","reason":"eof","by":"server"}\n' % (i, i, i, i, i, i)
            for i in range(at, at + 2_500))


def make(name: str) -> Path:
    suffix = {"gzip-bomb": ".jsonl.gz", "pcapng-corrupt": ".pcapng"}.get(name, ".jsonl")
    path = OUT / f"{name}{suffix}"
    if path.exists():
        return path
    OUT.mkdir(parents=True, exist_ok=True)
    if name == "gzip-bomb":
        with gzip.open(path, "wb", compresslevel=9) as f:
            f.write(GOOD.encode())
            for _ in range(600):
                f.write(b" " * (1 << 24))
        return path
    if name == "pcapng-corrupt":
        g = _pcapgen()
        conv = g.Conversation("127.0.0.1", 40000, "127.0.0.1", 8000)
        body = b"".join(f"id: {i}\r\ndata: {{}}\r\n\r\n".encode() for i in range(1, 2001))
        head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nmcp-session-id: s\r\n\r\n"
        segs = conv.handshake() + conv.c(b"GET /mcp HTTP/1.1\r\nhost: x\r\nmcp-session-id: s\r\n\r\n") + conv.s(head + body, 1400)
        blocks = [g.epb(r) for r in g.records(segs)]
        shb = struct.pack("<III", 0x0A0D0D0A, 24, 0x1A2B3C4D) + b"\0" * 8 + struct.pack("<I", 24)
        region = shb * ((1 << 20) // len(shb))
        half = len(blocks) // 2
        path.write_bytes(g.shb() + g.idb(g.LINK_ETHERNET) + b"".join(blocks[:half]) + region + b"".join(blocks[half:]))
        return path
    with open(path, "w") as f:
        if name.startswith("rpc-"):
            for block in _rpc_lines(name):
                f.write(block)
        elif name.startswith("bad"):
            n = {"bad-4mb": 2_000_000, "bad-10mb": 5_000_000}[name]
            f.write(GOOD)
            f.write("x\n" * n)
            f.write(GOOD.replace('"c1"', '"c2"'))
        else:
            f.write(GOOD + RESP)
            for i in range(1, 2_000_001):
                f.write('{"kind":"sse","ts":"2026-01-01T00:00:01Z","conn":"c1","id":"%d","data":"x"}\n' % i)
    return path


def run(cmd: list[str], timeout: float = 900) -> dict:
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + timeout
    while True:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            p.kill()
            pid, status, ru = os.wait4(p.pid, 0)
            break
        time.sleep(0.05)
    return {"wall_s": round(time.perf_counter() - t0, 2), "peak_mib": round(ru.ru_maxrss / 1024, 1),
            "exit": os.waitstatus_to_exitcode(status)}


INPUTS = ("bad-4mb", "bad-10mb", "tiny-160mb", "rpc-sse", "rpc-post", "gzip-bomb", "pcapng-corrupt")


def main() -> int:
    names = sys.argv[1:] or INPUTS  # python bench/memory_faults.py rpc-sse rpc-post: only those
    unknown = [n for n in names if n not in INPUTS]
    if unknown:
        print(f"unknown input(s) {', '.join(unknown)}; one of {', '.join(INPUTS)}", file=sys.stderr)
        return 2
    rows = []
    for name in names:
        path = make(name)
        size_mib = path.stat().st_size / 2**20
        ours = run([sys.executable, "-c", "import sys; from analyzer.__main__ import main; sys.exit(main())", "analyze", str(path), "--json", str(OUT / f"{name}.findings.json"), "-q"])
        base = run([sys.executable, "-c", f"f = open({str(path)!r}, 'rb')\nfor line in f: pass"])  # the bytes as they are on disk
        rows.append({"input": name, "size_mib": round(size_mib, 1), "ours": ours, "baseline_read_lines": base,
                     "peak_x_input": round(ours["peak_mib"] / size_mib, 2), "peak_x_baseline": round(ours["peak_mib"] / base["peak_mib"], 1),
                     "wall_x_baseline": round(ours["wall_s"] / max(base["wall_s"], 0.01), 1)})
    (OUT / "memory_faults.json").write_text(json.dumps(rows, indent=1))
    print("| input | size | peak RSS | peak / input | peak / baseline | wall | wall / baseline | exit |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        o = r["ours"]
        print(f"| {r['input']} | {r['size_mib']} MiB | {o['peak_mib']} MiB | {r['peak_x_input']}x | {r['peak_x_baseline']}x | "
              f"{o['wall_s']} s | {r['wall_x_baseline']}x | {o['exit']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
