"""Record real MCP Streamable HTTP traffic from the official TypeScript SDK as proxy JSONL, HAR and pcap.

For each scenario, in one run:

    client.cjs --> mitmdump A (analyzer/mitm_addon.py, streams SSE, writes JSONL)
               --> mitmdump B (../har_keep_stream.py + hardump, writes HAR on exit)
               --> server.cjs (TS SDK, 127.0.0.1)
    tcpdump -i lo -s 0 -U -w real-ts-<scenario>.pcap 'tcp port <server port>'   (B <-> server)

then stops everything (bounded waits; SIGINT first so mitmdump writes its HAR and tcpdump
flushes) and writes sample_logs/real-ts-<scenario>.{jsonl,har,pcap}.

    python3 sample_logs/recording/ts/record_ts.py --install      # npm ci into /work/ts-rec (outside the repo)
    python3 sample_logs/recording/ts/record_ts.py                # all scenarios
    python3 sample_logs/recording/ts/record_ts.py get-stream-bug # one

node_modules is never created inside the repo: `--install` copies package.json and
package-lock.json to TS_REC_DIR (default /work/ts-rec) and runs `npm ci` there; server.cjs and
client.cjs are CommonJS and run from this folder with NODE_PATH=TS_REC_DIR/node_modules.
Environment: TS_REC_DIR, NODE (default node), NPM (default npm), MITMDUMP
(default /work/mitm-venv/bin/mitmdump), TCPDUMP (default /usr/bin/tcpdump).

The client-* scenarios run the TypeScript CLIENT against the PYTHON recording server
(../server.py, mcp 2.3.0; interpreter REC_PYTHON, default /work/rec-venv/bin/python):
`Scenario.py_server` holds its options. With `replicas=2` two server.py processes share
session validity through a directory and keep their own event stores, behind ../rr_proxy.py
(round-robin per request), as in record.py's replica-failover; B's upstream is then the proxy
and tcpdump captures the B -> proxy leg. Their client output is also kept in the repo, in
client-logs/<scenario>.txt (.txt, not .log: the analyzer reads .log files as captures) (what the application received, per call).
Everything listens on 127.0.0.1 only; every wait has a deadline. Standard library only.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
RECORDING = HERE.parent
sys.path.insert(0, str(RECORDING))
import record as _shared  # noqa: E402  (the python harness: process and port helpers shared by both)

free_port, wait_port, stop, mitm_cmd = _shared.free_port, _shared.wait_port, _shared.stop, _shared.mitm_cmd


def start(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    return _shared.start(cmd, log, cwd=HERE, env=env)

REPO = RECORDING.parent.parent
TS_REC_DIR = Path(os.environ.get("TS_REC_DIR", "/work/ts-rec"))
NODE = os.environ.get("NODE", "node")
NPM = os.environ.get("NPM", "npm")
MITMDUMP = os.environ.get("MITMDUMP", "/work/mitm-venv/bin/mitmdump")
TCPDUMP = os.environ.get("TCPDUMP", "/usr/bin/tcpdump")
HOST = "127.0.0.1"


@dataclass(frozen=True)
class Scenario:
    retry_ms: int
    client_args: list[str]
    keepalive_ms: int = 15000
    store: str = "per-session"
    restart_after_event: int | None = None  # SIGKILL the server after this `EVENT n` line, restart on the same port
    client_timeout_s: int = 30
    # client-* scenarios (defaults keep the five above exactly as they were):
    py_server: tuple[str, ...] | None = None  # run ../server.py (python SDK) with these options, not server.cjs
    replicas: int = 1  # > 1 (py_server only): that many server.py processes behind ../rr_proxy.py
    keep_client_log: bool = False  # also write the client's output to client-logs/<scenario>.txt (.txt, not .log: the analyzer reads .log files as captures)


SCENARIOS: dict[str, Scenario] = {
    # tools/call slow_count: 6 steps 400 ms apart (progress + log each), server closes the POST stream
    # after step 2 and the resumed GET stream after step 4: POST -> GET -> GET, retry 600 ms.
    "resume": Scenario(retry_ms=600, client_args=["resume", "--steps", "6", "--interval-ms", "400", "--close-at", "2,4"]),
    # broadcast: 8 server-initiated log notifications 300 ms apart on the standalone GET stream, the
    # server closes that stream after #3; keep-alive comments every 1 s show the resumed GET stays open.
    "get-stream-bug": Scenario(
        retry_ms=500, keepalive_ms=1000,
        client_args=["get-stream-bug", "--count", "8", "--close-after", "3", "--listen-ms", "4000"],
    ),
    # slow_count 6 x 300 ms; the client abandons its session after progress 2 (Client.close(), no DELETE),
    # 2 s later a new session resumes the old call with the last token: the new session's own store
    # (per-session, as in simpleStreamableHttp) has never seen it. keep-alive 1 s shows the empty
    # resumed stream is held open.
    "unknown-id": Scenario(
        retry_ms=500, keepalive_ms=1000,
        client_args=["unknown-id", "--steps", "6", "--interval-ms", "300", "--abandon-after", "2",
                     "--gap-ms", "2000", "--resume-timeout-ms", "3500"],
    ),
    # The same client run against ONE event store shared by all sessions (as in ssePollingExample).
    "cross-session": Scenario(
        retry_ms=500, keepalive_ms=1000, store="shared",
        client_args=["unknown-id", "--steps", "6", "--interval-ms", "300", "--abandon-after", "2",
                     "--gap-ms", "2000", "--resume-timeout-ms", "3500"],
    ),
    # slow_count 6 x 300 ms; server SIGKILLed 0.15 s after step 2 and restarted on the same port (no
    # sessions, empty store); retry 2000 ms so the client's reconnects reach the new process; the call
    # times out after 6.5 s.
    "server-restart": Scenario(
        retry_ms=2000, keepalive_ms=1000, restart_after_event=2,
        client_args=["server-restart", "--steps", "6", "--interval-ms", "300", "--call-timeout-ms", "6500"],
    ),
    # ---- The TypeScript CLIENT against the python recording server (../server.py, mcp 2.3.0) ----
    # Two replicas (own in-memory "start over" stores, shared session validity) behind the round-robin
    # proxy, as record.py's replica-failover. Requests: initialize -> 1, initialized -> 2, standalone
    # GET -> 1, add -> 2, tools/list -> 1, ping -> 2, slow_count -> 1 (cut after step 2), the
    # transport's own resume GET -> 2, which "starts over" and replays add's and ping's results
    # (foreign ids): the TS client drops them ("unknown message ID") and the call times out (6 s).
    "client-replica-failover": Scenario(
        retry_ms=500, replicas=2, keep_client_log=True,
        py_server=("--store", "session-log", "--retry-ms", "500", "--close-at", "2", "--interval", "0.4",
                   "--log-calls", "--extra-tools", "add"),
        client_args=["replica-failover", "--steps", "5", "--call-timeout-ms", "6000"],
    ),
    # The same requests; the transport does not resume by itself (maxRetries 0): the APPLICATION resumes
    # the cut call with its last resumption token, the GET lands on replica 2, and the TS client rewrites
    # the foreign response's id to the resumed request's id: the resumed call "succeeds" with add's result.
    "client-resumption-token": Scenario(
        retry_ms=500, replicas=2, keep_client_log=True,
        py_server=("--store", "session-log", "--retry-ms", "500", "--close-at", "2", "--interval", "0.4",
                   "--log-calls", "--extra-tools", "add"),
        client_args=["resumption-token", "--steps", "5", "--call-timeout-ms", "5000", "--gap-ms", "500",
                     "--resume-timeout-ms", "5000"],
    ),
    # One server, one store keyed by stream (= JSON-RPC request id) without the session (record.py's
    # shared-store-concurrent). Two TS sessions at once: A calls slow_side (3 steps), B calls slow_count
    # 0.5 s later; both calls are JSON-RPC id 1. B's stream is cut after step 2; its resume (retry 1000 ms,
    # after A's result was stored) gets A's events and A's result, with B's own id.
    "client-foreign-same-id": Scenario(
        retry_ms=1000, keep_client_log=True,
        py_server=("--store", "shared-stream", "--retry-ms", "1000", "--close-at", "2", "--interval", "0.4",
                   "--log-calls", "--extra-tools", "slow_side"),
        client_args=["pair", "--pair-tool", "slow_side", "--pair-steps", "3", "--steps", "6",
                     "--stagger-ms", "500", "--linger-ms", "3000", "--call-timeout-ms", "15000"],
    ),
    # One call cut twice (after steps 2 and 4: POST -> GET -> GET), dense per-stream ids; the store's first
    # replay is correct, its second leaves out the first event after the cursor.
    "client-cut-twice": Scenario(
        retry_ms=500, keep_client_log=True,
        py_server=("--store", "dense-skip-second", "--retry-ms", "500", "--close-at", "2,4", "--interval", "0.4",
                   "--log-calls"),
        client_args=["cut-twice", "--steps", "6", "--call-timeout-ms", "15000"],
    ),
}


def install() -> None:
    TS_REC_DIR.mkdir(parents=True, exist_ok=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copy2(HERE / name, TS_REC_DIR / name)
    subprocess.run([NPM, "ci", "--no-audit", "--no-fund"], cwd=TS_REC_DIR, check=True, timeout=300)


def wait_text(path: Path, text: str, proc: subprocess.Popen, deadline_s: float = 10.0) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}, see {path}")
        time.sleep(0.05)
    raise RuntimeError(f"{text!r} not seen in {path} after {deadline_s}s")


def node_env() -> dict[str, str]:
    env = dict(os.environ)
    env["NODE_PATH"] = str(TS_REC_DIR / "node_modules")
    return env


def server_cmd(sc: Scenario, port: int) -> list[str]:
    return [NODE, "server.cjs", "--port", str(port), "--retry-ms", str(sc.retry_ms),
            "--keepalive-ms", str(sc.keepalive_ms), "--store", sc.store]


def py_server_cmd(sc: Scenario, port: int, extra: tuple[str, ...] = ()) -> list[str]:
    assert sc.py_server is not None
    return [_shared.REC_PYTHON, "-u", str(RECORDING / "server.py"), "--port", str(port), *sc.py_server, *extra]


def start_py_servers(name: str, sc: Scenario, port: int, log_dir: Path, procs: list[subprocess.Popen]) -> str:
    """client-*: one server.py on `port`, or `sc.replicas` of them behind rr_proxy.py listening on `port`."""
    if sc.replicas <= 1:
        procs.append(_shared.start(py_server_cmd(sc, port), log_dir / f"ts-{name}.server.log", cwd=RECORDING))
        wait_port(port, procs[-1])
        return f"python server :{port}"
    return _shared.start_behind_rr_proxy(sc.replicas, lambda p, extra: py_server_cmd(sc, p, extra), port,
                                         log_dir / f"ts-{name}", sc.client_timeout_s + 60, procs, cwd=RECORDING,
                                         label="python ")


def watch_and_restart(sc: Scenario, server: list[subprocess.Popen], port: int, log: Path,
                      stop_event: threading.Event) -> None:
    """Scenario unknown-id: SIGKILL the server 0.15 s after `EVENT n`, start a fresh one on the same port."""
    _shared.restart_after(f"EVENT {sc.restart_after_event}", server, port, log, stop_event,
                          lambda: start(server_cmd(sc, port), log, node_env()), tag="record_ts.py")


def record(name: str, sc: Scenario, out_dir: Path, log_dir: Path) -> None:
    if not (TS_REC_DIR / "node_modules" / "@modelcontextprotocol" / "sdk").is_dir():
        raise SystemExit(f"{TS_REC_DIR}/node_modules missing: run with --install first")
    log_dir.mkdir(parents=True, exist_ok=True)
    for old in log_dir.glob(f"ts-{name}.*.log"):
        old.unlink()
    stem = f"real-ts-{name}"
    out_dir.mkdir(parents=True, exist_ok=True)  # tcpdump cannot create it
    jsonl, har, pcap = (out_dir / f"{stem}.{ext}" for ext in ("jsonl", "har", "pcap"))
    s_port, b_port, a_port = free_port(), free_port(), free_port()
    s_log, b_log, a_log, t_log = (log_dir / f"ts-{name}.{p}.log" for p in ("server", "mitm-har", "mitm-jsonl", "tcpdump"))
    upstream_desc = f"server :{s_port}"
    b_extra = ["--set", f"hardump={har}", "-s", str(RECORDING / "har_keep_stream.py")]
    a_extra = ["-s", str(REPO / "analyzer" / "mitm_addon.py"), "--set", f"mcp_jsonl={jsonl}"]

    procs: list[subprocess.Popen] = []  # tcpdump, B, A
    server: list[subprocess.Popen] = []
    stop_event = threading.Event()
    watcher = None
    try:
        procs.append(start([TCPDUMP, "-i", "lo", "-n", "-s", "0", "-U", "-Z", "root", "-w", str(pcap),
                            f"tcp port {s_port}"], t_log))
        wait_text(t_log, "listening on", procs[-1])
        if sc.py_server is not None:  # client-*: python server(s); with replicas, s_port is the rr proxy's
            upstream_desc = start_py_servers(name, sc, s_port, log_dir, server)
            server.reverse()  # stopped in this order: the rr proxy first, then the replicas
        else:
            server.append(start(server_cmd(sc, s_port), s_log, node_env()))
            wait_port(s_port, server[0])
        procs.append(start(mitm_cmd(b_port, s_port, b_extra), b_log))
        wait_port(b_port, procs[-1])
        procs.append(start(mitm_cmd(a_port, b_port, a_extra), a_log))
        wait_port(a_port, procs[-1])
        time.sleep(1.0)  # mitmdump listens before it reports script errors and exits
        for proc, log in zip(procs[1:], (b_log, a_log), strict=True):
            if proc.poll() is not None:
                raise RuntimeError(f"mitmdump exited early ({proc.returncode}), see {log}")
        if sc.restart_after_event is not None:
            watcher = threading.Thread(target=watch_and_restart, args=(sc, server, s_port, s_log, stop_event))
            watcher.start()
        print(f"[ts-{name}] {upstream_desc} <- HAR proxy :{b_port} <- JSONL proxy :{a_port} <- client "
              f"(tcpdump on tcp port {s_port})", flush=True)
        client = subprocess.run(
            [NODE, "client.cjs", f"http://{HOST}:{a_port}/mcp", *sc.client_args, "--timeout", str(sc.client_timeout_s)],
            cwd=HERE, capture_output=True, text=True, timeout=sc.client_timeout_s + 15, env=node_env(),
        )
        (log_dir / f"ts-{name}.client.log").write_text(client.stdout + client.stderr)
        if sc.keep_client_log:
            (HERE / "client-logs").mkdir(exist_ok=True)
            (HERE / "client-logs" / f"{name}.txt").write_text(client.stdout + client.stderr)
        print(client.stdout + client.stderr, end="", flush=True)
        print(f"[ts-{name}] client exit code {client.returncode}", flush=True)
        time.sleep(0.5)  # let the proxies see the last connection closes
    finally:
        stop_event.set()
        if watcher is not None:
            watcher.join(timeout=35)
        for proc in reversed(procs[1:]):  # A first, then B (its HAR is written on exit)
            stop(proc)
        for proc in server:
            stop(proc)
        if procs:
            time.sleep(0.3)
            stop(procs[0])  # tcpdump last: SIGINT flushes the pcap
    sizes = ", ".join(f"{p.name} ({p.stat().st_size if p.exists() else 'missing'} B)" for p in (jsonl, har, pcap))
    print(f"[ts-{name}] wrote {sizes}; logs in {log_dir}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenarios", nargs="*", help=f"any of {list(SCENARIOS)} (default: all)")
    parser.add_argument("--install", action="store_true", help=f"npm ci into {TS_REC_DIR} first")
    parser.add_argument("--out-dir", type=Path, default=RECORDING.parent)
    parser.add_argument("--log-dir", type=Path, default=Path("/tmp/mcp-sse-audit-recording"))
    args = parser.parse_args()
    unknown = [n for n in args.scenarios if n not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s) {unknown}; choose from {list(SCENARIOS)}")
    if args.install:
        install()
        if not args.scenarios:
            return 0
    for name in args.scenarios or list(SCENARIOS):
        record(name, SCENARIOS[name], args.out_dir.resolve(), args.log_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
