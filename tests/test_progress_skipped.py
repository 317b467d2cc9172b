"""Losses that only the call's own progress shows (issue [3/5] item 2): behind opaque ids, a store that skips an event
on replay, evicts the cursor or lets it expire loses events that appear on no wire.  When the call's progress keeps
one fixed step before and after the reconnect and jumps at it by a whole number of steps (1, 2, 3 | 5, 6, 7), that is
a ``gap`` with evidence ``progress_skipped``, the skipped steps counted as lost and the call named.  Uneven progress
(1, 2, 5, 6, 10) proves nothing; a call with no progress stays ``unverifiable``, never ``continuous``."""
from __future__ import annotations

import json

import pytest

from test_progress_proof import boundary, log, progress, result, resumed


def test_one_step_skipped_at_the_reconnect_is_a_gap_naming_the_call(capture, analyze):
    doc = analyze(resumed(capture, [progress(5), progress(6), progress(7), result()], before=[progress(1), progress(2), progress(3)]))
    b = boundary(doc)
    assert (b["verdict"], b["rule_id"], b["evidence"]) == ("gap", "progress_skipped", "progress_skipped")
    assert b["lost_count"] == 1 and b["lost_event_ids"] == []
    assert "went 1, 2, 3 by 1 before the cursor and 5, 6, 7 by 1 after the reconnect" in b["reason"], b["reason"]
    assert "1 progress notification(s) in between (4) never arrived: tools/call slow_count (id 2) lost them" in b["reason"]
    (f,) = [f for f in doc["findings"] if f["boundary"] == b["boundary_id"]]
    assert f["rule"] == "gap" and f["severity"] in ("critical", "error")


def test_two_steps_skipped_count_two(capture, analyze):
    b = boundary(analyze(resumed(capture, [progress(6), progress(7), progress(8), result()], before=[progress(1), progress(2), progress(3)])))
    assert (b["verdict"], b["evidence"], b["lost_count"]) == ("gap", "progress_skipped", 2)
    assert "(4, 5) never arrived" in b["reason"]


def test_fractional_steps(capture, analyze):
    b = boundary(analyze(resumed(capture, [progress(0.75), progress(1.0), result()], before=[progress(0.0), progress(0.25)])))
    assert (b["verdict"], b["lost_count"]) == ("gap", 1)
    assert "went 0, 0.25 by 0.25 before the cursor and 0.75, 1 by 0.25 after" in b["reason"] and "(0.5) never arrived" in b["reason"], b["reason"]


@pytest.mark.parametrize(
    "before, after, why",
    [
        ([progress(1), progress(2)], [progress(5), progress(6), progress(10), result()], "uneven after the reconnect: 1, 2, 5, 6, 10"),
        ([progress(1), progress(3), progress(4)], [progress(6), progress(7), result()], "uneven before the cursor"),
        ([progress(1)], [progress(3), progress(4), progress(5), result()], "one value before: its step is not shown"),
        ([progress(1), progress(2)], [progress(4), result()], "one value after: its step is not shown"),
        ([progress(1), progress(2)], [progress(5), progress(7), result()], "a step after that is not the step before"),
        ([progress(1), progress(3)], [progress(6), progress(8), result()], "a jump that is not a whole number of steps"),
        ([progress(1), progress(2)], [progress(4, token=9), progress(5, token=9), result()], "another token"),
    ],
)
def test_no_gap_without_a_regular_step_on_both_sides(capture, analyze, before, after, why):
    b = boundary(analyze(resumed(capture, after, before=before)))
    assert b["verdict"] != "gap" and b["evidence"] != "progress_skipped", why
    assert b["verdict"] != "continuous" or b["evidence"] == "progress_and_response", why


def test_a_healthy_regular_resume_is_no_gap(capture, analyze):
    b = boundary(analyze(resumed(capture, [progress(4), progress(5), progress(6), result()], before=[progress(1), progress(2), progress(3)])))
    assert (b["verdict"], b["evidence"]) == ("continuous", "progress_and_response")


def test_a_call_without_progress_stays_unverifiable(capture, analyze):
    b = boundary(analyze(resumed(capture, [log(3), log(4), result()], before=[log(1), log(2)])))
    assert (b["verdict"], b["evidence"]) == ("unverifiable", "none")


ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("fmt", ["jsonl", "har", "pcap"])
@pytest.mark.parametrize("name, verdict, evidence, lost", [
    # python SDK 2.3.0, uuid ids; the client logs (sample_logs/recording/client-logs/) show what the application got
    ("real-python-uuid-skip-one", "gap", "progress_skipped", 1),      # 1, 2, 3 | 5, 6, 7
    ("real-python-uuid-skip-two", "gap", "progress_skipped", 2),      # 1, 2, 3 | 6, 7, 8
    ("real-python-uuid-evicted-buffer", "gap", "progress_skipped", 3),  # 1, 2, 3 | 7, 8, 9, 10
    ("real-python-uuid-ttl-expired", "gap", "progress_skipped", 2),   # 1, 2, 3 | 6, 7, 8, 9
    ("real-python-uuid-healthy-regular", "continuous", "progress_and_response", 0),  # 1 .. 7, nothing lost
    ("real-python-uuid-healthy-uneven", "unverifiable", "none", 0),   # 1, 2 | 5, 6, 10: nothing lost, nothing proven
    ("real-python-uuid-no-progress", "unverifiable", "none", 0),      # logs only
])
def test_real_progress_recordings(fmt, name, verdict, evidence, lost, monkeypatch):
    from analyzer import pipeline

    monkeypatch.chdir(ROOT)
    (b,) = pipeline.run([f"sample_logs/{name}.{fmt}"]).document["boundaries"]
    assert (b["verdict"], b["evidence"], b["lost_count"]) == (verdict, evidence, lost), b["reason"]
    if name == "real-python-uuid-healthy-uneven":
        assert "likely lost" not in b["reason"]  # uneven progress is the tool's own counting, no hint of a loss


@pytest.mark.parametrize("fmt", ["jsonl", "har", "pcap"])
@pytest.mark.parametrize("name, again", [("real-python-stale-cursor", ["6", "7", "9"]), ("real-python-stale-cursor-uuid", None)])
def test_real_python_stale_cursor(fmt, name, again, monkeypatch):
    """The python client resumed a resumed stream that broke again with its previous resume's Last-Event-ID; a correct
    store replayed from it, and the application got 3 events twice (client log).  Each reconnect is judged on its own:
    the first continuous, the second stale_last_event_id -- never a gap (nothing was lost)."""
    from analyzer import pipeline

    monkeypatch.chdir(ROOT)
    doc = pipeline.run([f"sample_logs/{name}.{fmt}"]).document
    first, second = doc["boundaries"]
    assert first["last_event_id"] == second["last_event_id"]
    assert first["verdict"] == "continuous"
    assert (second["verdict"], second["rule_id"], second["duplicated_count"], second["lost_count"]) == ("replay_reset", "stale_last_event_id", 3, 0)
    if again:
        assert second["duplicated_event_ids"] == again
    assert "tools/call slow_count (id 2) processed them twice" in second["reason"]
    assert not [f for f in doc["findings"] if f["rule"] == "gap"]


PY = "python-httpx/0.28.1"  # the python SDK client's User-Agent (signals/clients.py)


def _message(i: int, tag: str) -> str:
    return json.dumps({"jsonrpc": "2.0", "method": "notifications/message", "params": {"n": i, "tag": tag}})


def test_a_reopen_between_two_resumes_is_no_stale_cursor(capture, analyze):
    """The stale cursor is the previous *resume*'s (reference point 3).  Resumed from 5, the stream broke, was reopened
    without Last-Event-ID by a server that numbered from 1 again, and was resumed from that connection's 5: the client's
    cursor is what it last received, not a stale one, and ids 6-8 of the new process are new events (bench/out/
    truth-1000k.json had two such reconnects judged replay_reset, "the application got 34 event(s) twice")."""
    capture.user_agent = PY
    capture.initialize()
    capture.stream(ids=range(1, 6), data=lambda i: _message(i, "a"))
    capture.stream(last="5", ids=range(6, 10), data=lambda i: _message(i, "a"))
    capture.stream(ids=range(1, 6), data=lambda i: _message(i, "b"))  # a new process numbers from 1
    capture.stream(last="5", ids=range(6, 9), data=lambda i: _message(i, "b"), close="eof")
    doc = analyze(capture)
    first, reopen, third = doc["boundaries"]
    assert (first["verdict"], reopen["verdict"]) == ("continuous", "replay_reset")
    assert (third["verdict"], third["rule_id"], third["duplicated_count"], third["lost_count"]) == ("continuous", "ids_continue", 0, 0), third["reason"]
    assert "twice" not in third["reason"]


def test_a_stale_cursor_with_other_events_under_its_ids_is_no_double_delivery(capture, analyze):
    """Resumed twice from 5 (the python client's stale cursor), but the second time ids 6-8 carried other payloads: the
    application did not get the same events twice (a digest conflict says what it got), so no stale_last_event_id."""
    capture.user_agent = PY
    capture.initialize()
    capture.stream(ids=range(1, 6), data=lambda i: _message(i, "a"))
    capture.stream(last="5", ids=range(6, 10), data=lambda i: _message(i, "a"))
    capture.stream(last="5", ids=range(6, 9), data=lambda i: _message(i, "b"), close="eof")
    doc = analyze(capture)
    second = doc["boundaries"][1]
    assert second["rule_id"] != "stale_last_event_id" and "processed them twice" not in second["reason"], second["reason"]
    assert [f["rule"] for f in doc["findings"]] == ["digest_conflict"]


def test_the_same_stale_cursor_with_the_same_events_is_one(capture, analyze):
    """The control of the two above: the same payloads again are the stale cursor's double delivery."""
    capture.user_agent = PY
    capture.initialize()
    capture.stream(ids=range(1, 6), data=lambda i: _message(i, "a"))
    capture.stream(last="5", ids=range(6, 10), data=lambda i: _message(i, "a"))
    capture.stream(last="5", ids=range(6, 9), data=lambda i: _message(i, "a"), close="eof")
    second = analyze(capture)["boundaries"][1]
    assert (second["verdict"], second["rule_id"], second["duplicated_count"]) == ("replay_reset", "stale_last_event_id", 3), second["reason"]
