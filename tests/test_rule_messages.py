"""The wording of each rule's message, pinned where it is made (the golden files pin verdicts, ids, counts and rules,
not prose): one real example per rule that the sample logs show, read against its capture.  A reworded message
changes this file only, and a count that a rewording loses ("used on 3 streams" becoming "several") fails here."""
from __future__ import annotations

from pathlib import Path

import pytest

from analyzer import pipeline

ROOT = Path(__file__).resolve().parent.parent

EXAMPLES = [
    ("sample_logs/real-python-shared-store-concurrent.jsonl", "cross_session_replay",
     "4 event(s) delivered on this reconnect had been delivered in session 8fcd01432a1d49ecb86921cfb522e2f1 (6, 7, 8, 9)"),
    ("sample_logs/real-python-shared-store-concurrent.jsonl", "cross_stream_replay",
     "4 event(s) on this reconnect are the same events (id and payload) that session 8fcd01432a1d49ecb86921cfb522e2f1 had been delivered earlier (first: 6): another session's stream was replayed here; the client used the old session again (line 52) without re-initializing."),
    ("sample_logs/real-python-shared-store-concurrent.jsonl", "digest_conflict",
     "3 event ids (6, 7, 8) each carried different payloads on one stream"),
    ("sample_logs/real-python-replica-failover.jsonl", "duplicate_response",
     "the response to tools/call add (id 2) was delivered 2 times"),
    ("sample_logs/synthetic/epoch_change.jsonl", "epoch_change",
     "the replay epoch changed from e-7f3a to e-91c2; the client used the old session again (line 20) without re-initializing."),
    ("sample_logs/real-python-capture-client-loss-send-buffer.jsonl", "gap",
     "event id 9 came after 5: 3 event id(s) were never delivered (3 of them left the capture point on the old connection, but the client's own Last-Event-ID 5 shows they never arrived); the client used the old session again (line 30) without re-initializing."),
    ("sample_logs/real-ts-get-stream-bug.jsonl", "get_stream_resume_lost",
     "the standalone GET stream was resumed with a _GET_stream_ id and nothing came after: the typescript-sdk example event store registers such a resume under the wrong stream (issues #943, #2560)"),
    ("sample_logs/real-python-shared-store-concurrent.jsonl", "id_not_monotonic",
     "3 event id(s) on one connection were not above an earlier id (first: 6 after 8)"),
    ("sample_logs/real-nginx-python-resume-mitm.jsonl", "id_reused_across_streams",
     "event id 2 was used on 3 streams of the session for different events"),
    ("sample_logs/real-ts-cross-session.jsonl", "last_event_id_of_other_session",
     "the reconnect sent Last-Event-ID 920eee41-1b1a-4d51-bf13-d0661a4369ad_1796213282910_mv9ky82q, an event of session 6d2bef1d-91ad-4fa1-9c44-8fd81d258828"),
    ("sample_logs/real-python-reissue-after-break.jsonl", "reissued_after_break",
     "tools/call slow_count (id 2) was re-issued as id 3 after its stream ended without a response, although the first attempt had started (2 event(s) delivered); the first attempt had reported progress 1 time(s): the server may have run it twice"),
    ("sample_logs/synthetic/stateless_reissue.jsonl", "reissued_request_ran_twice",
     "tools/call charge_card with the same arguments was issued under 2 ids (1, 2) and answered each time: it ran 2 times"),
    ("sample_logs/real-python-replica-failover.jsonl", "replay_reset",
     "event id 2 came after 7: ids went back, 1 event(s) already processed were delivered again; the capture ends before the client re-initialized or used the session again."),
    ("sample_logs/real-python-reissue-after-break.jsonl", "request_unanswered",
     "tools/call slow_count (id 2) never got a response, although its stream broke, ended or was resumed"),
    ("sample_logs/real-ts-cross-session.jsonl", "response_without_request",
     "a response to request id 1 arrived, but this session never sent that request"),
    ("sample_logs/real-python-server-restart.jsonl", "session_invalid",
     "the reconnect was answered HTTP 404 (Session not found); the client used the old session again (line 23) without re-initializing."),
    ("sample_logs/real-python-resurrection-loop.jsonl", "session_resurrected",
     "the server delivered nothing of the old session after this reconnect, and then answered line 51 error -32602 \"Invalid request parameters\" under the same session id: a new process that re-created the session uninitialized; the client used the old session again (line 21) without re-initializing."),
    ("sample_logs/real-python-capture-client-loss.jsonl", "stale_last_event_id",
     "the client resumed with Last-Event-ID 5 although the capture shows the stream had already delivered up to 8: either those events were lost after the capture point (then replaying them is right) or the client resumed from an older point than it had reached"),
    ("sample_logs/real-ts-cross-session.jsonl", "unknown_last_event_id",
     "Last-Event-ID 920eee41-1b1a-4d51-bf13-d0661a4369ad_1796213282910_mv9ky82q names an event that no capture shows being delivered in this session"),
    ("sample_logs/real-python-uuid-drops-log.jsonl", "unverifiable",
     "ids are opaque and no capture shows which event came after the cursor; the call's progress went on, but the step the reconnect cut lacks a notifications/message that every other step of the call carries: it was likely lost; the client used the old session again (line 29) without re-initializing."),
    ("sample_logs/real-python-replica-failover.jsonl", "wrong_result_delivered",
     "tools/call slow_count (id 5) was handed the result of tools/call add (id 2) (line 11): \"sum=5\" (line 34); the python client (python-httpx2/2.16.2) gives the first response on a resumed stream to the call that opened the stream (it rewrites the id), so the application took it as this call's own; the client closed the stream right after it"),
    ("sample_logs/synthetic/cross_stream_response.jsonl", "foreign_response_on_resume",
     "the result of tools/call slow_count (id 5) (line 8): \"done\" (line 18) arrived on the resumed stream of tools/call other (id 6); what the application got depends on the client (no User-Agent), which is not known here: a client that rewrites response ids on a resumed stream (the python SDK's) took it as tools/call other (id 6)'s result, one that keeps them (the TypeScript SDK's automatic reconnect) gave it to tools/call slow_count (id 5), whose answer it is; tools/call other (id 6) never completed"),
]


@pytest.fixture(autouse=True)
def _cwd(monkeypatch):
    monkeypatch.chdir(ROOT)  # sources named relative to the repository, as the messages' line numbers are read


@pytest.mark.parametrize("sample, rule, message", EXAMPLES, ids=[r for _, r, _ in EXAMPLES])
def test_the_rule_says_it_so(sample, rule, message):
    said = [f["message"] for f in pipeline.run([sample]).document["findings"] if f["rule"] == rule]
    assert message in said, said


def test_an_id_other_sessions_had_names_the_first_of_them(tmp_path, capture, analyze):
    """A reconnect whose Last-Event-ID many other sessions were delivered names the first of them in history.  The rule
    kept any one (``unique("gx")``): on a damaged 1M-event log the message and the fingerprint of 14 findings changed
    in one run of three (``bench/determinism.py``).  This small log does not show that variation; it pins the choice."""
    sessions = [f"sess-{n:02d}" for n in range(40)]
    for sid in sessions:
        capture.initialize(sid=sid).stream(sid=sid, ids=range(1, 8), close="eof")
    capture.initialize(sid="sess-late").stream(sid="sess-late", last="7", ids=range(8, 10), close="eof")
    doc = analyze(capture)
    named = [f for f in doc["findings"] if f["rule"] == "last_event_id_of_other_session"]
    assert len(named) == 1 and named[0]["message"].endswith("an event of session sess-00"), named
