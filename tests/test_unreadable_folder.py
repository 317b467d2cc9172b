"""A folder that cannot be listed is lost input, never a silent skip (issue [3/5] item 2): a chmod-000 folder
holding a capture with a critical gap made `analyze` exit 0 "clean" and `ingest` exit 0."""
from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from analyzer.cli import main

ROOT = Path(__file__).resolve().parent.parent
GAP = ROOT / "sample_logs" / "synthetic" / "gap.jsonl"
CLEAN = ROOT / "sample_logs" / "synthetic" / "continuous.jsonl"


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """archive/ok/ holds a clean capture; archive/locked/ a capture with a gap, and cannot be listed. As root no
    permission bit stops a read, so the listing fails as it does for any other user: os.scandir raises."""
    (tmp_path / "archive" / "ok").mkdir(parents=True)
    (tmp_path / "archive" / "locked").mkdir()
    shutil.copy(CLEAN, tmp_path / "archive" / "ok" / CLEAN.name)
    shutil.copy(GAP, tmp_path / "archive" / "locked" / GAP.name)
    locked = str(tmp_path / "archive" / "locked")
    real = os.scandir

    def scandir(path="."):
        if os.fspath(path) == locked:
            raise PermissionError(errno.EACCES, "Permission denied", locked)
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    return tmp_path / "archive", locked


def test_analyze_names_the_folder_and_fails(folder, tmp_path):
    archive, locked = folder
    out = tmp_path / "out.json"
    r = CliRunner().invoke(main, ["analyze", str(archive), "--json", str(out)])
    assert r.exit_code == 1, r.stderr
    assert f"error: {locked}: a folder that cannot be listed (Permission denied)" in r.stderr
    doc = json.loads(out.read_text())
    assert [i["path"] for i in doc["inputs"] if i["error"]] == [locked]
    assert doc["summary"]["anomalies_by_severity"]["error"] == 1


def test_ingest_names_the_folder_and_exits_1(folder, tmp_path):
    archive, locked = folder
    r = CliRunner().invoke(main, ["ingest", str(archive), "--store", str(tmp_path / "store")])
    assert r.exit_code == 1, r.output
    assert locked in r.stderr and "1 unreadable" in r.stdout


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a chmod-000 folder; the fixture above covers it")
def test_a_real_chmod_000_folder(tmp_path):
    (tmp_path / "a" / "locked").mkdir(parents=True)
    shutil.copy(GAP, tmp_path / "a" / "locked" / GAP.name)
    os.chmod(tmp_path / "a" / "locked", 0)
    try:
        r = CliRunner().invoke(main, ["analyze", str(tmp_path / "a"), "--json", str(tmp_path / "o.json")])
    finally:
        os.chmod(tmp_path / "a" / "locked", 0o755)
    assert r.exit_code == 2 and "a folder that cannot be listed" in r.stderr  # nothing else was readable
