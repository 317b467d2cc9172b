"""History across captures: one incident, several inputs (issue [3/6] item 2)."""
from __future__ import annotations

import itertools
from pathlib import Path

from analyzer import pipeline

ROOT = Path(__file__).resolve().parent.parent
THREE = ROOT / "sample_logs" / "synthetic" / "three_captures"
FILES = {n: str(THREE / n) for n in ("client.har", "lb-proxy.jsonl", "server-a.jsonl")}


def verdicts(*names):
    doc = pipeline.run([FILES[n] for n in names]).document
    return doc, [b["verdict"] for b in doc["boundaries"]]


def test_no_single_capture_shows_the_loss():
    for name in FILES:
        _, got = verdicts(name)
        assert "gap" not in got, (name, got)


def test_client_and_proxy_views_alone_agree_it_looks_continuous():
    doc, got = verdicts("client.har", "lb-proxy.jsonl")
    assert got == ["continuous"]
    assert len(doc["boundaries"][0]["views"]) == 2  # one reconnect, seen by two captures


def test_server_log_with_the_proxy_view_proves_the_gap_and_names_its_capture():
    for names in (("lb-proxy.jsonl", "server-a.jsonl"), tuple(FILES)):
        doc, got = verdicts(*names)
        assert got == ["gap"], names
        b = doc["boundaries"][0]
        assert b["lost_event_ids"] == [str(i) for i in range(1042, 1051)]
        assert "server-a.jsonl" in b["reason"] and "ids were reused" in b["reason"]
        f = next(f for f in doc["findings"] if f["boundary"] == b["boundary_id"])
        assert any(e["source"].endswith("server-a.jsonl") for e in f["evidence"])
        assert f["severity"] == "critical"  # the client went on using the session


def test_all_three_name_every_capture_that_saw_the_reconnect():
    doc, _ = verdicts(*FILES)
    views = sorted(Path(v["source"]).name for v in doc["boundaries"][0]["views"])
    assert views == ["client.har", "lb-proxy.jsonl"]


def test_client_without_the_old_connection_cannot_be_tied_to_the_server_log():
    _, got = verdicts("client.har", "server-a.jsonl")
    assert got == ["continuous"]  # the client's capture starts after the old connection: nothing to match


def test_same_event_seen_in_two_captures_counts_once(capture, tmp_path):
    """The JSONL and HAR of one run are two views of the same traffic: one boundary, no duplicates."""
    syn = ROOT / "sample_logs" / "synthetic"
    doc = pipeline.run([str(syn / "gap.jsonl"), str(syn / "gap.har")]).document
    assert [b["verdict"] for b in doc["boundaries"]] == ["gap"]
    assert not [f for f in doc["findings"] if f["rule"] in ("duplicate_response", "digest_conflict", "replay_reset")]


def test_order_of_inputs_does_not_change_the_result():
    docs = [pipeline.run([FILES[n] for n in perm]).document for perm in itertools.permutations(FILES)]
    key = lambda d: [(b["verdict"], b["lost_event_ids"], b["handled_correctly"]) for b in d["boundaries"]]  # noqa: E731
    assert all(key(d) == key(docs[0]) for d in docs)
