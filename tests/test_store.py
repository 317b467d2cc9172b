"""The Parquet store: incremental ingest, lazy narrowed analysis, same findings as a direct run."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
from click.testing import CliRunner

from analyzer import pipeline
from analyzer.scale import store
from analyzer.cli import main

ROOT = Path(__file__).resolve().parent.parent
SYN = ROOT / "sample_logs" / "synthetic"


def body(doc):
    return json.dumps({k: doc[k] for k in ("sessions", "exchanges", "boundaries", "findings")}, sort_keys=True)


def test_store_gives_the_same_findings_as_reading_the_files(tmp_path):
    rep = store.ingest([str(SYN)], tmp_path / "st")
    assert rep.added and not rep.already
    tables, rows = store.load(tmp_path / "st")
    from_store = pipeline.analyze_tables(tables, rows, [], [], len(rows)).document
    direct = pipeline.run([str(SYN)]).document
    assert body(from_store) == body(direct)
    assert sorted(r["path"] for r in from_store["inputs"]) == sorted(r["path"] for r in direct["inputs"])


def test_second_run_parses_only_new_files(tmp_path, monkeypatch):
    archive = tmp_path / "archive"
    archive.mkdir()
    for name in ("gap.jsonl", "continuous.har"):
        shutil.copy(SYN / name, archive / name)
    first = store.ingest([str(archive)], tmp_path / "st")
    assert len(first.added) == 2
    shutil.copy(SYN / "replay_reset.jsonl", archive / "night-2.jsonl")
    shutil.copy(SYN / "gap.jsonl", archive / "gap-renamed.jsonl")  # same bytes under another name
    parsed = []
    real = pipeline.inputs.read_one
    monkeypatch.setattr(pipeline.inputs, "read_one", lambda p, *a, **k: parsed.append(Path(p).name) or real(p, *a, **k))
    second = store.ingest([str(archive)], tmp_path / "st")
    assert parsed == ["night-2.jsonl"]
    assert [Path(p).name for p in second.added] == ["night-2.jsonl"]
    assert sorted(Path(p).name for p in second.already) == ["continuous.har", "gap-renamed.jsonl", "gap.jsonl"]
    tables, rows = store.load(tmp_path / "st")
    assert len(rows) == 3


def test_session_and_time_narrowing_are_pushed_into_the_scan(tmp_path):
    store.ingest([str(SYN / "gap.jsonl"), str(SYN / "continuous.jsonl")], tmp_path / "st")
    gap_sid = pipeline.run([str(SYN / "gap.jsonl")]).document["sessions"][0]["session_id"]
    tables, rows = store.load(tmp_path / "st", sessions=(gap_sid,))
    doc = pipeline.analyze_tables(tables, rows, [], [], len(rows)).document
    assert {s["session_id"] for s in doc["sessions"]} == {gap_sid}
    assert [b["verdict"] for b in doc["boundaries"]] == ["gap"]
    from datetime import datetime, timezone

    late = datetime(2030, 1, 1, tzinfo=timezone.utc)
    tables, rows = store.load(tmp_path / "st", since=late)
    assert tables["exchanges"].num_rows == 0 and tables["events"].num_rows == 0


def test_cli_ingest_then_analyze_store(tmp_path):
    r = CliRunner().invoke(main, ["ingest", str(SYN / "gap.har"), "--store", str(tmp_path / "st")])
    assert r.exit_code == 0 and "stored 1 new input(s), 0 already" in r.stdout
    r = CliRunner().invoke(main, ["ingest", str(SYN / "gap.har"), "--store", str(tmp_path / "st")])
    assert "stored 0 new input(s), 1 already" in r.stdout
    r = CliRunner().invoke(main, ["analyze", "--store", str(tmp_path / "st"), "--json", "-", "-q"])
    assert r.exit_code == 1 and json.loads(r.stdout)["boundaries"][0]["verdict"] == "gap"


def test_cli_store_errors_are_one_line(tmp_path):
    r = CliRunner().invoke(main, ["analyze", "--store", str(tmp_path / "empty")])
    assert r.exit_code == 2 and "no mcp-sse-audit store here" in r.stderr and "Traceback" not in r.output
    r = CliRunner().invoke(main, ["analyze", "--session", "x", str(SYN / "gap.har")])
    assert r.exit_code == 2 and "add --store DIR" in r.stderr
    r = CliRunner().invoke(main, ["analyze"])
    assert r.exit_code == 2 and "give PATHs" in r.stderr


def test_ingest_streams_one_input_at_a_time(tmp_path, monkeypatch):
    """Each input is on disk (tables and manifest row) before the next one is read: memory holds one input."""
    st = tmp_path / "st"
    seen = []
    real = pipeline.inputs.read_one

    def spy(path, *a, **k):
        seen.append((Path(path).name, store.manifest(st).height if (st / store.MANIFEST).exists() else 0))
        return real(path, *a, **k)

    monkeypatch.setattr(pipeline.inputs, "read_one", spy)
    rep = store.ingest([str(SYN / "gap.jsonl"), str(SYN / "continuous.har"), str(SYN / "replay_reset.jsonl")], st)
    assert [n for _, n in seen] == [0, 1, 2]
    assert len(rep.added) == 3 and store.manifest(st).height == 3


def test_manifest_lists_every_part_with_its_bytes_rows_and_sha256(tmp_path):
    st = tmp_path / "st"
    store.ingest([str(SYN / "gap.jsonl"), str(SYN / "continuous.har")], st)
    man = store.manifest(st)
    assert man.height == 2
    for row in man.iter_rows(named=True):
        for t in store.TABLES:
            f = st / row[f"{t}_file"]
            assert f.parent.name == f"input={row['sha256']}" and f.parent.parent.name == t
            assert f.stat().st_size == row[f"{t}_bytes"] and store.file_sha256(f) == row[f"{t}_sha256"]
            assert pq.read_metadata(f).num_rows == row[f"{t}_rows"]
    assert pq.read_schema(st / store.MANIFEST).metadata[b"mcp_sse_audit_store"] == store.VERSION.encode()
