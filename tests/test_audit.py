"""Incremental audits (``analyze --store STORE --audit NAME``, analyzer/scale/audits.py): late captures judged
the night they arrive, nothing re-judged that was judged, nothing recorded that was not judged (kill -9 before
the commit, two audits racing), a failing input held until its finding is accepted, damage said.

Subprocesses run the real CLI where a process must die or pause; every wait is bounded and every child killed
in ``finally``.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from analyzer.cli import main
from analyzer.scale import audits, store
from analyzer.scale.store_commit import KILL_ENV, PAUSE_ENV, RELEASE_ENV

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_logs"
SYN = SAMPLES / "synthetic"
DENSE = SAMPLES / "real-python-resume-dense.jsonl"  # 2026-12-02, one session, continuous resumes (a warning)
SHARED = SAMPLES / "real-python-shared-store.jsonl"  # 2026-12-03, two sessions
GAP = SYN / "gap.jsonl"  # 2026-11-13, one session with a critical gap
SCHEMA = json.loads((ROOT / "schemas" / "findings.schema.json").read_text())
TIMEOUT = 120


def analyze(st: Path, *args: str) -> tuple[int, dict, str]:
    """``analyze --store st --audit nightly ARGS --json -``: exit code, document, stderr."""
    r = CliRunner().invoke(main, ["analyze", "--store", str(st), "--audit", "nightly", *args, "--json", "-"])
    assert r.exit_code in (0, 1), r.output
    doc = json.loads(r.stdout[: r.stdout.rindex("}") + 1])
    jsonschema.validate(doc, SCHEMA)
    return r.exit_code, doc, r.stderr


def ingest(st: Path, *paths: Path) -> None:
    r = CliRunner().invoke(main, ["ingest", *map(str, paths), "--store", str(st), "-q"])
    assert r.exit_code == 0, r.output


def sids(doc: dict) -> set[str]:
    return {s["session_id"] for s in doc["sessions"]}


def session_ids_of(path: Path) -> set[str]:
    from analyzer import pipeline

    return {s["session_id"] for s in pipeline.run([str(path)]).document["sessions"]}


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "from analyzer.cli import main; main()", *args], cwd=ROOT,
                          env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=TIMEOUT)


def popen(*args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "from analyzer.cli import main; main()", *args], cwd=ROOT,
                            env={**os.environ, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(path: Path, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def test_late_captures_are_judged_the_night_they_arrive_and_nothing_twice(tmp_path):
    st = tmp_path / "st"
    ingest(st, DENSE)
    code, doc, _ = analyze(st, "--fail-on", "never")
    assert sids(doc) == session_ids_of(DENSE) and doc["summary"]["audit"] == {
        "name": "nightly", "inputs_new": 1, "inputs_judged_before": 0, "sessions": 1, "inputs_held": 0, "inputs_released": 0}
    # night 2: a capture of three weeks earlier arrives; a window counted back from the clock would never judge it
    ingest(st, GAP)
    code, doc, _ = analyze(st, "--fail-on", "never")
    assert sids(doc) == session_ids_of(GAP)  # the late one, and not last night's again
    assert any(b["verdict"] == "gap" for b in doc["boundaries"])
    assert doc["summary"]["audit"]["inputs_new"] == 1 and doc["summary"]["audit"]["inputs_judged_before"] == 1
    # night 3: nothing new: nothing judged, exit 0, and the document says so
    code, doc, _ = analyze(st, "--fail-on", "never")
    assert code == 0 and doc["sessions"] == [] and doc["summary"]["boundaries"] == 0
    assert doc["summary"]["audit"]["inputs_new"] == 0 and doc["summary"]["audit"]["inputs_judged_before"] == 2


def test_a_new_input_brings_its_sessions_whole_from_older_inputs(tmp_path):
    """Two captures of one incident (the proxy log and the pcap of the same traffic) arriving on two nights: the
    second night judges the session with both, as a run over both files does."""
    st = tmp_path / "st"
    ingest(st, SAMPLES / "real-python-resume-dense.jsonl")
    analyze(st, "--fail-on", "never")
    ingest(st, SAMPLES / "real-python-resume-dense.pcap")
    _, doc, _ = analyze(st, "--fail-on", "never")
    assert {i["path"] for i in doc["inputs"]} == {str(SAMPLES / "real-python-resume-dense.jsonl"), str(SAMPLES / "real-python-resume-dense.pcap")}
    assert sids(doc) == session_ids_of(DENSE)


def test_a_failing_input_is_judged_again_until_its_finding_is_accepted(tmp_path):
    st, base, tonight = tmp_path / "st", tmp_path / "accepted.json", tmp_path / "tonight.json"
    ingest(st, GAP, DENSE)
    for night in (1, 2):  # not accepted: red every night, never green by itself
        r = CliRunner().invoke(main, ["analyze", "--store", str(st), "--audit", "nightly", "--baseline", str(base), "--json", str(tonight)])
        assert r.exit_code == 1, (night, r.output)
        doc = json.loads(tonight.read_text())
        assert sids(doc) == (session_ids_of(GAP) | session_ids_of(DENSE) if night == 1 else session_ids_of(GAP))
        assert "held for new findings" in r.output
    r = CliRunner().invoke(main, ["accept", str(tonight), "--baseline", str(base)])
    assert r.exit_code == 0 and "1 finding(s)" in r.stdout, r.output
    r = CliRunner().invoke(main, ["analyze", "--store", str(st), "--audit", "nightly", "--baseline", str(base), "--json", str(tonight)])
    assert r.exit_code == 0, r.output  # accepted: recorded without judging it again
    doc = json.loads(tonight.read_text())
    assert doc["sessions"] == [] and doc["summary"]["audit"]["inputs_released"] == 1 and doc["summary"]["audit"]["inputs_new"] == 0
    assert "1 of them held before, their findings accepted since" in r.output
    assert set(audits.read(st, "nightly").inputs) == set(store.manifest(st)["sha256"].to_list())
    _, doc, _ = analyze(st, "--baseline", str(base))
    assert doc["sessions"] == [] and doc["summary"]["audit"]["inputs_released"] == 0


def test_a_held_input_without_a_baseline_is_judged_every_run(tmp_path):
    st = tmp_path / "st"
    ingest(st, GAP)
    for _ in range(2):
        code, doc, _ = analyze(st)
        assert code == 1 and sids(doc) == session_ids_of(GAP) and doc["summary"]["audit"]["inputs_held"] == 1
    assert audits.read(st, "nightly").inputs == {} and len(audits.read(st, "nightly").held) == 1


@pytest.mark.parametrize("point", ["audit_before_commit", "audit_merged"])
def test_kill_9_between_judging_and_the_commit_rejudges_and_never_skips(tmp_path, point):
    st, out = tmp_path / "st", tmp_path / "night.json"
    ingest(st, DENSE, SHARED)
    r = cli("analyze", "--store", str(st), "--audit", "nightly", "--fail-on", "never", "--json", str(out), env={KILL_ENV: point})
    assert r.returncode == -signal.SIGKILL, r.stderr
    judged = json.loads(out.read_text())  # the outputs were written before the commit
    assert sids(judged) == session_ids_of(DENSE) | session_ids_of(SHARED)
    assert audits.read(st, "nightly").inputs == {}  # nothing recorded
    _, doc, _ = analyze(st, "--fail-on", "never")
    assert sids(doc) == sids(judged)  # judged again, in full
    _, doc, _ = analyze(st, "--fail-on", "never")
    assert doc["sessions"] == []


def test_two_audits_racing_lose_neither_commit(tmp_path):
    """The first audit pins its snapshot and judges, then waits before its commit; an ingest adds an input and a
    second audit judges and commits; the first commits.  The ledger holds every input; a third run judges none."""
    st, release = tmp_path / "st", tmp_path / "release"
    ingest(st, DENSE)
    first = popen("analyze", "--store", str(st), "--audit", "nightly", "--fail-on", "never", "--json", str(tmp_path / "a.json"),
                  env={PAUSE_ENV: "audit_before_commit", RELEASE_ENV: str(release)})
    try:
        wait_for(Path(str(release) + ".waiting"))
        ingest(st, SHARED)
        second = cli("analyze", "--store", str(st), "--audit", "nightly", "--fail-on", "never", "--json", str(tmp_path / "b.json"))
        assert second.returncode == 0, second.stderr
        release.touch()
        _, err = first.communicate(timeout=TIMEOUT)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(timeout=10)
    assert first.returncode == 0, err
    assert sids(json.loads((tmp_path / "a.json").read_text())) == session_ids_of(DENSE)  # its snapshot: before the ingest
    assert sids(json.loads((tmp_path / "b.json").read_text())) == session_ids_of(DENSE) | session_ids_of(SHARED)
    assert set(audits.read(st, "nightly").inputs) == set(store.manifest(st)["sha256"].to_list())
    _, doc, _ = analyze(st, "--fail-on", "never")
    assert doc["sessions"] == [] and doc["summary"]["audit"]["inputs_judged_before"] == 2


def test_audits_of_other_names_keep_their_own_ledger(tmp_path):
    st = tmp_path / "st"
    ingest(st, DENSE)
    analyze(st, "--fail-on", "never")
    r = CliRunner().invoke(main, ["analyze", "--store", str(st), "--audit", "weekly", "--fail-on", "never", "--json", "-", "-q"])
    assert r.exit_code == 0 and sids(json.loads(r.stdout)) == session_ids_of(DENSE)


def test_a_damaged_new_input_fails_the_night_it_arrives(tmp_path):
    st = tmp_path / "st"
    ingest(st, DENSE)
    analyze(st, "--fail-on", "never")
    bad = tmp_path / "cut.jsonl"  # a clean capture whose last line was cut while written
    bad.write_text((SYN / "continuous.jsonl").read_text() + '{"kind":"request","ts":"2026-12-04T00:00:00Z","conn":"c1","method":"GET"\n')
    ingest(st, bad)
    code, doc, _ = analyze(st)
    assert not [f for f in doc["findings"] if f["severity"] in ("critical", "error")]
    assert code == 1 and doc["summary"]["anomalies_by_severity"]["error"] >= 1
    assert any(i["path"] == str(bad) and i["rejected"] == 1 for i in doc["inputs"])


@pytest.mark.parametrize("damage", ["truncated", "rows changed"])
def test_a_damaged_ledger_is_an_error_naming_the_fix(tmp_path, damage):
    """Never read as "nothing judged yet" (the archive judged again) nor "all judged" (new inputs skipped)."""
    import pyarrow.parquet as pq

    st = tmp_path / "st"
    ingest(st, DENSE)
    analyze(st, "--fail-on", "never")
    ledger = st / audits.ledger_path("nightly")
    if damage == "truncated":
        ledger.write_bytes(ledger.read_bytes()[:-40])
    else:  # a valid Parquet file whose rows are not the ones its checksum was made of
        import pyarrow as pa

        table = pq.read_table(ledger)
        rows = table.to_pylist()
        rows[0]["sha256"] = "0" * 64
        pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), ledger)
    r = CliRunner().invoke(main, ["analyze", "--store", str(st), "--audit", "nightly", "--json", str(tmp_path / "x.json")])
    assert r.exit_code == 2 and "audit ledger is damaged" in r.stderr and "move it aside" in r.stderr, r.output
    assert "Traceback" not in r.output and not (tmp_path / "x.json").exists()


@pytest.mark.parametrize("args, says", [
    (["analyze", str(DENSE), "--audit", "nightly"], "--audit records what it judged in a store"),
    (["analyze", "--store", "ST", "--audit", "nightly", "--since", "24h"], "drop --since/--until/--session"),
    (["analyze", "--store", "ST", "--audit", "nightly", "--partitions", "2"], "--audit runs with --engine local and one partition"),
    (["analyze", "--store", "ST", "--audit", "../x"], "give a name of letters, digits"),
])
def test_audit_usage_errors(tmp_path, args, says):
    r = CliRunner().invoke(main, [a.replace("ST", str(tmp_path / "st")) for a in args])
    assert r.exit_code == 2 and says in r.stderr, r.output


def test_accept_keeps_what_a_narrowed_run_did_not_judge(tmp_path):
    """accept after an incremental run replaces the findings of the sessions it judged and keeps the others'."""
    st, base, tonight = tmp_path / "st", tmp_path / "accepted.json", tmp_path / "tonight.json"
    ingest(st, DENSE)
    CliRunner().invoke(main, ["analyze", "--store", str(st), "--audit", "nightly", "--fail-on", "never", "--json", str(tonight)])
    assert CliRunner().invoke(main, ["accept", str(tonight), "--baseline", str(base)]).exit_code == 0
    first = {f["fingerprint"] for f in json.loads(base.read_text())["findings"]}
    assert first  # dense has a warning
    ingest(st, GAP)
    r = CliRunner().invoke(main, ["analyze", "--store", str(st), "--audit", "nightly", "--baseline", str(base), "--json", str(tonight)])
    doc = json.loads(tonight.read_text())
    assert r.exit_code == 1 and doc["summary"]["baseline"]["gone"] == 0 and doc["summary"]["baseline"]["not_judged"] == len(first)
    r = CliRunner().invoke(main, ["accept", str(tonight), "--baseline", str(base)])
    assert r.exit_code == 0 and f"{len(first)} kept from sessions that run did not judge" in r.stdout, r.output
    assert first < {f["fingerprint"] for f in json.loads(base.read_text())["findings"]}


def test_a_missing_baseline_is_a_first_run(tmp_path):
    out = tmp_path / "tonight.json"
    r = CliRunner().invoke(main, ["analyze", str(GAP), "--baseline", str(tmp_path / "accepted.json"), "--json", str(out)])
    assert r.exit_code == 1 and "does not exist yet (a first run?)" in r.stderr
    assert f"mcp-sse-audit accept {out} --baseline {tmp_path / 'accepted.json'}" in r.stderr
    doc = json.loads(out.read_text())
    jsonschema.validate(doc, SCHEMA)
    assert doc["summary"]["baseline"]["missing"] is True and doc["summary"]["baseline"]["new"] == len(doc["findings"]) > 0
    assert not (tmp_path / "accepted.json").exists()  # analyze never writes the baseline: accept does


def test_accept_refuses_what_is_not_a_findings_document(tmp_path):
    p = tmp_path / "x.json"
    p.write_text("[1, 2]")
    r = CliRunner().invoke(main, ["accept", str(p), "--baseline", str(tmp_path / "b.json")])
    assert r.exit_code == 2 and "not a findings document of mcp-sse-audit" in r.stderr and not (tmp_path / "b.json").exists()


def test_json_lines_records_stay_one_line_for_every_line_reader(tmp_path):
    """U+2028/U+2029/U+0085 (and the other C1 controls) are written escaped into --json-lines, in memory and
    through a store: str.splitlines, JavaScript and 8-bit terminals take them raw for line ends or commands."""
    src = tmp_path / "odd.jsonl"
    src.write_text(GAP.read_text().replace('notifications/message', 'notifications/message\\u2028\\u2029\\u0085\\u009b'))
    assert "notifications/message" in GAP.read_text()
    for extra in ([], ["--store", str(tmp_path / "store")]):
        out = tmp_path / "f.ndjson"
        r = CliRunner().invoke(main, ["analyze", str(src), *extra, "--json-lines", str(out), "-q"])
        assert r.exit_code == 1, r.output
        text = out.read_text()
        assert "notifications/message\\u2028\\u2029\\u0085\\u009b" in text, extra  # the event data is in the records, escaped
        assert not any(c in text for c in "\u2028\u2029\x85\x9b"), extra
        lines = text.splitlines()
        assert lines == text.split("\n")[:-1]
        assert all(isinstance(json.loads(line), dict) for line in lines)
        assert "notifications/message\u2028\u2029\x85\x9b" in json.dumps([json.loads(line) for line in lines], ensure_ascii=False)  # same values


def test_a_json_lines_baseline_with_unicode_line_separators_reads_back(tmp_path):
    """U+2028/U+2029/U+0085 inside a message are not line ends: the tool reads its own JSON Lines back."""
    src = tmp_path / "odd.jsonl"
    text = GAP.read_text().replace('"notifications/message"', '"notifications/message\\u2028\\u2029\\u0085"')
    src.write_text(text)
    out = tmp_path / "f.ndjson"
    r = CliRunner().invoke(main, ["analyze", str(src), "--json-lines", str(out), "-q"])
    assert r.exit_code == 1, r.output
    r = CliRunner().invoke(main, ["analyze", str(src), "--baseline", str(out), "--json", "-", "-q"])
    assert r.exit_code == 0, r.output
