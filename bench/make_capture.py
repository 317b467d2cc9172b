"""Write a large, deterministic pcap of MCP Streamable HTTP traffic on loopback (for bench/pcap_ingest.py).

    python bench/make_capture.py                  # bench/out/mcp-sse-120mb.pcap (+ .json with what is in it)
    python bench/make_capture.py --mb 300 --out /tmp/big.pcap

Stdlib only; packets are built with ``tests/pcapgen.py`` (imported by path).  Same arguments, same bytes:
every choice comes from one ``random.Random(seed)`` and timestamps are a counter, not the clock.

What is in it (modelled on the real python-SDK recordings in ``sample_logs/``: uvicorn headers, CRLF
SSE fields, every event its own HTTP chunk, 127.0.0.1 on an Ethernet-typed loopback capture):

* sessions run ``--concurrency`` at a time, their packets interleaved in time as one capture of a busy
  server would show them;
* each session: a keep-alive POST connection with ``initialize`` (JSON response carrying
  ``mcp-session-id``), ``notifications/initialized`` (202), a few ``tools/call`` POSTs (JSON results of
  0.5-4 KB) while the stream runs, and ``DELETE`` at the end, then FIN both ways;
* a standalone ``GET`` SSE stream per session, ``Transfer-Encoding: chunked``, 300-2500 events of
  JSON-RPC notifications (progress / message / resources/updated, 200-400 bytes of JSON each), ids
  increasing per session.  The server's writes become TCP segments of loopback-like sizes: about a
  third one event per segment (a server that flushes per event), the rest bursts cut into 1-16 KB
  segments, so events are often split across segments.  The client ACKs every one or two segments;
* a normal stream ends with the last chunk, then FIN from the server, FIN from the client;
* about 30% of the streams are broken by an RST (from the client or the server, often in the middle of
  an event) and resumed on a new connection with ``Last-Event-ID`` = the last event the client got
  whole; a resumed stream can break again.  In ~5% of resumptions the server skips one event (a lost
  event, so the analysis has real findings to report).
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import random
import struct
import sys
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
GENERATOR_VERSION = 1  # bump when the output for the same arguments changes
DEFAULT_MB = 120
DEFAULT_SEED = 20261202


def _pcapgen():
    spec = importlib.util.spec_from_file_location("pcapgen", ROOT / "tests" / "pcapgen.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("pcapgen", mod)  # dataclasses look their module up there
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


g = _pcapgen()

SERVER, PORT, HOST = "127.0.0.1", 8000, "127.0.0.1:8000"
PROTO = "2025-11-25"
WORDS = ("indexing chunk shard worker file module build step cache update resource scan batch token queue "
         "merge write read commit sync delta tree node leaf page record table column stream buffer flush").split()


def default_path(mb: int) -> Path:
    return HERE / "out" / f"mcp-sse-{mb}mb.pcap"


def _http_date(t_ns: int) -> str:
    import time
    return time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(t_ns // 10**9))


def acking(c: "g.Conversation", seg: "g.Seg") -> "g.Seg":
    """The client's ACK of the server's bytes up to the end of ``seg`` (not of all the segments made so far)."""
    return replace(c.ack(True), ack=(seg.seq + len(seg)) & 0xFFFFFFFF)


class Session:
    """One MCP session as a generator of packet groups; a group is sent back to back, groups of different
    sessions interleave."""

    def __init__(self, gen: "Generator", n: int) -> None:
        self.gen, self.rng, self.n = gen, gen.rng, n
        self.sid = f"{self.rng.getrandbits(128):032x}"
        self.next_id = 1  # SSE event id
        self.rpc_id = 0
        self.token = 0
        self.replay: dict[int, bytes] = {}

    # -- pieces ---------------------------------------------------------------
    def conv(self) -> "g.Conversation":
        self.gen.stats["connections"] += 1
        return g.Conversation("127.0.0.1", self.gen.port(), SERVER, PORT, self.rng.randrange(2**32), self.rng.randrange(2**32))

    def req_head(self, method: str, extra: list[tuple[str, str]], length: int | None) -> bytes:
        h = [f"{method} /mcp HTTP/1.1", f"Host: {HOST}", "Accept-Encoding: gzip, deflate", "Connection: keep-alive",
             "User-Agent: python-httpx2/2.16.2"]
        if method == "GET":
            h.append("Cache-Control: no-store")
        h += ["accept: application/json, text/event-stream", "content-type: application/json"]
        h += [f"{k}: {v}" for k, v in extra]
        if length is not None:
            h.append(f"Content-Length: {length}")
        return ("\r\n".join(h) + "\r\n\r\n").encode()

    def resp_head(self, status: str, extra: list[tuple[str, str]]) -> bytes:
        h = [f"HTTP/1.1 {status}", f"date: {_http_date(self.gen.ts)}", "server: uvicorn"]
        h += [f"{k}: {v}" for k, v in extra]
        return ("\r\n".join(h) + "\r\n\r\n").encode()

    def text(self, n: int) -> str:
        at = self.rng.randrange(len(self.gen.lorem) - n)
        return self.gen.lorem[at : at + n]

    def notification(self) -> str:
        r = self.rng.random()
        target = self.rng.randint(200, 400)
        if r < 0.45:
            self.token += 1
            base = {"jsonrpc": "2.0", "method": "notifications/progress",
                    "params": {"progressToken": self.rpc_id or 1, "progress": self.token, "total": 100000, "message": ""}}
            key = ("params", "message")
        elif r < 0.85:
            base = {"jsonrpc": "2.0", "method": "notifications/message",
                    "params": {"level": self.rng.choice(("info", "info", "debug", "warning")), "logger": "worker", "data": ""}}
            key = ("params", "data")
        else:
            path = "/".join(self.rng.choice(WORDS) for _ in range(self.rng.randint(2, 6)))
            base = {"jsonrpc": "2.0", "method": "notifications/resources/updated",
                    "params": {"uri": f"file:///workspace/{path}.py", "title": ""}}
            key = ("params", "title")
        fill = max(8, target - len(json.dumps(base, separators=(",", ":"))))
        base[key[0]][key[1]] = self.text(fill)
        return json.dumps(base, separators=(",", ":"))

    def event_chunk(self, eid: int) -> bytes:
        if eid in self.replay:  # written before a reset but not delivered whole: the server sends it again, unchanged
            return self.replay.pop(eid)
        ev = f"id: {eid}\r\nevent: message\r\ndata: {self.notification()}\r\n\r\n".encode()
        return b"%x\r\n" % len(ev) + ev + b"\r\n"

    def exchange(self, c, method: str, body: dict | None, status: str, resp_body: bytes | None, extra_req=(), extra_resp=()) -> list:
        raw = json.dumps(body, separators=(",", ":")).encode() if body is not None else b""
        segs = c.c(self.req_head(method, list(extra_req), len(raw) if body is not None else None) + raw)
        segs.append(c.ack(False))
        head = self.resp_head(status, [*extra_resp, ("content-length", str(len(resp_body or b"")))])
        segs += c.s(head + (resp_body or b""), 16384)
        segs.append(c.ack(True))
        return segs

    def rpc(self, method: str, params: dict) -> dict:
        self.rpc_id += 1
        return {"jsonrpc": "2.0", "id": self.rpc_id, "method": method, "params": params}

    def sid_h(self) -> list[tuple[str, str]]:
        return [("mcp-session-id", self.sid), ("mcp-protocol-version", PROTO)]

    # -- the session ------------------------------------------------------------
    def run(self):
        rng = self.rng
        stats = self.gen.stats
        stats["sessions"] += 1
        a = self.conv()
        init = self.rpc("initialize", {"protocolVersion": PROTO, "capabilities": {"sampling": {}, "roots": {"listChanged": True}},
                                       "clientInfo": {"name": "bench-client", "version": "1.0.0"}})
        result = {"jsonrpc": "2.0", "id": init["id"], "result": {
            "protocolVersion": PROTO, "capabilities": {"experimental": {}, "logging": {}, "prompts": {"listChanged": False},
                                                       "resources": {"subscribe": True, "listChanged": True}, "tools": {"listChanged": False}},
            "serverInfo": {"name": "bench-server", "version": "2.3.0"}, "instructions": self.text(rng.randint(40, 200))}}
        json_h = [("content-type", "application/json")]
        yield a.handshake() + self.exchange(a, "POST", init, "200 OK", json.dumps(result, separators=(",", ":")).encode(),
                                            extra_req=[("mcp-protocol-version", PROTO)], extra_resp=[*json_h, ("mcp-session-id", self.sid)])
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        yield self.exchange(a, "POST", note, "202 Accepted", b"", extra_req=self.sid_h(), extra_resp=[("mcp-session-id", self.sid)])

        remaining = rng.randint(300, 2500)  # events this session's stream(s) deliver in all
        last: int | None = None
        sse_h = [("cache-control", "no-cache, no-transform"), ("connection", "keep-alive"), ("content-type", "text/event-stream"),
                 ("mcp-session-id", self.sid), ("x-accel-buffering", "no"), ("Transfer-Encoding", "chunked")]
        while True:
            b = self.conv()
            stats["streams"] += 1
            extra = self.sid_h() + ([("last-event-id", str(last))] if last is not None else [])
            if last is not None:
                stats["resumptions"] += 1
                if rng.random() < 0.05:
                    self.next_id += 1  # the server skips one event on this resumption
                    stats["events_skipped_by_server"] += 1
            yield b.handshake() + b.c(self.req_head("GET", extra, None)) + [b.ack(False)] + b.s(self.resp_head("200 OK", sse_h))
            breaks_after = rng.randint(50, remaining) if remaining > 60 and rng.random() < 0.3 else None  # events written before the RST
            written = 0
            broken = False
            while written < remaining:
                if rng.random() < 0.02:  # a tool call on the POST connection while the stream runs
                    call = self.rpc("tools/call", {"name": "index", "arguments": {"path": f"/workspace/{rng.choice(WORDS)}"}})
                    res = {"jsonrpc": "2.0", "id": call["id"], "result": {"content": [{"type": "text", "text": self.text(rng.randint(400, 4000))}],
                                                                         "isError": False}}
                    yield self.exchange(a, "POST", call, "200 OK", json.dumps(res, separators=(",", ":")).encode(),
                                        extra_req=self.sid_h(), extra_resp=[*json_h, ("mcp-session-id", self.sid)])
                # one server write: one event, or a burst of events cut into 1-16 KB segments
                n = 1 if rng.random() < 0.35 else rng.randint(5, 120)
                n = min(n, remaining - written)
                cut = breaks_after is not None and written + n >= breaks_after
                chunks, ends = [], []  # ends: (end offset of each event's chunk, id)
                size = 0
                first = self.next_id
                for _ in range(n):
                    ch = self.event_chunk(self.next_id)
                    chunks.append(ch)
                    size += len(ch)
                    ends.append((size, self.next_id))
                    self.next_id += 1
                data = b"".join(chunks)
                sizes = None if n == 1 else []
                if sizes is not None:
                    at = 0
                    while at < len(data):
                        k = rng.randint(1024, 16384)
                        sizes.append(k)
                        at += k
                start = b.nxt[False]
                segs = b.s(data, sizes)
                if cut:  # only part of this write got out before the connection was reset
                    keep = rng.randint(0, len(segs) - 1) if len(segs) > 1 else rng.randint(0, 1)
                    segs = segs[:keep]
                    b.nxt[False] = (segs[-1].seq + len(segs[-1])) & 0xFFFFFFFF if segs else start
                    sent = sum(len(s) for s in segs)
                    got = [eid for end, eid in ends if end <= sent]
                    if got:
                        last = got[-1]
                    self.replay = {eid: ch for (end, eid), ch in zip(ends, chunks) if end > sent}
                    self.next_id = got[-1] + 1 if got else first  # the resumed stream starts after the last event delivered
                    written += len(got)
                    stats["events"] += len(got)
                    by_client = rng.random() < 0.5
                    out = []
                    for i, s in enumerate(segs):
                        out.append(s)
                        if i % 2 == 1:
                            out.append(acking(b, s))
                    out.append(b.rst(by_client))
                    stats["resets"] += 1
                    yield out
                    broken = True
                    break
                out = []
                every = rng.choice((1, 2))
                for i, s in enumerate(segs):
                    out.append(s)
                    if (i + 1) % every == 0 or i == len(segs) - 1:
                        out.append(acking(b, s))
                written += n
                stats["events"] += n
                last = self.next_id - 1
                yield out
            remaining -= written
            if broken and remaining > 0:
                continue
            if not broken:
                yield b.s(b"0\r\n\r\n") + [b.ack(True), b.fin(False), b.fin(True), b.ack(False)]
            break
        yield self.exchange(a, "DELETE", None, "200 OK", b"", extra_req=self.sid_h(), extra_resp=[("mcp-session-id", self.sid)])
        yield [a.fin(True), a.fin(False), a.ack(True)]


class Generator:
    def __init__(self, f, target: int, seed: int, concurrency: int) -> None:
        self.f, self.target, self.concurrency = f, target, concurrency
        self.rng = random.Random(seed)
        self.ts = g.T0_NS
        self.next_port = 40000
        self.hdr = struct.Struct("<IIII")
        self.lorem = " ".join(self.rng.choice(WORDS) for _ in range(4000))
        self.stats = {k: 0 for k in ("bytes", "packets", "payload_bytes", "sessions", "connections", "streams", "resets",
                                     "resumptions", "events", "events_skipped_by_server")}

    def port(self) -> int:
        p = self.next_port
        self.next_port = 40000 + (self.next_port - 40000 + 1) % 21000  # no reuse below 21000 connections
        return p

    def emit(self, seg) -> None:
        fr = g.frame(seg)
        self.ts += self.rng.randint(3_000, 60_000)  # 3-60 us between packets
        sec, ns = divmod(self.ts, 10**9)
        rec = self.hdr.pack(sec, ns // 1000, len(fr), len(fr)) + fr
        self.f.write(rec)
        self.stats["bytes"] += len(rec)
        self.stats["packets"] += 1
        self.stats["payload_bytes"] += len(seg.payload)

    def run(self) -> dict:
        self.f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, g.LINK_ETHERNET))
        self.stats["bytes"] = 24
        active: list = []
        n = 0
        while True:
            while len(active) < self.concurrency and self.stats["bytes"] < self.target:
                n += 1
                active.append(Session(self, n).run())
            if not active:
                break
            i = self.rng.randrange(len(active))
            group = next(active[i], None)
            if group is None:
                active.pop(i)
                continue
            self.ts += self.rng.randint(50_000, 2_000_000)  # 0.05-2 ms between one write and the next
            for seg in group:
                self.emit(seg)
        return self.stats


def make(path: Path, mb: int = DEFAULT_MB, seed: int = DEFAULT_SEED, concurrency: int = 8) -> dict:
    """Write the capture and ``<path>.json`` (arguments, counts, sha256); returns that description."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".part")
    with open(tmp, "wb", buffering=1 << 20) as f:
        stats = Generator(f, mb * 10**6, seed, concurrency).run()
    h = hashlib.sha256()
    with open(tmp, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    tmp.replace(path)
    meta = {"generator_version": GENERATOR_VERSION, "mb": mb, "seed": seed, "concurrency": concurrency, **stats,
            "sha256": h.hexdigest()}
    path.with_suffix(path.suffix + ".json").write_text(json.dumps(meta, indent=1) + "\n")
    return meta


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=DEFAULT_MB, help="write at least this many MB (10^6 bytes); default %(default)s")
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument("--concurrency", type=int, default=8, help="sessions in progress at once (interleaved)")
    ap.add_argument("--out", type=Path, default=None, help="default: bench/out/mcp-sse-<mb>mb.pcap")
    a = ap.parse_args(argv)
    path = a.out or default_path(a.mb)
    meta = make(path, a.mb, a.seed, a.concurrency)
    print(f"{path}: {meta['bytes'] / 1e6:.1f} MB, {meta['packets']} packets, {meta['sessions']} sessions, "
          f"{meta['streams']} streams ({meta['resets']} reset, {meta['resumptions']} resumed), {meta['events']} events", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
