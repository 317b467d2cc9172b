"""Record real MCP Streamable HTTP traffic (python SDK server + client) as proxy JSONL, HAR and pcap.

For each scenario:

    client.py --> mitmdump A (analyzer/mitm_addon.py, streams SSE, writes JSONL)
              --> mitmdump B (har_keep_stream.py + hardump, writes HAR on exit)
              --> server.py (python SDK, 127.0.0.1)
    tcpdump -i lo -s 0 -U 'tcp port <server port>'   (the B -> server leg only)

starts tcpdump before the server, runs the client once, stops everything
(bounded waits, SIGINT first so mitmdump writes its HAR and tcpdump flushes its
file), and writes sample_logs/real-python-<scenario>.{jsonl,har,pcap}: one run,
the same traffic seen by three recorders. The pcap holds every HTTP exchange
once (B's upstream connections; the client -> A and A -> B legs are filtered
out). Afterwards `editcap -F pcapng` (Wireshark's editcap) converts the pcap
of `--pcapng-of` to .pcapng, and the pcap of `--gz-of` is gzipped to .pcap.gz.
Everything listens on 127.0.0.1 only; every wait has a deadline.

    python3 sample_logs/recording/record.py                 # the original three scenarios
    python3 sample_logs/recording/record.py resume-dense    # one
    python3 sample_logs/recording/record.py all             # every scenario, the newer ones too
    python3 sample_logs/recording/record.py --no-pcap       # JSONL + HAR only (no tcpdump)
    REC_PYTHON=/work/rec-venv/bin/python MITMDUMP=/work/mitm-venv/bin/mitmdump  (defaults)
    TCPDUMP=tcpdump EDITCAP=editcap  (defaults; tcpdump needs root or CAP_NET_RAW)

Newer scenarios (named explicitly or with `all`): resurrection-loop, shared-store,
reissue-after-break, capture-client-loss and capture-client-loss-send-buffer. They pass
extra options to server.py / client.py (`Scenario.server_args`, `client_args`), and the
capture-client-loss ones put `partition_relay.py` between the client and A
(`Scenario.relay`; its log is `<scenario>.relay.log`). See sample_logs/README.md.

replica-failover runs **two** server.py processes (replicas, `Scenario.replicas`) that share
session validity through a directory and keep their own event stores, behind
`rr_proxy.py` (round-robin per request); B's upstream is the proxy and tcpdump captures
the B -> proxy leg (`tcp port <proxy port>`). Logs: `<scenario>.server-<i>.log`,
`<scenario>.rr-proxy.log`, the session directory `<scenario>.sessions/`.
shared-store-concurrent runs two client sessions at once (client.py --pair).

uuid-lossy-replay, uuid-restart and uuid-drops-log use uuid4 event ids and really lose events
at the resume (buggy uuid stores; a restart whose new process accepts the old session through
a session directory, `Scenario.shared_sessions`: `<log dir>/<scenario>.sessions/`). Their
server logs (`--log-events`) list every stored and replayed event id with its kind.

uuid-skip-one, uuid-skip-two, uuid-evicted-buffer, uuid-ttl-expired, uuid-healthy-regular,
uuid-healthy-uneven and uuid-no-progress (uuid4 ids, a fixed progress step or none, one cut
mid-call; lossy stores and correct ones), stale-cursor and stale-cursor-uuid (a correct store;
the first resumed GET is dropped mid-stream and the python client resumes again with the
Last-Event-ID of its first resume) keep what the client application received
(`client.py --app-log`) in `recording/client-logs/<scenario>.txt` and the server's log
(`STORE`/`REPLAY`/`BREAK` lines) in `recording/server-logs/<scenario>.txt`, under --out-dir
(`Scenario.keep_logs`; `.txt`, not `.log`: the analyzer reads `.log` files as captures when it
walks sample_logs/).

`--har-mode` (default keep): `stream` = B streams SSE without the helper (HAR
bodies stay empty), `buffer` = plain `hardump` (mitmproxy buffers SSE; shows
the deadlock); both write `real-python-<scenario>.mitm-{streamed,buffered}.*`.
Needs only the standard library.
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
REC_PYTHON = os.environ.get("REC_PYTHON", "/work/rec-venv/bin/python")
MITMDUMP = os.environ.get("MITMDUMP", "/work/mitm-venv/bin/mitmdump")
TCPDUMP = os.environ.get("TCPDUMP", "tcpdump")
EDITCAP = os.environ.get("EDITCAP", "editcap")
HOST = "127.0.0.1"


@dataclass(frozen=True)
class Scenario:
    store: str
    retry_ms: int
    close_at: str = ""
    steps: int = 5
    interval: float = 0.3
    kill_after_step: int | None = None  # SIGKILL the server after this step, restart it on the same port
    # Newer scenarios (defaults keep the original three exactly as they were):
    server_args: tuple[str, ...] = ()  # extra server.py options (both processes of a restart)
    client_args: tuple[str, ...] = ()  # extra client.py options
    client_timeout: float = 30.0  # client.py --timeout (the whole run)
    relay: tuple[str, ...] | None = None  # run partition_relay.py between client and A with these options
    replicas: int = 1  # > 1: that many server.py processes behind rr_proxy.py (shared session directory)
    shared_sessions: bool = False  # one server.py (and its restart) with --shared-sessions <log dir>/<scenario>.sessions
    keep_logs: bool = False  # copy the client and server logs to <out dir>/recording/{client,server}-logs/<scenario>.txt


def _paced(store: str, *, retry_ms: int, close_at: str, steps: int, server_args: tuple[str, ...] = ()) -> Scenario:
    """A scenario of the paced shape (steps 0.4 s apart, one cut, the client's application log kept): the
    server closes the stream right after the step's progress notification unless ``server_args`` names
    another cut (``--close-after-log``); ``--break-resume-after`` and the store options come in ``server_args``."""
    cut = () if "--close-after-log" in server_args else ("--close-after-progress",)
    return Scenario(store=store, retry_ms=retry_ms, close_at=close_at, steps=steps, interval=0.4,
                    server_args=("--log-calls", "--log-events", *cut, *server_args),
                    client_args=("--app-log",), keep_logs=True)


SCENARIOS: dict[str, Scenario] = {
    # SDK server-initiated disconnect after step 2, uuid4 ids: one resume, ids opaque.
    "resume-uuid": Scenario(store="uuid", retry_ms=500, close_at="2"),
    # Same with dense per-stream ids, closed twice: POST -> GET -> GET chain.
    "resume-dense": Scenario(store="dense", retry_ms=500, close_at="2,4"),
    # Server process killed after step 2 and restarted: old session id is unknown.
    "server-restart": Scenario(store="dense", retry_ms=3000, steps=6, kill_after_step=2),
    # Server killed after step 2, the new process re-creates the unknown session id uninitialized
    # (server.py --resurrect-unknown-sessions): resume GETs get empty 200s, the client re-polls, then
    # its follow-up requests get -32602.
    "resurrection-loop": Scenario(
        store="dense", retry_ms=1000, steps=6, kill_after_step=2,
        server_args=("--resurrect-unknown-sessions", "--log-calls"),
        client_args=("--call-timeout", "8", "--follow-up", "--follow-up-pause", "2.5")),
    # Two sessions one after the other share one event store that looks ids up without the session.
    "shared-store": Scenario(
        store="shared-stream", retry_ms=500, close_at="2",
        server_args=("--tagged", "--log-calls"), client_args=("--sessions", "2", "--tag", "session")),
    # The server closes the first call's stream after step 2; the client does not resume
    # (MAX_RECONNECTION_ATTEMPTS = 0) and the application calls the tool again with the same arguments.
    "reissue-after-break": Scenario(
        store="dense", retry_ms=500, close_at="2",
        server_args=("--tagged", "--log-calls", "--close-first-only"),
        client_args=("--max-reconnect", "0", "--reissue", "--tag", "invoice-42")),
    # One-way partition between the client and A (partition_relay.py): A and the pcap see events the
    # client never got; the client resumes with its own, older Last-Event-ID.
    # (a) a correct store replays from the client's Last-Event-ID:
    "capture-client-loss": Scenario(
        store="counter", retry_ms=500, steps=8, server_args=("--tagged", "--log-calls"),
        client_args=("--tag", "partition"), relay=("--after-events", "3", "--hold", "1.0")),
    # (b) a "send-buffer" store resumes after the last event it handed to the old connection:
    "capture-client-loss-send-buffer": Scenario(
        store="send-buffer", retry_ms=500, steps=8, server_args=("--tagged", "--log-calls"),
        client_args=("--tag", "partition"), relay=("--after-events", "3", "--hold", "1.0")),
    # Two replicas (own in-memory event stores, "start over" on an unknown Last-Event-ID; session validity
    # shared) behind a round-robin-per-request proxy. Requests: initialize -> 1, initialized -> 2,
    # standalone GET -> 1, add -> 2, tools/list -> 1, ping -> 2, slow_count -> 1 (closed after step 2),
    # resume GET -> 2, which holds add's (and ping's) events: slow_count "completes" with add's result.
    "replica-failover": Scenario(
        store="session-log", retry_ms=500, close_at="2", replicas=2,
        server_args=("--log-calls", "--extra-tools", "add"),
        client_args=("--pre", "sleep:0.5", "--pre", 'call:add:{"a":2,"b":3}', "--pre", "ping")),
    # Two sessions at once on one server whose store is keyed without the session: A calls slow_side,
    # B calls slow_count (both JSON-RPC id 2) and is closed after step 2; B's resume gets A's events and result.
    "shared-store-concurrent": Scenario(
        store="shared-stream", retry_ms=500, close_at="2",
        server_args=("--log-calls", "--extra-tools", "slow_side"),
        client_args=("--pair", "slow_side", "--pair-steps", "3", "--stagger", "0.5")),
    # uuid4 ids, the resume-uuid shape (closed after step 2, Last-Event-ID = log 1), but the store's replay
    # silently leaves out the first event after the cursor (progress 2): the client gets 1, (resume), 3, 4, 5, result.
    "uuid-lossy-replay": Scenario(
        store="uuid-skip-first", retry_ms=500, close_at="2", server_args=("--log-calls", "--log-events")),
    # uuid4 ids, server SIGKILLed after step 2 and restarted; session validity lives in a directory, so the new
    # process accepts the old session (initialized) but its store is empty: the resume GET (Last-Event-ID =
    # progress 2) gets an empty 200, again and again, until the call times out; progress 3-5 and the result are gone.
    "uuid-restart": Scenario(
        store="uuid", retry_ms=1000, kill_after_step=2, shared_sessions=True,
        server_args=("--log-calls", "--log-events"), client_args=("--call-timeout", "5")),
    # uuid4 ids, a log at every step; the stream is closed right after progress 2 (before log 2), so the client
    # resumes with Last-Event-ID = progress 2; the store's replay leaves out log 2 and replays every progress and
    # the result. Progress alone cannot show the loss.
    "uuid-drops-log": Scenario(
        store="uuid-drop-log", retry_ms=500, close_at="2",
        server_args=("--log-calls", "--log-events", "--log-every-step", "--close-after-progress")),
    # --- Progress behind opaque ids: uuid4 ids, steps 0.4 s apart, one cut (the stream closed right after a
    # step's progress notification has gone out, so the client's Last-Event-ID is that progress event), the
    # client resumes after the priming retry. Timings: the close at C, progress k+1 stored at C+0.4, k+2 at
    # C+0.8, ...; the resume GET arrives at C + retry + a few ms, between two steps.
    # (1) replay leaves out the first event after the cursor (progress 4): 1,2,3 | 5,6,7 + result.
    "uuid-skip-one": _paced("uuid-skip-first", retry_ms=1000, close_at="3", steps=7),
    # (2) replay leaves out the first two events after the cursor (progress 4, 5): 1,2,3 | 6,7,8 + result.
    "uuid-skip-two": _paced("uuid-skip-two", retry_ms=1000, close_at="3", steps=8),
    # (3) a buffer of the last 2 events per stream; the resume comes 2.2 s after the cut, when progress 4-8
    # are stored: the cursor (progress 3) and progress 4-6 are evicted; it replays 7, 8 and goes on live.
    "uuid-evicted-buffer": _paced("uuid-ring", retry_ms=2200, close_at="3", steps=10, server_args=("--ring-size", "2")),
    # (4) events expire 0.5 s after they were stored; the resume comes 1.5 s after the cut: progress 4 and 5
    # have expired, 6 (0.3 s old) is replayed, then live.
    "uuid-ttl-expired": _paced("uuid-ttl", retry_ms=1500, close_at="3", steps=9, server_args=("--ttl", "0.5")),
    # (5) a correct store, progress 1..7, cut after progress 3: no loss.
    "uuid-healthy-regular": _paced("uuid", retry_ms=1000, close_at="3", steps=7),
    # (6) a correct store, uneven progress 1, 2, 5, 6, 10 (total 10), cut after the value 2: no loss.
    "uuid-healthy-uneven": _paced("uuid", retry_ms=1000, close_at="2", steps=5,
                                  server_args=("--progress-values", "1,2,5,6,10")),
    # (7) a correct store, no progress at all, a log at every step, cut after log 3: no loss.
    "uuid-no-progress": _paced("uuid", retry_ms=1000, close_at="3", steps=7,
                               server_args=("--no-progress", "--log-every-step", "--close-after-log")),
    # --- The python client's stale cursor: a correct store (dense per-stream ids), cut after progress 3; the
    # first resumed GET (Last-Event-ID = progress 3) gets progress 4, 5 (replayed), a priming event and live
    # progress 6, then the server drops its TCP connection (server.py --break-resume-after 4). mcp 2.3.0 takes
    # the `except Exception` branch of _handle_reconnection and resumes with the SAME Last-Event-ID: progress
    # 4, 5, 6 come again (twice to the application), then 7..10 and the result.
    "stale-cursor": _paced("dense", retry_ms=1000, close_at="3", steps=10, server_args=("--break-resume-after", "4")),
    # The same with uuid4 ids (the correct UuidEventStore).
    "stale-cursor-uuid": _paced("uuid", retry_ms=1000, close_at="3", steps=10,
                                server_args=("--break-resume-after", "4")),
}


# `record.py` without scenario names records these (the original three, as before the newer ones were added).
DEFAULT_SCENARIOS = ("resume-uuid", "resume-dense", "server-restart")


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


def start(cmd: list[str], log: Path, cwd: Path = HERE, env: dict[str, str] | None = None) -> subprocess.Popen:
    out = open(log, "ab")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env)


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


def tcpdump_cmd(port: int, out: Path) -> list[str]:
    # -s 0: whole packets; -U: write each packet as it arrives; -n: no name lookups;
    # -Z root: Debian's tcpdump otherwise drops to user "tcpdump" before opening the
    # output file, which then cannot be created in a root-owned sample_logs/.
    cmd = [TCPDUMP, "-i", "lo", "-n", "-s", "0", "-U", "-w", str(out)]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd += ["-Z", "root"]
    return [*cmd, f"tcp port {port}"]


def start_tcpdump(port: int, out: Path, log: Path, deadline_s: float = 10.0) -> subprocess.Popen:
    """Start tcpdump and wait (bounded) until it reports that it is capturing."""
    if out.exists():
        out.unlink()
    proc = start(tcpdump_cmd(port, out), log)
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if "listening on" in log.read_text(errors="replace"):
            return proc
        if proc.poll() is not None:
            raise RuntimeError(f"tcpdump exited with {proc.returncode} before capturing, see {log}")
        time.sleep(0.05)
    stop(proc)
    raise RuntimeError(f"tcpdump did not report 'listening on' within {deadline_s}s, see {log}")


def derive_pcapng(pcap: Path) -> Path:
    out = pcap.with_suffix(".pcapng")
    subprocess.run([EDITCAP, "-F", "pcapng", str(pcap), str(out)], check=True, timeout=30)
    return out


def derive_gz(pcap: Path) -> Path:
    out = pcap.with_name(pcap.name + ".gz")
    with pcap.open("rb") as src, open(out, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as dst:
        shutil.copyfileobj(src, dst)
    return out


def server_cmd(sc: Scenario, port: int, extra: tuple[str, ...] = ()) -> list[str]:
    return [REC_PYTHON, "-u", "server.py", "--port", str(port), "--store", sc.store,
            "--retry-ms", str(sc.retry_ms), "--close-at", sc.close_at, "--interval", str(sc.interval),
            *sc.server_args, *extra]


def mitm_cmd(listen: int, upstream: int, extra: list[str]) -> list[str]:
    return [MITMDUMP, "--mode", f"reverse:http://{HOST}:{upstream}", "--listen-host", HOST,
            "--listen-port", str(listen), "--set", "connection_strategy=lazy",
            "--set", "termlog_verbosity=info", "--set", "flow_detail=1", *extra]


def restart_after(marker: str, server: list[subprocess.Popen], port: int, log: Path, stop_event: threading.Event,
                  fresh: Callable[[], subprocess.Popen], tag: str = "record.py") -> None:
    """SIGKILL the server once `marker` shows in its log, then start `fresh()` on the same port (bounded: 30 s)."""
    end = time.monotonic() + 30
    while time.monotonic() < end and not stop_event.is_set():
        if marker in log.read_text(errors="replace"):
            time.sleep(0.15)  # let the step's event reach the wire
            with log.open("a") as f:
                f.write(f"--- {tag}: SIGKILL server pid {server[0].pid} at {time.time():.6f}\n")
            server[0].kill()
            server[0].wait(timeout=5)
            server[0] = fresh()
            wait_port(port, server[0])
            with log.open("a") as f:
                f.write(f"--- {tag}: restarted server pid {server[0].pid} listening at {time.time():.6f}\n")
            return
        time.sleep(0.05)


def watch_and_restart(sc: Scenario, server: list[subprocess.Popen], port: int, log: Path,
                      stop_event: threading.Event, extra: tuple[str, ...] = ()) -> None:
    """Scenario server-restart: SIGKILL the server after `kill_after_step`, start a fresh one."""
    restart_after(f"EVENT {sc.kill_after_step}", server, port, log, stop_event,
                  lambda: start(server_cmd(sc, port, extra), log))


def start_behind_rr_proxy(n: int, server: Callable[[int, tuple[str, ...]], list[str]], proxy_port: int,
                          log_stem: Path, deadline_s: float, procs: list[subprocess.Popen], cwd: Path = HERE,
                          label: str = "") -> str:
    """`n` server.py replicas sharing a session directory (<log_stem>.sessions), then rr_proxy.py on
    `proxy_port`; `server(port, extra)` is the replica's command. Returns the line the harness prints."""
    sessions = log_stem.with_name(f"{log_stem.name}.sessions")
    if sessions.exists():
        shutil.rmtree(sessions)
    sessions.mkdir(parents=True)
    ports = [free_port() for _ in range(n)]
    for i, port in enumerate(ports, 1):
        procs.append(start(server(port, ("--replica-name", f"replica-{i}", "--shared-sessions", str(sessions))),
                           log_stem.with_name(f"{log_stem.name}.server-{i}.log"), cwd=cwd))
        wait_port(port, procs[-1])
    cmd = [sys.executable, "-u", str(HERE / "rr_proxy.py"), "--listen", str(proxy_port), "--deadline", f"{deadline_s:g}"]
    for port in ports:
        cmd += ["--upstream", str(port)]
    procs.append(start(cmd, log_stem.with_name(f"{log_stem.name}.rr-proxy.log"), cwd=cwd))  # stopped first (reversed order)
    wait_port(proxy_port, procs[-1])
    return " ".join(f"{label}replica-{i} :{p}" for i, p in enumerate(ports, 1)) + f" <- rr proxy :{proxy_port}"


def start_replicas(name: str, sc: Scenario, proxy_port: int, log_dir: Path, replicas: list[subprocess.Popen]) -> str:
    """replica-failover: `sc.replicas` server.py processes sharing a session directory, then rr_proxy.py."""
    return start_behind_rr_proxy(sc.replicas, lambda port, extra: [*server_cmd(sc, port), *extra], proxy_port,
                                 log_dir / name, sc.client_timeout + 60, replicas)


def record(name: str, sc: Scenario, out_dir: Path, log_dir: Path, har_mode: str, pcap: bool = True, *,
           stem: str | None = None, client_cmd: Callable[[str], list[str]] | None = None,
           client_log: Path | None = None, server_cmd_of: Callable[[int], list[str]] | None = None) -> Path | None:
    """One scenario, one run.  `record_peers.py` (the Go and Java SDK peers) passes `stem` (the output file name
    without extension), `client_cmd` (the client's argv for an MCP URL, run in place of client.py), `client_log`
    (where to keep the client's output in the repo) and `server_cmd_of` (the server's argv for a port, run in place
    of server.py; one process, no restart)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    for old in log_dir.glob(f"{name}.*.log"):
        old.unlink()
    stem = (stem or f"real-python-{name}") + {"keep": "", "stream": ".mitm-streamed", "buffer": ".mitm-buffered"}[har_mode]
    out_dir.mkdir(parents=True, exist_ok=True)  # tcpdump cannot create it
    jsonl, har, pcap_file = out_dir / f"{stem}.jsonl", out_dir / f"{stem}.har", out_dir / f"{stem}.pcap"
    s_port, b_port, a_port = free_port(), free_port(), free_port()
    s_log, b_log, a_log = (log_dir / f"{name}.{p}.log" for p in ("server", "mitm-har", "mitm-jsonl"))
    t_log = log_dir / f"{name}.tcpdump.log"
    b_extra = ["--set", f"hardump={har}"]
    if har_mode == "keep":
        b_extra += ["-s", str(HERE / "har_keep_stream.py")]
    elif har_mode == "stream":
        b_extra += ["--set", "stream_large_bodies=1"]
    a_extra = ["-s", str(REPO / "analyzer" / "mitm_addon.py"), "--set", f"mcp_jsonl={jsonl}"]

    # tcpdump first: it must be capturing before the server accepts its first connection.
    # (replica-failover: s_port is the round-robin proxy's port, so the pcap holds the B -> proxy leg.)
    capture = start_tcpdump(s_port, pcap_file, t_log) if pcap else None
    server: list[subprocess.Popen] = []
    replicas: list[subprocess.Popen] = []
    procs: list[subprocess.Popen] = []
    stop_event = threading.Event()
    upstream_desc = f"server :{s_port}"
    s_extra: tuple[str, ...] = ()
    if sc.shared_sessions:  # uuid-restart: the restarted process finds the session in this directory
        sessions = log_dir / f"{name}.sessions"
        if sessions.exists():
            shutil.rmtree(sessions)
        sessions.mkdir(parents=True)
        s_extra = ("--shared-sessions", str(sessions))
    try:
        if sc.replicas > 1:
            upstream_desc = start_replicas(name, sc, s_port, log_dir, replicas)
        else:
            server.append(start(server_cmd_of(s_port) if server_cmd_of else server_cmd(sc, s_port, s_extra), s_log))
            wait_port(s_port, server[0])
        procs.append(start(mitm_cmd(b_port, s_port, b_extra), b_log))
        wait_port(b_port, procs[-1])
        procs.append(start(mitm_cmd(a_port, b_port, a_extra), a_log))
        wait_port(a_port, procs[-1])
        time.sleep(1.0)  # mitmdump listens before it reports script errors and exits
        for proc, log in zip(procs, (b_log, a_log), strict=True):
            if proc.poll() is not None:
                raise RuntimeError(f"mitmdump exited early ({proc.returncode}), see {log}")
        client_port = a_port
        if sc.relay is not None:
            r_port = free_port()
            r_log = log_dir / f"{name}.relay.log"
            procs.append(start([sys.executable, "-u", str(HERE / "partition_relay.py"), "--listen", str(r_port),
                                "--upstream", str(a_port), "--deadline", str(sc.client_timeout + 30),
                                *sc.relay], r_log))
            wait_port(r_port, procs[-1])
            client_port = r_port
        watcher = None
        if sc.kill_after_step is not None:
            watcher = threading.Thread(target=watch_and_restart, args=(sc, server, s_port, s_log, stop_event, s_extra))
            watcher.start()
        chain = f"HAR proxy :{b_port} <- JSONL proxy :{a_port}" + (
            f" <- partition relay :{client_port}" if client_port != a_port else "")
        print(f"[{name}] {upstream_desc} <- {chain} <- client", flush=True)
        url = f"http://{HOST}:{client_port}/mcp"
        argv = client_cmd(url) if client_cmd is not None else [
            REC_PYTHON, "-u", "client.py", url, "--steps", str(sc.steps), "--timeout", f"{sc.client_timeout:g}",
            *sc.client_args]
        client = subprocess.run(argv, cwd=HERE, capture_output=True, text=True, timeout=sc.client_timeout + 30)
        (log_dir / f"{name}.client.log").write_text(client.stdout + client.stderr)
        if client_log is not None:  # record_peers.py: the client's own log, next to its module
            client_log.parent.mkdir(parents=True, exist_ok=True)
            client_log.write_text(client.stdout + client.stderr)
        if sc.keep_logs:  # newer scenarios: what the application received, next to the capture
            kept = out_dir / "recording" / "client-logs"
            kept.mkdir(parents=True, exist_ok=True)
            (kept / f"{name}.txt").write_text(client.stdout + client.stderr)
        print(client.stdout, end="", flush=True)
        print(f"[{name}] client exit code {client.returncode}", flush=True)
        if watcher is not None:
            stop_event.set()
            watcher.join(timeout=35)
        time.sleep(0.5)  # let the proxies see the last connection closes
    finally:
        stop_event.set()
        for proc in reversed(procs):  # relay, A first, then B (its HAR is written on exit)
            stop(proc)
        if server:
            stop(server[0])
        for proc in reversed(replicas):  # replica-failover: the rr proxy, then the replicas
            stop(proc)
        if capture is not None:
            # Last, so B's closing FINs are in the file; SIGINT makes tcpdump flush and report its counts.
            time.sleep(0.3)
            stop(capture, grace_s=5.0)
    if sc.keep_logs and s_log.exists():  # the server's STORE/REPLAY/BREAK lines: the ground truth
        kept = out_dir / "recording" / "server-logs"
        kept.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(s_log, kept / f"{name}.txt")
    written = (jsonl, har, pcap_file) if pcap else (jsonl, har)
    sizes = ", ".join(f"{p.name} ({p.stat().st_size if p.exists() else 'missing'} B)" for p in written)
    print(f"[{name}] wrote {sizes}; logs in {log_dir}", flush=True)
    if capture is not None:
        counts = [ln.strip() for ln in t_log.read_text(errors="replace").splitlines() if "packets" in ln]
        print(f"[{name}] tcpdump: {'; '.join(counts)}", flush=True)
        dropped = [ln for ln in counts if ln.endswith("dropped by kernel") and not ln.startswith("0 ")]
        if dropped:
            print(f"[{name}] WARNING: tcpdump lost packets ({dropped[0]}): the pcap has holes, record again", flush=True)
        return pcap_file
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenarios", nargs="*",
                        help=f"any of {list(SCENARIOS)}, or 'all' (default: {' '.join(DEFAULT_SCENARIOS)})")
    parser.add_argument("--out-dir", type=Path, default=HERE.parent)
    parser.add_argument("--log-dir", type=Path, default=Path("/tmp/mcp-sse-audit-recording"))
    parser.add_argument("--har-mode", choices=("keep", "stream", "buffer"), default="keep")
    parser.add_argument("--no-pcap", dest="pcap", action="store_false",
                        help="do not run tcpdump (default: capture the B -> server leg to .pcap)")
    parser.add_argument("--pcapng-of", default="resume-dense", metavar="SCENARIO",
                        help="also convert this scenario's pcap to .pcapng with editcap (default %(default)s; '' = none)")
    parser.add_argument("--gz-of", default="server-restart", metavar="SCENARIO",
                        help="also gzip this scenario's pcap to .pcap.gz (default %(default)s; '' = none)")
    args = parser.parse_args()
    if args.scenarios == ["all"]:
        args.scenarios = list(SCENARIOS)
    unknown = [n for n in args.scenarios if n not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s) {unknown}; choose from {list(SCENARIOS)}")
    for name in args.scenarios or list(DEFAULT_SCENARIOS):
        pcap = record(name, SCENARIOS[name], args.out_dir.resolve(), args.log_dir, args.har_mode, args.pcap)
        if pcap is not None and args.har_mode == "keep" and name == args.pcapng_of:
            print(f"[{name}] wrote {derive_pcapng(pcap).name} (editcap -F pcapng)", flush=True)
        if pcap is not None and args.har_mode == "keep" and name == args.gz_of:
            print(f"[{name}] wrote {derive_gz(pcap).name} (gzip)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
