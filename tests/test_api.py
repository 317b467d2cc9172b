"""The Python API (issue 43): analyzer.audit() -> Audit, its frames' stable schemas, its outputs and exit code, the
README's notebook example, and --json-lines DIR/ read by one plain pl.read_ndjson per kind.

``python tests/test_api.py --write`` writes schemas/audit-frames.json from analyzer.SCHEMAS.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import analyzer  # noqa: E402
from analyzer.cli import main  # noqa: E402

README = ROOT / "README.md"
FRAMES_SCHEMA = ROOT / "schemas" / "audit-frames.json"
DOC_SCHEMA = json.loads((ROOT / "schemas" / "findings.schema.json").read_text())
SAMPLES = ROOT / "sample_logs"
ONE = str(SAMPLES / "real-python-replica-failover.jsonl")
EPOCH = "1764547200"


def frames_schema_text() -> str:
    out = {kind: {name: str(dtype) for name, dtype in schema.items()} for kind, schema in analyzer.SCHEMAS.items()}
    return json.dumps(out, indent=1) + "\n"


@pytest.fixture(scope="module")
def samples():
    return analyzer.audit(str(SAMPLES))


def test_public_names_are_the_api():
    assert sorted(analyzer.__all__) == ["Analysis", "Audit", "Limits", "SCHEMAS", "__version__", "audit"]
    for name in analyzer.__all__:
        assert getattr(analyzer, name) is not None
    with pytest.raises(AttributeError):
        analyzer._context  # noqa: B018 (no private name is handed on)
    # ``import analyzer`` loads no Polars: the command tunes the allocator before it does (analyzer/__main__.py)
    r = subprocess.run([sys.executable, "-c", "import sys, analyzer; print('polars' in sys.modules)"], cwd=ROOT,
                       capture_output=True, text=True, timeout=60, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert r.stdout.strip() == "False", r.stderr


def test_every_frame_has_its_documented_schema(samples):
    for kind, schema in analyzer.SCHEMAS.items():
        got = getattr(samples, kind)
        assert isinstance(got, pl.DataFrame) and dict(got.schema) == schema, kind
        assert got.height > 0, kind
    empty = analyzer.Audit({"summary": {}})
    for kind, schema in analyzer.SCHEMAS.items():
        assert dict(getattr(empty, kind).schema) == schema and getattr(empty, kind).height == 0, kind


def test_the_frames_are_the_columns_of_the_findings_json():
    """Each frame's columns are its array's in schemas/findings.schema.json (reconnects: without the events, which
    are the events frame)."""
    props = DOC_SCHEMA["properties"]
    events = ("events_before", "events_after", "cut_off_before")
    from analyzer.result import FIELDS

    for kind, field in FIELDS.items():
        want = set(props[field]["items"]["properties"]) - (set(events) if kind == "reconnects" else set())
        assert set(analyzer.SCHEMAS[kind]) == want, kind
    event = set(DOC_SCHEMA["$defs"]["event"]["properties"])
    assert set(analyzer.SCHEMAS["events"]) == event | {"reconnect", "session_id", "side"}


def test_schemas_folder_holds_the_frames_schema():
    assert FRAMES_SCHEMA.read_text() == frames_schema_text(), "run: python tests/test_api.py --write"


def test_frames_say_what_the_document_says(samples):
    doc = samples.document
    assert samples.findings["fingerprint"].to_list() == [f["fingerprint"] for f in doc["findings"]]
    assert samples.reconnects["verdict"].value_counts().sort("verdict").rows() == sorted(
        (v, n) for v, n in doc["summary"]["verdicts"].items() if n)
    assert samples.streams.height == doc["summary"]["exchanges"] and samples.sessions.height == doc["summary"]["sessions"]
    assert samples.findings["time"].dtype == pl.Datetime("us", "UTC") and samples.findings["time"].null_count() < samples.findings.height
    assert samples.events["side"].unique().sort().to_list() == ["after", "before", "cut_off_before"]


def test_outputs_and_exit_code_are_the_commands(tmp_path, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH)
    a = analyzer.audit(ONE)
    a.write_json(str(tmp_path / "api.json"))
    a.write_junit(str(tmp_path / "api.xml"), fail_on="warning")
    a.write_html(str(tmp_path / "api.html"))
    r = CliRunner().invoke(main, ["analyze", ONE, "--json", str(tmp_path / "cli.json"), "--junit", str(tmp_path / "cli.xml"),
                                  "--fail-on", "warning", "-q"])
    assert r.exit_code == 1 == a.exit_code(fail_on="warning")
    assert (tmp_path / "api.json").read_bytes() == (tmp_path / "cli.json").read_bytes()
    assert (tmp_path / "api.xml").read_bytes() == (tmp_path / "cli.xml").read_bytes()
    assert (tmp_path / "api.html").read_text().startswith("<!DOCTYPE html>")
    assert a.exit_code(fail_on="never") == 0
    # with the run's own findings as the baseline nothing is new: 0, and the Audit itself is left as it was
    assert a.exit_code(baseline=str(tmp_path / "cli.json")) == 0 and "baseline" not in a.summary
    assert a.with_baseline(str(tmp_path / "cli.json")).summary["baseline"]["new"] == 0


def test_nothing_readable_is_2_and_no_exception(tmp_path):
    bad = tmp_path / "x.jsonl"
    bad.write_text("not json\n")
    a = analyzer.audit([str(bad), str(tmp_path / "missing.har")])
    assert a.exit_code() == 2 and a.findings.height == 0 and a.summary["inputs_unreadable"] == 2
    with pytest.raises(ValueError, match="--partitions"):
        analyzer.audit(ONE, partitions=2)
    with pytest.raises(ValueError):
        analyzer.audit(ONE, since="2026-12-05", until="2026-12-01")


def test_a_store_gives_the_same_findings(tmp_path):
    st = tmp_path / "store"
    assert CliRunner().invoke(main, ["ingest", ONE, "--store", str(st), "-q"]).exit_code == 0
    a, b = analyzer.audit(str(st)), analyzer.audit([ONE])
    assert a.findings["fingerprint"].to_list() == b.findings["fingerprint"].to_list()
    assert analyzer.audit(str(st), partitions=2).findings["fingerprint"].to_list() == b.findings["fingerprint"].to_list()
    assert analyzer.audit(str(st), since="2030-01-01").reconnects.height == 0


def test_the_analysis_value_reaches_the_rules():
    path = str(SAMPLES / "real-python-resurrection-loop.jsonl")  # 9 reconnects of one stream within a minute
    assert "reconnect_storm" not in analyzer.audit(path).findings["rule"].to_list()
    tuned = analyzer.audit(path, analysis=analyzer.Analysis(reconnect_storm={"reconnects": 3}))
    assert tuned.findings.filter(pl.col("rule") == "reconnect_storm")["message"].str.starts_with("9 reconnects").to_list() == [True]


def test_json_lines_folder_reads_with_one_plain_read_ndjson_per_kind(tmp_path):
    """One file of every kind, read whole by a plain pl.read_ndjson, has no verdict column (the first 100 lines are
    exchanges); one file per kind has it on every boundary."""
    one, folder = tmp_path / "all.ndjson", tmp_path / "out/"
    for out in (str(one), str(folder) + "/"):
        r = CliRunner().invoke(main, ["analyze", str(SAMPLES), "--json-lines", out, "-q"])
        assert r.exit_code == 1, r.output
    assert "verdict" not in pl.read_ndjson(one).columns  # (what the issue found)
    files = sorted(p.name for p in folder.iterdir())
    assert files == sorted(f"{k}.ndjson" for k in ("summary", "inputs", "sessions", "exchanges", "boundaries", "findings", "anomalies"))
    b = pl.read_ndjson(folder / "boundaries.ndjson")
    whole = [json.loads(line) for line in one.read_text().splitlines()]
    assert b["verdict"].to_list() == [rec["verdict"] for rec in whole if rec["type"] == "boundary"]
    for kind, name in (("finding", "findings"), ("exchange", "exchanges"), ("session", "sessions"), ("anomaly", "anomalies")):
        assert pl.read_ndjson(folder / f"{name}.ndjson").height == sum(rec["type"] == kind for rec in whole), name
    # the same folder from the API
    a = analyzer.audit(str(SAMPLES))
    a.write_json_lines(str(tmp_path / "api") + "/")
    assert pl.read_ndjson(tmp_path / "api" / "boundaries.ndjson")["verdict"].to_list() == b["verdict"].to_list()


def test_readme_from_python_example_runs(tmp_path):
    text = README.read_text()
    block = text.split("<!-- from-python:start -->\n```python\n", 1)[1].split("```\n<!-- from-python:end -->", 1)[0]
    os.symlink(SAMPLES, tmp_path / "sample_logs")
    r = subprocess.run([sys.executable, "-c", block], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert r.returncode == 0, r.stderr
    assert "exit code: 1" in r.stdout and (tmp_path / "incident.html").exists()
    assert "gap" in r.stdout and "events_lost" in r.stdout


if __name__ == "__main__":
    if "--write" not in sys.argv:
        sys.exit(__doc__)
    FRAMES_SCHEMA.write_text(frames_schema_text())
    print(f"wrote {FRAMES_SCHEMA}")
