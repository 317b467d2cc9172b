"""History across captures: one incident, several inputs (issue [3/6] item 2, issue #4).

sample_logs/synthetic/three_captures (sample_logs/README.md): the browser's HAR holds the
resume (Last-Event-ID 1041, answered by replica B with new events 1042-1046) and two
tools/call POSTs; the balancer node lb-1 carried the old GET (…1041) and tools/call id 1,
not the resume; replica A logged the old GET up to 1050.  Only the chain client ↔ lb-1
(tools/call id 1) ↔ replica A (the old GET) proves that A's 1042-1050 were lost.
"""
from __future__ import annotations

import hashlib
import itertools
from pathlib import Path

import polars as pl
import pytest

from analyzer import pipeline
from analyzer.signals import views

ROOT = Path(__file__).resolve().parent.parent
THREE = ROOT / "sample_logs" / "synthetic" / "three_captures"
FILES = {n: str(THREE / n) for n in ("client.har", "lb-proxy.jsonl", "server-a.jsonl")}


def verdicts(*names):
    doc = pipeline.run([FILES[n] for n in names]).document
    return doc, [b["verdict"] for b in doc["boundaries"]]


def resumes(doc):
    return [b["resumes"] and Path(b["resumes"]["source"]).name for b in doc["boundaries"]]


# what every capture and every pair yields, and why none of them is a gap
SUBSETS = {
    # the client's capture starts at the resume: 1041 -> 1042 looks continuous, and which
    # connection delivered 1041 is unknown
    ("client.har",): (["continuous"], [None], {"unknown_last_event_id"}),
    # the resume went through lb-2 and replica B: neither capture has a reconnect to judge
    ("lb-proxy.jsonl",): ([], [], set()),
    ("server-a.jsonl",): ([], [], set()),
    ("lb-proxy.jsonl", "server-a.jsonl"): ([], [], set()),
    # tools/call id 1 ties the client to lb-1, whose old GET delivered 1041: it is the resumed
    # connection, and from where lb-1 stood 1041 -> 1042 is continuous
    ("client.har", "lb-proxy.jsonl"): (["continuous"], ["lb-proxy.jsonl"], set()),
    # the client and replica A share no exchange: nothing ties the resume to A's old GET
    ("client.har", "server-a.jsonl"): (["continuous"], [None], {"unknown_last_event_id"}),
}


@pytest.mark.parametrize("names", list(SUBSETS), ids=" + ".join)
def test_no_capture_alone_and_no_pair_shows_the_loss(names):
    want_verdicts, want_resumes, want_rules = SUBSETS[names]
    doc, got = verdicts(*names)
    assert got == want_verdicts
    assert resumes(doc) == want_resumes
    assert {f["rule"] for f in doc["findings"]} == want_rules


def test_all_three_chained_prove_the_gap_and_name_the_capture_that_proved_it():
    doc, got = verdicts(*FILES)
    assert got == ["gap"]
    b = doc["boundaries"][0]
    assert Path(b["request"]["source"]).name == "client.har"
    assert resumes(doc) == ["lb-proxy.jsonl"]  # the resumed connection, seen only by lb-1
    assert [Path(v["source"]).name for v in b["views"]] == ["client.har"]  # only the client saw the reconnect
    assert b["lost_event_ids"] == [str(i) for i in range(1042, 1051)]
    assert "shown by " in b["reason"] and b["reason"].endswith("server-a.jsonl)") and "5 of their ids were reused" in b["reason"]
    f = next(f for f in doc["findings"] if f["boundary"] == b["boundary_id"])
    assert {Path(e["source"]).name for e in f["evidence"]} == set(FILES)
    assert f["severity"] == "critical"  # the client went on using the session (tools/call id 1)
    assert {f["rule"] for f in doc["findings"]} == {"gap"}


def test_same_session_id_without_a_shared_exchange_is_not_tied(tmp_path, monkeypatch):
    """An unrelated capture that happens to carry the same Mcp-Session-Id and an old GET that
    delivered 1041 (but no exchange the client's capture also has) never becomes its history."""
    monkeypatch.syspath_prepend(str(ROOT / "sample_logs"))
    import make_synthetic as ms

    sid = hashlib.md5(b"three_captures/1").hexdigest()
    other = [ms.get(sid, 1, events=[(str(i), ms.note(i)) for i in range(1036, 1051)])]
    ms.write_jsonl("other", other, tmp_path)
    doc = pipeline.run([FILES["client.har"], str(tmp_path / "other.jsonl")]).document
    assert [b["verdict"] for b in doc["boundaries"]] == ["continuous"]
    assert resumes(doc) == [None]
    assert len(doc["sessions"]) == 2


def test_incidents_are_connected_components_of_shared_exchanges():
    x = pl.DataFrame(
        {
            "session": ["har\x1fS", "lb\x1fS", "lb\x1fS", "a\x1fS", "other\x1fS", "solo\x1f"],
            "fp": ["post#0", "post#0", "get#0", "get#0", "get#1", None],
        }
    )
    got = dict(views.incidents(x).iter_rows())
    assert got["har\x1fS"] == got["lb\x1fS"] == got["a\x1fS"] == "a\x1fS"
    assert got["other\x1fS"] == "other\x1fS" and got["solo\x1f"] == "solo\x1f"
    # a long chain (every capture shares one exchange with the next) converges within the bound
    n = 3000
    chain = pl.DataFrame({"session": [f"s{i:05d}" for i in range(n) for _ in (0, 1)],
                          "fp": [f"f{i + k}" for i in range(n) for k in (0, 1)]})
    assert views.incidents(chain.sample(fraction=1.0, shuffle=True, seed=7))["incident"].unique().to_list() == ["s00000"]


def test_same_event_seen_in_two_captures_counts_once(capture, tmp_path):
    """The JSONL and HAR of one run are two views of the same traffic: one boundary, no duplicates."""
    syn = ROOT / "sample_logs" / "synthetic"
    doc = pipeline.run([str(syn / "gap.jsonl"), str(syn / "gap.har")]).document
    assert [b["verdict"] for b in doc["boundaries"]] == ["gap"]
    assert not [f for f in doc["findings"] if f["rule"] in ("duplicate_response", "digest_conflict", "replay_reset")]


def test_order_of_inputs_does_not_change_the_result():
    docs = [pipeline.run([FILES[n] for n in perm]).document for perm in itertools.permutations(FILES)]
    key = lambda d: [  # noqa: E731
        (b["verdict"], b["lost_event_ids"], b["handled_correctly"], b["reason"], b["resumes"], b["views"]) for b in d["boundaries"]
    ]
    assert all(key(d) == key(docs[0]) for d in docs)


def test_many_reconnects_resuming_one_long_connection_cost_joins_linear_in_them(tmp_path, monkeypatch):
    """Fan-in (issue #40 item 5): one connection delivers N events; the client, which had all but the last ten, then
    retries N times from the same Last-Event-ID and gets an empty stream each time, so every reconnect resumes that
    one connection (bench/many_streams.py --fan-in).  Doubling N at most doubles the largest join (now 152 -> 302
    rows for 150 -> 300); the code before joined each reconnect with every event its resumed connection emitted
    (22,500 -> 90,000).  Every reconnect is still a gap of the same ten events."""
    import joins

    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import many_streams

    def run(n):
        path = tmp_path / f"fan-in-{n}.jsonl"
        many_streams.write_fan_in(n, path)
        return joins.largest_join(path, monkeypatch)

    (small, _), (large, doc) = run(150), run(300)
    assert doc["summary"]["boundaries"] == 300 and doc["summary"]["verdicts"]["gap"] == 300
    lost = [str(i) for i in range(291, 301)]
    assert all(b["lost_event_ids"] == lost and b["lost_count"] == 10 for b in doc["boundaries"])
    assert large <= 2.2 * small, f"largest join: {small} rows for 150 reconnects, {large} for 300"
