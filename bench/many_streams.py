"""Memory in a session's streams: one session re-opening its GET stream N times (each resume names the last id).

    python bench/many_streams.py 2500 5000 10000 20000

For each N, writes the proxy log to a temporary folder and runs ``mcp-sse-audit analyze LOG --json /dev/null`` as a
process, printing its peak resident size (``/usr/bin/time``'s maximum RSS) and time; then the growth from each N to
the next.  Linear memory doubles the part above the process's base when N doubles; quadratic quadruples it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path


def write_log(n: int, path: Path) -> None:
    sid, t = "sess-1", [0]

    def ts() -> str:
        t[0] += 1
        v = t[0]
        return f"2026-12-01T{(v // 3_600_000) % 24:02d}:{(v // 60000) % 60:02d}:{(v // 1000) % 60:02d}.{v % 1000:03d}000Z"

    with open(path, "w") as out:
        def w(rec: dict) -> None:
            out.write(json.dumps(rec) + "\n")

        init = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "c", "version": "1"}}}
        w({"kind": "request", "ts": ts(), "conn": "c0", "method": "POST", "url": "http://127.0.0.1:8000/mcp",
           "headers": {"content-type": "application/json"}, "body": json.dumps(init)})
        w({"kind": "response", "ts": ts(), "conn": "c0", "status": 200, "headers": {"content-type": "application/json", "mcp-session-id": sid}})
        w({"kind": "body", "ts": ts(), "conn": "c0", "data": json.dumps({"jsonrpc": "2.0", "id": 0, "result": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "serverInfo": {"name": "s", "version": "1"}}})})
        w({"kind": "close", "ts": ts(), "conn": "c0", "reason": "eof"})
        eid = 0
        for i in range(n):
            c = f"g{i}"
            h = {"accept": "text/event-stream", "mcp-session-id": sid} | ({"last-event-id": str(eid)} if eid else {})
            w({"kind": "request", "ts": ts(), "conn": c, "method": "GET", "url": "http://127.0.0.1:8000/mcp", "headers": h, "body": None})
            w({"kind": "response", "ts": ts(), "conn": c, "status": 200, "headers": {"content-type": "text/event-stream", "mcp-session-id": sid}})
            for _ in range(2):
                eid += 1
                data = json.dumps({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": f"x{eid}"}})
                w({"kind": "sse", "ts": ts(), "conn": c, "id": str(eid), "event": "message", "data": data, "retry": None})
            w({"kind": "close", "ts": ts(), "conn": c, "reason": "reset"})


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr)
        return 0 if sys.argv[1:2] in (["-h"], ["--help"]) else 2
    ns = [int(a) for a in sys.argv[1:]]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in ns:
            log = Path(tmp) / f"streams-{n}.jsonl"
            write_log(n, log)
            r = subprocess.run(["/usr/bin/time", "-f", "%M %e", sys.executable, "-m", "analyzer", "analyze", str(log), "-q", "--json", os.devnull],
                               capture_output=True, text=True, timeout=1800)
            kb, secs = r.stderr.strip().splitlines()[-1].split()
            rows.append((n, log.stat().st_size / 2**20, int(kb) / 1024, float(secs), r.returncode))
    print("| streams | input MiB | peak MiB | s | exit |")
    print("|---:|---:|---:|---:|---:|")
    for n, mib, peak, secs, code in rows:
        print(f"| {n} | {mib:.1f} | {peak:.0f} | {secs:.1f} | {code} |")
    for (n0, _, p0, _, _), (n1, _, p1, _, _) in zip(rows, rows[1:]):
        print(f"{n0} -> {n1} streams: peak x{p1 / p0:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
