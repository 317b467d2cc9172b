"""A call re-issued after its stream broke (analyzer/rules/reissue.py, rule ``reissued_after_break``)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from analyzer.decode import jsonrpc
from analyzer import pipeline
from conftest import ROOT, SID, rpc_result

SCENARIO = ROOT / "sample_logs" / "synthetic" / "reissued_after_break"
RULE = "reissued_after_break"


def hits(doc, rule=RULE):
    return [f for f in doc["findings"] if f["rule"] == rule]


def init(capture, rev="2025-11-25", sid=SID):
    capture.exchange(
        "POST", {"content-type": "application/json"},
        body=json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": rev}}),
        resp_headers={"content-type": "application/json", **({"mcp-session-id": sid} if sid else {})},
        json_body=json.dumps({"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": rev}}),
    )
    return capture


def progress(token, n):
    return json.dumps({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": token, "progress": n}})


def log(n):
    return json.dumps({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": f"step {n}"}})


def call(capture, rid, events=(), close="eof", args=None, method="tools/call", sid=SID, rev="2025-11-25", meta=None, answered=False):
    params = {"name": "create_invoice", "arguments": args or {"customer": "c-42", "cents": 1999},
              "_meta": meta if meta is not None else {"progressToken": f"tok-{rid}"}}
    if method != "tools/call":
        params = {"uri": "file:///a.txt", "_meta": params["_meta"]}
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream", "mcp-protocol-version": rev}
    if sid:
        headers["mcp-session-id"] = sid
    evs = list(events) + ([(None, rpc_result(rid, content=[]))] if answered else [])
    return capture.exchange("POST", headers, body=json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}),
                            resp_headers={"content-type": "text/event-stream"}, events=evs, close=close)


def broke_then_reissued(capture, first_events, **kw):
    cap = init(capture)
    call(cap, 2, events=first_events, close="reset", **kw)
    return call(cap, 3, events=[(None, progress("tok-3", 1))], answered=True, **{k: v for k, v in kw.items() if k != "args"})


# --- the synthetic scenario --------------------------------------------------------------------

@pytest.mark.parametrize("ext", ["jsonl", "har"])
def test_scenario_fires_once_naming_both_ids_and_the_tool(ext):
    doc = pipeline.run([str(SCENARIO.with_suffix(f".{ext}"))]).document
    [f] = hits(doc)
    assert f["severity"] == "critical"
    assert "tools/call create_invoice (id 2) was re-issued as id 3" in f["message"]
    assert "reported progress 2 time(s)" in f["message"]
    # the first request, the last event before the break, the re-issue
    locs = [e["location"] for e in f["evidence"]]
    assert len(locs) == 3 and locs[0] != locs[2]
    # the first attempt is still the request that never got its response
    assert [u["message"] for u in hits(doc, "request_unanswered")] == ["tools/call create_invoice (id 2) never got a response, although its stream broke, ended or was resumed"]


def test_scenario_jsonl_and_har_agree():
    def key(ext):
        doc = pipeline.run([str(SCENARIO.with_suffix(f".{ext}"))]).document
        return [(f["severity"], f["rule"], f["session_id"], f["message"]) for f in doc["findings"]]

    assert key("jsonl") == key("har")


# --- when it fires and when not ----------------------------------------------------------------

def test_meta_only_difference_is_the_same_call(capture, analyze):
    a = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "t", "arguments": {"x": 1}, "_meta": {"progressToken": "a"}}}
    b = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"arguments": {"x": 1}, "name": "t", "_meta": {"progressToken": "b", "trace": 1}}}
    c = {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "t", "arguments": {"x": 2}}}
    da, db, dc = (jsonrpc.extract(json.dumps(m))[0].params_digest for m in (a, b, c))
    assert da == db != dc
    # and end to end: different progressTokens (and an extra _meta key) still pair
    doc = analyze(broke_then_reissued(capture, [(None, progress("tok-2", 1))]))
    assert len(hits(doc)) == 1


def test_different_arguments_are_another_call(capture, analyze):
    cap = init(capture)
    call(cap, 2, events=[(None, progress("tok-2", 1))], close="reset")
    call(cap, 3, args={"customer": "c-43", "cents": 1999}, answered=True)
    assert hits(analyze(cap)) == []


def test_first_attempt_without_any_event_is_not_reported(capture, analyze):
    assert hits(analyze(broke_then_reissued(capture, []))) == []


def test_a_priming_event_alone_does_not_show_the_call_started(capture, analyze):
    assert hits(analyze(broke_then_reissued(capture, [("p-1", "")]))) == []


def test_first_attempt_answered_is_not_reported(capture, analyze):
    cap = init(capture)
    call(cap, 2, events=[(None, progress("tok-2", 1))], answered=True, close="reset")
    call(cap, 3, answered=True)
    assert hits(analyze(cap)) == []


def test_started_without_progress_is_an_error(capture, analyze):
    [f] = hits(analyze(broke_then_reissued(capture, [(None, log(1))])))
    assert f["severity"] == "error" and f["message"].endswith("the server may have run it twice")


def test_first_attempt_answered_later_is_critical(capture, analyze):
    """The response to id 2 arrives on the standalone GET stream after the re-issue: both ran."""
    cap = broke_then_reissued(capture, [(None, log(1))])
    cap.stream(events=[("g-1", rpc_result(2, content=[]))], close="eof")
    [f] = hits(analyze(cap))
    assert f["severity"] == "critical" and "both attempts were answered" in f["message"]


def test_first_attempt_answered_before_the_reissue_is_not_reported(capture, analyze):
    cap = init(capture)
    call(cap, 2, events=[(None, progress("tok-2", 1))], close="reset")
    cap.stream(events=[("g-1", rpc_result(2, content=[]))], close="eof")  # the answer came, on another stream
    call(cap, 3, answered=True)
    assert hits(analyze(cap)) == []


def test_read_only_methods_are_not_reported(capture, analyze):
    assert hits(analyze(broke_then_reissued(capture, [(None, progress("tok-2", 1))], method="resources/read"))) == []


def test_a_stream_still_open_was_not_given_up(capture, analyze):
    cap = init(capture)
    call(cap, 2, events=[(None, progress("tok-2", 1))], close=None)
    call(cap, 3, answered=True)
    assert hits(analyze(cap)) == []


def test_resume_that_broke_too_counts_as_the_same_stream(capture, analyze):
    cap = init(capture)
    call(cap, 2, events=[("1", progress("tok-2", 1))], close="reset")
    cap.stream(last="1", events=[("2", progress("tok-2", 2))], close="reset")
    call(cap, 3, answered=True)
    [f] = hits(analyze(cap))
    assert "after 1 resume(s)" in f["message"] and len(f["evidence"]) == 4


def test_resume_that_delivered_the_response_is_not_reported(capture, analyze):
    cap = init(capture)
    call(cap, 2, events=[("1", progress("tok-2", 1))], close="reset")
    cap.stream(last="1", events=[("2", rpc_result(2, content=[]))], close="eof")
    call(cap, 3, answered=True)
    assert hits(analyze(cap)) == []


def test_other_session_is_not_a_reissue(capture, analyze):
    cap = init(capture)
    call(cap, 2, events=[(None, progress("tok-2", 1))], close="reset")
    init(cap, sid="sess-B")
    call(cap, 3, sid="sess-B", answered=True)
    assert hits(analyze(cap)) == []


# --- against eras.reissued_request_ran_twice (2026-07-28) -----------------------------------------

def test_stateless_both_answered_is_reported_once_by_the_era_rule(capture, analyze):
    cap = capture
    call(cap, 1, events=[(None, progress("tok-1", 1))], close="reset", sid=None, rev="2026-07-28")
    cap.exchange("GET", {"accept": "text/event-stream", "mcp-protocol-version": "2026-07-28"}, resp_headers={"content-type": "text/event-stream"},
                 events=[("g-1", rpc_result(1, content=[]))])  # the first answered after all (a server still keeping streams)
    call(cap, 2, answered=True, sid=None, rev="2026-07-28")
    doc = analyze(cap)
    assert doc["sessions"][0]["era"] == "stateless"
    assert len(hits(doc, "reissued_request_ran_twice")) == 1 and hits(doc) == []


def test_stateless_first_never_answered_is_this_rule(capture, analyze):
    cap = capture
    call(cap, 1, events=[(None, progress("tok-1", 1))], close="reset", sid=None, rev="2026-07-28")
    call(cap, 2, answered=True, sid=None, rev="2026-07-28")
    doc = analyze(cap)
    assert hits(doc, "reissued_request_ran_twice") == []
    [f] = hits(doc)
    assert f["severity"] == "critical" and "(id 1) was re-issued as id 2" in f["message"]


# --- the sample logs -----------------------------------------------------------------------------

def test_only_the_reissue_samples_have_it():
    """The synthetic twins and the real recording of a client that re-sent a call instead of resuming
    (real-python-reissue-after-break: the server closed the POST stream after progress 1, the client
    sent the same tools/call again); nothing else.  real-python-resurrection-loop re-issues too, but the
    restarted server refused the re-issue with -32602: it did not run twice."""
    logs = ROOT / "sample_logs"
    samples = sorted(
        str(p.relative_to(ROOT)) for p in logs.rglob("*")
        if p.is_file() and p.suffix in (".jsonl", ".har", ".pcap", ".pcapng", ".gz") and "recording" not in p.parts
    )
    doc = pipeline.run(samples).document
    where = {Path(e["source"]).name for f in hits(doc) for e in f["evidence"]}
    real = {p.name for p in logs.glob("real-python-reissue-after-break.*")}
    assert where == {"reissued_after_break.har", "reissued_after_break.jsonl"} | real


def test_a_reissue_the_server_refused_did_not_run(capture, analyze):
    """real-python-resurrection-loop: the restarted server answers the re-issue with -32602; a later attempt counts."""
    cap = init(capture)
    call(cap, 2, events=[(None, progress("tok-2", 1))], close="reset")
    body = lambda rid: json.dumps({"jsonrpc": "2.0", "id": rid, "error": {"code": -32602, "message": "Invalid request parameters"}})  # noqa: E731
    call(cap, 3, events=[(None, body(3))])
    assert hits(analyze(cap)) == []
    call(cap, 4, answered=True)
    [f] = hits(analyze(cap))
    assert "(id 2) was re-issued as id 4" in f["message"]
