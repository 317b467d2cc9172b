"""--engine spark gives the local engine's findings JSON, byte for byte (Spark in local[2] mode).

The Spark tests skip when pyspark or Java is missing here, with the reason; with CI=true they fail
instead, so CI cannot go green without running them.  The tests of the shared per-group function and
of the install messages need no Spark.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import sys
import types
from datetime import datetime, timezone
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest
from click.testing import CliRunner

from analyzer import pipeline, window, outputs
from analyzer.scale import partitions, store
from analyzer.cli import main
from conftest import EPOCH
from needs import unavailable

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_logs"


def spark_missing() -> str | None:
    try:
        import pyspark
    except ImportError:
        return "pyspark is not installed (pip install -e '.[spark]')"
    if int(pyspark.__version__.split(".")[0]) < 4:
        return f"pyspark {pyspark.__version__} < 4.0"
    java_home = os.environ.get("JAVA_HOME")
    if not (java_home and Path(java_home, "bin", "java").exists()) and not shutil.which("java"):
        return "no Java runtime (apt-get install -y default-jre-headless)"
    return None


@pytest.fixture
def filled(samples_store):
    """The samples' store, built once per session (tests/conftest.py); read only."""
    return samples_store


@pytest.fixture(scope="module")
def spark():
    reason = spark_missing()
    if reason:
        unavailable(reason)
    from analyzer.scale import engine_spark

    s = engine_spark.session("local[2]")
    yield s
    s.stop()


def single_pass(st, **narrow) -> dict:
    tables, rows = store.load(st, **narrow)
    return pipeline.analyze_tables(tables, rows, [], [], len(rows)).document


# --- the shared per-group function (no Spark needed) ---------------------------------------------


def test_group_rows_in_any_order_give_the_single_pass_document(filled, samples_single_pass, monkeypatch):
    """What Spark does to order: input rows and output rows shuffled; the function and its inverse undo it."""
    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH)
    rng = random.Random(7)
    comps = partitions.components(filled)
    whole = {name: store.scan(filled, name).collect() for name in store.TABLES}  # each table read once, not per group
    out = []
    for label in sorted(set(comps["label"].to_list())):
        shas = comps.filter(comps["label"] == label)["input"].to_list()
        tables = {}
        for name in store.TABLES:
            t = whole[name].filter(pl.col("input").is_in(shas))
            t = t.with_row_index("row").with_columns(pl.col("row").cast(pl.Int64))  # one file per input
            order = list(range(t.height))
            rng.shuffle(order)
            tables[name] = t[order].to_arrow()
        out.append(partitions.analyze_group(label, tables))
    rows = pa.concat_tables(out)
    assert rows.schema == partitions.GROUP_SCHEMA
    rows = rows.take(rng.sample(range(rows.num_rows), rows.num_rows))
    got = partitions.document_of(partitions.partials_from_rows(rows), filled, None).document
    assert outputs.document_json(got) == outputs.document_json(samples_single_pass)


def test_without_pyspark_spark_engine_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyspark", None)  # import pyspark raises ImportError
    r = CliRunner().invoke(main, ["analyze", str(SAMPLES / "synthetic" / "gap.jsonl"), "--engine", "spark"])
    assert r.exit_code == 2, r.output
    assert "pip install 'mcp-sse-audit[spark]'" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_without_java_spark_engine_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyspark", types.SimpleNamespace(__version__="4.3.0"))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None)
    r = CliRunner().invoke(main, ["analyze", str(SAMPLES / "synthetic" / "gap.jsonl"), "--engine", "spark"])
    assert r.exit_code == 2 and "apt-get install -y default-jre-headless" in r.stderr, r.output


def test_spark_engine_takes_no_partitions():
    r = CliRunner().invoke(main, ["analyze", str(SAMPLES), "--engine", "spark", "--partitions", "3"])
    assert r.exit_code == 2 and "--partitions is for --engine local" in r.stderr


# --- Spark, local[2] ------------------------------------------------------------------------------


def test_spark_findings_json_is_byte_identical(filled, samples_single_pass, spark, monkeypatch):
    from analyzer.scale import engine_spark

    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH)
    local = outputs.document_json(samples_single_pass)
    got = outputs.document_json(engine_spark.analyze(filled, spark=spark).document)
    assert json.loads(local)["summary"]["boundaries"] > 20 and json.loads(local)["summary"]["anomalies"] > 0
    assert got == local


def test_spark_narrowed_by_session_and_time_is_identical(filled, samples_single_pass, spark, monkeypatch):
    from analyzer.scale import engine_spark

    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH)
    whole = samples_single_pass
    gap_sid = next(s["session_id"] for s in whole["sessions"] if s["verdicts"].get("gap"))
    # a session id seen in several inputs (three captures of one session, several formats)
    by_sid: dict[str, set[str]] = {}
    for sess in whole["sessions"]:
        if sess["session_id"]:
            by_sid.setdefault(sess["session_id"], set()).update(sess["sources"])
    multi = max(by_sid, key=lambda s: (len(by_sid[s]), s))
    assert len(by_sid[multi]) >= 3
    since, until = datetime(2025, 1, 1, tzinfo=timezone.utc), datetime(2026, 6, 1, tzinfo=timezone.utc)
    # one session across inputs, two sessions (one of them the gap's), a time window: each one Spark run
    for narrow in ({"sessions": (multi,)}, {"sessions": (multi, gap_sid)}, {"since": since, "until": until}):
        doc = single_pass(filled, **narrow)
        if "since" in narrow:  # the bounds applied go in summary.window, as the command stamps a single pass (analyzer/window.py)
            doc = window.stamp(doc, window.Window(narrow["since"], narrow["until"]))
        expect = outputs.document_json(doc)
        got = engine_spark.analyze(filled, spark=spark, **narrow).document
        assert outputs.document_json(got) == expect, narrow
        if narrow == {"sessions": (multi,)}:
            assert {s["session_id"] for s in got["sessions"]} == {multi} and len(got["inputs"]) == len(by_sid[multi])
        if gap_sid in narrow.get("sessions", ()):
            assert any(s["session_id"] == gap_sid and s["verdicts"].get("gap") for s in got["sessions"])


def test_cli_engine_spark_on_paths_and_store_is_byte_identical(spark, tmp_path):
    """The command's plumbing (options, the temporary store for PATHs, the output): a few inputs of every kind of
    group suffice, the engines' agreement on the whole sample set is test_spark_findings_json_is_byte_identical's."""
    env = {"SOURCE_DATE_EPOCH": EPOCH}
    three = sorted(str(p) for p in (SAMPLES / "synthetic" / "three_captures").iterdir())  # one session, three inputs
    paths = [*three, str(SAMPLES / "synthetic" / "gap.jsonl"), str(SAMPLES / "real-ts-resume.pcap")]
    store.ingest(paths, tmp_path / "st")
    r = CliRunner().invoke(main, ["analyze", "--store", str(tmp_path / "st"), "--json", str(tmp_path / "local.json"), "-q"], env=env)
    assert r.exit_code == 1, r.output
    local = json.loads((tmp_path / "local.json").read_text())
    assert len(local["inputs"]) == 5 and any(b["verdict"] == "gap" for b in local["boundaries"])
    r = CliRunner().invoke(main, ["analyze", *paths, "--engine", "spark", "--json", str(tmp_path / "spark.json"), "-q"], env=env)
    assert r.exit_code == 1, r.output  # PATHs went through a temporary store
    assert (tmp_path / "spark.json").read_bytes() == (tmp_path / "local.json").read_bytes()
    r = CliRunner().invoke(main, ["analyze", "--store", str(tmp_path / "st"), "--engine", "spark", "--spark-master", "local[2]",
                                  "--json", str(tmp_path / "store.json"), "-q"], env=env)
    assert r.exit_code == 1 and (tmp_path / "store.json").read_bytes() == (tmp_path / "local.json").read_bytes()


def test_a_path_spark_could_not_read_fails_the_run_as_with_a_store(spark, tmp_path):
    """One exit decision for every engine: a PATH that could not go into Spark's temporary store is lost input,
    exit 1 at --fail-on error as with --store (before, Spark's run exited 0: the missing input left no trace)."""
    ok, missing = str(SAMPLES / "synthetic" / "continuous.jsonl"), str(tmp_path / "gone.jsonl")
    assert CliRunner().invoke(main, ["analyze", ok, "-q"]).exit_code == 0  # the readable input alone: clean
    for engine in (["--store", str(tmp_path / "st")], ["--engine", "spark"]):
        r = CliRunner().invoke(main, ["analyze", ok, missing, *engine, "-q"])
        assert r.exit_code == 1 and f"error: {missing}: could not be read" in r.stderr, (engine, r.output)
        r = CliRunner().invoke(main, ["analyze", ok, missing, *engine, "-q", "--fail-on", "critical"])
        assert r.exit_code == 0, (engine, r.output)  # lost input fails --fail-on error and warning only
