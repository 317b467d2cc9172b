"""Resource limits (analyzer/limits.py): a pathological input neither exhausts memory nor hangs, and
the message says which limit and which option.  Sizes are scaled down with the limits, so the tests
stay small while the code paths are the ones a 1 GB line or a bomb takes."""
from __future__ import annotations

import gzip
import json
import tracemalloc

from click.testing import CliRunner

from analyzer.ingest import inputs
from analyzer import limits
from analyzer.cli import main
from analyzer.ingest.reading import Reading

REQ = {"kind": "request", "ts": "2026-11-13T09:00:00Z", "conn": "c", "method": "GET", "url": "http://h/mcp",
       "headers": {"mcp-session-id": "s1", "last-event-id": "1"}, "body": None}
OK = json.dumps({"jsonrpc": "2.0", "method": "notifications/message", "params": {}})
RESP = {"kind": "response", "ts": "2026-11-13T09:00:00.1Z", "conn": "c", "status": 200, "headers": {"content-type": "text/event-stream"}}


def line(rec: dict) -> bytes:
    return (json.dumps(rec) + "\n").encode()


def test_a_line_past_the_limit_is_one_rejected_record_and_is_never_held(tmp_path):
    big = b'{"kind":"sse","conn":"c","data":"' + b"x" * (8 << 20) + b'"}\n'  # 8 MiB line, limit 1 MiB
    path = tmp_path / "huge-line.jsonl"
    path.write_bytes(line(REQ) + line(RESP) + big + line({"kind": "sse", "conn": "c", "id": "2", "data": OK}))
    warm = tmp_path / "warm.jsonl"  # imports and first-use caches are not what is measured
    warm.write_bytes(line(REQ) + line(RESP))
    inputs.read_one(str(warm))
    tracemalloc.start()
    got = inputs.read_one(str(path), Reading(limits=limits.Limits(line_bytes=1 << 20)))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 4 << 20  # the 8 MiB line was skipped in 1 MiB reads, never held whole
    codes = [r["code"] for r in got.anomalies.to_pylist()]
    assert codes == ["jsonl_line_too_long"]
    assert got.anomalies.to_pylist()[0]["location"] == "line 3" and "--max-line-mb" in got.anomalies.to_pylist()[0]["message"]
    assert (got.records, got.rejected) == (4, 1)
    assert got.events.column("data").to_pylist() == [OK]  # the good record after it is read


def test_a_har_past_the_document_limit_is_refused_with_the_option_named(tmp_path):
    path = tmp_path / "big.har"
    path.write_text(json.dumps({"log": {"entries": [], "pad": "x" * (3 << 20)}}))  # the document around the entries
    r = CliRunner().invoke(main, ["analyze", str(path), "-q", "--max-har-mb", "1"])
    assert r.exit_code == 2
    assert "larger than 1 MiB" in r.output and "--max-har-mb" in r.output
    entry = {"startedDateTime": "2026-01-01T00:00:00Z", "request": {"method": "POST", "url": "http://h/mcp", "headers": [],
             "postData": {"text": "x" * (3 << 20)}}, "response": {"status": 202, "headers": []}}
    path.write_text(json.dumps({"log": {"entries": [entry]}}))  # one entry
    r = CliRunner().invoke(main, ["analyze", str(path), "-q", "--max-har-mb", "1"])
    assert r.exit_code == 2 and "larger than 1 MiB" in r.output
    path.write_text(json.dumps({"log": {"entries": [entry] * 2}})[: 4 << 20])  # cut short: read whole to salvage
    r = CliRunner().invoke(main, ["analyze", str(path), "-q", "--max-har-mb", "1"])
    assert r.exit_code == 2 and "larger than 1 MiB" in r.output


def test_a_well_formed_har_is_streamed_past_the_document_limit(tmp_path):
    """Entries are read one at a time: 3 MiB of them under a 1 MiB limit are all read."""
    entry = {"startedDateTime": "2026-01-01T00:00:00Z", "request": {"method": "POST", "url": "http://h/mcp", "headers": [],
             "postData": {"text": "x" * (100 << 10)}}, "response": {"status": 202, "headers": []}}
    path = tmp_path / "many.har"
    path.write_text(json.dumps({"log": {"entries": [entry] * 30}}))
    got = inputs.read_one(str(path), Reading(limits=limits.Limits(document_bytes=1 << 20)))
    assert got.records == 30 and got.exchanges.num_rows == 30 and got.rejected == 0


def test_a_gzip_bomb_stops_at_the_ratio_and_the_rest_of_the_input_counts(tmp_path):
    good = line(REQ) + line(RESP) + line({"kind": "sse", "conn": "c", "id": "2", "data": OK})
    path = tmp_path / "bomb.jsonl.gz"
    path.write_bytes(gzip.compress(good + b" " * (64 << 20), 9))  # 64 MiB of blanks from ~64 KB
    ratio = 50
    old, limits.GUNZIP_FLOOR = limits.GUNZIP_FLOOR, 1 << 20
    try:
        got = inputs.read_one(str(path), Reading(limits=limits.Limits(gunzip_ratio=ratio)))
    finally:
        limits.GUNZIP_FLOOR = old
    rows = got.anomalies.to_pylist()
    assert [r["code"] for r in rows] == ["input_unreadable"]
    assert "--max-gunzip-ratio" in rows[0]["message"]
    assert got.events.column("data").to_pylist() == [OK]


def test_the_default_limits_leave_real_gzip_logs_alone(tmp_path):
    path = tmp_path / "real.jsonl.gz"
    path.write_bytes(gzip.compress(line(REQ) + line(RESP) + line({"kind": "sse", "conn": "c", "id": "2", "data": OK})))
    got = inputs.read_one(str(path))
    assert got.anomalies.num_rows == 0 and got.events.num_rows == 1


def test_two_hundred_thousand_tiny_events_in_one_connection(tmp_path):
    """One linear pass: every tiny event is a row, nothing is dropped, memory stays per event."""
    n = 200_000
    path = tmp_path / "tiny.jsonl"
    with open(path, "wb") as fh:
        fh.write(line(REQ) + line(RESP))
        fh.writelines(b'{"kind":"sse","conn":"c","id":"%d","data":"."}\n' % i for i in range(n))
    got = inputs.read_one(str(path))
    assert got.events.num_rows == n and got.rejected == 0
    assert got.events.column("ordinal").to_pylist()[-1] == n - 1


def test_limits_are_cli_options_with_defaults(tmp_path):
    r = CliRunner().invoke(main, ["analyze", "--help"])
    for opt in ("--max-line-mb", "--max-har-mb", "--max-gunzip-ratio"):
        assert opt in r.output
    r = CliRunner().invoke(main, ["ingest", "--help"])
    assert "--max-line-mb" in r.output
