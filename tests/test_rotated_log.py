"""A rotated log (issue [3/5] item 8): the format is decided by the records, not by line 1.  A first line
longer than the sniffed head -- the tail of a record cut by log rotation, a deep object, a long object
without `kind` -- made the whole file 'nothing readable' (it read only with --format jsonl)."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from analyzer import pipeline

ROOT = Path(__file__).resolve().parent.parent
CAPTURE = (ROOT / "sample_logs" / "real-python-shared-store.jsonl").read_bytes()
FIRST_LINES = {
    "tail of a cut record": b'"x' * 66_000 + b'"}}\n',  # 133 KB, not even JSON
    "deep object": b'{"a":' * 20_000 + b"1" + b"}" * 20_000 + b"\n",
    "long object without kind": json.dumps({"msg": "y" * 140_000}).encode() + b"\n",
}


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("first", list(FIRST_LINES), ids=lambda k: k.replace(" ", "-"))
def test_a_long_first_line_costs_only_itself(tmp_path, first, gz):
    data = FIRST_LINES[first] + CAPTURE
    p = tmp_path / ("rotated.jsonl.gz" if gz else "rotated.jsonl")
    p.write_bytes(gzip.compress(data) if gz else data)
    doc = pipeline.run([str(p)]).document
    alone = pipeline.run([str(ROOT / "sample_logs" / "real-python-shared-store.jsonl")]).document
    (row,) = doc["inputs"]
    assert (row["format"], row["records"], row["rejected"], row["error"]) == ("jsonl", 73, 1, None)
    assert [a["location"] for a in doc["anomalies"]] == ["line 1"]
    assert [b["verdict"] for b in doc["boundaries"]] == [b["verdict"] for b in alone["boundaries"]]


def test_a_long_first_line_and_nothing_else_is_still_refused(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_bytes(FIRST_LINES["long object without kind"] + json.dumps({"msg": "z"}).encode() + b"\n")
    got = pipeline.read_inputs([str(p)])
    assert got.errors and "neither proxy JSONL" in got.errors[0].reason
