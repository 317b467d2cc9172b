"""Analysis in partitions (bounded memory over a big store) gives the single pass's document."""
from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from analyzer.scale import partitions, store
from analyzer import pipeline

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_logs"


def comparable(doc: dict) -> str:
    return json.dumps({k: v for k, v in doc.items() if k != "generated_at"}, sort_keys=True, ensure_ascii=False)


@pytest.fixture
def filled(samples_store, samples_single_pass):
    """The samples' store and its single pass's document (both built once per session, tests/conftest.py)."""
    return samples_store, samples_single_pass


@pytest.mark.parametrize("n", [1, 2, 3, 8, 200])
def test_every_partitioning_gives_the_single_pass_document(filled, n):
    st, single = filled
    got = partitions.analyze(st, n).document
    assert single["summary"]["boundaries"] > 20 and single["summary"]["findings_by_severity"]["critical"] > 0
    assert comparable(got) == comparable(single)


def test_narrowing_by_session_and_time_partitioned_too(filled):
    st, single = filled
    sid = next(s["session_id"] for s in single["sessions"] if s["verdicts"].get("gap"))
    tables, rows = store.load(st, sessions=(sid,))
    expect = pipeline.analyze_tables(tables, rows, [], [], len(rows)).document
    got = partitions.analyze(st, 4, sessions=(sid,)).document
    assert comparable(got) == comparable(expect)
    assert {s["session_id"] for s in got["sessions"]} == {sid}


def test_inputs_sharing_a_session_id_stay_together_and_sessions_never_split(filled):
    st, _ = filled
    p = partitions.plan(st, 50)
    man = store.manifest(st)
    path_of = dict(zip(man["sha256"].to_list(), man["path"].to_list()))
    where = {Path(path_of[sha]).name: i for i, part in enumerate(p.partitions) for sha in part}
    three = ROOT / "sample_logs" / "synthetic" / "three_captures"
    assert len({where[f.name] for f in three.iterdir() if f.suffix in (".har", ".jsonl")}) == 1
    part_of = {sha: i for i, part in enumerate(p.partitions) for sha in part}
    spans = (
        store.scan(st, "exchanges")
        .select(pl.col("input").replace_strict(part_of).alias("part"), sid=pl.coalesce("req_session_id", "resp_session_id"))
        .filter(pl.col("sid").is_not_null())
        .group_by("sid")
        .agg(n=pl.col("part").n_unique())
        .collect()
    )
    assert spans.height > 20 and spans["n"].max() == 1
    assert sorted(sha for part in p.partitions for sha in part) == sorted(man["sha256"].to_list())  # every input once
    assert len(p.partitions) <= 50 and p.components >= len(p.partitions)


def test_cli_partitions_option(filled, tmp_path):
    from click.testing import CliRunner

    from analyzer.cli import main

    st, single = filled
    r = CliRunner().invoke(main, ["analyze", "--store", str(st), "--partitions", "3", "--json", str(tmp_path / "f.json"), "-q"])
    assert r.exit_code == 1, r.output
    got = json.loads((tmp_path / "f.json").read_text())
    # a store's document ends with its trend (analyzer/document/trend.py), added up as the spilled boundaries go by
    from analyzer.document import trend

    assert got.pop("trend") == trend.per_day(trend.per_reconnect(single))
    assert comparable(got) == comparable(single)
    r = CliRunner().invoke(main, ["analyze", str(SAMPLES / "synthetic" / "gap.jsonl"), "--partitions", "2"])
    assert r.exit_code == 2 and "--partitions splits a store" in r.output
