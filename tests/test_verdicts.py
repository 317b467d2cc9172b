"""One tiny capture per verdict and per rule of the decision procedure."""
from __future__ import annotations

import json

import pytest

from conftest import SID, SID2


def only_boundary(doc):
    assert len(doc["boundaries"]) == 1, doc["boundaries"]
    return doc["boundaries"][0]


def rules(doc):
    return sorted(f["rule"] for f in doc["findings"])


def test_continuous(capture, analyze):
    b = only_boundary(analyze(capture.initialize().stream(ids=range(1, 6)).stream(last="5", ids=range(6, 9)).call()))
    assert (b["verdict"], b["first_event_id_after"], b["lost_event_ids"], b["duplicated_event_ids"]) == ("continuous", "6", [], [])
    assert b["handled_correctly"] is True and b["severity"] is None


def test_gap_lists_lost_ids_and_is_critical_when_client_goes_on(capture, analyze):
    doc = analyze(capture.initialize().stream(ids=range(1, 6)).stream(last="5", ids=range(9, 12)).call())
    b = only_boundary(doc)
    assert b["verdict"] == "gap"
    assert b["lost_event_ids"] == ["6", "7", "8"] and b["lost_count"] == 3
    assert b["handled_correctly"] is False and b["severity"] == "critical"
    assert rules(doc) == ["gap"]


def test_gap_later_in_the_resumed_stream_is_still_a_gap(capture, analyze):
    """Case 4: 'continue to validate every subsequent event' — a jump after a good first event."""
    b = only_boundary(analyze(capture.initialize().stream(ids=range(1, 4)).stream(last="3", events=[(str(i), "{}") for i in (4, 5, 8)])))
    assert b["verdict"] == "gap" and b["lost_event_ids"] == ["6", "7"]


def test_lost_ids_listed_up_to_cap_but_counted_exactly(capture, analyze):
    b = only_boundary(analyze(capture.initialize().stream(ids=[1]).stream(last="1", ids=[5002])))
    assert b["lost_count"] == 5000 and len(b["lost_event_ids"]) == 1000 and b["lost_event_ids"][0] == "2"


def test_replay_reset_handled_by_reinitialize_is_warning(capture, analyze):
    cap = capture.initialize().stream(ids=range(1039, 1042)).stream(last="1041", ids=range(1, 4), close="eof")
    cap.initialize(sid=SID2, rid=5).call(sid=SID2)
    b = only_boundary(analyze(cap))
    assert b["verdict"] == "replay_reset"
    assert b["duplicated_event_ids"] == ["1", "2", "3"]
    assert b["handled_correctly"] is True and b["severity"] == "warning"


def test_replay_reset_with_capture_ending_is_error(capture, analyze):
    b = only_boundary(analyze(capture.initialize().stream(ids=range(1, 4)).stream(last="3", ids=range(2, 5))))
    assert b["verdict"] == "replay_reset" and b["duplicated_event_ids"] == ["2", "3"]
    assert b["handled_correctly"] is None and b["severity"] == "error"


def test_boundary_event_resent_unchanged_is_not_a_reset(capture, analyze):
    """The reference's dead branch, made live: same id, same digest = benign overlap."""
    doc = analyze(capture.initialize().stream(ids=range(1, 4)).stream(last="3", ids=range(3, 6)))
    b = only_boundary(doc)
    assert b["verdict"] == "continuous" and b["boundary_event_resent"] is True


def test_boundary_id_resent_with_other_payload_is_a_reset(capture, analyze):
    cap = capture.initialize().stream(ids=range(1, 4)).stream(last="3", ids=range(3, 6), data=lambda i: f'{{"new": {i}}}')
    doc = analyze(cap)
    b = only_boundary(doc)
    assert b["verdict"] == "replay_reset" and b["boundary_event_resent"] is False
    assert "digest_conflict" in rules(doc)


def test_epoch_change(capture, analyze):
    cap = capture.initialize().stream(ids=range(1, 3), resp_headers={"content-type": "text/event-stream", "x-mcp-replay-epoch": "1"})
    cap.stream(last="2", ids=range(3, 5), resp_headers={"content-type": "text/event-stream", "x-mcp-replay-epoch": "2"})
    b = only_boundary(analyze(cap))
    assert b["verdict"] == "epoch_change"
    assert (b["http"]["replay_epoch_before"], b["http"]["replay_epoch_after"]) == ("1", "2")


def test_epoch_appearing_counts_as_change(capture, analyze):
    cap = capture.initialize().stream(ids=range(1, 3))
    cap.stream(last="2", ids=range(3, 5), resp_headers={"content-type": "text/event-stream", "x-mcp-replay-epoch": "9"})
    assert only_boundary(analyze(cap))["verdict"] == "epoch_change"


def test_session_invalid_on_404_then_proper_reinit(capture, analyze):
    cap = capture.initialize().stream(ids=range(1, 3)).stream(last="2", status=404, resp_headers={"content-type": "text/plain"})
    cap.initialize(sid=SID2, rid=3)
    b = only_boundary(analyze(cap))
    assert b["verdict"] == "session_invalid" and b["http"]["status"] == 404
    assert b["handled_correctly"] is True and b["severity"] == "warning"


def test_session_invalid_on_other_session_id_takes_precedence_over_ids(capture, analyze):
    cap = capture.initialize().stream(ids=range(1, 3))
    cap.stream(last="2", ids=range(3, 5), resp_headers={"content-type": "text/event-stream", "mcp-session-id": "other"})
    cap.call()
    b = only_boundary(analyze(cap))
    assert b["verdict"] == "session_invalid" and b["severity"] == "critical"


def test_retry_after_404_is_using_the_session_again(capture, analyze):
    cap = capture.initialize().stream(ids=range(1, 3))
    cap.stream(last="2", status=404, resp_headers={}).stream(last="2", status=404, resp_headers={})
    doc = analyze(cap)
    assert [b["verdict"] for b in doc["boundaries"]] == ["session_invalid", "session_invalid"]
    assert [b["handled_correctly"] for b in doc["boundaries"]] == [False, None]


def test_opaque_ids_are_unverifiable_without_history(capture, analyze):
    ev = [(f"u-{c}", "{}") for c in "abcdef"]
    b = only_boundary(analyze(capture.initialize().stream(events=ev[:3]).stream(last="u-c", events=ev[3:])))
    assert b["verdict"] == "unverifiable" and b["severity"] == "warning" and b["id_scheme"] == "opaque"


def test_opaque_ids_already_delivered_are_a_reset(capture, analyze):
    ev = [(f"u-{c}", json.dumps({"n": c})) for c in "abcdef"]
    doc = analyze(capture.initialize().stream(events=ev[:4]).stream(last="u-d", events=ev[2:]))
    b = only_boundary(doc)
    assert b["verdict"] == "replay_reset" and b["duplicated_event_ids"] == ["u-c", "u-d"]


def test_no_event_after_reconnect_is_unverifiable(capture, analyze):
    b = only_boundary(analyze(capture.initialize().stream(ids=range(1, 3)).stream(last="2", ids=[])))
    assert b["verdict"] == "unverifiable" and "no event" in b["reason"]


def test_reconnect_without_response_is_unverifiable(capture, analyze):
    b = only_boundary(analyze(capture.initialize().stream(ids=range(1, 3)).stream(last="2", status=None, close="error")))
    assert b["verdict"] == "unverifiable" and "no response" in b["reason"]


def test_get_reopen_without_last_event_id_is_judged_against_history(capture, analyze):
    """typescript-sdk #2499: the reconnect carries no Last-Event-ID; history still knows the last id."""
    b = only_boundary(analyze(capture.initialize().stream(ids=range(1, 4)).stream(ids=range(1, 3))))
    assert b["last_event_id"] is None and b["last_before"] == "3"
    assert b["verdict"] == "replay_reset"


def test_stale_last_event_id_replays_already_processed_events(capture, analyze):
    """typescript-sdk PR #2466: a frozen resumption token replays what the client already had.

    The wire cannot tell that from events lost between the capture point and the client
    (then the replay is exactly right): the verdict follows the client's claim, and the
    re-sent events are listed as duplicates with a stale_last_event_id warning."""
    doc = analyze(capture.initialize().stream(ids=range(1, 6)).stream(last="3", ids=range(4, 8)))
    b = only_boundary(doc)
    assert b["verdict"] == "continuous" and b["duplicated_event_ids"] == ["4", "5"] and b["duplicated_count"] == 2
    assert "left the capture point" in b["reason"] and "processes them twice" in b["reason"]
    assert "stale_last_event_id" in rules(doc)


def test_events_lost_between_capture_point_and_client_are_a_gap(capture, analyze):
    """Issue [1/6] item 1: the proxy saw 4 and 5 leave, the client says it has 3, the server resumes at 6."""
    doc = analyze(capture.initialize().stream(ids=range(1, 6)).stream(last="3", ids=range(6, 9)).call())
    b = only_boundary(doc)
    assert b["verdict"] == "gap" and b["lost_event_ids"] == ["4", "5"] and b["lost_count"] == 2
    assert b["duplicated_event_ids"] == []
    assert "2 of them left the capture point" in b["reason"] and "Last-Event-ID 3" in b["reason"]
    assert b["severity"] == "critical"
    assert "stale_last_event_id" not in rules(doc)


def test_opaque_events_lost_between_capture_point_and_client_are_a_gap(capture, analyze):
    ev = [(f"u-{c}", json.dumps({"n": c})) for c in "abcdefgh"]
    doc = analyze(capture.initialize().stream(events=ev[:5]).stream(last="u-c", events=ev[5:]))
    b = only_boundary(doc)
    assert b["verdict"] == "gap" and b["lost_event_ids"] == ["u-d", "u-e"]
    assert "left the capture point" in b["reason"] and "never arrived" in b["reason"]


def test_opaque_replay_from_the_claim_is_proven_continuous_by_the_old_connection(capture, analyze):
    ev = [(f"u-{c}", json.dumps({"n": c})) for c in "abcdefgh"]
    doc = analyze(capture.initialize().stream(events=ev[:5]).stream(last="u-c", events=ev[3:]))
    b = only_boundary(doc)
    assert b["verdict"] == "continuous" and b["duplicated_event_ids"] == ["u-d", "u-e"]
    assert "stale_last_event_id" in rules(doc)


def test_unknown_last_event_id_falls_back_to_previous_stream(capture, analyze):
    doc = analyze(capture.initialize().stream(ids=range(1, 3)).stream(last="77", ids=range(78, 80)))
    b = only_boundary(doc)
    assert b["resumes"] is not None and "unknown_last_event_id" in rules(doc)
    assert b["verdict"] == "continuous"  # the claim 77 is ahead of what was seen: the capture may have missed events


def test_chained_resumptions_share_one_stream(capture, analyze):
    doc = analyze(capture.initialize().stream(ids=range(1, 3)).stream(last="2", ids=range(3, 5)).stream(last="4", ids=range(5, 7)))
    assert [b["verdict"] for b in doc["boundaries"]] == ["continuous", "continuous"]
    streams = {x["stream"] for x in doc["exchanges"] if x["method"] == "GET"}
    assert len(streams) == 1


def test_ids_backwards_inside_a_connection(capture, analyze):
    doc = analyze(capture.initialize().stream(events=[("1", "{}"), ("2", "{}"), ("1", "{}")]))
    assert rules(doc) == ["id_not_monotonic"]



@pytest.mark.parametrize(("second_b", "want"), [("7", []), ("3", ["id_not_monotonic"])])
def test_ids_of_two_stream_prefixes_on_one_connection_rise_per_prefix(capture, analyze, second_b, want):
    """go-sdk ids (<stream>_<n>) of two streams interleaved on one connection: each prefix is its own
    counter (A_2 after B_5 is not backwards; B_3 after B_5 is)."""
    ids = ["KAAAAAAAAAAA_1", "KBBBBBBBBBBB_5", "KAAAAAAAAAAA_2", f"KBBBBBBBBBBB_{second_b}", "KAAAAAAAAAAA_3"]
    doc = analyze(capture.initialize().stream(events=[(i, "{}") for i in ids]))
    assert {s["id_scheme"] for s in doc["sessions"]} == {"stream_seq"}
    assert rules(doc) == want
    if want:
        f = next(f for f in doc["findings"] if f["rule"] == "id_not_monotonic")
        assert f["message"] == "1 event id(s) on one connection were not above an earlier id (first: KBBBBBBBBBBB_3 after KAAAAAAAAAAA_2)"


def test_opaque_id_repeated_inside_a_connection(capture, analyze):
    """Opaque ids are checked for repeats (integers against the highest id before them): one finding per
    connection, naming the first repeat, its count and where the events are."""
    doc = analyze(capture.initialize().stream(events=[("a1", '"x"'), ("b2", '"y"'), ("a1", '"x"'), ("c3", '"z"'), ("b2", '"y"')]))
    assert rules(doc) == ["id_repeated"]
    f = next(f for f in doc["findings"] if f["rule"] == "id_repeated")
    assert f["message"] == "2 event id(s) were delivered again on the same connection (first: a1)"
    # the event before the first repeat, then the repeats
    assert [e["location"] for e in f["evidence"]] == ["line 8", "line 9", "line 11"]


def test_cut_off_event_is_evidence_not_delivery(capture, analyze):
    cap = capture.initialize().stream(events=[("1", "{}"), ("2", "{}"), ("3", '{"x":1}', "cut")])
    doc = analyze(cap.stream(last="2", events=[("3", '{"x":1}'), ("4", "{}")]))
    b = only_boundary(doc)
    assert b["verdict"] == "continuous"
    assert [e["id"] for e in b["cut_off_before"]] == ["3"]
    assert any(a["code"] == "sse_unterminated_event" for a in doc["anomalies"])


def test_each_session_judged_separately(capture, analyze):
    cap = capture.initialize().initialize(sid=SID2, rid=9)
    cap.stream(ids=range(1, 3)).stream(sid=SID2, ids=range(1, 3))
    cap.stream(last="2", ids=range(3, 5)).stream(sid=SID2, last="2", ids=range(7, 9))
    doc = analyze(cap)
    got = {b["session_id"]: b["verdict"] for b in doc["boundaries"]}
    assert got == {SID: "continuous", SID2: "gap"}


def test_another_clients_initialize_does_not_count_as_handling(capture, analyze):
    """bench/ found it: a capture holds many clients; the old session used again decides."""
    cap = capture.initialize().stream(ids=range(1, 4)).stream(last="3", ids=[7])
    cap.initialize(sid=SID2, rid=5)  # somebody else's new session
    cap.call()  # ... and the first client goes on with the old one
    b = only_boundary(analyze(cap))
    assert b["verdict"] == "gap" and b["handled_correctly"] is False and b["severity"] == "critical"


def test_common_notifications_in_two_sessions_are_no_cross_session_replay(capture, analyze):
    cap = capture.initialize().initialize(sid=SID2, rid=9)
    same = [(str(i), json.dumps({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": i}})) for i in (1, 2, 3)]
    cap.stream(events=same).stream(sid=SID2, events=same)
    cap.stream(last="3", events=same[:1]).stream(sid=SID2, last="3", events=same[:1])
    doc = analyze(cap)
    assert "cross_session_replay" not in rules(doc)


def _other(i):
    return f'{{"jsonrpc": "2.0", "method": "notifications/message", "params": {{"other": {i}}}}}'


def test_a_cursor_naming_two_events_that_brings_one_again_is_a_replay(capture, analyze):
    """Two servers numbering one stream: the second resume's cursor 4 names two events (the first connection's and
    the other server's), the server places it at the first one, and 5 comes again, same id and payload: a repeat,
    though the ids go up from the cursor (real-go-client-replica-failover, reduced)."""
    cap = capture.initialize().stream(ids=range(1, 6)).stream(last="5", ids=range(2, 5), data=_other)
    doc = analyze(cap.stream(last="4", ids=range(5, 8)))
    second = doc["boundaries"][1]
    assert (second["verdict"], second["rule_id"]) == ("replay_reset", "cursor_named_two_events")
    assert second["duplicated_event_ids"] == ["5"] and second["duplicated_count"] == 1 and second["lost_count"] == 0
    assert "the client's Last-Event-ID 4 named 2 different events" in second["reason"]


def test_a_counter_restarted_with_new_payloads_goes_on_continuous(capture, analyze):
    """The same ids after a restart, with new payloads: the cursor 4 names two events, but nothing came again (5 and 6
    are new events): continuous, as counting ids alone would not say (bench/generate.py's restarts)."""
    cap = capture.initialize().stream(ids=range(1, 6)).stream(last="5", ids=range(1, 5), data=_other)
    doc = analyze(cap.stream(last="4", ids=range(5, 7), data=_other))
    assert [(b["verdict"], b["rule_id"]) for b in doc["boundaries"]] == [("replay_reset", "ids_went_back"), ("continuous", "ids_continue")]


def test_one_equal_payload_after_a_restarted_counter_is_chance_not_a_repeat(capture, analyze):
    """After a restart (new payloads for the old ids) the cursor 4 names two events and the next event 5 happens to
    carry the first run's payload, but 6 carries another: the server numbers anew, 5 is no repeat (9 of 3,929
    reconnects of bench/generate.py's traffic look like this: a progress notification equal by chance)."""
    default = lambda i: json.dumps({"jsonrpc": "2.0", "method": "notifications/message", "params": {"n": i}})  # noqa: E731
    cap = capture.initialize().stream(ids=range(1, 7)).stream(last="6", ids=range(1, 5), data=_other)
    doc = analyze(cap.stream(last="4", events=[("5", default(5)), ("6", _other(6))]))
    assert [(b["verdict"], b["rule_id"]) for b in doc["boundaries"]] == [("replay_reset", "ids_went_back"), ("continuous", "ids_continue")]


def test_a_resend_of_what_followed_the_cursor_is_no_repeat_of_an_ambiguous_cursor(capture, analyze):
    """The cursor 3 names two events (a restart in between), and the client resumes from the newer 3 although the
    old connection had gone on to 5: the resent 4 and 5 are what the client never got, not a repeat of what it had
    (their payloads were delivered after the cursor's last delivery, its claim): continuous."""
    cap = capture.initialize().stream(ids=range(1, 7)).stream(last="6", ids=range(1, 6), data=_other)
    doc = analyze(cap.stream(last="3", ids=range(4, 8), data=_other))
    assert [(b["verdict"], b["rule_id"]) for b in doc["boundaries"]] == [("replay_reset", "ids_went_back"), ("continuous", "ids_continue")]
