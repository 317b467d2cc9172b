"""Real object-store servers on 127.0.0.1 for the object-store tests and the bench: moto's S3 server,
and gcp-storage-emulator for gs:// reads (:func:`start_gcs`).

Run as a program it serves until killed and prints ``port N`` once it listens:

    python tests/s3_server.py [PORT]        # PORT 0 (default): a free port

It serves one request at a time (werkzeug without threads).  Why: moto checks a conditional write's
precondition (If-Match / If-None-Match) and then writes, in two steps without a lock; with a threaded
server two racing conditional PUTs could both pass, which AWS S3 never lets happen.  One request at a
time makes each conditional PUT atomic, as on S3, so the race tests test our protocol, not moto's.

:func:`start` runs it as a child process (the tests' fixture stops it with :meth:`Server.stop`).
"""
from __future__ import annotations

import os
import select
import socket
import subprocess
import sys
import time
from dataclasses import dataclass

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing-key-id", "AWS_SECRET_ACCESS_KEY": "testing-secret-key", "AWS_REGION": "us-east-1"}


def serve(port: int = 0) -> None:
    from moto.server import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import make_server

    app = DomainDispatcherApplication(create_backend_app)
    server = make_server("127.0.0.1", port, app, threaded=False)
    print(f"port {server.server_port}", flush=True)
    server.serve_forever()


@dataclass
class Server:
    proc: subprocess.Popen
    port: int

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """What a client needs in its environment to reach this server."""
        return {**CREDENTIALS, "AWS_ENDPOINT_URL": self.endpoint, "AWS_EC2_METADATA_DISABLED": "true"}

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def start(timeout: float = 60) -> Server:
    """The server in a child process, listening on a free loopback port (bounded wait for it)."""
    proc = subprocess.Popen([sys.executable, __file__], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env={**os.environ, **CREDENTIALS})
    deadline = time.monotonic() + timeout
    buf = b""
    while time.monotonic() < deadline and proc.poll() is None:
        ready, _, _ = select.select([proc.stdout], [], [], 0.1)
        if ready:
            buf += os.read(proc.stdout.fileno(), 4096)
        if b"\n" in buf:
            line = buf.split(b"\n", 1)[0].decode()
            if line.startswith("port "):
                return Server(proc, int(line.split()[1]))
    proc.kill()
    proc.wait(timeout=10)
    raise RuntimeError(f"the moto S3 server did not start within {timeout:g} s (output: {buf!r})")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_gcs(bucket: str, timeout: float = 60) -> Server:
    """gcp-storage-emulator (in memory, anonymous) in a child process, with ``bucket`` created."""
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "gcp_storage_emulator", "start", "--host", "127.0.0.1", "--port", str(port),
                             "--in-memory", "--default-bucket", bucket], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return Server(proc, port)
        except OSError:
            time.sleep(0.1)
    proc.kill()
    proc.wait(timeout=10)
    raise RuntimeError(f"gcp-storage-emulator did not start within {timeout:g} s")


if __name__ == "__main__":
    serve(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
