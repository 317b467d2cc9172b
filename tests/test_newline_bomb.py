"""Bombs in time, not only in bytes (issue [3/5] item 9): blank lines are counted in C, in runs, never split
into billions of empty lines one Python call each; every line number after them stays right."""
from __future__ import annotations

import gzip
import io
import json

import pytest

from analyzer import pipeline
from analyzer.ingest import jsonl as ingest_jsonl

REQ = json.dumps({"kind": "request", "ts": "2026-11-13T09:00:00Z", "conn": "c1", "method": "GET", "url": "/mcp",
                  "headers": {"accept": "text/event-stream", "mcp-session-id": "s"}, "body": None}).encode()
RESP = json.dumps({"kind": "response", "ts": "2026-11-13T09:00:00Z", "conn": "c1", "status": 200,
                   "headers": {"content-type": "text/event-stream"}}).encode()


def sse(i):
    return json.dumps({"kind": "sse", "ts": "2026-11-13T09:00:01Z", "conn": "c1", "id": str(i), "event": None,
                       "data": json.dumps({"jsonrpc": "2.0", "method": "notifications/message", "params": {"n": i}}), "retry": None}).encode()


@pytest.mark.parametrize("blank", [b"\n", b"\r\n", b"  \n"])
@pytest.mark.parametrize("run", [3, 70_000, 3_000_000])  # within a block, a run longer than BLANK_RUN, runs across blocks
def test_line_numbers_after_blank_runs_are_the_per_line_readers(blank, run, monkeypatch):
    monkeypatch.setattr(ingest_jsonl, "READ_BLOCK", 1 << 20)  # several blocks without a big file
    data = REQ + b"\n" + RESP + b"\n" + sse(1) + b"\n" + blank * run + b"not json\n" + sse(2) + b"\n" + blank * run + b"{bad\n" + blank * 5
    got = ingest_jsonl.read("x.jsonl", io.BytesIO(data))
    bad = [(a["code"], a["location"]) for a in got.anomalies.to_pylist()]
    assert bad == [("jsonl_bad_line", f"line {4 + run}"), ("jsonl_bad_line", f"line {6 + 2 * run}")]
    assert [e["location"] for e in got.events.to_pylist()] == ["line 3", f"line {5 + run}"]
    assert (got.records, got.rejected) == (6, 2)  # (a bad line is a record, rejected)


def test_a_gzip_of_newlines_is_read_in_seconds_not_minutes(tmp_path):
    """200 MiB of newlines between records (a 200 KB gzip): the old reader made 200 million Python calls
    (75 s on the machine of bench/README.md); counted in runs it is a strip and a count per block. Not timed
    here (timings live in bench/): the reader's own calls are counted instead."""
    p = tmp_path / "nl.jsonl.gz"
    with gzip.open(p, "wb", compresslevel=6) as f:
        f.write(REQ + b"\n" + RESP + b"\n" + sse(1) + b"\n")
        for _ in range(50):
            f.write(b"\n" * (4 << 20))
        f.write(sse(2) + b"\n")
    calls = 0
    line = ingest_jsonl._Reader.line

    def counted(self, *a):
        nonlocal calls
        calls += 1
        return line(self, *a)

    ingest_jsonl._Reader.line = counted
    try:
        doc = pipeline.run([str(p)]).document
    finally:
        ingest_jsonl._Reader.line = line
    assert doc["summary"]["events"] == 2 and doc["anomalies"] == []
    assert calls < 100_000  # the records and the few blank lines next to them, not 200 million
