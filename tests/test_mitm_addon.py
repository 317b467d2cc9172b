"""The mitmproxy addon (analyzer/mitm_addon.py) recording through a real ``mitmdump``.

A tiny SSE server (stdlib ``http.server`` in a thread, 127.0.0.1 only) sits
behind ``mitmdump -s analyzer/mitm_addon.py --mode reverse:…``; the test talks
to mitmdump with ``http.client`` and then checks the JSONL the addon wrote,
record by record, and that the analyzer reads it without rejecting anything.

What the server sends (every write is one HTTP chunk, flushed, with a pause
between them so the proxy sees them one by one):

* ``POST /mcp`` -> ``application/json`` initialize result with ``mcp-session-id``
  (Content-Length, keep-alive: the next GET reuses the client connection);
* ``GET /mcp`` (same connection): a comment line, a priming event with
  ``retry:``, an event with ``event:``, a two-line ``data``, an event split
  across two writes, then half an event (``id``, one data line, a partial line)
  and the socket is closed without the terminating chunk: mitmproxy reports an
  incomplete chunked read;
* ``GET /mcp`` with ``Last-Event-ID: 4`` on a new connection: events 5 and 6,
  then comments until the client (this test) hangs up after reading event 6.

All lines end in CRLF, as the python SDK's server writes them.

mitmdump is found through ``$MITMDUMP``, then ``mitmdump`` on PATH, then
``.venv-mitm/bin/mitmdump`` in the repository (``.ci/run`` creates that venv:
mitmproxy pins h11/cryptography versions that clash with ours). Missing:
skipped locally, a failure when ``CI=true``.
"""
from __future__ import annotations

import http.client
import http.server
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest

from analyzer import pipeline
from needs import unavailable

ROOT = Path(__file__).resolve().parent.parent
ADDON = ROOT / "analyzer" / "mitm_addon.py"
HOST = "127.0.0.1"
SID = "sess-mitm-1"
TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")

INIT_REQ = json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}})
INIT_RESP = json.dumps({"jsonrpc": "2.0", "id": 0, "result": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "serverInfo": {"name": "tiny-sse", "version": "0"}}})
PROGRESS = '{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}'
TWO_LINES = ('{"jsonrpc":"2.0","method":"notifications/message",', '"params":{"level":"info","data":"two lines"}}')
SPLIT = '{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"split"}}'
LATER = '{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":%d}}'

# The first GET's body, one element per write (= one chunk on the wire).
STREAM_1 = [
    b": keep-alive comment\r\n\r\n",
    b"id: 1\r\nretry: 1500\r\ndata:\r\n\r\n",
    b"id: 2\r\nevent: message\r\ndata: " + PROGRESS.encode() + b"\r\n\r\n",
    b"id: 3\r\ndata: " + TWO_LINES[0].encode() + b"\r\ndata: " + TWO_LINES[1].encode() + b"\r\n\r\n",
    b"id: 4\r\ndata: " + SPLIT[:30].encode(),  # an event split across two writes
    SPLIT[30:].encode() + b"\r\n\r\n",
    b"id: 5\r\ndata: first line\r\ndata: seco",  # cut off: the server closes here
]
STREAM_2 = [
    b"id: 5\r\ndata: " + (LATER % 5).encode() + b"\r\n\r\n",
    b"id: 6\r\ndata: " + (LATER % 6).encode() + b"\r\n\r\n",
]
PAUSE_S = 0.15  # between writes (0.05 was within a loaded machine's scheduling jitter: CI saw 62 ms for two pauses)
SERVER_LIMIT_S = 10.0  # no handler runs longer than this


def find_mitmdump() -> str | None:
    env = os.environ.get("MITMDUMP")
    if env:
        return env if Path(env).exists() or shutil.which(env) else None
    return shutil.which("mitmdump") or next(
        (str(p) for p in [ROOT / ".venv-mitm" / "bin" / "mitmdump"] if p.exists()), None
    )


@pytest.fixture(scope="module")
def mitmdump() -> str:
    exe = find_mitmdump()
    if exe is None:
        msg = ("mitmdump not found ($MITMDUMP, PATH, .venv-mitm/bin/mitmdump); "
               "install it in its own venv: python3 -m venv .venv-mitm && .venv-mitm/bin/pip install mitmproxy==11.0.2")
        unavailable(msg)
    return exe


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive and chunked streams, like uvicorn
    timeout = SERVER_LIMIT_S  # an idle connection does not hold a thread forever

    def log_message(self, *args) -> None:  # quiet
        pass

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _sse_head(self) -> None:
        self.send_response_only(200)  # no Server/Date headers: the records stay exact
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-store")
        self.send_header("mcp-session-id", SID)
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        self.wfile.flush()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", "0")))
        body = INIT_RESP.encode()
        self.send_response_only(200)
        self.send_header("content-type", "application/json")
        self.send_header("mcp-session-id", SID)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    def do_GET(self) -> None:
        self._sse_head()
        if self.headers.get("last-event-id") is None:
            for part in STREAM_1:
                self._chunk(part)
                time.sleep(PAUSE_S)
            # Mid-event, without the terminating 0-chunk: the server goes away.
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        for part in STREAM_2:
            self._chunk(part)
            time.sleep(PAUSE_S)
        end = time.monotonic() + SERVER_LIMIT_S
        try:
            while time.monotonic() < end:  # until the client's abort reaches us through the proxy
                self._chunk(b": ping\r\n\r\n")
                time.sleep(PAUSE_S)
        except OSError:
            pass
        self.close_connection = True


@pytest.fixture(scope="module")
def sse_server():
    server = http.server.ThreadingHTTPServer((HOST, 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def wait_listening(port: int, proc: subprocess.Popen, log: Path, tries: int = 300, pause_s: float = 0.1) -> None:
    for _ in range(tries):
        if proc.poll() is not None:
            pytest.fail(f"mitmdump exited with {proc.returncode} before listening:\n{log.read_text(errors='replace')}")
        with socket.socket() as s:
            s.settimeout(0.5)
            if s.connect_ex((HOST, port)) == 0:
                return
        time.sleep(pause_s)
    pytest.fail(f"mitmdump not listening on {port} after {tries * pause_s:.0f} s:\n{log.read_text(errors='replace')}")


def stop(proc: subprocess.Popen) -> None:
    for sig, wait_s in ((signal.SIGINT, 10), (signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        if proc.poll() is not None:
            return
        proc.send_signal(sig)
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def read_records(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def wait_for_closes(path: Path, n: int, timeout_s: float = 15.0) -> list[dict]:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        records = read_records(path)
        if sum(r["kind"] == "close" for r in records) >= n:
            return records
        time.sleep(0.05)
    return read_records(path)


def read_sse_until(resp: http.client.HTTPResponse, marker: bytes, timeout_s: float = 10.0) -> bytes:
    got = b""
    end = time.monotonic() + timeout_s
    while marker not in got and time.monotonic() < end:
        line = resp.readline()
        if not line:
            break
        got += line
    return got


@pytest.fixture(scope="module")
def recording(mitmdump, sse_server, tmp_path_factory):
    """Run the three exchanges through mitmdump; returns (records, jsonl path, server port, mitmdump's log)."""
    tmp = tmp_path_factory.mktemp("mitm")
    out, log = tmp / "out.jsonl", tmp / "mitmdump.log"
    port = free_port()
    cmd = [mitmdump, "-s", str(ADDON), "--mode", f"reverse:http://{HOST}:{sse_server}",
           "--listen-host", HOST, "--listen-port", str(port), "--set", f"mcp_jsonl={out}",
           "--set", "connection_strategy=lazy"]  # the readiness probes open no upstream connection
    with log.open("wb") as logf:
        proc = subprocess.Popen(cmd, cwd=tmp, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_listening(port, proc, log)
        # c1.1 POST and c1.2 GET on one keep-alive connection
        conn = http.client.HTTPConnection(HOST, port, timeout=10)
        conn.request("POST", "/mcp", body=INIT_REQ, headers={
            "content-type": "application/json", "accept": "application/json, text/event-stream"})
        resp = conn.getresponse()
        assert resp.status == 200 and json.loads(resp.read()) == json.loads(INIT_RESP)
        conn.request("GET", "/mcp", headers={"accept": "text/event-stream", "mcp-session-id": SID})
        resp = conn.getresponse()
        assert resp.status == 200
        try:
            resp.read()  # ends with an error: the chunked body is incomplete
        except (http.client.IncompleteRead, OSError):
            pass
        conn.close()
        # c2.1 GET resuming after 4; this client aborts after event 6
        conn = http.client.HTTPConnection(HOST, port, timeout=10)
        conn.request("GET", "/mcp", headers={
            "accept": "text/event-stream", "mcp-session-id": SID, "last-event-id": "4"})
        resp = conn.getresponse()
        assert resp.status == 200
        seen = read_sse_until(resp, b"id: 6")
        assert b"id: 6" in seen, seen
        resp.close()
        conn.close()
        records = wait_for_closes(out, 3)
    finally:
        stop(proc)
    # done() closed the file; anything written after the closes (there should be nothing) is read too
    records = read_records(out)
    return records, out, sse_server, log


def normalized(records: list[dict]) -> list[dict]:
    """The records without what changes on every run (times, client port)."""
    out = []
    for r in records:
        r = {k: v for k, v in r.items() if k != "ts"}
        if "client_addr" in r:
            assert re.fullmatch(r"127\.0\.0\.1:\d+", r["client_addr"]), r
            r["client_addr"] = "127.0.0.1:*"
        out.append(r)
    return out


def sse(conn, eid, data, event=None, retry=None, **extra):
    return {"kind": "sse", "conn": conn, "id": eid, "event": event, "data": data, "retry": retry, **extra}


def test_jsonl_records_are_exact(recording):
    records, _, upstream, log = recording
    url = f"http://{HOST}:{upstream}/mcp"
    host = f"{HOST}:{upstream}"  # reverse mode rewrites Host to the upstream
    got = normalized(records)
    # The close details of the two broken streams come from mitmproxy: checked apart below.
    details = {r["conn"]: r.pop("detail") for r in got if r["kind"] == "close"}
    want = [
        {"kind": "request", "conn": "c1.1", "method": "POST", "url": url,
         "headers": {"host": host, "accept-encoding": "identity", "content-length": str(len(INIT_REQ)),
                     "content-type": "application/json", "accept": "application/json, text/event-stream"},
         "body": INIT_REQ, "client_addr": "127.0.0.1:*"},
        {"kind": "response", "conn": "c1.1", "status": 200,
         "headers": {"content-type": "application/json", "mcp-session-id": SID, "content-length": str(len(INIT_RESP))}},
        {"kind": "body", "conn": "c1.1", "data": INIT_RESP},
        {"kind": "close", "conn": "c1.1", "reason": "eof", "by": "server"},
        {"kind": "request", "conn": "c1.2", "method": "GET", "url": url,
         "headers": {"host": host, "accept-encoding": "identity", "accept": "text/event-stream", "mcp-session-id": SID},
         "body": None, "client_addr": "127.0.0.1:*"},
        {"kind": "response", "conn": "c1.2", "status": 200,
         "headers": {"content-type": "text/event-stream", "cache-control": "no-store", "mcp-session-id": SID,
                     "transfer-encoding": "chunked"}},
        # the comment block yields nothing; "data:" with no value is an empty data line
        sse("c1.2", "1", "", retry=1500),
        sse("c1.2", "2", PROGRESS, event="message"),
        sse("c1.2", "3", "\n".join(TWO_LINES)),
        sse("c1.2", "4", SPLIT),
        sse("c1.2", "5", "first line", truncated=True, partial_line="data: seco"),
        {"kind": "close", "conn": "c1.2", "reason": "reset", "by": "server"},
        {"kind": "request", "conn": "c2.1", "method": "GET", "url": url,
         "headers": {"host": host, "accept-encoding": "identity", "accept": "text/event-stream", "mcp-session-id": SID,
                     "last-event-id": "4"},
         "body": None, "client_addr": "127.0.0.1:*"},
        {"kind": "response", "conn": "c2.1", "status": 200,
         "headers": {"content-type": "text/event-stream", "cache-control": "no-store", "mcp-session-id": SID,
                     "transfer-encoding": "chunked"}},
        sse("c2.1", "5", LATER % 5),
        sse("c2.1", "6", LATER % 6),
        {"kind": "close", "conn": "c2.1", "reason": "reset", "by": "client"},
    ]
    assert got == want, f"mitmdump log:\n{log.read_text(errors='replace')}"
    assert details["c1.1"] == "response complete"
    # mitmproxy's own words (11.0.2); the addon maps them to reason/by, checked exactly above
    assert "incomplete chunked read" in details["c1.2"].lower(), details
    assert "client disconnected" in details["c2.1"].lower(), details


def test_timestamps_are_rfc3339_and_increase_per_exchange(recording):
    records = recording[0]
    assert records and all(TS.match(r["ts"]) for r in records), [r["ts"] for r in records]
    when = lambda r: datetime.strptime(r["ts"], "%Y-%m-%dT%H:%M:%S.%fZ")  # noqa: E731
    for conn in ("c1.1", "c1.2", "c2.1"):
        mine = [r for r in records if r["conn"] == conn]
        times = [when(r) for r in mine]
        assert times == sorted(times), (conn, [r["ts"] for r in mine])
        # every event was its own write, PAUSE_S apart: each is stamped as it passed, so strictly later
        events = [when(r) for r in mine if r["kind"] == "sse"]
        assert all(a < b for a, b in zip(events, events[1:])), (conn, [r["ts"] for r in mine if r["kind"] == "sse"])
    # c1.2: the split event's record comes after its second half, i.e. at least one pause after event 3
    c12 = {r["id"]: when(r) for r in records if r["conn"] == "c1.2" and r["kind"] == "sse"}
    assert (c12["4"] - c12["3"]).total_seconds() >= PAUSE_S * 1.5, c12


def test_analyzer_reads_the_recording_without_rejecting_anything(recording):
    _, out, _, _ = recording
    doc = pipeline.run([str(out)]).document
    (inp,) = doc["inputs"]
    assert (inp["format"], inp["records"], inp["rejected"], inp["error"]) == ("jsonl", 17, 0, None)
    assert [x["conn"] for x in doc["exchanges"]] == ["c1.1", "c1.2", "c2.1"]
    # the cut-off event 5 is kept as evidence, never as processed; the resume from 4 continues with 5
    codes = [a["code"] for a in doc["anomalies"]]
    assert codes.count("sse_unterminated_event") == 1, doc["anomalies"]
    (b,) = doc["boundaries"]
    assert (b["last_event_id"], b["first_event_id_after"], b["verdict"]) == ("4", "5", "continuous"), b
