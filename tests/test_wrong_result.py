"""Another call's result handed to the call that opened a resumed stream (issue [2/5] item 1): the
python and typescript clients give the first response on a resumed stream to the request that opened it
(they rewrite its id), so a replay of the wrong events completes the wrong call, and nothing on the
client shows it.  ``wrong_result_delivered`` names both calls and what the application was handed."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from analyzer import pipeline
from analyzer.report import render
from conftest import SID, SID2, rpc_note

ROOT = Path(__file__).resolve().parent.parent


def tool_result(rid, text):
    return json.dumps({"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": text}], "isError": False}})


def call(cap, rid, tool, events, close, sid=SID):
    """A tools/call of ``tool`` whose POST opens an SSE stream."""
    return cap.exchange(
        "POST", {"content-type": "application/json", "accept": "application/json, text/event-stream", "mcp-session-id": sid},
        body=json.dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": {"name": tool, "arguments": {}}}),
        resp_headers={"content-type": "text/event-stream"}, events=events, close=close,
    )


def wrong(doc):
    return [f for f in doc["findings"] if f["rule"] == "wrong_result_delivered"]


def replica_start_over(capture, replayed):
    """add (id 3) completes; slow_count (id 4) breaks after its priming event and a progress note; the resume lands
    on a replica that does not know the Last-Event-ID and replays ``replayed``."""
    cap = capture.initialize()
    call(cap, 3, "add", [("e1", ""), ("e2", tool_result(3, "sum=5"))], close="eof")
    call(cap, 4, "slow_count", [("e3", ""), ("e4", rpc_note(1))], close="reset")
    return cap.stream(last="e4", events=replayed, close="eof")


def test_a_replica_that_starts_over_hands_add_result_to_slow_count(capture, analyze):
    doc = analyze(replica_start_over(capture, [("e1", ""), ("e2", tool_result(3, "sum=5"))]))
    (f,) = wrong(doc)
    assert f["severity"] == "critical" and f["boundary"] == doc["boundaries"][0]["boundary_id"]
    assert f["message"].startswith('tools/call slow_count (id 4) was handed the result of tools/call add (id 3) (line 5): "sum=5" (line 18)'), f["message"]
    # the victim's request, the answer's event, the request it really answered
    assert [e["location"] for e in f["evidence"]] == ["line 10", "line 18", "line 5"]
    assert doc["boundaries"][0]["wrong_result"] == {"call": "tools/call slow_count (id 4)", "got": "tools/call add (id 3)", "preview": "sum=5"}
    assert doc["findings"][0] is f  # worst first, and within critical the wrong result first


def test_its_own_result_after_the_resume_is_no_wrong_result(capture, analyze):
    doc = analyze(replica_start_over(capture, [("e5", rpc_note(2)), ("e6", tool_result(4, "counted to 2"))]))
    assert wrong(doc) == [] and doc["boundaries"][0]["wrong_result"] is None


def test_only_the_first_answer_counts(capture, analyze):
    """The client stops reading the resumed stream at the first response: a foreign one after its own changes nothing."""
    doc = analyze(replica_start_over(capture, [("e6", tool_result(4, "counted to 2")), ("e2", tool_result(3, "sum=5"))]))
    assert wrong(doc) == []


def test_an_error_of_another_call_and_an_id_nobody_sent(capture, analyze):
    err = json.dumps({"jsonrpc": "2.0", "id": 9, "error": {"code": -32603, "message": "disk <full>"}})
    doc = analyze(replica_start_over(capture, [("e9", err)]))
    (f,) = wrong(doc)
    assert f["message"].startswith('tools/call slow_count (id 4) was handed the error of a response to id 9, which this session never sent: "disk <full>"')
    assert doc["boundaries"][0]["wrong_result"]["preview"] == "disk <full>"


def test_a_call_answered_before_the_reconnect_is_not_resumed(capture, analyze):
    cap = capture.initialize()
    call(cap, 3, "add", [("e1", ""), ("e2", tool_result(3, "sum=5"))], close="eof")
    call(cap, 4, "slow_count", [("e3", ""), ("e4", tool_result(4, "counted"))], close="reset")
    doc = analyze(cap.stream(last="e4", events=[("e2", tool_result(3, "sum=5"))], close="eof"))
    assert wrong(doc) == []


def test_another_sessions_result_names_that_session_and_its_tool(capture, analyze):
    """A store keyed without the session: session B's resume gets session A's events, its result included; both
    calls have id 2 (each client numbers from 1), so only the content shows whose it is."""
    cap = capture.initialize(sid=SID)
    call(cap, 2, "slow_side", [("1", ""), ("2", rpc_note(1)), ("3", rpc_note(2)), ("4", tool_result(2, "slow_side done"))], close="eof", sid=SID)
    cap.initialize(sid=SID2)
    call(cap, 2, "slow_count", [("1", ""), ("2", rpc_note(7))], close="reset", sid=SID2)
    doc = analyze(cap.stream(sid=SID2, last="2", events=[("3", rpc_note(2)), ("4", tool_result(2, "slow_side done"))], close="eof"))
    (f,) = wrong(doc)
    assert f["session_id"] == SID2
    assert f["message"].startswith(f'tools/call slow_count (id 2) was handed the result of tools/call slow_side (id 2) of session {SID} (line 5): "slow_side done"'), f["message"]
    assert doc["boundaries"][-1]["wrong_result"]["got"] == f"tools/call slow_side (id 2) of session {SID}"


@pytest.mark.parametrize("fmt", ["jsonl", "har", "pcap"])
def test_real_shared_store_recording(fmt, monkeypatch):
    """sample_logs/real-python-shared-store: session 2's slow_count (id 2) completes with session 1's result,
    in every format of the recording."""
    monkeypatch.chdir(ROOT)
    doc = pipeline.run([f"sample_logs/real-python-shared-store.{fmt}"]).document
    (f,) = wrong(doc)
    assert f["session_id"] == "ebbaa3cef85c4d058c6e325f526a4201"
    (b,) = [b for b in doc["boundaries"] if b["boundary_id"] == f["boundary"]]
    assert b["wrong_result"] == {"call": "tools/call slow_count (id 2)", "got": "tools/call slow_count (id 2) of session 7efb5e7b027247d0b87d0a7896632e86",
                                 "preview": "counted to 5 [session-1]"}
    assert doc["findings"][0] is f


def test_the_card_shows_it_first_and_escaped(capture, analyze):
    cap = capture.initialize()
    call(cap, 3, "<b>add</b>", [("e1", ""), ("e2", tool_result(3, "<script>x</script>"))], close="eof")
    call(cap, 4, "slow_count", [("e3", ""), ("e4", rpc_note(1))], close="reset")
    doc = analyze(cap.stream(last="e4", events=[("e2", tool_result(3, "<script>x</script>"))], close="eof"))
    html = render(doc)
    card = html[html.index('<p class="wrong">'):]
    card = card[: card.index("</p>")]
    assert "tools/call &lt;b&gt;add&lt;/b&gt; (id 3)" in card and "&lt;script&gt;x&lt;/script&gt;" in card
    assert "<script>x" not in html


@pytest.mark.parametrize("fmt", ["jsonl", "har", "pcap"])
def test_real_replica_failover_recording(fmt, monkeypatch):
    """sample_logs/real-python-replica-failover: two replicas behind a round-robin proxy, each store starting over on
    an unknown Last-Event-ID; the resume lands on the replica that ran add, and slow_count returns "sum=5"
    (the client printed it)."""
    monkeypatch.chdir(ROOT)
    doc = pipeline.run([f"sample_logs/real-python-replica-failover.{fmt}"]).document
    (f,) = wrong(doc)
    (b,) = doc["boundaries"]
    assert b["wrong_result"] == {"call": "tools/call slow_count (id 5)", "got": "tools/call add (id 2)", "preview": "sum=5"}
    assert f["boundary"] == b["boundary_id"] and doc["findings"][0] is f


@pytest.mark.parametrize("fmt", ["jsonl", "har", "pcap"])
def test_real_concurrent_shared_store_recording(fmt, monkeypatch):
    """sample_logs/real-python-shared-store-concurrent: session B's slow_count returns session A's "slow_side done"
    (the client printed it); both calls are id 2."""
    monkeypatch.chdir(ROOT)
    doc = pipeline.run([f"sample_logs/real-python-shared-store-concurrent.{fmt}"]).document
    (f,) = wrong(doc)
    (b,) = [b for b in doc["boundaries"] if b["boundary_id"] == f["boundary"]]
    assert b["wrong_result"] == {"call": "tools/call slow_count (id 2)",
                                 "got": "tools/call slow_side (id 2) of session 8fcd01432a1d49ecb86921cfb522e2f1", "preview": "slow_side done"}
