"""The HAR reader parses its event-stream bodies in batches of PARSE_BYTES (the parse holds about six times its
batch at its peak: bench/SCALE.md, 2026-12-06 "HAR peak") and logs their anomalies every LOG_BYTES, so the tables
are those of one parse per LOG_BYTES, anomalies in the same order.  Counted on the batches, never timed."""
from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from analyzer.decode import sse_columns
from analyzer.ingest import har as ingest_har
from analyzer.ingest.reading import Reading

ROOT = Path(__file__).resolve().parent.parent
HARS = sorted((ROOT / "sample_logs").rglob("*.har"))


def _entry(i: int) -> dict:
    """An SSE GET of 3 events; every 3rd body ends inside an event (an anomaly logged with the bodies), every 4th
    entry says its body was longer (an anomaly logged as the entry is read), every 5th is a JSON POST."""
    started = f"2026-01-01T00:{i // 60 % 60:02d}:{i % 60:02d}Z"
    if i % 5 == 0:
        return {"startedDateTime": started, "time": 1, "connection": f"c{i}",
                "request": {"method": "POST", "url": "http://h/mcp", "headers": [],
                            "postData": {"text": json.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/call"})}},
                "response": {"status": 200, "headers": [{"name": "Content-Type", "value": "application/json"}],
                             "content": {"mimeType": "application/json", "text": json.dumps({"jsonrpc": "2.0", "id": i, "result": {}})}}}
    text = "".join(f'id: {i}-{k}\ndata: {{"jsonrpc":"2.0","method":"notifications/message","params":{{"n":{k}}}}}\n\n' for k in range(3))
    if i % 3 == 0:
        text += f"id: {i}-cut\ndata: half"
    content = {"mimeType": "text/event-stream", "text": text} | ({"size": len(text) + 10} if i % 4 == 0 else {})
    return {"startedDateTime": started, "time": 1, "connection": f"c{i}",
            "request": {"method": "GET", "url": "http://h/mcp", "headers": [{"name": "Accept", "value": "text/event-stream"}]},
            "response": {"status": 200, "headers": [{"name": "Content-Type", "value": "text/event-stream"}], "content": content}}


def _har(n: int) -> bytes:
    entries = [_entry(i) for i in range(n)]
    entries.reverse()  # completion order: the reader renumbers the exchanges (and the events of every batch) by start
    return json.dumps({"log": {"version": "1.2", "creator": {"name": "t"}, "entries": entries}}).encode()


def _tables(raw: bytes, monkeypatch, parse: int, log: int) -> tuple:
    """The tables of ``raw`` read with batches of ``parse`` bytes logged every ``log`` bytes, and the bytes of bodies
    each parse held."""
    held: list[int] = []
    real = sse_columns.parse

    def spy(keys, bodies):
        held.append(sum(map(len, bodies)))
        return real(keys, bodies)

    with monkeypatch.context() as m:
        m.setattr(ingest_har._EventBodies, "PARSE_BYTES", parse)
        m.setattr(ingest_har._EventBodies, "LOG_BYTES", log)
        m.setattr(sse_columns, "parse", spy)
        ing = ingest_har.read("x.har", io.BytesIO(raw), Reading())
    return (ing.records, ing.rejected, ing.exchanges.to_pylist(), ing.events.to_pylist(), ing.messages.to_pylist(),
            ing.anomalies.to_pylist(), ing.notes), held


def test_bodies_are_parsed_in_small_batches_to_the_tables_of_one_parse_per_log_batch(monkeypatch):
    raw = _har(120)
    body = max(len(e["response"]["content"].get("text", "")) for e in json.loads(raw)["log"]["entries"])
    want, held_once = _tables(raw, monkeypatch, parse=4000, log=4000)  # one parse per logging: the reader before
    got, held = _tables(raw, monkeypatch, parse=1000, log=4000)
    assert got == want
    assert len(held) > 3 * len(held_once) > 3 * 2
    assert max(held) < 1000 + body  # a parse holds one batch, not what the anomalies wait for
    codes = [a["code"] for a in got[5]]
    assert {"sse_unterminated_event", "har_body_truncated"} <= set(codes)
    # the order is the one of the logging batches: logging per parse would move the bodies' anomalies earlier
    per_parse, _ = _tables(raw, monkeypatch, parse=1000, log=1000)
    assert per_parse[5] != want[5] and sorted(map(str, per_parse[5])) == sorted(map(str, want[5]))


@pytest.mark.parametrize("path", HARS, ids=lambda p: p.name)
def test_sample_hars_read_alike_in_batches_of_any_size(path, monkeypatch):
    raw = path.read_bytes()
    want, _ = _tables(raw, monkeypatch, parse=ingest_har._EventBodies.LOG_BYTES, log=ingest_har._EventBodies.LOG_BYTES)
    got, held = _tables(raw, monkeypatch, parse=64, log=256)
    assert got[:5] == want[:5] and got[6] == want[6]
    assert sorted(map(str, got[5])) == sorted(map(str, want[5]))  # (logged every 256 bytes here: the same rows)
    assert _tables(raw, monkeypatch, parse=64, log=ingest_har._EventBodies.LOG_BYTES)[0] == want
