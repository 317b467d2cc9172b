"""The reconnect findings stay the rule's frame until the document is written, and are made as dicts a slice at a
time (analyzer/document/finding_rows.py): 60,000 of them as dicts at once were the analysis' peak (bench/SCALE.md,
2026-12-06).  Counted, never timed."""
from __future__ import annotations

import io
import json

import polars as pl
import pytest

from analyzer import outputs, pipeline
from analyzer.document import records
from analyzer.document.finding_rows import FindingRecords
from conftest import EPOCH

SLICE = 16  # records.LIST_SLICE in these tests: the 59 reconnect findings below are four slices


def _restarts(path, n: int) -> None:
    """A proxy log of one session re-opening its GET stream ``n`` times, each stream's ids 1, 2 and every resume
    naming "2": a critical finding per reconnect (ids went back)."""
    t = [0]

    def ts() -> str:
        t[0] += 1
        return f"2026-12-01T00:00:{t[0] // 1000:02d}.{t[0] % 1000:03d}000Z"

    lines = []
    for i in range(n):
        c = f"g{i}"
        h = {"accept": "text/event-stream", "mcp-session-id": "s1"} | ({"last-event-id": "2"} if i else {})
        lines += [
            {"kind": "request", "ts": ts(), "conn": c, "method": "GET", "url": "http://127.0.0.1:8000/mcp", "headers": h, "body": None},
            {"kind": "response", "ts": ts(), "conn": c, "status": 200,
             "headers": {"content-type": "text/event-stream", "mcp-session-id": "s1"}},
            *({"kind": "sse", "ts": ts(), "conn": c, "id": str(k), "event": "message", "data": f"x{i}-{k}", "retry": None} for k in (1, 2)),
            {"kind": "close", "ts": ts(), "conn": c, "reason": "reset"},
        ]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))


def _made_as_dicts(monkeypatch) -> list[int]:
    """The heights of the reconnect findings' frames turned into dicts (the frames with ``attempts``), from now on."""
    heights = []
    real = pl.DataFrame.to_dicts

    def counted(self):
        if "attempts" in self.columns:
            heights.append(self.height)
        return real(self)

    monkeypatch.setattr(pl.DataFrame, "to_dicts", counted)
    return heights


def test_the_reconnect_findings_are_made_a_slice_at_a_time(monkeypatch, tmp_path):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH)
    monkeypatch.setattr(records, "LIST_SLICE", SLICE)
    _restarts(tmp_path / "r.jsonl", 60)
    heights = _made_as_dicts(monkeypatch)
    doc = pipeline.run([str(tmp_path / "r.jsonl")], columnar=True).document  # (its summary and calls_hit read the findings)
    assert isinstance(doc["findings"], FindingRecords)
    text = records.document_json(doc)  # --json, compact
    found = json.loads(text)["findings"]
    assert sum(f["boundary"] is not None for f in found) == 59 and json.loads(text)["summary"]["findings_by_severity"]["critical"] >= 58
    # the dicts made a slice at a time, none kept (on the code before: one frame of 59 made whole, [59]); made once,
    # to be written: the summary and calls_hit read their rule and severity from the frame (before: three times, 177)
    assert heights and max(heights) <= SLICE and sum(heights) == 59
    assert doc["findings"]._rows is None
    # and the list path's findings are the same dicts, in the same order, with the same ids
    heights.clear()
    listed = pipeline.run([str(tmp_path / "r.jsonl")]).document
    assert isinstance(listed["findings"], list) and listed["findings"] == found
    assert max(heights) <= SLICE


def test_written_by_slices_is_the_text_of_the_dicts(monkeypatch, tmp_path):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH)
    monkeypatch.setattr(records, "LIST_SLICE", SLICE)
    _restarts(tmp_path / "r.jsonl", 40)
    doc = pipeline.run([str(tmp_path / "r.jsonl")], columnar=True).document
    found = doc["findings"]
    buf = io.BytesIO()
    found.write_json(buf)  # by slices, from the frame
    severities, rules = found.column("severity"), found.column("rule")
    # a few findings' keys, chosen by rule: the dicts of those alone, with their places' ids
    for rule in set(rules):
        assert [f["id"] for f in found.some(["id", "rule"], pl.col("rule") == rule)] == [
            f"f{i + 1}" for i, r in enumerate(rules) if r == rule]
    with pytest.raises(ValueError, match="rule, severity only"):
        next(found.some(["id"], pl.col("message").is_not_null()))
    assert found._rows is None
    dicts = list(found)  # made once and kept: a reader of the list may change them (a baseline marks them)
    assert all(a is b for a, b in zip(found._rows, dicts, strict=True)) and [f["severity"] for f in dicts] == severities
    assert [f["rule"] for f in dicts] == rules and len(set(rules)) > 1
    assert buf.getvalue().decode("utf-8") == json.dumps(dicts, ensure_ascii=False, separators=(",", ":"))
    assert [f["id"] for f in dicts] == [f"f{i + 1}" for i in range(len(dicts))] and len(dicts) > 2 * SLICE
    # worst first, then by place in history: the history findings in between where they belong
    ranks = [("critical", "error", "warning", "info").index(f["severity"]) for f in dicts]
    assert ranks == sorted(ranks)
    buf2 = io.BytesIO()
    found.write_json(buf2)  # from the dicts now
    assert buf2.getvalue() == buf.getvalue()
    assert outputs.document_json(doc) == outputs.document_json(pipeline.run([str(tmp_path / "r.jsonl")]).document)
