"""Partitioned analysis that writes as it goes (analyzer/scale/spill.py): the single pass's outputs, exactly."""
from __future__ import annotations

import json

import pytest

from analyzer.document import build as findings
from analyzer import pipeline
from analyzer.scale import spill, store
from conftest import EPOCH


@pytest.fixture
def filled(samples_store):
    """The samples' store, built once per session (tests/conftest.py); read only."""
    return samples_store


@pytest.mark.parametrize("n", [1, 3, 40])
def test_streamed_outputs_are_the_single_pass_outputs(filled, samples_single_pass, tmp_path, monkeypatch, n):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH)  # the shared single pass was made under this one
    single = samples_single_pass
    got = spill.write(filled, n, str(tmp_path / "f.ndjson"), str(tmp_path / "f.json"), spill_dir=str(tmp_path))
    expect_lines = "".join(line + "\n" for line in findings.json_lines(single))
    assert (tmp_path / "f.ndjson").read_text() == expect_lines
    assert json.loads((tmp_path / "f.json").read_text()) == single
    assert (tmp_path / "f.json").read_text() == json.dumps(single, ensure_ascii=False, separators=(",", ":")) + "\n"
    assert got.summary == single["summary"] and got.fails("critical")
    assert not list(tmp_path.glob("mcp-sse-audit-spill-*"))  # the spill folder is gone


def test_narrowed_streamed_run(filled, samples_single_pass, tmp_path, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH)
    sid = next(s["session_id"] for s in samples_single_pass["sessions"])
    tables, rows = store.load(filled, sessions=(sid,))
    single = pipeline.analyze_tables(tables, rows, [], [], len(rows)).document
    spill.write(filled, 5, str(tmp_path / "f.ndjson"), None, sessions=(sid,))
    assert (tmp_path / "f.ndjson").read_text() == "".join(line + "\n" for line in findings.json_lines(single))


def test_spilled_outputs_are_whole_or_absent(tmp_path, monkeypatch):
    """A failure while writing the partitioned JSON leaves the previous file, never a truncated one."""
    from analyzer.scale import spill

    out = tmp_path / "f.json"
    out.write_text("previous\n")
    fh = spill._open(str(out))
    fh.write("half a docu")
    spill._close(fh, ok=False)
    assert out.read_text() == "previous\n" and [p.name for p in tmp_path.iterdir()] == ["f.json"]
    fh = spill._open(str(out))
    fh.write("{}\n")
    spill._close(fh, ok=True)
    assert out.read_text() == "{}\n" and [p.name for p in tmp_path.iterdir()] == ["f.json"]
