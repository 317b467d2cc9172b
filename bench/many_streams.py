"""Memory in a session's streams: one session re-opening its GET stream N times (each resume names the last id).

    python bench/many_streams.py 2500 5000 10000 20000             # HTTP/1: a proxy log, one connection per stream
    python bench/many_streams.py --h2 sse 5000 10000 20000 60000    # HTTP/2: one TLS 1.3 connection, N streams
    python bench/many_streams.py --h2 restart 5000 10000 20000      # ... each stream's ids starting again at 1
    python bench/many_streams.py --h2 rst 12500 25000 50000         # HTTP/2: N HEADERS each followed by RST_STREAM
    python bench/many_streams.py --h2 calls 1000 2000 4000          # HTTP/2: N tools/call POST streams, every id 1
    python bench/many_streams.py --fan-in 500 1000 2000             # HTTP/1: N reconnects resuming one N-event connection

For each N, writes the input to a temporary folder and runs ``python -m analyzer analyze INPUT -q --json /dev/null``
as a process, printing its peak resident size (the child's ``ru_maxrss``) and time; then the growth from each N to
the next.  Linear memory doubles the part above the process's base when N doubles; quadratic quadruples it.

``--h2 sse``: a pcap of one TLS 1.3 connection (ALPN h2) and its key log (``--tls-keylog``): ``initialize`` on
stream 1, then N GET streams of one session, each naming the last event id of the one before (``Last-Event-ID``),
receiving two events and ended by the server (END_STREAM, even streams) or the client (RST_STREAM CANCEL, odd,
sent with the next request).  One stream per round trip: the client's segment, then the server's; ``--batch K``
opens K streams per round trip (the capture gets smaller per stream, as the issue's 60,000 streams in 8.3 MB).
``--h2 restart``: the same, but the server numbers each stream's events 1, 2 (a counter per stream), so every
resume names "2" and every stream delivered it.  ``--h2 rst``: the same connection carrying N client HEADERS (a
GET with the session id, END_STREAM) each followed by RST_STREAM and no response, written in 16 KiB TLS records
(about 30 bytes per stream, as in the issue).  ``--h2 calls``: N ``tools/call`` POST streams of the session, every
request numbered 1 (a client that numbers each call from 1), each answered on its own event stream.

``--fan-in``: a proxy log of one session whose GET stream delivers N events (ids 1..N) on one connection, cut by a
reset after the client had received all but the last ten (the capture point saw those ten leave); then N reconnects,
each naming the client's last id (``N - 10``) and answered by an empty event stream (a server whose store lost the
stream), so every reconnect resumes that same connection and is a gap of the same ten events.

Every run is bounded: ``--timeout`` seconds (default 900) and ``--limit-gib`` of address space (``RLIMIT_AS``,
default 8), so a quadratic run fails instead of taking the machine; its row then says so.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SID = "sess-1"


def _opened(out) -> tuple:
    """The writer and the clock of a proxy log in ``out``, after the session's ``initialize`` exchange (conn c0)."""
    t = [0]

    def ts() -> str:
        t[0] += 1
        v = t[0]
        return f"2026-12-01T{(v // 3_600_000) % 24:02d}:{(v // 60000) % 60:02d}:{(v // 1000) % 60:02d}.{v % 1000:03d}000Z"

    def w(rec: dict) -> None:
        out.write(json.dumps(rec) + "\n")

    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "c", "version": "1"}}}
    w({"kind": "request", "ts": ts(), "conn": "c0", "method": "POST", "url": "http://127.0.0.1:8000/mcp",
       "headers": {"content-type": "application/json"}, "body": json.dumps(init)})
    w({"kind": "response", "ts": ts(), "conn": "c0", "status": 200, "headers": {"content-type": "application/json", "mcp-session-id": SID}})
    w({"kind": "body", "ts": ts(), "conn": "c0", "data": json.dumps({"jsonrpc": "2.0", "id": 0, "result": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "serverInfo": {"name": "s", "version": "1"}}})})
    w({"kind": "close", "ts": ts(), "conn": "c0", "reason": "eof"})
    return w, ts


def write_log(n: int, path: Path) -> None:
    sid = SID
    with open(path, "w") as out:
        w, ts = _opened(out)
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


FAN_IN_CUT = 10  # the events of the long connection the client never received


def write_fan_in(n: int, path: Path) -> None:
    """One connection of ``n`` events, then ``n`` reconnects resuming it from id ``n - FAN_IN_CUT`` (module doc)."""
    with open(path, "w") as out:
        w, ts = _opened(out)
        get = {"accept": "text/event-stream", "mcp-session-id": SID}
        w({"kind": "request", "ts": ts(), "conn": "g", "method": "GET", "url": "http://127.0.0.1:8000/mcp", "headers": get, "body": None})
        w({"kind": "response", "ts": ts(), "conn": "g", "status": 200, "headers": {"content-type": "text/event-stream", "mcp-session-id": SID}})
        for eid in range(1, n + 1):  # bounded: n events
            data = json.dumps({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": f"x{eid}"}})
            w({"kind": "sse", "ts": ts(), "conn": "g", "id": str(eid), "event": "message", "data": data, "retry": None})
        w({"kind": "close", "ts": ts(), "conn": "g", "reason": "reset"})
        last = str(max(1, n - FAN_IN_CUT))
        for i in range(n):  # bounded: n reconnects
            c = f"r{i}"
            w({"kind": "request", "ts": ts(), "conn": c, "method": "GET", "url": "http://127.0.0.1:8000/mcp",
               "headers": get | {"last-event-id": last}, "body": None})
            w({"kind": "response", "ts": ts(), "conn": c, "status": 200, "headers": {"content-type": "text/event-stream", "mcp-session-id": SID}})
            w({"kind": "close", "ts": ts(), "conn": c, "reason": "eof"})


def write_h2(n: int, path: Path, kind: str, batch: int = 1) -> list[str]:
    """One TLS 1.3 connection (ALPN h2) carrying N streams of one session as a pcap, and its key log next to it
    (``path`` with ``.keylog``).  Returns the extra arguments the analysis needs (``--tls-keylog``)."""
    sys.path.insert(0, str(ROOT / "tests"))
    import pcapgen as g
    import tlsgen
    from hpack import Encoder
    from hyperframe.frame import DataFrame, HeadersFrame, RstStreamFrame, SettingsFrame

    from analyzer.decode import h2

    sess = tlsgen.Session(alpn="h2")
    enc = {True: Encoder(), False: Encoder()}
    conv = g.Conversation(sport=443)
    segs = conv.handshake()
    sent = [0]

    def flush() -> None:  # the records made since the last flush, each its own segment
        for from_client, rec in sess.records[sent[0]:]:
            segs.extend(conv.c(rec) if from_client else conv.s(rec))
        sent[0] = len(sess.records)

    def headers(from_client: bool, stream: int, fields: list[tuple[str, str]], end: bool = False) -> bytes:
        flags = ["END_HEADERS"] + (["END_STREAM"] if end else [])
        return HeadersFrame(stream, enc[from_client].encode(fields), flags=flags).serialize()

    get = [(":method", "GET"), (":scheme", "https"), (":authority", "mcp.example"), (":path", "/mcp"),
           ("accept", "text/event-stream"), ("mcp-session-id", SID)]
    sse_200 = [(":status", "200"), ("content-type", "text/event-stream"), ("mcp-session-id", SID)]
    sess.send(True, h2.PREFACE + SettingsFrame(0).serialize())
    sess.send(False, SettingsFrame(0).serialize())
    init = json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "c", "version": "1"}}}).encode()
    post = [(":method", "POST"), (":scheme", "https"), (":authority", "mcp.example"), (":path", "/mcp"),
            ("content-type", "application/json"), ("accept", "application/json, text/event-stream")]
    sess.send(True, headers(True, 1, post) + DataFrame(1, init, flags=["END_STREAM"]).serialize())
    result = json.dumps({"jsonrpc": "2.0", "id": 0, "result": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "serverInfo": {"name": "s", "version": "1"}}}).encode()
    sess.send(False, headers(False, 1, [(":status", "200"), ("content-type", "application/json"), ("mcp-session-id", SID)])
              + DataFrame(1, result, flags=["END_STREAM"]).serialize())
    flush()
    if kind == "calls":
        post = post + [("mcp-session-id", SID)]
        call = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "t", "arguments": {}}},
                          separators=(",", ":")).encode()
        answer = json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"content": []}}, separators=(",", ":"))
        for i in range(n):  # bounded: n streams
            s = 3 + 2 * i
            sess.send(True, headers(True, s, post) + DataFrame(s, call, flags=["END_STREAM"]).serialize())
            flush()
            sess.send(False, headers(False, s, sse_200) + DataFrame(s, f"id: {i + 1}\ndata: {answer}\n\n".encode(),
                                                                     flags=["END_STREAM"]).serialize())
            flush()
    elif kind == "rst":
        buf = bytearray()
        for i in range(n):  # bounded: n streams
            s = 3 + 2 * i
            buf += headers(True, s, get, end=True) + RstStreamFrame(s, error_code=8).serialize()
            if len(buf) >= 1 << 14:
                sess.send(True, bytes(buf))
                buf.clear()
                flush()
        if buf:
            sess.send(True, bytes(buf))
    else:
        eid, cancel = 0, []
        for first in range(0, n, batch):  # bounded: n streams, `batch` to a round trip
            ask, answer = bytearray(), bytearray()
            for s in cancel:  # the client cancels the streams the server left open
                ask += RstStreamFrame(s, error_code=8).serialize()
            cancel = []
            for i in range(first, min(n, first + batch)):
                s = 3 + 2 * i
                last = eid if kind == "sse" else 2 * (i > 0)  # restart: every stream's ids are 1, 2
                ask += headers(True, s, get + ([("last-event-id", str(last))] if last else []), end=True)
                answer += headers(False, s, sse_200)
                for k in range(2):
                    eid += 1
                    data = json.dumps({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": f"x{eid}"}},
                                      separators=(",", ":"))
                    answer += DataFrame(s, f"id: {eid if kind == 'sse' else k + 1}\ndata: {data}\n\n".encode()).serialize()
                if i % 2 == 0:
                    answer += DataFrame(s, b"", flags=["END_STREAM"]).serialize()
                else:
                    cancel.append(s)
            sess.send(True, bytes(ask))
            flush()
            sess.send(False, bytes(answer))
            flush()
        if cancel:
            sess.send(True, b"".join(RstStreamFrame(s, error_code=8).serialize() for s in cancel))
    flush()
    segs += [conv.fin(True), conv.fin(False)]
    path.write_bytes(g.pcap(g.records(segs, step_ns=100_000)))
    keylog = path.with_suffix(".keylog")
    keylog.write_text(sess.keylog)
    return ["--tls-keylog", str(keylog)]


def _limit(gib: float):
    def set_limit() -> None:
        b = int(gib * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (b, b))
    return set_limit


def measure(cmd: list[str], timeout: float, gib: float) -> tuple[float, float, str]:
    """Peak resident MiB (the child's own ``ru_maxrss``, from wait4), seconds, and how it ended ('0', 'exit N',
    'timeout', 'signal N': a run over ``gib`` of address space fails with MemoryError or is killed)."""
    with tempfile.TemporaryFile() as err:
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, preexec_fn=_limit(gib))
        timed_out = False
        for _ in range(int(timeout / 0.05) + 1):  # bounded: at most `timeout` seconds of polls
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            time.sleep(0.05)
        else:
            p.kill()
            timed_out = True
            pid, status, ru = os.wait4(p.pid, 0)
        secs = time.monotonic() - t0
        code = p.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait for it again
        how = "timeout" if timed_out else "0" if code == 0 else f"exit {code}" if code > 0 else f"signal {-code}"
        if code and not timed_out:
            err.seek(0)
            lines = err.read().decode(errors="replace").strip().splitlines()
            if lines:
                print(lines[-1][:300], file=sys.stderr)
    return ru.ru_maxrss / 1024, secs, how


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("--h2", choices=("sse", "restart", "rst", "calls"), help="HTTP/2 in one TLS connection instead of the HTTP/1 proxy log")
    ap.add_argument("--fan-in", action="store_true", help="HTTP/1: N reconnects resuming one connection of N events")
    ap.add_argument("--batch", type=int, default=1, help="--h2 sse/restart: streams opened per round trip (default 1)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per analysis (default 900)")
    ap.add_argument("--limit-gib", type=float, default=8, help="address space per analysis, GiB (default 8)")
    ap.add_argument("--keep", metavar="DIR", help="write the inputs here and keep them")
    ap.add_argument("n", type=int, nargs="+")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.keep or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for n in args.n:
            if args.h2:
                inp = folder / f"h2-{args.h2}-{n}.pcap"
                extra = write_h2(n, inp, args.h2, args.batch)
            elif args.fan_in:
                inp = folder / f"fan-in-{n}.jsonl"
                write_fan_in(n, inp)
                extra = []
            else:
                inp = folder / f"streams-{n}.jsonl"
                write_log(n, inp)
                extra = []
            cmd = [sys.executable, "-m", "analyzer", "analyze", str(inp), *extra, "-q", "--json", os.devnull]
            peak, secs, how = measure(cmd, args.timeout, args.limit_gib)
            rows.append((n, inp.stat().st_size / 2**20, peak, secs, how))
            print(f"{n} streams: {rows[-1][1]:.1f} MiB in, peak {rows[-1][2]:.0f} MiB, {secs:.1f} s, {how}", file=sys.stderr)
    # exit 0 or 1 (findings at --fail-on): the analysis ran to its end; else the peak is where it was stopped
    done = {n: how in ("0", "exit 1") for n, _, _, _, how in rows}
    print("| streams | input MiB | peak MiB | 20x input + 300 MB, MiB | s | exit |")
    print("|---:|---:|---:|---:|---:|---:|")
    for n, mib, peak, secs, how in rows:
        print(f"| {n} | {mib:.1f} | {'' if done[n] else '>= '}{peak:.0f} | {20 * mib + 300e6 / 2**20:.0f} | {secs:.1f} | {how} |")
    for (n0, _, p0, _, _), (n1, _, p1, _, _) in zip(rows, rows[1:]):
        if done[n0] and done[n1]:
            print(f"{n0} -> {n1} streams: peak x{p1 / p0:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
