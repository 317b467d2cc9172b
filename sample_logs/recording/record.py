"""Record real MCP Streamable HTTP traffic (python SDK server + client) as proxy JSONL and HAR.

For each scenario:

    client.py --> mitmdump A (analyzer/mitm_addon.py, streams SSE, writes JSONL)
              --> mitmdump B (har_keep_stream.py + hardump, writes HAR on exit)
              --> server.py (python SDK, 127.0.0.1)

runs the client once, stops everything (bounded waits, SIGINT first so mitmdump
writes its HAR), and writes sample_logs/real-python-<scenario>.{jsonl,har}.
Everything listens on 127.0.0.1 only; every wait has a deadline.

    python3 sample_logs/recording/record.py                 # all scenarios
    python3 sample_logs/recording/record.py resume-dense    # one
    REC_PYTHON=/work/rec-venv/bin/python MITMDUMP=/work/mitm-venv/bin/mitmdump  (defaults)

`--har-mode` (default keep): `stream` = B streams SSE without the helper (HAR
bodies stay empty), `buffer` = plain `hardump` (mitmproxy buffers SSE; shows
the deadlock); both write `real-python-<scenario>.mitm-{streamed,buffered}.*`.
Needs only the standard library.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
REC_PYTHON = os.environ.get("REC_PYTHON", "/work/rec-venv/bin/python")
MITMDUMP = os.environ.get("MITMDUMP", "/work/mitm-venv/bin/mitmdump")
HOST = "127.0.0.1"


@dataclass(frozen=True)
class Scenario:
    store: str
    retry_ms: int
    close_at: str = ""
    steps: int = 5
    interval: float = 0.3
    kill_after_step: int | None = None  # SIGKILL the server after this step, restart it on the same port


SCENARIOS: dict[str, Scenario] = {
    # SDK server-initiated disconnect after step 2, uuid4 ids: one resume, ids opaque.
    "resume-uuid": Scenario(store="uuid", retry_ms=500, close_at="2"),
    # Same with dense per-stream ids, closed twice: POST -> GET -> GET chain.
    "resume-dense": Scenario(store="dense", retry_ms=500, close_at="2,4"),
    # Server process killed after step 2 and restarted: old session id is unknown.
    "server-restart": Scenario(store="dense", retry_ms=3000, steps=6, kill_after_step=2),
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen, deadline_s: float = 20.0) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"process {proc.args!r} exited with {proc.returncode} before listening on {port}")
        with socket.socket() as s:
            s.settimeout(0.5)
            if s.connect_ex((HOST, port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listening on {HOST}:{port} after {deadline_s}s")


def start(cmd: list[str], log: Path, cwd: Path = HERE) -> subprocess.Popen:
    out = open(log, "ab")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def stop(proc: subprocess.Popen, first: int = signal.SIGINT, grace_s: float = 10.0) -> None:
    """Signal our own process (by its pid), escalate after bounded waits."""
    for sig, wait_s in ((first, grace_s), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        if proc.poll() is not None:
            return
        try:
            os.kill(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def server_cmd(sc: Scenario, port: int) -> list[str]:
    return [REC_PYTHON, "-u", "server.py", "--port", str(port), "--store", sc.store,
            "--retry-ms", str(sc.retry_ms), "--close-at", sc.close_at, "--interval", str(sc.interval)]


def mitm_cmd(listen: int, upstream: int, extra: list[str]) -> list[str]:
    return [MITMDUMP, "--mode", f"reverse:http://{HOST}:{upstream}", "--listen-host", HOST,
            "--listen-port", str(listen), "--set", "connection_strategy=lazy",
            "--set", "termlog_verbosity=info", "--set", "flow_detail=1", *extra]


def watch_and_restart(sc: Scenario, server: list[subprocess.Popen], port: int, log: Path,
                      stop_event: threading.Event) -> None:
    """Scenario server-restart: SIGKILL the server after `kill_after_step`, start a fresh one."""
    marker = f"EVENT {sc.kill_after_step}"
    end = time.monotonic() + 30
    while time.monotonic() < end and not stop_event.is_set():
        if marker in log.read_text(errors="replace"):
            time.sleep(0.15)  # let the step's event reach the wire
            with log.open("a") as f:
                f.write(f"--- record.py: SIGKILL server pid {server[0].pid} at {time.time():.6f}\n")
            server[0].kill()
            server[0].wait(timeout=5)
            server[0] = start(server_cmd(sc, port), log)
            wait_port(port, server[0])
            with log.open("a") as f:
                f.write(f"--- record.py: restarted server pid {server[0].pid} listening at {time.time():.6f}\n")
            return
        time.sleep(0.02)


def record(name: str, sc: Scenario, out_dir: Path, log_dir: Path, har_mode: str) -> None:
    log_dir.mkdir(parents=True, exist_ok=True)
    for old in log_dir.glob(f"{name}.*.log"):
        old.unlink()
    stem = f"real-python-{name}" + {"keep": "", "stream": ".mitm-streamed", "buffer": ".mitm-buffered"}[har_mode]
    jsonl, har = out_dir / f"{stem}.jsonl", out_dir / f"{stem}.har"
    s_port, b_port, a_port = free_port(), free_port(), free_port()
    s_log, b_log, a_log = (log_dir / f"{name}.{p}.log" for p in ("server", "mitm-har", "mitm-jsonl"))
    b_extra = ["--set", f"hardump={har}"]
    if har_mode == "keep":
        b_extra += ["-s", str(HERE / "har_keep_stream.py")]
    elif har_mode == "stream":
        b_extra += ["--set", "stream_large_bodies=1"]
    a_extra = ["-s", str(REPO / "analyzer" / "mitm_addon.py"), "--set", f"mcp_jsonl={jsonl}"]

    server = [start(server_cmd(sc, s_port), s_log)]
    procs: list[subprocess.Popen] = []
    stop_event = threading.Event()
    try:
        wait_port(s_port, server[0])
        procs.append(start(mitm_cmd(b_port, s_port, b_extra), b_log))
        wait_port(b_port, procs[-1])
        procs.append(start(mitm_cmd(a_port, b_port, a_extra), a_log))
        wait_port(a_port, procs[-1])
        time.sleep(1.0)  # mitmdump listens before it reports script errors and exits
        for proc, log in zip(procs, (b_log, a_log), strict=True):
            if proc.poll() is not None:
                raise RuntimeError(f"mitmdump exited early ({proc.returncode}), see {log}")
        watcher = None
        if sc.kill_after_step is not None:
            watcher = threading.Thread(target=watch_and_restart, args=(sc, server, s_port, s_log, stop_event))
            watcher.start()
        print(f"[{name}] server :{s_port} <- HAR proxy :{b_port} <- JSONL proxy :{a_port} <- client", flush=True)
        client = subprocess.run(
            [REC_PYTHON, "-u", "client.py", f"http://{HOST}:{a_port}/mcp", "--steps", str(sc.steps),
             "--timeout", "30"],
            cwd=HERE, capture_output=True, text=True, timeout=60,
        )
        (log_dir / f"{name}.client.log").write_text(client.stdout + client.stderr)
        print(client.stdout, end="", flush=True)
        print(f"[{name}] client exit code {client.returncode}", flush=True)
        if watcher is not None:
            stop_event.set()
            watcher.join(timeout=35)
        time.sleep(0.5)  # let the proxies see the last connection closes
    finally:
        stop_event.set()
        for proc in reversed(procs):  # A first, then B (its HAR is written on exit)
            stop(proc)
        stop(server[0])
    sizes = ", ".join(f"{p.name} ({p.stat().st_size if p.exists() else 'missing'} B)" for p in (jsonl, har))
    print(f"[{name}] wrote {sizes}; logs in {log_dir}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenarios", nargs="*", help=f"any of {list(SCENARIOS)} (default: all)")
    parser.add_argument("--out-dir", type=Path, default=HERE.parent)
    parser.add_argument("--log-dir", type=Path, default=Path("/tmp/mcp-sse-audit-recording"))
    parser.add_argument("--har-mode", choices=("keep", "stream", "buffer"), default="keep")
    args = parser.parse_args()
    unknown = [n for n in args.scenarios if n not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s) {unknown}; choose from {list(SCENARIOS)}")
    for name in args.scenarios or list(SCENARIOS):
        record(name, SCENARIOS[name], args.out_dir.resolve(), args.log_dir, args.har_mode)
    return 0


if __name__ == "__main__":
    sys.exit(main())
