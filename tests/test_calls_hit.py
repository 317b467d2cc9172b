"""One story per call, first (issue [3/5] item 4): ``calls_hit`` -- every call a reconnect touched, its outcome, the
session and the reconnect that caused it -- in the JSON, the terminal and at the top of the report, the same calls in
the same order; and the Where? table shows a reconnect with a critical wrong result as critical."""
from __future__ import annotations

import html as htmllib
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from analyzer import pipeline, report, terminal
from analyzer.cli import main

ROOT = Path(__file__).resolve().parent.parent


def one(name: str) -> list[dict]:
    """The calls hit by the reconnects of one sample, the same whether the document's arrays are lists of dicts or
    frames (``columnar``, as ``analyze`` runs: calls_hit reads the findings of its rules alone, finding_rows.py)."""
    listed = pipeline.run([f"sample_logs/{name}"]).document["calls_hit"]
    assert pipeline.run([f"sample_logs/{name}"], columnar=True).document["calls_hit"] == listed
    return listed


@pytest.fixture(autouse=True)
def _cwd(monkeypatch):
    monkeypatch.chdir(ROOT)


@pytest.mark.parametrize("name, call, outcome", [
    # each against the recording's client log (sample_logs/recording/**/client-logs/)
    ("real-python-replica-failover.jsonl", "tools/call slow_count (id 5)", "another_result"),    # "sum=5"
    ("real-ts-client-replica-failover.pcap", "tools/call slow_count (id 4)", "never_completed"),  # timed out
    ("real-ts-client-resumption-token.har", "the application's resume of tools/call slow_count (id 4), as id 5 (not on the wire)",
     "another_result"),
    ("real-python-stale-cursor.jsonl", "tools/call slow_count (id 2)", "delivered_twice"),        # progress 4, 5, 6 twice
    ("real-python-uuid-skip-two.jsonl", "tools/call slow_count (id 2)", "events_lost"),           # 4, 5 never came
    ("real-python-uuid-healthy-regular.jsonl", "tools/call slow_count (id 2)", "own_result"),
    ("synthetic/stateless_reissue.jsonl", "tools/call charge_card", "ran_twice"),
])
def test_each_call_gets_its_outcome(name, call, outcome):
    hit = one(name)
    assert [(c["call"], c["outcome"]) for c in hit if c["call"] == call] == [(call, outcome)], hit


def test_a_call_with_two_reconnects_keeps_its_worst_story():
    """real-ts-client-cut-twice: the first resume continuous, the second lost an event: one row, events_lost, naming
    the second reconnect."""
    doc = pipeline.run(["sample_logs/real-ts-client-cut-twice.jsonl"]).document
    (c,) = doc["calls_hit"]
    assert c["outcome"] == "events_lost" and c["reconnect"] == doc["boundaries"][1]["boundary_id"]


def test_a_call_hit_alike_by_several_reconnects_says_how_many_and_which():
    """real-go-client-replica-failover: both resumes of slow_count (id 4) delivered events twice (2, then 1: the client
    log shows them).  The row names the first reconnect and its detail the second and the total; before, the second
    reconnect and its event were not in the row at all."""
    doc = pipeline.run(["sample_logs/real-go-client-replica-failover.jsonl"]).document
    first, second = (b["boundary_id"] for b in doc["boundaries"] if b["call"] == "tools/call slow_count (id 4)")
    (c,) = [c for c in doc["calls_hit"] if c["call"] == "tools/call slow_count (id 4)"]
    assert (c["outcome"], c["reconnect"]) == ("delivered_twice", first)
    assert c["detail"] == f"2 event(s) twice (replay_reset); the same outcome at 1 more reconnect(s): {second}; 3 event(s) twice in all"


def test_many_reconnects_alike_are_counted_and_the_first_few_named():
    doc = pipeline.run(["sample_logs/real-python-resurrection-loop.jsonl"]).document
    (c,) = [c for c in doc["calls_hit"] if c["call"] == "tools/call slow_count (id 2)"]
    named = [b["boundary_id"] for b in doc["boundaries"] if b["call"] == c["call"]]
    assert len(named) == 9 and c["reconnect"] == named[0]
    assert c["detail"].endswith(f"the same outcome at 8 more reconnect(s): {', '.join(named[1:4])} and 5 more"), c["detail"]


def test_one_recording_read_in_two_formats_counts_each_reconnect_once():
    """The JSONL and the HAR of one recording in one run give the same reconnects (the same names): the total is
    that of one, not twice it."""
    doc = pipeline.run(["sample_logs/real-go-client-replica-failover.jsonl", "sample_logs/real-go-client-replica-failover.har"]).document
    one = pipeline.run(["sample_logs/real-go-client-replica-failover.jsonl"]).document
    (c,) = [c for c in doc["calls_hit"] if c["call"] == "tools/call slow_count (id 4)"]
    (alone,) = [c for c in one["calls_hit"] if c["call"] == "tools/call slow_count (id 4)"]
    assert c == alone and c["detail"].endswith("; 3 event(s) twice in all"), c


def test_terminal_json_and_report_list_the_same_calls_in_the_same_order():
    doc = pipeline.run(["sample_logs"]).document
    hit = doc["calls_hit"]
    assert len(hit) > 20 and [c["outcome"] for c in hit] == sorted((c["outcome"] for c in hit),
                                                                   key=lambda o: ["another_result", "ran_twice", "another_result_or_never_completed",
                                                                                  "never_completed", "delivered_twice", "events_lost",
                                                                                  "own_result"].index(o))
    text = terminal.summary_text(doc)
    shown = [line for line in text.splitlines() if line.startswith("  ") and " at " in line and ": " in line][: terminal.SHOWN_CALLS]
    assert [line.split(" at ")[0].strip() for line in shown] == [c["call"] for c in hit[: terminal.SHOWN_CALLS]]
    page = report.render(doc)
    table = page[page.index('id="calls-hit"'):]
    table = table[: table.index("</table>")]
    rows = [htmllib.unescape(m) for m in re.findall(r'<th scope="row" class="wrap">(.*?)</th>', table)]
    assert rows == [c["call"] for c in hit][:10]  # the first ten in view, the others folded below in the same order
    rest = page[page.index('<details class="more-calls">'):]
    rest = rest[: rest.index("</details>")]
    assert f"{len(hit) - 10} more calls" in rest
    assert [htmllib.unescape(m) for m in re.findall(r'<th scope="row" class="wrap">(.*?)</th>', rest)] == [c["call"] for c in hit][10:50]
    # at the top: before the summary's "When?", "Where?" and the findings
    assert page.index('id="calls-hit"') < page.index('id="sum-when"') < page.index('id="sum-where"')


def test_the_store_gives_the_same_calls_hit(tmp_path):
    one_pass = pipeline.run(["sample_logs/real-python-stale-cursor.jsonl", "sample_logs/real-ts-client-replica-failover.jsonl"]).document
    out = tmp_path / "f.json"
    r = CliRunner().invoke(main, ["analyze", "sample_logs/real-python-stale-cursor.jsonl", "sample_logs/real-ts-client-replica-failover.jsonl",
                                  "--store", str(tmp_path / "st"), "--json", str(out), "-q"])
    assert r.exit_code == 1, r.output
    assert json.loads(out.read_text())["calls_hit"] == one_pass["calls_hit"]


def test_where_shows_a_reconnect_with_a_wrong_result_as_critical():
    """real-python-replica-failover: the verdict (replay_reset) is an error, its wrong result is critical: the Where?
    row says critical (it said error)."""
    doc = pipeline.run(["sample_logs/real-python-replica-failover.jsonl"]).document
    (b,) = doc["boundaries"]
    assert b["severity"] != "critical" and any(f["severity"] == "critical" and f["boundary"] == b["boundary_id"] for f in doc["findings"])
    page = report.render(doc)
    where = page[page.index('id="sum-where"'):]
    row = where[where.index(b["boundary_id"]):]
    row = row[: row.index("</tr>")]
    assert ">critical<" in row, row
