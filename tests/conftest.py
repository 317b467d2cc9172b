"""Shared helpers: tiny proxy-JSONL captures written in the test itself, and the stores of the samples, built
once per session (several modules read the same store of the same inputs: it is ingested once, not per module)."""
from __future__ import annotations

import copy
import json
import os
from pathlib import Path


def rpc_result(rid, **result):
    return json.dumps({"jsonrpc": "2.0", "id": rid, "result": result})


def rpc_note(n):
    return json.dumps({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": n}})

import pytest

from analyzer import pipeline

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_logs"
SYN = SAMPLES / "synthetic"
EPOCH = "1767225600"  # 2026-01-01T00:00:00Z: the SOURCE_DATE_EPOCH of the shared single-pass document
SID = "sess-A"
SID2 = "sess-B"


class Capture:
    """Builds a proxy JSONL capture one exchange at a time; times advance by 1 s per exchange."""

    def __init__(self, user_agent: str | None = None) -> None:
        self.lines: list[dict] = []
        self.n = 0
        self.user_agent = user_agent  # when set, every request carries it (signals/clients.py tells the client by it)

    def _ts(self, extra: float = 0.0) -> str:
        sec = self.n + extra
        return f"2026-11-13T09:{int(sec) // 60:02d}:{int(sec) % 60:02d}.{int((sec % 1) * 1e6):06d}Z"

    def exchange(self, method="GET", headers=None, body=None, status=200, resp_headers=None, events=(), json_body=None, close="eof"):
        self.n += 1
        conn = f"c{self.n}"
        headers = dict(headers or {})
        if self.user_agent is not None:
            headers.setdefault("user-agent", self.user_agent)
        self.lines.append({"kind": "request", "ts": self._ts(), "conn": conn, "method": method, "url": "http://127.0.0.1:9/mcp", "headers": headers, "body": body})
        if status is not None:
            self.lines.append({"kind": "response", "ts": self._ts(0.01), "conn": conn, "status": status, "headers": resp_headers or {}})
        for i, ev in enumerate(events):
            eid, data = ev[0], ev[1]
            rec = {"kind": "sse", "ts": self._ts(0.1 + i / 1000), "conn": conn, "id": eid, "event": None, "data": data, "retry": None}
            if len(ev) > 2 and ev[2] == "cut":
                rec["truncated"] = True
            self.lines.append(rec)
        if json_body is not None:
            self.lines.append({"kind": "body", "ts": self._ts(0.02), "conn": conn, "data": json_body})
        if close:
            self.lines.append({"kind": "close", "ts": self._ts(0.5), "conn": conn, "reason": close})
        return self

    def initialize(self, sid=SID, rid=0):
        self.exchange(
            "POST", {"content-type": "application/json"},
            body=json.dumps({"jsonrpc": "2.0", "id": rid, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}),
            resp_headers={"content-type": "application/json", "mcp-session-id": sid},
            json_body=json.dumps({"jsonrpc": "2.0", "id": rid, "result": {"protocolVersion": "2025-06-18", "capabilities": {}, "serverInfo": {"name": "s", "version": "0"}}}),
        )
        return self

    def stream(self, sid=SID, last=None, ids=(), status=200, resp_headers=None, close="reset", data=None, events=None):
        headers = {"accept": "text/event-stream", "mcp-session-id": sid}
        if last is not None:
            headers["last-event-id"] = last
        rh = {"content-type": "text/event-stream"} if resp_headers is None else resp_headers
        evs = events if events is not None else [(str(i), data(i) if data else json.dumps({"jsonrpc": "2.0", "method": "notifications/message", "params": {"n": i}})) for i in ids]
        return self.exchange("GET", headers, status=status, resp_headers=rh, events=evs, close=close)

    def call(self, sid=SID, rid=1):
        return self.exchange(
            "POST", {"content-type": "application/json", "mcp-session-id": sid},
            body=json.dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": {"name": "x"}}),
            resp_headers={"content-type": "application/json"},
            json_body=json.dumps({"jsonrpc": "2.0", "id": rid, "result": {}}),
        )

    def post_sse(self, sid=SID, rid=1, method="tools/call", events=(), close="eof", status=200):
        """A POST whose request opens an SSE stream (the response, notifications, server requests come on it)."""
        return self.exchange(
            "POST", {"content-type": "application/json", "accept": "application/json, text/event-stream", "mcp-session-id": sid},
            body=json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": {"name": "x"}}),
            status=status, resp_headers={"content-type": "text/event-stream"}, events=events, close=close,
        )

    def text(self) -> str:
        return "".join(json.dumps(r) + "\n" for r in self.lines)

    def write(self, path: Path) -> Path:
        path.write_text(self.text())
        return path


@pytest.fixture
def capture():
    return Capture()


@pytest.fixture
def analyze(tmp_path):
    """Write a Capture (or raw text) to a file and run the whole pipeline on it."""

    def run(cap, name="cap.jsonl"):
        p = tmp_path / name
        if isinstance(cap, Capture):
            cap.write(p)
        elif isinstance(cap, bytes):
            p.write_bytes(cap)
        else:
            p.write_text(cap)
        return pipeline.run([str(p)]).document

    return run


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config) -> int:
    """``-n auto`` (pyproject.toml's addopts): one worker per core, at most 4.  Each worker imports the analyzer
    and builds the shared stores below that its files need, and the Spark files start a JVM each: past a few
    workers that repeated set-up outweighs the parallelism (2 workers: 435 s, 3: 418 s on 2 cores)."""
    return max(1, min(os.cpu_count() or 1, 4))


# --- the stores of the samples, built once per session ---------------------------------------------------------
#
# Read-only: a test that changes a store copies it first (shutil.copytree of a local store is cheap); the
# teardown fails the run when a shared store's files changed, so a mutated store is never shared unnoticed.


def _files(root: Path) -> list[tuple[str, int, int]]:
    return sorted((str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file())


def _shared_store(tmp_path_factory, name: str, paths: list[str]):
    from analyzer.scale import store

    st = tmp_path_factory.mktemp(name) / "st"
    store.ingest(paths, st)
    before = _files(st)
    yield st
    assert _files(st) == before, f"a test changed the shared store {st}: copy it (shutil.copytree) before changing it"


@pytest.fixture(scope="session")
def samples_store(tmp_path_factory):
    """sample_logs/ ingested once (test_partitions, test_spill, test_spark read it)."""
    yield from _shared_store(tmp_path_factory, "samples-store", [str(SAMPLES)])


@pytest.fixture(scope="session")
def synthetic_store(tmp_path_factory):
    """sample_logs/synthetic/ ingested once (the local twins of test_store_s3's object stores)."""
    yield from _shared_store(tmp_path_factory, "synthetic-store", [str(SYN)])


@pytest.fixture(scope="session")
def _samples_single_pass(samples_store) -> dict:
    from analyzer.scale import store

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SOURCE_DATE_EPOCH", EPOCH)
        tables, rows = store.load(samples_store)
        return pipeline.analyze_tables(tables, rows, [], [], len(rows)).document


@pytest.fixture
def samples_single_pass(_samples_single_pass) -> dict:
    """The single pass's document of ``samples_store`` (SOURCE_DATE_EPOCH=EPOCH), analyzed once per session;
    each test gets its own copy."""
    return copy.deepcopy(_samples_single_pass)


@pytest.fixture(scope="session")
def _samples_run() -> dict:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SOURCE_DATE_EPOCH", EPOCH)
        return pipeline.run([str(SAMPLES)]).document


@pytest.fixture
def samples_run(_samples_run) -> dict:
    """``pipeline.run([sample_logs/])``'s document (SOURCE_DATE_EPOCH=EPOCH, the list path), analyzed once per
    session; each test gets its own copy."""
    return copy.deepcopy(_samples_run)
