"""Copies of the wide per-reconnect frames that a run of 60,000 reconnects paid for (bench/SCALE.md, 2026-12-06):
counted on the frames themselves (their widths, their rows), never timed."""
from __future__ import annotations

import json

import polars as pl

from analyzer import pipeline
from analyzer.rules import reconnects, verdicts


def _mixed(path, n: int, every: int) -> int:
    """A proxy log of one session re-opening its GET stream ``n`` times, each resume naming the last id delivered: the
    server continues the ids (continuous), but every ``every``-th stream skips four (a gap).  Returns the gaps."""
    t = [0]

    def ts() -> str:
        t[0] += 1
        return f"2026-12-01T00:00:{t[0] // 1000:02d}.{t[0] % 1000:03d}000Z"

    lines, eid, gaps = [], 0, 0
    for i in range(n):
        c = f"g{i}"
        h = {"accept": "text/event-stream", "mcp-session-id": "s1"} | ({"last-event-id": str(eid)} if eid else {})
        if i and i % every == 0:
            eid, gaps = eid + 4, gaps + 1
        lines += [
            {"kind": "request", "ts": ts(), "conn": c, "method": "GET", "url": "http://127.0.0.1:8000/mcp", "headers": h, "body": None},
            {"kind": "response", "ts": ts(), "conn": c, "status": 200,
             "headers": {"content-type": "text/event-stream", "mcp-session-id": "s1"}},
        ]
        for _ in range(2):
            eid += 1
            lines.append({"kind": "sse", "ts": ts(), "conn": c, "id": str(eid), "event": "message", "data": f"x{eid}", "retry": None})
        lines.append({"kind": "close", "ts": ts(), "conn": c, "reason": "reset"})
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    return gaps


def test_one_boundary_per_reconnect_gathers_the_wide_frame_once(monkeypatch, tmp_path):
    # the rows kept are chosen on a few columns; the boundaries' ~130 columns are gathered once, never sorted, made
    # unique or joined whole (on the code before: four copies of every column, three held at once)
    gaps = _mixed(tmp_path / "m.jsonl", 40, 5)
    seen = []
    real_one = verdicts._one_per_reconnect
    sort, unique, join = pl.DataFrame.sort, pl.DataFrame.unique, pl.DataFrame.join

    def watched(b, f):
        for name, fn in (("sort", sort), ("unique", unique), ("join", join)):
            monkeypatch.setattr(pl.DataFrame, name, lambda self, *a, _fn=fn, **k: seen.append(self.width) or _fn(self, *a, **k))
        try:
            got = real_one(b, f)
        finally:
            for name, fn in (("sort", sort), ("unique", unique), ("join", join)):
                monkeypatch.setattr(pl.DataFrame, name, fn)
        # the same rows as the whole frame sorted, made unique and joined (the code before)
        nvis = f.exchanges.select(pl.col("gx").alias("resumed_gx"), pl.col("n_visible").alias("_nv"))
        whole = b.join(nvis, on="resumed_gx", how="left").with_columns(_key=pl.coalesce(pl.col("fp"), pl.format("solo#{}", pl.col("gx"))))
        views = whole.group_by("_key").agg(views=pl.struct("source", "location").sort_by("pos"), _n=pl.len())
        want = whole.sort(["_nv", "pos"], nulls_last=True).unique("_key", keep="first").join(views, on="_key").sort("pos").drop("_nv")
        assert got.equals(want) and got.columns == want.columns
        watched.widths = (b.width, max(seen))
        return got

    monkeypatch.setattr(verdicts, "_one_per_reconnect", watched)
    doc = pipeline.run([str(tmp_path / "m.jsonl")]).document
    assert doc["summary"]["verdicts"]["gap"] == gaps == 7 and doc["summary"]["verdicts"]["continuous"] == 32
    wide, most = watched.widths
    assert wide > 100 and most <= 12


def test_the_reconnect_rule_reads_the_previews_of_its_findings_alone(monkeypatch, tmp_path):
    # the evidence of a finding (the request, the events around the cut, the views) is made for the reconnects that are
    # not continuous: on the code before, for every reconnect (60,000 continuous ones: +113 MiB for no finding)
    gaps = _mixed(tmp_path / "m.jsonl", 40, 5)
    made = []
    real = pl.LazyFrame.select

    def select(self, *a, **k):
        out = real(self, *a, **k)
        if "_base" in k:
            made.append(out.select(pl.len()).collect().item())
        return out

    real_findings = reconnects.findings
    monkeypatch.setattr(reconnects, "findings", lambda rows: (monkeypatch.setattr(pl.LazyFrame, "select", select), real_findings(rows))[1])
    doc = pipeline.run([str(tmp_path / "m.jsonl")]).document
    monkeypatch.setattr(pl.LazyFrame, "select", real)
    assert made == [gaps] == [7]
    assert sum(f["boundary"] is not None for f in doc["findings"]) == gaps


def test_the_event_previews_are_joined_in_one_chunk(monkeypatch, tmp_path):
    # a group-by leaves its lists in a chunk per thread; a join gathering a list of structs in two chunks cost ten
    # times the column (60,000 reconnects: +119 MiB for a 21 MiB column, one chunk +12): the previews come in one
    from analyzer.document import build

    _mixed(tmp_path / "m.jsonl", 40, 5)
    chunks = []
    real = build._previews  # (each part's previews: before, cut off, after)

    def counted(*a, **k):
        out = real(*a, **k)
        chunks.append(max(out[c].n_chunks() for c in out.columns))
        return out

    monkeypatch.setattr(build, "_previews", counted)
    pipeline.run([str(tmp_path / "m.jsonl")])
    assert chunks == [1, 1, 1]  # (before, cut off, after; on the code before: [2, 1, 2])
