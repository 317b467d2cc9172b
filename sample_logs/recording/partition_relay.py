"""A tiny TCP relay that simulates a one-way partition between the client and the capture point.

    client.py --> partition_relay.py --> mitmdump A (JSONL) --> mitmdump B (HAR) --> server

It forwards bytes unchanged in both directions, except on **one** connection:
the first one on which the client sends a `tools/call` request. On that
connection it counts the SSE events with an `id:` field in the server -> client
bytes that follow the request; once it has forwarded the end of the
`--after-events`-th such event, it stops forwarding server -> client bytes (it
reads and drops them, so the upstream side keeps flowing and the capture sees
every event delivered). After `--hold` seconds it resets the client side
(SO_LINGER 0 -> RST) and closes the upstream side (FIN). The client then
reconnects with the last event id it really received; that and every other
connection is relayed untouched.

Everything it does is logged with wall-clock times: the events forwarded, the
`id:` values it dropped, the reset. Only 127.0.0.1 is used, every socket has a
timeout, and the whole process exits by itself after `--deadline` seconds.

    python3 partition_relay.py --listen 18090 --upstream 18091 --after-events 3 --hold 1.0

Standard library only.
"""

from __future__ import annotations

import argparse
import re
import select
import socket
import struct
import sys
import threading
import time

HOST = "127.0.0.1"
TOOLS_CALL = re.compile(rb'"method"\s*:\s*"tools/call"')
ID_LINE = re.compile(rb"(?:^|\r\n|\n|\r)id: ?([^\r\n]*)(?:\r\n|\n|\r)")
EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")  # a blank line ends an event


def stamp() -> str:
    t = time.time()
    return time.strftime("%H:%M:%S", time.gmtime(t)) + f".{int(t * 1000) % 1000:03d}Z"


def log(msg: str) -> None:
    print(f"{stamp()} {msg}", flush=True)


class Relay:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.armed_conn: int | None = None  # only one connection is ever partitioned
        self.lock = threading.Lock()
        self.end = time.monotonic() + args.deadline

    def serve(self) -> None:
        srv = socket.socket()
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind((HOST, self.args.listen))
        srv.listen(16)
        srv.settimeout(0.5)
        log(f"relay listening on {HOST}:{self.args.listen} -> {HOST}:{self.args.upstream} "
            f"(partition after {self.args.after_events} events of the first tools/call, hold {self.args.hold}s)")
        n = 0
        while time.monotonic() < self.end:
            try:
                client, addr = srv.accept()
            except TimeoutError:
                continue
            n += 1
            threading.Thread(target=self.handle, args=(n, client, addr), daemon=True).start()
        log("deadline reached, exiting")

    def handle(self, n: int, client: socket.socket, addr: tuple) -> None:
        """Relay one connection in both directions (one thread, select with a 50 ms tick)."""
        try:
            upstream = socket.create_connection((HOST, self.args.upstream), timeout=5)
        except OSError as exc:
            log(f"conn {n}: upstream connect failed: {exc}")
            client.close()
            return
        log(f"conn {n}: client port {addr[1]} -> upstream local port {upstream.getsockname()[1]}")
        armed = tripped = False
        pending = b""  # armed: bytes not yet forwarded, until the k-th event is complete
        seen = 0
        reset_at: float | None = None
        dropped_ids: list[str] = []
        dropped_bytes = 0
        open_dirs = {client, upstream}
        try:
            while time.monotonic() < self.end and open_dirs:
                if reset_at is not None and time.monotonic() >= reset_at:
                    log(f"conn {n}: partition over: RST to the client, FIN upstream; dropped {dropped_bytes} bytes, "
                        f"event ids {dropped_ids}")
                    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    return  # finally: closes both (RST to the client, FIN upstream)
                readable, _, _ = select.select(list(open_dirs), [], [], 0.05)
                if client in readable:
                    try:
                        data = client.recv(65536)
                    except OSError:
                        data = b""
                    if not data:
                        open_dirs.discard(client)
                        try:
                            upstream.shutdown(socket.SHUT_WR)
                        except OSError:
                            pass
                    else:
                        with self.lock:
                            if self.armed_conn is None and TOOLS_CALL.search(data):
                                self.armed_conn = n
                                armed = True
                                log(f"conn {n}: tools/call request seen: watching the response for "
                                    f"{self.args.after_events} events with ids")
                        upstream.sendall(data)
                if upstream not in readable:
                    continue
                try:
                    data = upstream.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    open_dirs.discard(upstream)
                    if client in open_dirs:
                        try:
                            client.shutdown(socket.SHUT_WR)
                        except OSError:
                            pass
                    if not tripped:
                        break
                    continue
                if tripped:
                    dropped_bytes += len(data)
                    ids = [m.group(1).decode("latin-1") for m in ID_LINE.finditer(data)]
                    dropped_ids += ids
                    log(f"conn {n}: DROPPED {len(data)} bytes server->client (ids {ids}): {data[:400]!r}")
                    continue
                if not armed:
                    client.sendall(data)
                    continue
                pending += data
                cut = None
                pos = 0
                while True:
                    m = ID_LINE.search(pending, pos)
                    if m is None:
                        break
                    e = EVENT_END.search(pending, m.end() - 2)
                    if e is None:
                        break
                    seen += 1
                    log(f"conn {n}: forwarded event #{seen} id={m.group(1).decode('latin-1')}: "
                        f"{pending[m.start():e.end()][:200]!r}")
                    pos = e.end()
                    if seen >= self.args.after_events:
                        cut = e.end()
                        break
                if cut is None:  # forward whole events only; keep an incomplete tail
                    client.sendall(pending[:pos])
                    pending = pending[pos:]
                    continue
                if pending[cut:cut + 2] == b"\r\n":
                    cut += 2  # the CRLF that ends the HTTP chunk carrying the event goes with it
                client.sendall(pending[:cut])
                rest, pending = pending[cut:], b""
                tripped = True
                reset_at = time.monotonic() + self.args.hold
                log(f"conn {n}: PARTITION: server->client bytes are dropped from now on for {self.args.hold}s")
                if rest:
                    dropped_bytes += len(rest)
                    ids = [m.group(1).decode("latin-1") for m in ID_LINE.finditer(rest)]
                    dropped_ids += ids
                    log(f"conn {n}: DROPPED {len(rest)} bytes server->client (ids {ids}): {rest[:400]!r}")
        except OSError as exc:
            log(f"conn {n}: {type(exc).__name__}: {exc}")
        finally:
            for sock in (client, upstream):
                try:
                    sock.close()
                except OSError:
                    pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", type=int, required=True)
    parser.add_argument("--upstream", type=int, required=True)
    parser.add_argument("--after-events", type=int, default=3,
                        help="partition after forwarding this many SSE events with an id on the tools/call response")
    parser.add_argument("--hold", type=float, default=1.0, help="seconds of silence before the client side is reset")
    parser.add_argument("--deadline", type=float, default=90.0, help="exit after this many seconds")
    args = parser.parse_args()
    try:
        Relay(args).serve()
    except KeyboardInterrupt:  # record.py stops the relay with SIGINT
        log("interrupted, exiting")
    return 0


if __name__ == "__main__":
    sys.exit(main())
