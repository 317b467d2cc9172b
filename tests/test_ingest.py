"""Ingesters: every record read or rejected with its location; producer quirks; format detection."""
from __future__ import annotations

import base64
import gzip
import json

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.ingest import inputs
from analyzer import pipeline, tables
from analyzer.errors import InputError
from analyzer.ingest.reading import Reading
from conftest import SID


def codes(doc):
    return [(a["code"], a["location"]) for a in doc["anomalies"]]


# --- proxy JSONL -----------------------------------------------------------------------------


def test_bad_lines_cost_one_row_each_and_the_rest_is_analyzed(capture, analyze):
    capture.initialize().stream(ids=range(1, 4)).stream(last="3", ids=range(5, 7))
    lines = capture.text().splitlines(keepends=True)
    bad = lines[:3] + ["{not json\n", "[1,2]\n", '{"kind":"sse","conn":"c999","ts":"2026-11-13T09:00:00Z","data":"x"}\n',
                       '{"kind":"teleport","conn":"c1","ts":"2026-11-13T09:00:00Z"}\n', '{"kind":"response","conn":"c1","ts":"x","status":"200"}\n'] + lines[3:]
    doc = analyze("".join(bad))
    assert codes(doc) == [
        ("jsonl_bad_line", "line 4"),
        ("jsonl_bad_line", "line 5"),
        ("jsonl_orphan_record", "line 6"),
        ("jsonl_unknown_kind", "line 7"),
        ("jsonl_bad_timestamp", "line 8"),
        ("jsonl_bad_record", "line 8"),
    ]
    inp = doc["inputs"][0]
    assert inp["records"] == len(bad) and inp["rejected"] == 5
    assert [b["verdict"] for b in doc["boundaries"]] == ["gap"]


def test_invalid_utf8_is_replaced_and_recorded(capture, analyze):
    capture.initialize().stream(ids=[1], data=lambda i: "\"caf\u00e9\"")
    raw = capture.text().encode().replace("caf\\u00e9".encode(), b"caf\xe9")
    doc = analyze(raw)
    assert ("jsonl_invalid_utf8", "line 7") in codes(doc)
    assert doc["summary"]["events"] == 1


def test_keep_alive_connection_carries_several_exchanges(analyze):
    recs = []
    for n in range(3):
        recs += [
            {"kind": "request", "ts": f"2026-11-13T09:00:0{n}Z", "conn": "k", "method": "POST", "url": "/mcp", "headers": {"mcp-session-id": SID}, "body": json.dumps({"jsonrpc": "2.0", "id": n, "method": "ping"})},
            {"kind": "response", "ts": f"2026-11-13T09:00:0{n}Z", "conn": "k", "status": 200, "headers": {"content-type": "application/json"}},
            {"kind": "body", "ts": f"2026-11-13T09:00:0{n}Z", "conn": "k", "data": json.dumps({"jsonrpc": "2.0", "id": n, "result": {}})},
        ]
    doc = analyze("".join(json.dumps(r) + "\n" for r in recs))
    assert [x["end_reason"] for x in doc["exchanges"]] == ["complete"] * 3
    assert doc["summary"]["messages"] == 6


def test_empty_jsonl_file_is_readable_but_empty(analyze):
    doc = analyze("")
    assert doc["summary"]["sessions"] == 0


# --- HAR -------------------------------------------------------------------------------------

def har(entries):
    return json.dumps({"log": {"version": "1.2", "creator": {"name": "t", "version": "0"}, "entries": entries}})


def entry(start, method="GET", headers=(), status=200, resp_headers=(("Content-Type", "text/event-stream"),), text=None, encoding=None, **extra):
    content = {"size": -1, "mimeType": dict(resp_headers).get("Content-Type", "")}
    if text is not None:
        content["text"] = text
    if encoding:
        content["encoding"] = encoding
    e = {
        "startedDateTime": start, "time": 100,
        "request": {"method": method, "url": "http://127.0.0.1/mcp", "headers": [{"name": k, "value": v} for k, v in headers]},
        "response": {"status": status, "headers": [{"name": k, "value": v} for k, v in resp_headers], "content": content},
    }
    e.update(extra)
    return e


def test_har_orders_by_start_and_decodes_base64(analyze):
    first = entry("2026-11-13T09:00:01Z", headers=[("Mcp-Session-Id", SID)], text="id: 1\ndata: a\n\nid: 2\ndata: b\n\n", _error="net::ERR_CONNECTION_RESET")
    second = entry("2026-11-13T09:00:05Z", headers=[("Mcp-Session-Id", SID), ("Last-Event-ID", "2")],
                   text=base64.b64encode(b"id: 4\ndata: d\n\n").decode(), encoding="base64")
    doc = analyze(har([second, first]), "x.har")  # completion order: the resume finished first
    b = doc["boundaries"][0]
    assert b["verdict"] == "gap" and b["lost_event_ids"] == ["3"]
    assert b["request"]["location"] == "entry 1" and b["resumes"]["location"] == "entry 2"
    assert [x["end_reason"] for x in doc["exchanges"]] == ["error", "complete"]


def test_har_empty_sse_body_means_not_recorded(analyze):
    doc = analyze(har([
        entry("2026-11-13T09:00:01Z", headers=[("Mcp-Session-Id", SID)], text="id: 1\ndata: a\n\n"),
        entry("2026-11-13T09:00:05Z", headers=[("Mcp-Session-Id", SID), ("Last-Event-ID", "1")], text=""),
    ]), "m.har")
    b = doc["boundaries"][0]
    assert b["verdict"] == "unverifiable" and "did not record" in b["reason"]
    assert ("har_sse_body_not_recorded", "entry 2") in codes(doc)
    assert any("not absent" in n for n in doc["inputs"][0]["notes"])
    assert doc["exchanges"][1]["body_recorded"] is False


def test_har_reopen_of_an_unrecorded_stream_is_not_judged(analyze):
    """A reopen without Last-Event-ID of a stream whose body the HAR did not keep (an event stream that ended empty, or
    was still open): what the client had received is unknown, so the reopen is unverifiable for the capture's blind spot
    and the client's reaction is not judged -- going on with the session after it is no error (it was `no_cursor`,
    "the earlier stream delivered no id", and `handled_correctly` false)."""
    doc = analyze(har([
        entry("2026-11-13T09:00:01Z", headers=[("Mcp-Session-Id", SID)], text="id: 1\ndata: a\n\nid: 2\ndata: b\n\n"),
        entry("2026-11-13T09:00:05Z", headers=[("Mcp-Session-Id", SID), ("Last-Event-ID", "2")], text=""),
        entry("2026-11-13T09:00:09Z", headers=[("Mcp-Session-Id", SID)], text="id: 7\ndata: g\n\n"),
        entry("2026-11-13T09:00:12Z", method="POST", headers=[("Mcp-Session-Id", SID)], resp_headers=(("Content-Type", "application/json"),),
              text=json.dumps({"jsonrpc": "2.0", "id": 1, "result": {}})),
    ]), "r.har")
    resumed, reopened = doc["boundaries"]
    assert (resumed["rule_id"], resumed["handled_correctly"]) == ("body_not_recorded", None)
    assert (reopened["verdict"], reopened["rule_id"], reopened["evidence"], reopened["handled_correctly"]) == (
        "unverifiable", "resumed_not_recorded", "none", None), reopened["reason"]
    assert "did not record the body of the stream it reopened" in reopened["reason"]


def test_har_aborted_variants(analyze):
    doc = analyze(har([
        entry("2026-11-13T09:00:01Z", status=0, resp_headers=(), _error="net::ERR_ABORTED"),
        entry("2026-11-13T09:00:02Z", text="data: x\n\n", _wasAborted=True),
        entry("2026-11-13T09:00:03Z", text="data: x\n\n", response_extra=None, _failureText="net::ERR_FAILED"),
    ]), "a.har")
    assert [(x["status"], x["end_reason"]) for x in doc["exchanges"]] == [(None, "aborted"), (200, "aborted"), (200, "error")]


def test_har_entry_missing_fields_is_rejected_not_fatal(analyze):
    doc = analyze(har([{"startedDateTime": "2026-11-13T09:00:01Z"}, entry("2026-11-13T09:00:02Z", text="data: {\"jsonrpc\":\"2.0\",\"method\":\"m\"}\n\n"), "junk"]), "b.har")
    assert codes(doc) == [("har_entry_invalid", "entry 1"), ("har_entry_invalid", "entry 3")]
    assert doc["inputs"][0]["rejected"] == 2 and doc["summary"]["events"] == 1


def test_truncated_har_is_one_clear_error(tmp_path):
    p = tmp_path / "cut.har"
    p.write_text(har([entry("2026-11-13T09:00:01Z", text="data: x\n\n")])[:-40])
    with pytest.raises(InputError, match=r"cut\.har: not a complete HAR document .*truncated"):
        inputs.read_one(str(p))


# --- detection, gzip, directories -------------------------------------------------------------

def test_format_detected_by_content_not_name(tmp_path, capture):
    capture.initialize().stream(ids=[1])
    (tmp_path / "weird.har").write_text(capture.text())
    (tmp_path / "weird.jsonl").write_text(har([entry("2026-11-13T09:00:01Z", text="data: x\n\n")]))
    doc = pipeline.run([str(tmp_path)]).document
    assert {i["path"].rsplit("/", 1)[1]: i["format"] for i in doc["inputs"]} == {"weird.har": "jsonl", "weird.jsonl": "har"}


def test_gzip_is_read_transparently(tmp_path, capture):
    capture.initialize().stream(ids=range(1, 3)).stream(last="2", ids=[3])
    (tmp_path / "cap.jsonl.gz").write_bytes(gzip.compress(capture.text().encode()))
    doc = pipeline.run([str(tmp_path / "cap.jsonl.gz")]).document
    assert [b["verdict"] for b in doc["boundaries"]] == ["continuous"]


def test_directory_walk_lists_skipped_files(tmp_path, capture):
    capture.initialize()
    capture.write(tmp_path / "a.jsonl")
    (tmp_path / "notes.md").write_text("# hi")
    doc = pipeline.run([str(tmp_path)]).document
    assert [i["path"] for i in doc["inputs"]] == [str(tmp_path / "a.jsonl")]
    assert doc["skipped"] == [str(tmp_path / "notes.md")]


def test_not_a_capture_names_the_file(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text("hello world\n")
    with pytest.raises(InputError, match="x.jsonl: not a proxy JSONL log or a HAR file"):
        inputs.read_one(str(p))


# --- redaction -------------------------------------------------------------------------------

def test_secrets_are_redacted_at_ingest(tmp_path, capture):
    capture.exchange("GET", {"authorization": "Bearer sk-123", "cookie": "sid=s3cr3t", "mcp-session-id": SID}, resp_headers={"set-cookie": "a=b"})
    capture.lines[0]["url"] = "http://127.0.0.1/mcp?access_token=tok-999&x=1"
    capture.write(tmp_path / "s.jsonl")
    text = json.dumps(pipeline.run([str(tmp_path / "s.jsonl")]).document)
    for secret in ("sk-123", "s3cr3t", "tok-999", "a=b"):
        assert secret not in text
    assert "x=1" in text
    kept = json.dumps(pipeline.run([str(tmp_path / "s.jsonl")], Reading(redact=False)).document)
    assert "tok-999" in kept


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.none(), st.text(max_size=8)), st.text(max_size=40)), max_size=20))
def test_the_column_wise_digest_is_the_reference_digest(rows):
    """tables.digest_expr (polars-hash, in Rust) gives tables.digest's hex for every id and payload, any text."""
    rows = [(i, d) for i, d in rows if not any("\ud800" <= c <= "\udfff" for c in (i or "") + d)]  # (no str in Polars holds a surrogate)
    frame = pl.DataFrame({"id": [i for i, _ in rows], "data": [d for _, d in rows]}, schema={"id": pl.String, "data": pl.String})
    got = frame.select(tables.digest_expr(pl.col("id"), pl.col("data"))).to_series().to_list()
    assert got == [tables.digest(i, d) for i, d in rows]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet="0123456789abcdef", min_size=64, max_size=64), max_size=30))
def test_the_frames_digest_is_the_hex_prefix(hexes):
    """The rules compare digests as their first 64 bits (streams.compact_digest), exactly: two digests compare
    equal in the frames when their first 16 hex digits are equal.  (The document shows the digest of the data it
    shows, the redacted data: tests/test_digest_leaks.py.)"""
    from analyzer.signals.streams import compact_digest

    frame = pl.DataFrame({"digest": hexes}, schema={"digest": pl.String})
    bits = compact_digest(frame)
    assert bits.schema["digest"] == pl.UInt64
    assert bits["digest"].to_list() == [int(h[:16], 16) for h in hexes]
    assert compact_digest(bits) is bits  # already compact: left as it is


def test_the_analysis_is_the_same_from_the_polars_events_and_from_their_arrow_table():
    """The single pass reads the ingester's Polars frame as it is; the Arrow table (the store's) gives the same document."""
    from pathlib import Path

    path = str(Path(__file__).resolve().parent.parent / "sample_logs" / "real-python-resurrection-loop.jsonl")
    docs = []
    for as_arrow in (False, True):
        got = inputs.read_one(path)
        if as_arrow:
            assert got.events.num_rows > 0 and not isinstance(got.events_frame, pl.DataFrame)
        else:
            assert isinstance(got.events_frame, pl.DataFrame)
        doc = pipeline.analyze_tables(inputs.concat([got]), [], [], [], 1).document
        doc.pop("generated_at")
        docs.append(doc)
    assert docs[0] == docs[1] and docs[0]["boundaries"]


def test_har_placeholder_mime_type_is_no_content_type():
    """Browsers write mimeType "x-unknown" for a response without Content-Type: it is shown as none, never
    as a real type (issue [5/6]); the proxy log of the same exchange agrees."""
    from analyzer import pipeline

    from pathlib import Path

    syn = Path(__file__).resolve().parent.parent / "sample_logs" / "synthetic"
    assert '"mimeType": "x-unknown"' in (syn / "gap.har").read_text()
    har = pipeline.run([str(syn / "gap.har")]).document["exchanges"]
    jsonl = pipeline.run([str(syn / "gap.jsonl")]).document["exchanges"]
    assert [x["content_type"] for x in har] == [x["content_type"] for x in jsonl]
    assert None in [x["content_type"] for x in har] and "x-unknown" not in {x["content_type"] for x in har}


# --- the cyclic collector paused while an input is read (analyzer.ingest.reading.collector_paused) ----------------


@pytest.mark.parametrize("fails", [False, True])
def test_the_collector_is_paused_for_each_read_and_restored_after(tmp_path, monkeypatch, capture, fails):
    import gc

    path = tmp_path / "cap.jsonl"
    path.write_text(capture.initialize().text())
    during = []
    read_jsonl = inputs.READERS["jsonl"]

    def spy(source, stream, reading):
        during.append(gc.isenabled())
        if fails:
            raise OSError("the disk went away")
        return read_jsonl(source, stream, reading)

    monkeypatch.setitem(inputs.READERS, "jsonl", spy)
    assert gc.isenabled()
    if fails:
        with pytest.raises(InputError, match="read failed part-way"):
            inputs.read_one(str(path))
    else:
        assert inputs.read_one(str(path)).exchanges.num_rows == 1
    assert during == [False] and gc.isenabled()  # (paused for the read, as it was after it, even when it failed)
    gc.disable()
    try:
        inputs.read_one(str(path)) if not fails else None
        assert not gc.isenabled()  # a caller's own pause is left to it
    finally:
        gc.enable()
