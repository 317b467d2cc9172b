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
    return pipeline.run([f"sample_logs/{name}"]).document["calls_hit"]


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
