"""Integer ids listed as numbers, not as strings ("9, 10", never "10, 9"; "1, 2, 10, 11, 100", never "1, 10, 100, 11")."""
from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from analyzer import pipeline
from analyzer.rules.shape import natural_order

SYN = Path(__file__).resolve().parent.parent / "sample_logs" / "synthetic"


def test_natural_order_sorts_digit_ids_by_number_then_the_rest():
    df = pl.DataFrame({"g": [1] * 8, "id": ["11", "1", "100", "10", "2", "b", "a", "02x"]})
    got = df.group_by("g").agg(natural_order(pl.col("id").unique()).str.join(", "))["id"][0]
    assert got == "1, 2, 10, 11, 100, 02x, a, b"


def test_a_reissued_call_lists_its_ids_as_numbers(tmp_path):
    """The stateless re-issue sample with its two JSON-RPC ids renumbered 9 and 10: the finding says (9, 10)."""
    lines = []
    for line in (SYN / "stateless_reissue.jsonl").read_text().splitlines():
        rec = json.loads(line)
        for key in ("body", "data"):
            if isinstance(rec.get(key), str) and rec[key].startswith("{"):
                body = json.loads(rec[key])
                body["id"] = {1: 10, 2: 9}.get(body.get("id"), body.get("id"))
                rec[key] = json.dumps(body)
        lines.append(json.dumps(rec))
    p = tmp_path / "reissue.jsonl"
    p.write_text("\n".join(lines) + "\n")
    [f] = [f for f in pipeline.run([str(p)]).document["findings"] if f["rule"] == "reissued_request_ran_twice"]
    assert "issued under 2 ids (9, 10)" in f["message"], f["message"]
