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


PY, TS = "python-httpx2/2.16.2", "node"  # the User-Agents of the python and TypeScript SDK clients (signals/clients.py)


def wrong(doc):
    return [f for f in doc["findings"] if f["rule"] == "wrong_result_delivered"]


def rules(doc, *names):
    return [f for f in doc["findings"] if f["rule"] in names]


def handed(call, got, preview, client="python", resumed=None):
    """A boundary's ``wrong_result`` when the application took another call's answer as ``call``'s."""
    return {"call": call, "got": got, "preview": preview, "client": client, "outcome": "another_result", "resumed_call": resumed or call}


def replica_start_over(capture, replayed, agent=PY):
    """add (id 3) completes; slow_count (id 4) breaks after its priming event and a progress note; the resume lands
    on a replica that does not know the Last-Event-ID and replays ``replayed``.  ``agent``: the client's User-Agent."""
    capture.user_agent = agent
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
    assert doc["boundaries"][0]["wrong_result"] == handed("tools/call slow_count (id 4)", "tools/call add (id 3)", "sum=5")
    assert doc["findings"][0] is f  # worst first, and within critical the wrong result first
    assert "the python client (python-httpx2/2.16.2)" in f["message"]
    # one story per call: it completed (with add's result), so no "never got a response" beside it
    assert not [u for u in rules(doc, "request_unanswered") if "slow_count" in u["message"]]


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
    capture.user_agent = PY
    cap = capture.initialize()
    call(cap, 3, "add", [("e1", ""), ("e2", tool_result(3, "sum=5"))], close="eof")
    call(cap, 4, "slow_count", [("e3", ""), ("e4", tool_result(4, "counted"))], close="reset")
    doc = analyze(cap.stream(last="e4", events=[("e2", tool_result(3, "sum=5"))], close="eof"))
    assert wrong(doc) == []


def test_another_sessions_result_names_that_session_and_its_tool(capture, analyze):
    """A store keyed without the session: session B's resume gets session A's events, its result included; both
    calls have id 2 (each client numbers from 1), so only the content shows whose it is."""
    capture.user_agent = PY
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
    assert b["wrong_result"] == handed("tools/call slow_count (id 2)", "tools/call slow_count (id 2) of session 7efb5e7b027247d0b87d0a7896632e86",
                                       "counted to 5 [session-1]")
    assert doc["findings"][0] is f


def test_the_card_shows_it_first_and_escaped(capture, analyze):
    capture.user_agent = PY
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
    assert b["wrong_result"] == handed("tools/call slow_count (id 5)", "tools/call add (id 2)", "sum=5")
    assert rules(doc, "request_unanswered") == []  # it completed, with add's result: one story
    assert f["boundary"] == b["boundary_id"] and doc["findings"][0] is f


@pytest.mark.parametrize("fmt", ["jsonl", "har", "pcap"])
def test_real_concurrent_shared_store_recording(fmt, monkeypatch):
    """sample_logs/real-python-shared-store-concurrent: session B's slow_count returns session A's "slow_side done"
    (the client printed it); both calls are id 2."""
    monkeypatch.chdir(ROOT)
    doc = pipeline.run([f"sample_logs/real-python-shared-store-concurrent.{fmt}"]).document
    (f,) = wrong(doc)
    (b,) = [b for b in doc["boundaries"] if b["boundary_id"] == f["boundary"]]
    assert b["wrong_result"] == handed("tools/call slow_count (id 2)", "tools/call slow_side (id 2) of session 8fcd01432a1d49ecb86921cfb522e2f1",
                                       "slow_side done")


# --- the client decides (issue [3/5] item 1; shared/reference/mcp-transport-facts.md point 3) -------------------------


def test_the_typescript_client_drops_another_calls_answer_and_the_call_never_completes(capture, analyze):
    """The TypeScript client keeps a response's id on its own reconnect: add (id 3) was answered already, so nothing waits
    for id 3 and the answer is dropped ("unknown message ID"); slow_count waits on.  No wrong result is claimed, and the
    call has one story: the drop finding says it never completed (no separate request_unanswered)."""
    doc = analyze(replica_start_over(capture, [("e1", ""), ("e2", tool_result(3, "sum=5"))], agent=TS))
    assert wrong(doc) == [] and not [f for f in doc["findings"] if f["severity"] == "critical"]
    (f,) = rules(doc, "foreign_response_dropped")
    assert f["severity"] == "error" and f["boundary"] == doc["boundaries"][0]["boundary_id"]
    assert "was dropped: the TypeScript client (node)" in f["message"] and "tools/call slow_count (id 4) never completed" in f["message"]
    assert rules(doc, "request_unanswered") == []
    w = doc["boundaries"][0]["wrong_result"]
    assert (w["client"], w["outcome"], w["call"]) == ("typescript", "never_completed", "tools/call slow_count (id 4)")
    assert doc["sessions"][0]["client"] == {"family": "typescript", "user_agent": "node", "name": "t", "version": "0"}


def test_the_typescript_client_whose_own_answer_comes_later_completed(capture, analyze):
    doc = analyze(replica_start_over(capture, [("e2", tool_result(3, "sum=5")), ("e6", tool_result(4, "counted to 2"))], agent=TS))
    (f,) = rules(doc, "foreign_response_dropped")
    assert f["severity"] == "warning" and "its own response came later" in f["message"]
    assert doc["boundaries"][0]["wrong_result"]["outcome"] == "own_result"


def test_the_typescript_client_takes_another_sessions_answer_with_its_own_id(capture, analyze):
    """Another session's answer with the resumed call's own id (each client numbers from 1): the TypeScript client's pending
    request takes it -- a wrong result for that client too."""
    capture.user_agent = TS
    cap = capture.initialize(sid=SID)
    call(cap, 2, "slow_side", [("1", ""), ("2", rpc_note(1)), ("3", tool_result(2, "slow_side done"))], close="eof", sid=SID)
    cap.initialize(sid=SID2)
    call(cap, 2, "slow_count", [("1", ""), ("2", rpc_note(7))], close="reset", sid=SID2)
    doc = analyze(cap.stream(sid=SID2, last="2", events=[("3", tool_result(2, "slow_side done"))], close="eof"))
    (f,) = wrong(doc)
    assert f["severity"] == "critical" and "the TypeScript client (node) gives a response to the pending request with its id" in f["message"]
    assert doc["boundaries"][-1]["wrong_result"]["client"] == "typescript"


def test_the_typescript_client_gives_a_waiting_calls_own_answer_to_it(capture, analyze):
    """The answer on the resumed stream is another call's of this session that was still waiting: the TypeScript client
    hands it to that call, its own result -- no damage to claim (the boundary's verdict still says where it came)."""
    capture.user_agent = TS
    cap = capture.initialize()
    call(cap, 3, "add", [("e1", "")], close="reset")  # add (id 3) is still waiting
    call(cap, 4, "slow_count", [("e3", ""), ("e4", rpc_note(1))], close="reset")
    doc = analyze(cap.stream(last="e4", events=[("e2", tool_result(3, "sum=5"))], close="eof"))
    assert rules(doc, "wrong_result_delivered", "foreign_response_dropped", "foreign_response_on_resume") == []
    assert doc["boundaries"][-1]["wrong_result"] is None


def test_an_unknown_client_gets_both_outcomes_and_no_critical(capture, analyze):
    doc = analyze(replica_start_over(capture, [("e1", ""), ("e2", tool_result(3, "sum=5"))], agent="curl/8.5.0"))
    assert wrong(doc) == []
    (f,) = rules(doc, "foreign_response_on_resume")
    assert f["severity"] == "error"
    assert "not known here" in f["message"] and "took it as tools/call slow_count (id 4)'s result" in f["message"] and "dropped it" in f["message"]
    assert doc["boundaries"][0]["wrong_result"]["outcome"] == "another_result_or_never_completed"
    assert doc["sessions"][0]["client"]["family"] == "unknown"


@pytest.mark.parametrize("fmt", ["jsonl", "har", "pcap"])
@pytest.mark.parametrize("name, rule, outcome, call", [
    # the client log: add said "sum=5"; slow_count (id 4) got "unknown message ID" errors, then timed out
    ("real-ts-client-replica-failover", "foreign_response_dropped", "never_completed", "tools/call slow_count (id 4)"),
    # the client log: B's slow_count (id 1) returned A's "slow_side done"
    ("real-ts-client-foreign-same-id", "wrong_result_delivered", "another_result", "tools/call slow_count (id 1)"),
    # the client log: the application's resume (id 5, resumptionToken 7) returned "sum=5"; slow_count (id 4) timed out
    ("real-ts-client-resumption-token", "wrong_result_delivered", "another_result",
     "the application's resume of tools/call slow_count (id 4), as id 5 (not on the wire)"),
])
def test_real_typescript_client_recordings(fmt, name, rule, outcome, call, monkeypatch):
    """The TypeScript SDK client (1.32.2) on the wire: what each finding claims is what its client log shows the
    application got (sample_logs/recording/ts/client-logs/)."""
    monkeypatch.chdir(ROOT)
    doc = pipeline.run([f"sample_logs/{name}.{fmt}"]).document
    (f,) = rules(doc, "wrong_result_delivered", "foreign_response_dropped", "foreign_response_on_resume")
    assert f["rule"] == rule
    (b,) = [b for b in doc["boundaries"] if b["boundary_id"] == f["boundary"]]
    assert (b["wrong_result"]["client"], b["wrong_result"]["outcome"], b["wrong_result"]["call"]) == ("typescript", outcome, call)
    unanswered = [u["message"] for u in rules(doc, "request_unanswered")]
    if name == "real-ts-client-foreign-same-id":
        assert not any("slow_count (id 1)" in m for m in unanswered)  # it completed (with A's result)
    elif name == "real-ts-client-replica-failover":
        assert unanswered == []  # its story is the drop finding's: "never completed"
    else:
        assert any("tools/call slow_count (id 4) never got a response" in m for m in unanswered)  # it timed out
