"""Record the Go and Java MCP SDK clients against the python recording server as proxy JSONL, HAR and pcap
(and the Go SDK's server with the python recording client: go-server-*).

For each scenario, in one run (record.py's `record()`, with this client in place of client.py):

    go-rec-client | RecClient --> mitmdump A (analyzer/mitm_addon.py, JSONL)
                              --> mitmdump B (har_keep_stream.py + hardump, HAR)
                              --> server.py (python SDK mcp 2.3.0; or 2 replicas behind rr_proxy.py)
    tcpdump -i lo -s 0 -U 'tcp port <server or proxy port>'

and writes sample_logs/real-<go|java>-<scenario>.{jsonl,har,pcap}, plus the client's own log (what the
application received, and every HTTP request its transport made) in
sample_logs/recording/<go|java>/client-logs/<scenario>.txt (.txt, not .log: the analyzer reads .log
files as captures) and the server's log in the same folder's server-logs/<scenario>.txt.

    python3 sample_logs/recording/record_peers.py --build            # build both clients outside the repo
    python3 sample_logs/recording/record_peers.py                    # every scenario
    python3 sample_logs/recording/record_peers.py go-client-resume   # one

Clients:
- Go: github.com/modelcontextprotocol/go-sdk v1.8.0, module go/ (go.mod, go.sum), built with
  `go build -o $GO_REC_DIR/go-rec-client ./client` and `... go-rec-server ./server` (GO_REC_DIR default
  /work/go-rec; GO default go).
- Java: io.modelcontextprotocol.sdk:mcp 2.2.0, java/pom.xml; `--build` asks Maven for the class path
  (`mvn dependency:build-classpath`, into $JAVA_REC_DIR/cp.txt, JAVA_REC_DIR default /work/java-rec) and
  compiles java/src/main/java/RecClient.java with javac into $JAVA_REC_DIR/classes. Nothing is built in
  the repo. Environment: MVN (default mvn), JAVA (java), JAVAC (javac).
go-server-* run the Go SDK's server (go/server/main.go, built as $GO_REC_DIR/go-rec-server: the SDK's
MemoryEventStore, a STORE/REPLAY line per store call) in place of server.py, and client.py as the client.
Server side: REC_PYTHON (default /work/rec-venv/bin/python), MITMDUMP, TCPDUMP as record.py.
Everything listens on 127.0.0.1 only; every wait has a deadline. Standard library only.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import record as _shared  # noqa: E402  (the python harness: record() runs the chain, this file names the client)

GO_DIR, JAVA_DIR = HERE / "go", HERE / "java"
GO = os.environ.get("GO", "go")
MVN = os.environ.get("MVN", "mvn")
JAVA = os.environ.get("JAVA", "java")
JAVAC = os.environ.get("JAVAC", "javac")
GO_REC_DIR = Path(os.environ.get("GO_REC_DIR", "/work/go-rec"))
JAVA_REC_DIR = Path(os.environ.get("JAVA_REC_DIR", "/work/java-rec"))


@dataclass(frozen=True)
class Peer:
    lang: str  # "go" | "java": file names real-<lang>-<scenario>.*, logs in <lang>/client-logs/
    server: _shared.Scenario  # the python server side (store, retry, cuts, replicas, restart); the python client's steps
    client_args: tuple[str, ...]
    sdk_server: tuple[str, ...] | None = None  # run the Go SDK server with these options (and python client.py)


# the server options every scenario shares: TOOL START/END lines and the STORE/REPLAY lines of the store
_LOG = ("--log-calls", "--log-events")

SCENARIOS: dict[str, Peer] = {
    # --- The Go SDK client (v1.8.0) ---
    # A healthy resume: dense per-stream ids, the server closes slow_count's POST stream after step 2 (priming
    # retry 500 ms); the client resumes with GET + Last-Event-ID and the store replays the rest.
    "go-client-resume": Peer("go", _shared.Scenario(
        store="dense", retry_ms=500, close_at="2", steps=5, interval=0.4, server_args=_LOG),
        ("--steps", "5", "--call-timeout", "15s")),
    # The resumed stream cut again (server.py --break-resume-after 4 drops the first resumed GET's TCP connection
    # after 4 events): the Go client resumes again from the LAST id it received (not the first resume's cursor).
    "go-client-cut-twice": Peer("go", _shared.Scenario(
        store="dense", retry_ms=1000, close_at="3", steps=10, interval=0.4,
        server_args=(*_LOG, "--close-after-progress", "--break-resume-after", "4")),
        ("--steps", "10", "--call-timeout", "20s")),
    # Server SIGKILLed after step 2 and restarted on the same port (no sessions): the resume GET (after the
    # priming retry, 3000 ms) gets 404; then the application pings and lists tools. The client opens no standalone
    # GET stream (--no-standalone-sse): with one, the Go client reconnects that stream about 1-2 s after the kill,
    # and its 404 (or, while the server is still down, the HAR proxy's 502) fails the session before the call's own
    # resume is sent (two trial runs did that).
    "go-client-server-restart": Peer("go", _shared.Scenario(
        store="dense", retry_ms=3000, steps=6, interval=0.3, kill_after_step=2, server_args=("--log-calls",)),
        ("--steps", "6", "--call-timeout", "15s", "--follow-up", "--no-standalone-sse")),
    # Two replicas (own in-memory "start over" stores, shared session validity) behind the round-robin proxy, as
    # record.py's replica-failover: the resume GET lands on the other replica, which replays ITS events of the
    # session: other calls' responses (foreign ids) on slow_count's resumed stream.
    "go-client-replica-failover": Peer("go", _shared.Scenario(
        store="session-log", retry_ms=500, close_at="2", steps=5, interval=0.4, replicas=2,
        server_args=("--log-calls", "--extra-tools", "add")),
        ("--pre", "sleep:0.5", "--pre", 'call:add:{"a":2,"b":3}', "--pre", "ping", "--steps", "5",
         "--call-timeout", "6s", "--follow-up")),
    # One server, one store keyed by stream (= JSON-RPC request id) without the session (record.py's
    # shared-store-concurrent, record_ts.py's client-foreign-same-id). Two Go sessions at once: A calls slow_side
    # (3 steps), B calls slow_count 0.5 s later; both calls are JSON-RPC id 2. B's stream is cut after step 2; its
    # resume (retry 1000 ms, after A's result was stored) gets A's events and A's result, with B's own id.
    "go-client-foreign-same-id": Peer("go", _shared.Scenario(
        store="shared-stream", retry_ms=1000, close_at="2", steps=6, interval=0.4,
        server_args=("--log-calls", "--extra-tools", "slow_side")),
        ("--pair", "slow_side", "--pair-steps", "3", "--steps", "6", "--stagger", "500ms", "--call-timeout", "15s")),
    # --- The Go SDK SERVER (v1.8.0, its own MemoryEventStore) with the python client (mcp 2.3.0) ---
    # A healthy resume: the tool closes its stream after step 2 (RequestExtra.CloseSSEStream, retry 500 ms); the
    # python client resumes with GET + Last-Event-ID and the store replays the rest.
    "go-server-resume": Peer("go", _shared.Scenario(store="", retry_ms=0, steps=5),
                             ("--app-log",), sdk_server=("--close-at", "2", "--retry-ms", "500", "--interval", "0.4")),
    # --- The Java SDK client (2.2.0) ---
    # The same healthy-resume server: the Java client does not resume (no GET with Last-Event-ID); the call
    # times out after the client's request timeout (8 s); the application then pings and lists tools.
    "java-client-resume": Peer("java", _shared.Scenario(
        store="dense", retry_ms=500, close_at="2", steps=5, interval=0.4, server_args=_LOG),
        ("--steps", "5", "--call-timeout-s", "8", "--follow-up")),
    # Server SIGKILLed after step 2 and restarted (no sessions): the cut POST stream is not resumed; the call
    # times out; the follow-up requests get 404 (unknown session).
    "java-client-server-restart": Peer("java", _shared.Scenario(
        store="dense", retry_ms=3000, steps=6, interval=0.3, kill_after_step=2, server_args=("--log-calls",)),
        ("--steps", "6", "--call-timeout-s", "8", "--follow-up")),
}


def java_classpath() -> str:
    cp = (JAVA_REC_DIR / "cp.txt").read_text().strip()
    return f"{JAVA_REC_DIR / 'classes'}{os.pathsep}{cp}"


def client_cmd(peer: Peer):
    def cmd(url: str) -> list[str]:
        if peer.sdk_server is not None:  # the SDK's server: the python recording client
            return [_shared.REC_PYTHON, "-u", "client.py", url, "--steps", str(peer.server.steps),
                    "--timeout", f"{peer.server.client_timeout:g}", *peer.client_args]
        if peer.lang == "go":
            return [str(GO_REC_DIR / "go-rec-client"), url, *peer.client_args]
        # slf4j-simple: the SDK's own log lines to stdout, UTC time stamps, so they interleave with the client's
        return [JAVA, "-Duser.timezone=UTC", "-Dorg.slf4j.simpleLogger.logFile=System.out",
                "-Dorg.slf4j.simpleLogger.showDateTime=true",
                "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd'T'HH:mm:ss.SSS'Z'",
                "-cp", java_classpath(), "RecClient", url, *peer.client_args]
    return cmd


def server_cmd_of(peer: Peer):
    if peer.sdk_server is None:
        return None
    return lambda port: [str(GO_REC_DIR / "go-rec-server"), "--port", str(port), *peer.sdk_server]


def build() -> None:
    GO_REC_DIR.mkdir(parents=True, exist_ok=True)
    for prog in ("client", "server"):
        subprocess.run([GO, "build", "-mod=readonly", "-o", str(GO_REC_DIR / f"go-rec-{prog}"), f"./{prog}"],
                       cwd=GO_DIR, check=True, timeout=600)
    JAVA_REC_DIR.mkdir(parents=True, exist_ok=True)
    subprocess.run([MVN, "-q", "-B", "-f", str(JAVA_DIR / "pom.xml"), "dependency:build-classpath",
                    f"-Dmdep.outputFile={JAVA_REC_DIR / 'cp.txt'}"], check=True, timeout=600)
    classes = JAVA_REC_DIR / "classes"
    if classes.exists():
        shutil.rmtree(classes)
    subprocess.run([JAVAC, "-d", str(classes), "-cp", (JAVA_REC_DIR / "cp.txt").read_text().strip(),
                    str(JAVA_DIR / "src" / "main" / "java" / "RecClient.java")], check=True, timeout=600)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenarios", nargs="*", help=f"any of {list(SCENARIOS)} (default: all)")
    parser.add_argument("--build", action="store_true", help=f"build the clients into {GO_REC_DIR}, {JAVA_REC_DIR}")
    parser.add_argument("--out-dir", type=Path, default=HERE.parent)
    parser.add_argument("--log-dir", type=Path, default=Path("/tmp/mcp-sse-audit-recording"))
    args = parser.parse_args()
    unknown = [n for n in args.scenarios if n not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s) {unknown}; choose from {list(SCENARIOS)}")
    if args.build:
        build()
        if not args.scenarios:
            return 0
    out_dir = args.out_dir.resolve()
    for name in args.scenarios or list(SCENARIOS):
        peer = SCENARIOS[name]
        short = name.removeprefix(f"{peer.lang}-")  # client-resume, server-resume (client-logs/ holds the client's log either way)
        logs = HERE / peer.lang
        _shared.record(name, peer.server, out_dir, args.log_dir, "keep", stem=f"real-{name}",
                       client_cmd=client_cmd(peer), client_log=logs / "client-logs" / f"{short}.txt",
                       server_cmd_of=server_cmd_of(peer))
        s_logs = sorted(args.log_dir.glob(f"{name}.server*.log"))
        (logs / "server-logs").mkdir(parents=True, exist_ok=True)
        for s_log in s_logs:  # server.log, or server-1.log / server-2.log for replicas
            suffix = s_log.name.removeprefix(f"{name}.server").removesuffix(".log")
            shutil.copyfile(s_log, logs / "server-logs" / f"{short}{suffix}.txt")
    return 0


if __name__ == "__main__":
    sys.exit(main())
