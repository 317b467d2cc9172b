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
    """A failure while writing the partitioned JSON leaves the previous file, never a truncated one; a whole one is
    renamed over it and its folder fsync'd (the outputs' one writer, analyzer.outputs.streamed)."""
    from analyzer import outputs
    from analyzer import atomic
    from analyzer.scale import spill

    out = tmp_path / "f.json"
    out.write_text("previous\n")

    def half(*_a, **_k):
        raise OSError(28, "No space left on device")

    sections = [("finding", "findings", iter([{"a": 1}]))]
    monkeypatch.setattr(spill.json, "dumps", half)
    with pytest.raises(Exception):
        spill._emit({}, {}, sections, None, str(out))
    monkeypatch.undo()
    assert out.read_text() == "previous\n" and [p.name for p in tmp_path.iterdir()] == ["f.json"]
    synced = []
    monkeypatch.setattr(atomic, "fsync_dir", lambda path: synced.append(path))
    spill._emit({"k": 1}, {"n": 0}, [("finding", "findings", iter([{"a": 1}]))], None, str(out))
    assert json.loads(out.read_text()) == {"k": 1, "summary": {"n": 0}, "findings": [{"a": 1}]}
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"] and synced == [tmp_path]


def test_spilled_output_to_a_closed_pipe_is_an_error(monkeypatch):
    """``--partitions N --json-lines - | head``: the reader going away is exit 2's one line, as for every other output
    (spill wrote to sys.stdout itself, and a closed pipe was a traceback)."""
    from analyzer import outputs
    from analyzer.errors import AuditError

    def closed(*_a, **_k):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(outputs, "_to_stdout", closed)
    monkeypatch.setattr(outputs.os, "dup2", lambda *a: None)
    with pytest.raises(AuditError, match="broken pipe"):
        spill._emit({}, {}, [("finding", "findings", iter([{"a": 1}]))], "-", None)
