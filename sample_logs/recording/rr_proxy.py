"""Round-robin HTTP/1.1 reverse proxy in front of server replicas (scenario replica-failover).

A small layer-7 load balancer without stickiness: every **request** goes to the next
upstream in turn (1, 2, 1, 2, ...), whatever connection it arrived on, the way a
round-robin upstream of nginx or HAProxy in HTTP mode picks a server per request. The
downstream side keeps its connection alive (mitmdump B reuses it, e.g. for the
client's resume GET after the POST stream ended); each request gets a fresh upstream
connection, closed when its response has ended (chunked terminator, Content-Length,
or upstream EOF) or when the downstream side went away mid-response (the client closing
a resumed SSE stream after the result). Requests and responses are forwarded byte for
byte: no header is added, removed or rewritten (Host stays as B sent it; the SDK server
accepts any `127.0.0.1:*`).

Each routing decision is logged (`ROUTE #n conn=... METHOD mcp-session-id=... last-event-id=...
jsonrpc=... -> upstream :port`) and each end (`DONE #n status=... end=...`), so the log says which
replica answered which request. Listens on 127.0.0.1 only; stops by itself after
`--deadline` seconds, or at SIGINT/SIGTERM. Standard library only.

    python3 rr_proxy.py --listen 18090 --upstream 18081 --upstream 18082 --deadline 90
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import signal
import sys
import time

HOST = "127.0.0.1"
MAX_HEAD = 64 * 1024
MAX_BODY = 4 * 1024 * 1024


def stamp() -> str:
    return time.strftime("%H:%M:%S", time.gmtime()) + f".{int(time.time() * 1e6) % 1_000_000:06d}Z"


def log(line: str) -> None:
    print(f"{stamp()} {line}", flush=True)


class Downstream:
    """A StreamReader with a push-back buffer (bytes read by the EOF watcher during a response)."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self.reader = reader
        self.buf = bytearray()

    async def read_head(self) -> bytes | None:
        while b"\r\n\r\n" not in self.buf:
            if len(self.buf) > MAX_HEAD:
                raise ValueError("request head too large")
            data = await self.reader.read(65536)
            if not data:
                if self.buf:
                    raise ConnectionError("EOF inside a request head")
                return None
            self.buf.extend(data)
        end = self.buf.index(b"\r\n\r\n") + 4
        head = bytes(self.buf[:end])
        del self.buf[:end]
        return head

    async def read_exact(self, n: int) -> bytes:
        while len(self.buf) < n:
            data = await self.reader.read(65536)
            if not data:
                raise ConnectionError("EOF inside a request body")
            self.buf.extend(data)
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    async def read_line(self) -> bytes:
        while b"\r\n" not in self.buf:
            if len(self.buf) > MAX_HEAD:
                raise ValueError("line too long")
            data = await self.reader.read(65536)
            if not data:
                raise ConnectionError("EOF inside a chunked body")
            self.buf.extend(data)
        end = self.buf.index(b"\r\n") + 2
        out = bytes(self.buf[:end])
        del self.buf[:end]
        return out

    async def watch_eof(self) -> None:
        """Return when the downstream side closes (bytes that arrive meanwhile are kept)."""
        while True:
            data = await self.reader.read(65536)
            if not data:
                return
            self.buf.extend(data)


def parse_headers(head: bytes) -> tuple[str, list[tuple[str, str]]]:
    lines = head.decode("latin-1").split("\r\n")
    headers = []
    for line in lines[1:]:
        if not line:
            continue
        name, _, value = line.partition(":")
        headers.append((name.strip().lower(), value.strip()))
    return lines[0], headers


def header(headers: list[tuple[str, str]], name: str) -> str | None:
    for k, v in headers:
        if k == name:
            return v
    return None


def is_chunked(headers: list[tuple[str, str]]) -> bool:
    te = header(headers, "transfer-encoding")
    return te is not None and "chunked" in te.lower()


async def read_request_body(down: Downstream, headers: list[tuple[str, str]]) -> bytes:
    if is_chunked(headers):
        out = bytearray()
        while True:
            line = await down.read_line()
            out.extend(line)
            size = int(line.split(b";")[0].strip(), 16)
            if size == 0:
                while True:  # trailers, then the empty line
                    trailer = await down.read_line()
                    out.extend(trailer)
                    if trailer == b"\r\n":
                        return bytes(out)
            out.extend(await down.read_exact(size + 2))
            if len(out) > MAX_BODY:
                raise ValueError("request body too large")
    length = header(headers, "content-length")
    if length is None:
        return b""
    n = int(length)
    if n > MAX_BODY:
        raise ValueError("request body too large")
    return await down.read_exact(n)


def describe_jsonrpc(body: bytes) -> str:
    try:
        msg = json.loads(body)
    except ValueError:
        return "-"
    if isinstance(msg, dict):
        return f"{msg.get('method', 'response')}#{msg.get('id', '-')}"
    return "batch"


async def relay_response(up_reader: asyncio.StreamReader, writer: asyncio.StreamWriter, method: str
                         ) -> tuple[str, int, bool]:
    """Forward one response; returns (status line, body bytes, whether the downstream may be kept alive)."""
    head = await up_reader.readuntil(b"\r\n\r\n")
    status_line, headers = parse_headers(head)
    writer.write(head)
    await writer.drain()
    status = int(status_line.split()[1])
    keep = (header(headers, "connection") or "").lower() != "close"
    total = 0
    if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
        return status_line, 0, keep
    if is_chunked(headers):
        while True:
            line = await up_reader.readuntil(b"\r\n")
            size = int(line.split(b";")[0].strip(), 16)
            if size == 0:
                rest = line
                while True:
                    trailer = await up_reader.readuntil(b"\r\n")
                    rest += trailer
                    if trailer == b"\r\n":
                        break
                writer.write(rest)
                await writer.drain()
                return status_line, total, keep
            data = await up_reader.readexactly(size + 2)
            writer.write(line + data)
            await writer.drain()
            total += size
    length = header(headers, "content-length")
    if length is not None:
        remaining = int(length)
        while remaining > 0:
            data = await up_reader.read(min(remaining, 65536))
            if not data:
                raise ConnectionError("upstream EOF inside a Content-Length body")
            writer.write(data)
            await writer.drain()
            remaining -= len(data)
            total += len(data)
        return status_line, total, keep
    while True:  # delimited by the upstream's close
        data = await up_reader.read(65536)
        if not data:
            return status_line, total, False
        writer.write(data)
        await writer.drain()
        total += len(data)


class Proxy:
    def __init__(self, upstreams: list[int], deadline: float) -> None:
        self.upstreams = upstreams
        self.requests = itertools.count(1)
        self.connections = itertools.count(1)
        self.deadline = deadline
        self.tasks: set[asyncio.Task] = set()

    def remaining(self) -> float:
        return max(0.1, self.deadline - time.monotonic())

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self.tasks.add(task)
        conn = next(self.connections)
        peer = writer.get_extra_info("peername")
        log(f"ACCEPT conn={conn} from {peer[0]}:{peer[1]}")
        down = Downstream(reader)
        try:
            while True:
                head = await asyncio.wait_for(down.read_head(), self.remaining())
                if head is None:
                    log(f"CLOSE conn={conn} by downstream (idle)")
                    return
                request_line, headers = parse_headers(head)
                body = await asyncio.wait_for(read_request_body(down, headers), self.remaining())
                if not await self.forward(conn, down, writer, request_line, headers, head + body, body):
                    return
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.TimeoutError, ValueError) as exc:
            log(f"CLOSE conn={conn} {type(exc).__name__}: {exc}")
        finally:
            writer.close()
            if task is not None:
                self.tasks.discard(task)

    async def forward(self, conn: int, down: Downstream, writer: asyncio.StreamWriter, request_line: str,
                      headers: list[tuple[str, str]], raw: bytes, body: bytes) -> bool:
        n = next(self.requests)
        port = self.upstreams[(n - 1) % len(self.upstreams)]
        replica = (n - 1) % len(self.upstreams) + 1
        method = request_line.split()[0]
        log(f"ROUTE #{n} conn={conn} {method} mcp-session-id={header(headers, 'mcp-session-id')} "
            f"last-event-id={header(headers, 'last-event-id')} jsonrpc={describe_jsonrpc(body)} "
            f"-> replica-{replica} :{port}")
        up_reader, up_writer = await asyncio.wait_for(asyncio.open_connection(HOST, port), 10)
        try:
            up_writer.write(raw)
            await up_writer.drain()
            relay = asyncio.ensure_future(relay_response(up_reader, writer, method))
            watch = asyncio.ensure_future(down.watch_eof())
            done, _ = await asyncio.wait({relay, watch}, timeout=self.remaining(),
                                         return_when=asyncio.FIRST_COMPLETED)
            if relay in done:
                watch.cancel()
                status_line, total, keep = relay.result()
                log(f"DONE #{n} replica-{replica} {status_line} body={total} B end=complete")
                return keep
            relay.cancel()
            watch.cancel()
            end = "downstream-closed" if watch in done else "deadline"
            log(f"DONE #{n} replica-{replica} end={end} (upstream connection closed)")
            return False
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
            log(f"DONE #{n} replica-{replica} end=upstream-error {type(exc).__name__}: {exc}")
            return False
        finally:
            up_writer.close()


async def main_async(args: argparse.Namespace) -> int:
    deadline = time.monotonic() + args.deadline
    proxy = Proxy(args.upstream, deadline)
    server = await asyncio.start_server(proxy.handle, HOST, args.listen)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    log(f"rr_proxy listening on {HOST}:{args.listen} -> "
        + ", ".join(f"replica-{i} :{p}" for i, p in enumerate(args.upstream, 1)) + f"; deadline {args.deadline:g}s")
    try:
        await asyncio.wait_for(stop.wait(), args.deadline)
        log("stopping (signal)")
    except asyncio.TimeoutError:
        log("stopping (deadline)")
    server.close()
    for task in list(proxy.tasks):
        task.cancel()
    try:
        await asyncio.wait_for(server.wait_closed(), 5)
    except asyncio.TimeoutError:
        log("connections still open after 5 s; exiting anyway")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", type=int, required=True)
    parser.add_argument("--upstream", type=int, action="append", required=True, help="a replica's port (repeat)")
    parser.add_argument("--deadline", type=float, default=120.0, help="stop after this many seconds")
    return asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
