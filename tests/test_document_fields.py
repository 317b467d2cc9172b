"""What the document carries for the report (issue [4/6]): the requests a reconnect's stream still owed,
and per-event times, so the report reads answers instead of re-deriving them."""
from __future__ import annotations

from datetime import datetime
from pathlib import Path

import polars as pl
import pytest

from analyzer import pipeline
from analyzer.document import build

ROOT = Path(__file__).resolve().parent.parent
SYNTHETIC = ROOT / "sample_logs" / "synthetic"


@pytest.fixture(scope="module")
def doc() -> dict:
    return pipeline.run([str(SYNTHETIC)]).document


def _ts(s: str) -> datetime:
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


def test_owed_requests_are_unanswered_requests_of_the_resumed_stream(doc):
    by_id = {x["exchange_id"]: x for x in doc["exchanges"]}
    owed = [b for b in doc["boundaries"] if b["owed_requests"]]
    assert owed, "the synthetic samples have a reconnect whose stream still owed a response"
    unanswered = {f["exchange"] for f in doc["findings"] if f["rule"] == "request_unanswered"}
    for b in owed:
        for ref in b["owed_requests"]:
            x = by_id[ref]
            assert (x["session"], x["stream"]) == (b["session"], b["stream"])
            assert int(ref[1:]) < int(b["request_exchange"][1:]), "owed by a request made before the reconnect"
            assert x["content_type"] == "text/event-stream"
    # the cross-stream replay of the synthetic set: its stream owed tools/call id 6; a foreign answer came on it and the
    # client is not known, so the finding at the reconnect tells that call's story (both outcomes), not request_unanswered
    b = next(b for b in doc["boundaries"] if b["verdict"] == "cross_stream_replay")
    assert b["owed_requests"] and not set(b["owed_requests"]) & unanswered
    (told,) = [f for f in doc["findings"] if f["rule"] == "foreign_response_on_resume" and f["boundary"] == b["boundary_id"]]
    assert "tools/call other (id 6) never completed" in told["message"]
    other = [x for x in doc["boundaries"] if x["owed_requests"] and set(x["owed_requests"]) & unanswered]
    assert all(x["verdict"] != "continuous" for x in other)


def test_event_offsets_are_the_events_times(doc):
    timed = [x for x in doc["exchanges"] if x["event_offsets_ms"]]
    assert timed
    for x in timed:
        offs = x["event_offsets_ms"]
        visible = x["events"] - x["cut_off_events"]
        assert len(offs) == min(visible, build.EVENT_TIMES)
        assert offs == sorted(offs) and offs[0] >= 0
        if x["ended"]:
            assert offs[-1] <= (_ts(x["ended"]) - _ts(x["started"])).total_seconds() * 1000 + 1
    # the history sample: events 100 ms apart from the request, the last one cut off
    x = next(x for x in doc["exchanges"] if x["source"].endswith("history.jsonl") and x["cut_off_events"])
    assert x["event_offsets_ms"] == [100, 200, 300, 400, 500] and x["cut_off_offsets_ms"] == [600]


def test_har_has_no_event_times():
    d = pipeline.run([str(ROOT / "sample_logs" / "real-python-resume-dense.har")]).document
    assert all(x["event_offsets_ms"] is None for x in d["exchanges"])
    assert any(x["events"] for x in d["exchanges"])


def _offsets(events: dict, started: dict) -> dict:
    """build._event_offsets of a few events (gx, visible, ts as ms after 0) and their requests' starts."""
    from datetime import datetime, timedelta, timezone

    from analyzer.signals.streams import Frames

    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    at = [None if ms is None else t0 + timedelta(milliseconds=ms) for ms in events["ts"]]
    ev = pl.DataFrame({"gx": events["gx"], "visible": events["visible"], "ts": at}, schema_overrides={"ts": pl.Datetime("us", "UTC")})
    x = pl.DataFrame({"gx": list(started), "started": [t0 + timedelta(milliseconds=ms) for ms in started.values()]},
                     schema_overrides={"started": pl.Datetime("us", "UTC")})
    got = build._event_offsets(Frames(x, ev, None))
    return {gx: (vis, cut) for gx, vis, cut in got.iter_rows()}


def test_sampling_keeps_the_first_of_each_equal_run():
    n = 100
    got = _offsets({"gx": [7] * n, "visible": [True] * n, "ts": [10 * i + 5 for i in range(n)]}, {7: 5})[7][0]
    want = [10 * i for i in range(n) if i == 0 or (i * build.EVENT_TIMES) // n != ((i - 1) * build.EVENT_TIMES) // n]
    assert len(got) == build.EVENT_TIMES and got == want and got[0] == 0
    # the rows' order is the stream's (Frames): kept as it is, per connection and part
    few = _offsets({"gx": [1, 1, 2, 2, 3, 3], "visible": [True, True, True, False, True, True], "ts": [5, 3, 9, 12, 1, None]},
                   {1: 0, 2: 0, 3: 0, 4: 0})
    # connection 3 has an event without a time: no times at all (a partly timed list would misplace the rest);
    # connection 4 has no events
    assert few == {1: ([5, 3], None), 2: ([9], [12]), 3: (None, None), 4: (None, None)}


def test_sampling_when_seen_and_cut_off_events_alternate():
    """A part that is several runs of rows (seen and cut-off events interleaved): each part is sampled
    over its own events, in stream order, as the rule says (checked against the rule applied one event
    at a time)."""
    def rule(times):
        n = len(times)
        return [t for i, t in enumerate(times) if n <= build.EVENT_TIMES or i == 0
                or (i * build.EVENT_TIMES) // n != ((i - 1) * build.EVENT_TIMES) // n] or None

    visible = [i % 3 != 1 for i in range(250)] + [True, False, False, True]  # connection 8, then connection 9
    gx = [8] * 250 + [9] * 4
    ts = list(range(250)) + [1000, 1001, 1002, 1003]
    got = _offsets({"gx": gx, "visible": visible, "ts": ts}, {8: 0, 9: 1000})
    seen8 = [t for g, v, t in zip(gx, visible, ts) if g == 8 and v]
    cut8 = [t for g, v, t in zip(gx, visible, ts) if g == 8 and not v]
    assert got[8] == (rule(seen8), rule(cut8)) and len(got[8][0]) == build.EVENT_TIMES
    assert got[9] == ([0, 3], [1, 2])


def test_captures_of_one_run_are_one_incident_and_one_report_section():
    """The same run recorded as HAR, proxy JSONL, pcap and pcap.gz: four per-input sessions of one
    incident, and one section in the report that lists the four captures (issue [5/6], Sessions)."""
    from analyzer import report

    paths = sorted(str(p) for p in (ROOT / "sample_logs").glob("real-python-server-restart.*"))
    d = pipeline.run(paths).document
    sid = "5c12f625f21c40bbbd9707cc01b27c0e"
    mine = [s for s in d["sessions"] if s["session_id"] == sid]
    assert len(mine) == len(paths) == 4
    assert {s["incident"] for s in mine} == {mine[0]["session"]}
    html = report.render(d)
    sections = [m for m in html.split('<section class="session" ')[1:] if sid in m]
    assert len(sections) == 1 and "Seen by 4 captures" in sections[0]
    assert all(p in sections[0] for p in paths)
    # every reconnect of the four captures is on that one section's timeline
    assert sections[0].count('<g class="bmark ') == sum(1 for b in d["boundaries"] if b["session_id"] == sid)


def test_sessions_are_named_by_their_session_id(doc):
    """Names come from the Mcp-Session-Id (analyzer/document/names.py): the per-capture records of one id share
    its name (one entry of the report), different ids have different names, the traffic without an id is ``S0``
    in every capture; an incident (shared exchanges) is named by its first session, which has its own name."""
    from analyzer.document import names
    from analyzer.report.view import _merged_sessions

    by_incident = {}
    for s in doc["sessions"]:
        by_incident.setdefault(s["incident"], []).append(s)
    assert all(group[0]["session"] == inc for inc, group in by_incident.items())  # named by its first session
    name_of = {}
    for s in doc["sessions"]:
        assert name_of.setdefault(s["session_id"], s["session"]) == s["session"]
        assert s["session"] == (names.NO_SESSION if not s["session_id"] else "S" + names.digest(s["session_id"])[:names.SESSION_CHARS])
    assert len(set(name_of.values())) == len(name_of)
    entries = _merged_sessions(doc["sessions"])
    assert [e["session"] for e in entries] == list(dict.fromkeys(s["session"] for s in doc["sessions"]))
    assert len(entries) < len(doc["sessions"])


def test_sampling_of_random_layouts_follows_the_rule():
    """Connections of random sizes whose seen and cut-off events come in random runs (the sampled places are found
    per run, arithmetically): each part sampled as the rule applied one event at a time says."""
    import random

    def rule(times):
        n = len(times)
        return [t for i, t in enumerate(times) if n <= build.EVENT_TIMES or i == 0
                or (i * build.EVENT_TIMES) // n != ((i - 1) * build.EVENT_TIMES) // n] or None

    rnd = random.Random(42)
    gx, visible, ts = [], [], []
    for g in range(60):
        n = rnd.choice([0, 1, 2, 39, 40, 41, 79, 80, 81, 123, 400])
        flip = rnd.choice([0.0, 0.05, 0.5, 1.0])
        v = rnd.random() < 0.8
        for i in range(n):
            if rnd.random() < flip:
                v = not v
            gx.append(g), visible.append(v), ts.append(len(ts))
    got = _offsets({"gx": gx, "visible": visible, "ts": ts}, {g: 0 for g in range(60)})
    for g in range(60):
        seen = [t for a, v, t in zip(gx, visible, ts) if a == g and v]
        cut = [t for a, v, t in zip(gx, visible, ts) if a == g and not v]
        assert got[g] == (rule(seen), rule(cut)), g
