"""Id schemes of the real SDKs and JSON-RPC semantics (issue [3/6] items 1, 3, 4)."""
from __future__ import annotations

import json

import pytest

from conftest import SID, rpc_note, rpc_result


def only_boundary(doc):
    assert len(doc["boundaries"]) == 1, [(b["verdict"], b["reason"]) for b in doc["boundaries"]]
    return doc["boundaries"][0]


def rules(doc):
    return sorted(f["rule"] for f in doc["findings"])


# --- id schemes ------------------------------------------------------------------------------

def shared_counter(capture, resumed_ids, other_ids):
    """python-sdk test store: one counter for the session; stream A (GET) and stream B (POST) interleave."""
    cap = capture.initialize()
    cap.stream(events=[(str(i), rpc_note(i)) for i in (1, 3, 5)])
    cap.post_sse(rid=7, events=[(str(i), rpc_note(i)) for i in other_ids] + [("10", rpc_result(7))])
    return cap.stream(last="5", events=[(str(i), rpc_note(i)) for i in resumed_ids])


def test_shared_counter_jump_filled_by_other_streams_is_continuous(capture, analyze):
    doc = analyze(shared_counter(capture, resumed_ids=(9, 11), other_ids=(2, 4, 6, 7, 8)))
    b = only_boundary(doc)
    assert b["id_scheme"] == "integer_shared"
    assert b["verdict"] == "continuous", b["reason"]


def test_shared_counter_id_nobody_delivered_is_lost(capture, analyze):
    doc = analyze(shared_counter(capture, resumed_ids=(9, 11), other_ids=(2, 4, 7, 8)))
    b = only_boundary(doc)
    assert (b["verdict"], b["lost_event_ids"], b["lost_count"]) == ("gap", ["6"], 1)


def test_per_stream_counters_repeat_values_and_are_judged_per_stream(capture, analyze):
    cap = capture.initialize().stream(ids=range(1, 4))
    cap.post_sse(rid=7, events=[(str(i), rpc_note(i)) for i in (1, 2, 3, 4, 5, 6)] + [("7", rpc_result(7))])
    doc = analyze(cap.stream(last="3", ids=[6]))  # 4 and 5 of the GET stream were lost even if the POST stream had a 4 and a 5
    b = only_boundary(doc)
    assert b["id_scheme"] == "integer"
    assert (b["verdict"], b["lost_event_ids"]) == ("gap", ["4", "5"])
    assert "id_reused_across_streams" in rules(doc)


GO = "KQ7ZP3XW2M5RNBT6YDHC4AJGEV"


@pytest.mark.parametrize(
    "after, verdict, lost",
    [
        ([f"{GO}_4", f"{GO}_5"], "continuous", []),
        ([f"{GO}_6"], "gap", [f"{GO}_4", f"{GO}_5"]),
        ([f"{GO}_2"], "replay_reset", []),
        ([f"OTHERSTREAMXXXXXXXXXXXXXXX_0"], "cross_stream_replay", []),
    ],
)
def test_go_stream_index_ids(capture, analyze, after, verdict, lost):
    cap = capture.initialize().stream(events=[(f"{GO}_{i}", rpc_note(i)) for i in range(0, 4)])
    b = only_boundary(analyze(cap.stream(last=f"{GO}_3", events=[(e, rpc_note(0)) for e in after])))
    assert b["id_scheme"] == "stream_seq"
    assert (b["verdict"], b["lost_event_ids"]) == (verdict, lost), b["reason"]


def test_csharp_ids(capture, analyze):
    pre = "c2Vzc2lvbi0x:c3RyZWFtLTE="
    cap = capture.initialize().stream(events=[(f"{pre}:{i}", rpc_note(i)) for i in range(1, 4)])
    b = only_boundary(analyze(cap.stream(last=f"{pre}:3", events=[(f"{pre}:5", rpc_note(5))])))
    assert (b["id_scheme"], b["verdict"], b["lost_event_ids"]) == ("csharp", "gap", [f"{pre}:4"])


def test_typescript_ids_name_their_stream(capture, analyze):
    post = "3f2b8c1e-9d4a-4b7e-8c21-5a6f0e9d1c2b"
    ids = [f"{post}_17646714001{i:02d}_k3j9a0x{i}" for i in range(4)]
    cap = capture.initialize().stream(events=[(i, rpc_note(0)) for i in ids[:2]])
    same = analyze(cap.stream(last=ids[1], events=[(i, rpc_note(0)) for i in ids[2:]]))
    assert only_boundary(same)["id_scheme"] == "ts_stream_ms"
    assert only_boundary(same)["verdict"] == "unverifiable"


def test_typescript_get_stream_replayed_on_wrong_stream(capture, analyze):
    post = "3f2b8c1e-9d4a-4b7e-8c21-5a6f0e9d1c2b"
    cap = capture.initialize().stream(events=[(f"_GET_stream_1764671400100_aaaa{i}", rpc_note(i)) for i in range(2)])
    cap.stream(last="_GET_stream_1764671400101_aaaa1", events=[(f"{post}_1764671400200_bbbb1", rpc_note(9))])
    b = only_boundary(analyze(cap))
    assert b["verdict"] == "cross_stream_replay" and "_GET_stream" in b["reason"]


# --- unknown Last-Event-ID: what the SDKs really answer ---------------------------------------

def broken_tool_call(capture):
    """A tools/call whose POST stream broke after the priming event (2025-11-25)."""
    return capture.initialize().post_sse(rid=4, events=[("p-1", "")], close="reset")


def test_200_with_nothing_replayed_while_a_response_is_owed_is_a_gap(capture, analyze):
    """python example store: unknown id -> None -> 200 text/event-stream that just ends."""
    doc = analyze(broken_tool_call(capture).stream(last="p-1", events=[], close="eof"))
    b = only_boundary(doc)
    assert b["verdict"] == "gap" and "tools/call x (id 4)" in b["reason"]
    assert "request_unanswered" in rules(doc)


def test_200_kept_open_with_nothing_while_a_response_is_owed_is_a_gap(capture, analyze):
    """typescript example store: the stream is registered under the wrong key and stays open."""
    doc = analyze(broken_tool_call(capture).stream(last="p-1", events=[], close=None))
    assert only_boundary(doc)["verdict"] == "gap"


def test_200_with_nothing_and_nothing_owed_is_unverifiable(capture, analyze):
    cap = capture.initialize().post_sse(rid=4, events=[("p-1", ""), ("p-2", rpc_result(4))], close="reset")
    assert only_boundary(analyze(cap.stream(last="p-2", events=[])))["verdict"] == "unverifiable"


@pytest.mark.parametrize(
    "status, message",
    [(400, "Invalid event ID format"), (404, "Session not found"), (409, "Conflict: Stream already has an active connection")],
)
def test_4xx_answers_carry_the_servers_words(capture, analyze, status, message):
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32000, "message": message}})
    cap = broken_tool_call(capture)
    cap.exchange("GET", {"mcp-session-id": SID, "last-event-id": "p-1"}, status=status, resp_headers={"content-type": "application/json"}, json_body=body)
    b = only_boundary(analyze(cap))
    assert b["verdict"] == "session_invalid" and message in b["reason"]


# --- JSON-RPC semantics --------------------------------------------------------------------------

def test_response_on_another_stream_is_cross_stream_replay(capture, analyze):
    cap = capture.initialize().post_sse(rid=5, events=[("a-1", rpc_note(1))], close="reset")
    cap.post_sse(rid=6, events=[("b-1", rpc_note(1))], close="reset")
    cap.stream(last="b-1", events=[("a-2", rpc_result(5))])  # stream b resumed, but it delivers a's response
    doc = analyze(cap)
    b = only_boundary(doc)
    assert b["verdict"] == "cross_stream_replay" and "id 5" in b["reason"]


def test_server_forgetting_the_session_after_resume_is_resurrection(capture, analyze):
    cap = capture.initialize().stream(ids=range(1, 4)).stream(last="3", ids=range(4, 6))
    cap.exchange("POST", {"content-type": "application/json", "mcp-session-id": SID},
                 body=json.dumps({"jsonrpc": "2.0", "id": 9, "method": "tools/list"}),
                 resp_headers={"content-type": "application/json"},
                 json_body=json.dumps({"jsonrpc": "2.0", "id": 9, "error": {"code": -32602, "message": "Received request before initialization was complete"}}))
    b = only_boundary(analyze(cap))
    assert b["verdict"] == "session_resurrected" and "-32602" in b["reason"]


def test_second_initialize_result_under_the_same_id_is_resurrection(capture, analyze):
    cap = capture.initialize().stream(ids=range(1, 4)).stream(last="3", ids=range(4, 6))
    cap.initialize(rid=3)  # the server hands out the same session id again
    b = only_boundary(analyze(cap))
    assert b["verdict"] == "session_resurrected" and "second initialize" in b["reason"]


def test_server_request_numbering_restarting_is_resurrection(capture, analyze):
    sampling = lambda topic: json.dumps({"jsonrpc": "2.0", "id": 0, "method": "sampling/createMessage", "params": {"topic": topic}})  # noqa: E731
    cap = capture.initialize().stream(events=[("1", sampling("old")), ("2", rpc_note(2))])
    b = only_boundary(analyze(cap.stream(last="2", events=[("3", sampling("new"))])))
    assert b["verdict"] == "session_resurrected" and "new process" in b["reason"]


def test_server_request_delivered_and_answered_twice(capture, analyze):
    sampling = json.dumps({"jsonrpc": "2.0", "id": 0, "method": "sampling/createMessage", "params": {}})
    cap = capture.initialize().stream(events=[("1", sampling)]).stream(events=[("1", sampling)], last="0")
    for _ in range(2):
        cap.exchange("POST", {"content-type": "application/json", "mcp-session-id": SID}, body=rpc_result(0, role="assistant"), status=202)
    doc = analyze(cap)
    assert "duplicate_side_effect" in rules(doc)
    f = next(f for f in doc["findings"] if f["rule"] == "duplicate_side_effect")
    assert f["severity"] == "critical" and "answered 2 times" in f["message"]


def test_duplicate_response_and_response_without_request(capture, analyze):
    cap = capture.initialize().post_sse(rid=5, events=[("a-1", rpc_result(5)), ("a-2", rpc_result(5)), ("a-3", rpc_result(77))])
    doc = analyze(cap)
    assert {"duplicate_response", "response_without_request"} <= set(rules(doc))


# --- protocol eras (item 5) ----------------------------------------------------------------------

def init_rev(capture, rev, sid=SID, rid=0):
    capture.exchange(
        "POST", {"content-type": "application/json"},
        body=json.dumps({"jsonrpc": "2.0", "id": rid, "method": "initialize", "params": {"protocolVersion": rev}}),
        resp_headers={"content-type": "application/json", **({"mcp-session-id": sid} if sid else {})},
        json_body=json.dumps({"jsonrpc": "2.0", "id": rid, "result": {"protocolVersion": rev}}),
    )
    return capture


def test_2025_11_25_polling_reconnect_is_info_not_warning(capture, analyze):
    """Server closes after `retry`, the client polls, the reconnect only primes: normal."""
    cap = init_rev(capture, "2025-11-25")
    cap.exchange("GET", {"mcp-session-id": SID}, resp_headers={"content-type": "text/event-stream"},
                 events=[("u-1", "")], close="eof")
    cap.lines[-2]["retry"] = 3000  # the priming event carries retry:, then the server closes
    cap.exchange("GET", {"mcp-session-id": SID, "last-event-id": "u-1"}, resp_headers={"content-type": "text/event-stream"},
                 events=[("u-2", "")], close="eof")
    doc = analyze(cap)
    b = only_boundary(doc)
    assert (b["verdict"], b["severity"]) == ("unverifiable", "info") and "polling" in b["reason"]
    assert doc["sessions"][0]["era"] == "sessions"


def test_same_reconnect_before_2025_11_25_is_a_warning(capture, analyze):
    cap = init_rev(capture, "2025-06-18")
    cap.exchange("GET", {"mcp-session-id": SID}, resp_headers={"content-type": "text/event-stream"}, events=[("u-1", "")], close="eof")
    cap.lines[-2]["retry"] = 3000
    cap.exchange("GET", {"mcp-session-id": SID, "last-event-id": "u-1"}, resp_headers={"content-type": "text/event-stream"}, events=[("u-2", "")], close="eof")
    assert only_boundary(analyze(cap))["severity"] == "warning"


def stateless_call(capture, rid, close="eof", answered=True):
    body = json.dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": {"name": "charge_card", "arguments": {"amount": 5},
                       "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}})
    events = [(None, rpc_result(rid, ok=True))] if answered else []
    return capture.exchange("POST", {"content-type": "application/json", "mcp-protocol-version": "2026-07-28"}, body=body,
                            resp_headers={"content-type": "text/event-stream"}, events=events, close=close)


def test_reissued_call_that_ran_twice(capture, analyze):
    """2026-07-28: the stream broke, the client re-issued under a new id, the server answered both."""
    doc = analyze(stateless_call(stateless_call(capture, 1, close="reset"), 2))
    f = [f for f in doc["findings"] if f["rule"] == "reissued_request_ran_twice"]
    assert len(f) == 1 and f[0]["severity"] == "critical" and "ids (1, 2)" in f[0]["message"]
    assert doc["sessions"][0]["era"] == "stateless"


def test_reissued_call_cancelled_properly_is_fine(capture, analyze):
    doc = analyze(stateless_call(stateless_call(capture, 1, close="reset", answered=False), 2))
    assert "reissued_request_ran_twice" not in rules(doc)


def test_stateless_server_minting_sessions_and_honouring_resumption(capture, analyze):
    cap = init_rev(capture, "2026-07-28")
    cap.stream(ids=range(1, 3)).stream(last="2", ids=range(3, 5))
    doc = analyze(cap)
    assert {"stateless_server_minted_session", "stateless_server_honoured_resumption"} <= set(rules(doc))


def test_mixed_fleet_is_judged_per_session(capture, analyze):
    init_rev(capture, "2025-06-18", sid="old-1")
    init_rev(capture, "2026-07-28", sid="new-1", rid=1)
    doc = analyze(capture)
    assert {s["session_id"]: s["era"] for s in doc["sessions"]} == {"old-1": "sessions", "new-1": "stateless"}
    minted = [f for f in doc["findings"] if f["rule"] == "stateless_server_minted_session"]
    assert [f["session_id"] for f in minted] == ["new-1"]
