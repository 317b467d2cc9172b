"""A proof for opaque ids (issue [2/5] item 3): the call's own progress goes on from the cursor without a jump,
and its own response arrives.  Healthy resumes of the uuid and ``<stream>_<ms>_<rand>`` stores are then
``continuous`` with ``evidence: progress_and_response``; every way of losing or mixing events is not."""
from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from analyzer import pipeline
from conftest import SID

ROOT = Path(__file__).resolve().parent.parent
U = [str(uuid.UUID(int=i * 7919 + 1)) for i in range(40)]  # opaque ids, fixed


def progress(v, token=2, total=5):
    return json.dumps({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": token, "progress": v, "total": total}})


def log(n):
    return json.dumps({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": f"step {n}"}})


def result(rid=2, text="counted to 5"):
    return json.dumps({"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": text}]}})


def resumed(capture, after, before=None, close="eof"):
    """tools/call slow_count (id 2, progressToken 2): priming, then ``before`` (default progress 1 and its log), the
    stream breaks; the client resumes from the last event's id and gets ``after`` (data texts; uuid ids)."""
    cap = capture.initialize()
    before = before if before is not None else [progress(1), log(1)]
    evs = [(U[0], "")] + [(U[1 + i], d) for i, d in enumerate(before)]
    cap.exchange(
        "POST", {"content-type": "application/json", "accept": "application/json, text/event-stream", "mcp-session-id": SID},
        body=json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "slow_count", "_meta": {"progressToken": 2}}}),
        resp_headers={"content-type": "text/event-stream"}, events=evs, close="reset",
    )
    return cap.stream(last=evs[-1][0], events=[(U[20 + i], d) for i, d in enumerate(after)], close=close)


def boundary(doc):
    (b,) = doc["boundaries"]
    return b


def test_healthy_uuid_resume_is_continuous_with_its_proof(capture, analyze):
    b = boundary(analyze(resumed(capture, [progress(2), progress(3), log(3), progress(4), progress(5), result()])))
    assert (b["verdict"], b["rule_id"], b["evidence"]) == ("continuous", "progress_continues", "progress_and_response")
    assert "went on from 1 to 5 without a jump" in b["reason"] and "response (id 2)" in b["reason"]


@pytest.mark.parametrize(
    "after, why",
    [
        ([progress(3), progress(4), progress(5), result()], "progress 2 lost at the boundary"),
        ([progress(4), progress(5), result()], "a store that replayed nothing while the tool went on live"),
        ([progress(2), progress(3), progress(4), progress(5)], "no response: the call never completed"),
        ([progress(2), progress(3), result(rid=7)], "the first answer is another call's"),
        ([progress(2), progress(2), progress(3), result()], "a repeat"),
        ([progress(2), progress(3, token=9), result()], "another token: another call's stream"),
        ([progress(2), result()], "one value after and one before: the step is unknown"),
        ([log(2), log(3), result()], "no progress after the reconnect"),
        ([progress(1), progress(2), result()], "the cursor's own progress again"),
    ],
)
def test_no_proof_when_events_were_lost_or_mixed(capture, analyze, after, why):
    b = boundary(analyze(resumed(capture, after)))
    assert b["verdict"] != "continuous", why
    assert b["evidence"] != "progress_and_response", why


def test_the_step_before_the_cursor_must_be_the_step_after(capture, analyze):
    """1, 2 before (step 1), then 4, 6: the values after are evenly spaced, but by another step: 3 and 5 were lost."""
    b = boundary(analyze(resumed(capture, [progress(4), progress(6), result()], before=[progress(1), progress(2)])))
    assert b["verdict"] != "continuous"
    ok = boundary(analyze(resumed(capture.__class__(), [progress(3), result()], before=[progress(1), progress(2)])))
    assert (ok["verdict"], ok["evidence"]) == ("continuous", "progress_and_response")  # one value after: the step before decides


def test_fractional_progress(capture, analyze):
    b = boundary(analyze(resumed(capture, [progress(0.5), progress(0.75), result()], before=[progress(0.0), progress(0.25)])))
    assert (b["verdict"], b["evidence"]) == ("continuous", "progress_and_response")
    assert "from 0.25 to 0.75" in b["reason"]


@pytest.mark.parametrize("name", ["real-python-resume-uuid", "real-ts-resume"])
@pytest.mark.parametrize("fmt", ["jsonl", "har", "pcap"])
def test_real_healthy_opaque_resumes(name, fmt, monkeypatch):
    """Recorded with the python SDK's uuid store and the typescript SDK's example store: the first reconnect of
    each is healthy (sample_logs/README.md) and is proven by progress and response, in every format."""
    monkeypatch.chdir(ROOT)
    b = pipeline.run([f"sample_logs/{name}.{fmt}"]).document["boundaries"][0]
    assert (b["verdict"], b["evidence"]) == ("continuous", "progress_and_response"), b["reason"]


def test_a_log_at_every_step_must_be_in_the_cut_step_too(capture, analyze):
    """A tool that logs at every step: the replay that drops the log of the step the reconnect cut is caught,
    although every progress value arrives (real-python-uuid-drops-log, below, recorded)."""
    before = [progress(1), log(1), progress(2)]
    healthy = boundary(analyze(resumed(capture, [log(2), progress(3), log(3), progress(4), log(4), progress(5), log(5), result()], before=before)))
    assert (healthy["verdict"], healthy["evidence"]) == ("continuous", "progress_and_response")
    dropped = boundary(analyze(resumed(capture.__class__(), [progress(3), log(3), progress(4), log(4), progress(5), log(5), result()], before=before)))
    assert (dropped["verdict"], dropped["rule_id"]) == ("unverifiable", "opaque_unproven")
    assert "the step the reconnect cut lacks a notifications/message that every other step of the call carries" in dropped["reason"]


def test_a_jump_is_said_in_the_reason(capture, analyze):
    b = boundary(analyze(resumed(capture, [progress(3), progress(4), progress(5), result()])))
    assert b["verdict"] == "unverifiable" and "progress went from 1 to 3 on the reconnect where its step is 1" in b["reason"]


@pytest.mark.parametrize("name", ["real-python-uuid-lossy-replay", "real-python-uuid-restart", "real-python-uuid-drops-log"])
@pytest.mark.parametrize("fmt", ["jsonl", "har", "pcap"])
def test_real_opaque_losses_are_never_continuous(name, fmt, monkeypatch):
    """Recorded with uuid stores that really lost events at the resume (the server's own log says which;
    sample_logs/README.md): a skipped progress, a restarted server with an empty store, a dropped log."""
    monkeypatch.chdir(ROOT)
    doc = pipeline.run([f"sample_logs/{name}.{fmt}"]).document
    assert doc["boundaries"] and all(b["verdict"] != "continuous" for b in doc["boundaries"]), [(b["verdict"], b["reason"]) for b in doc["boundaries"]]
