"""A TCP proxy on 127.0.0.1 in front of an object store that can stop answering: an endpoint that stalls.

``with StallProxy(port) as proxy:`` listens on ``proxy.port`` and forwards every connection to ``port``; after
``proxy.stall = True`` the requests still reach the server but no byte of its answers comes back (connections open
then too), as a load balancer or a server that hangs mid-request.  Every thread stops when the block ends; every
blocking call has a timeout, so nothing here outlives the test.
"""
from __future__ import annotations

import socket
import threading


class StallProxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream = ("127.0.0.1", upstream_port)
        self.stall = False
        self._stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port = self._listener.getsockname()[1]
        self._threads: list[threading.Thread] = []
        self._socks: list[socket.socket] = []

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> "StallProxy":
        self._spawn(self._accept)
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for s in [self._listener, *self._socks]:
            try:
                s.close()
            except OSError:
                pass
        for t in self._threads:
            t.join(timeout=2)

    def _spawn(self, fn, *args) -> None:
        t = threading.Thread(target=fn, args=args, daemon=True)
        self._threads.append(t)
        t.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except (socket.timeout, OSError):
                continue
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            for s in (client, server):
                s.settimeout(0.2)
                self._socks.append(s)
            self._spawn(self._pump, client, server, False)
            self._spawn(self._pump, server, client, True)

    def _pump(self, src: socket.socket, dst: socket.socket, answers: bool) -> None:
        while not self._stop.is_set():
            try:
                data = src.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                return
            if not data:
                try:
                    dst.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                return
            if answers and self.stall:
                continue  # swallowed: the client waits for an answer that never comes
            try:
                dst.sendall(data)
            except OSError:
                return
