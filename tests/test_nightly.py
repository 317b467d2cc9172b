"""The README's nightly cron block, word for word, for three nights on a temporary store.

Night 1 has no baseline yet (a first run: every finding new, the outputs written, the accept step makes the
baseline); night 2 brings captures of earlier days, late, as archives do (judged that night, whatever their
times); night 3 brings nothing (nothing judged, exit 0).  Only the paths are replaced (the archive, the state
folder, the reports folder) and ``$(date +%F)`` by the night's date.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_logs"
SCHEMA = json.loads((ROOT / "schemas" / "findings.schema.json").read_text())
NIGHTS = {  # captures copied into the archive before each night, and what the night must show
    "2026-12-03": ["real-python-resume-dense.jsonl", "synthetic/gap.jsonl"],
    "2026-12-04": ["real-python-shared-store.jsonl", "synthetic/replay_reset.jsonl"],  # 2026-12-03 and 2026-11-13: late
    "2026-12-05": [],
}


def cron_block() -> tuple[list[str], str]:
    """The README's cron block: its commands (continuation lines joined) and the accept step of its comment."""
    text = (ROOT / "README.md").read_text()
    block = re.search(r"<!-- cron:start -->\n```sh\n(.*?)```\n<!-- cron:end -->", text, re.S)
    assert block, "README.md has no cron block between <!-- cron:start --> and <!-- cron:end -->"
    commands, accept = [], None
    for line in block.group(1).replace("\\\n", " ").splitlines():
        line = line.strip()
        if line.startswith("#"):
            step = re.match(r"#\s*(mcp-sse-audit accept .*)", line)
            accept = step.group(1) if step else accept
        elif line:
            commands.append(line)
    assert accept, "the cron block names no accept step"
    return commands, accept


def localize(cmd: str, tmp: Path, night: str) -> str:
    return (cmd.replace("/archive/mcp/", f"{tmp}/archive/").replace("/var/lib/mcp-audit", f"{tmp}/state")
            .replace("/srv/reports", f"{tmp}/reports").replace("/var/lib/node_exporter/textfile", f"{tmp}/textfile")
            .replace("$(date +%F)", night))


def _metrics(text: str) -> dict[str, float]:
    """The textfile as node_exporter's parser reads it: OpenMetrics families, each sample summed over its labels."""
    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    sums: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            sums[sample.name] = sums.get(sample.name, 0) + sample.value
    return sums


def sh(cmd: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(["bash", "-c", cmd], env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def nights(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("nightly")
    for d in ("archive", "state", "reports", "textfile"):
        (tmp / d).mkdir()
    commands, accept = cron_block()
    out = {}
    for night, files in NIGHTS.items():
        for name in files:
            shutil.copy(SAMPLES / name, tmp / "archive" / Path(name).name)
        runs = [sh(localize(c, tmp, night)) for c in commands]
        doc = json.loads((tmp / "state" / "tonight.json").read_text())
        report = (tmp / "reports" / f"mcp-{night}.html").read_text()
        junit = (tmp / "state" / "tonight.xml").read_text()
        metrics = _metrics((tmp / "textfile" / "mcp_sse_audit.prom").read_text())
        accepted = sh(localize(accept, tmp, night))
        out[night] = {"runs": runs, "doc": doc, "report": report, "junit": junit, "metrics": metrics, "accepted": accepted}
    return out


def test_night_1_without_a_baseline_judges_everything_and_says_how_to_accept(nights):
    n = nights["2026-12-03"]
    ingest, analyze = n["runs"]
    assert ingest.returncode == 0, ingest.stderr
    assert analyze.returncode == 1, analyze.stderr  # the gap is critical and new
    assert "does not exist yet (a first run?)" in analyze.stderr and "mcp-sse-audit accept" in analyze.stderr
    doc = n["doc"]
    jsonschema.validate(doc, SCHEMA)
    assert doc["summary"]["audit"]["inputs_new"] == 2 and doc["summary"]["baseline"]["missing"] is True
    assert doc["summary"]["baseline"]["new"] == len(doc["findings"]) > 0
    assert any(b["verdict"] == "gap" for b in doc["boundaries"])
    assert n["accepted"].returncode == 0 and "created" in n["accepted"].stdout
    m = n["metrics"]
    assert m["mcp_sse_audit_reconnects"] == doc["summary"]["boundaries"] > 0
    assert m["mcp_sse_audit_findings_new"] == len(doc["findings"]) and m["mcp_sse_audit_exit_code"] == 1


def test_night_2_judges_the_late_captures_of_earlier_days(nights):
    n = nights["2026-12-04"]
    _, analyze = n["runs"]
    doc = n["doc"]
    jsonschema.validate(doc, SCHEMA)
    paths = {Path(i["path"]).name for i in doc["inputs"]}
    # the two late captures (2026-12-03 and 2026-11-13), and nothing of night 1: dense was recorded then, and the
    # gap's input (held by its critical finding) is recorded now that night 1's accept put the finding in the baseline
    assert paths == {"real-python-shared-store.jsonl", "replay_reset.jsonl"}
    assert doc["summary"]["audit"]["inputs_new"] == 2 and doc["summary"]["audit"]["inputs_released"] == 1
    assert any(b["verdict"] == "replay_reset" for b in doc["boundaries"])
    base = doc["summary"]["baseline"]
    assert base["new"] >= 1 and base["gone"] == 0 and base["not_judged"] >= 1 and "missing" not in base
    assert analyze.returncode == 1  # replay_reset is new and critical


def test_night_3_with_nothing_new_judges_nothing_and_passes(nights):
    n = nights["2026-12-05"]
    ingest, analyze = n["runs"]
    assert ingest.returncode == 0 and analyze.returncode == 0, analyze.stderr
    doc = n["doc"]
    # night 2's new finding was accepted after it: its input is recorded now, without being judged again
    assert doc["summary"]["audit"] == {"name": "nightly", "inputs_new": 0, "inputs_judged_before": 4, "sessions": 0,
                                       "inputs_held": 0, "inputs_released": 1}
    assert doc["summary"]["boundaries"] == 0 and doc["findings"] == []
    assert "<testsuites" in n["junit"]
    m = n["metrics"]  # and the monitoring sees a run that judged nothing, not a run that did not happen
    assert m["mcp_sse_audit_reconnects"] == 0 and m["mcp_sse_audit_findings_new"] == 0 and m["mcp_sse_audit_exit_code"] == 0
    assert m["mcp_sse_audit_run_end_timestamp_seconds"] > 0


def test_the_trend_of_night_3_covers_the_earlier_nights(nights):
    """Night 3 judged nothing, yet its report's trend shows the reconnects the audit judged on nights 1 and 2."""
    one, two = (nights[n]["doc"]["boundaries"] for n in ("2026-12-03", "2026-12-04"))
    assert not {b["session_id"] for b in one} & {b["session_id"] for b in two}  # night 2 judged none of night 1's again
    trend = nights["2026-12-05"]["doc"]["trend"]
    # (the reconnects are told apart by their names, the same in every run: analyzer/document/names.py)
    assert sum(d["judged"] for d in trend) == len(one) + len(two) > 0
    assert sum(d["events_lost"] for d in trend) == sum(b["lost_count"] for b in one + two)
    assert "Trend" in nights["2026-12-05"]["report"]
