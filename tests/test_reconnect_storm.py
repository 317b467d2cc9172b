"""reconnect_storm: more than N reconnects of one stream within a minute (N: the Analysis value, --reconnect-storm).

The rule that proves the door (issue 43): its own file, one registry line, one catalog line, one option. Its
threshold travels in the Analysis value to every engine: the single pass, a store's partitions (in memory and
written as they go) and Spark's workers.
"""
from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
from click.testing import CliRunner

from analyzer import pipeline
from analyzer.cli import main
from analyzer.rules.registry import Analysis
from analyzer.rules.storm import Storm

ROOT = Path(__file__).resolve().parent.parent


def _storm(tmp_path, monkeypatch, every: float, n: int) -> Path:
    """A session whose GET stream is cut and resumed ``n`` times, ``every`` seconds apart."""
    monkeypatch.syspath_prepend(str(ROOT / "sample_logs"))
    import make_synthetic as ms

    sid = "5702a0c0ffee4d0b9b7a5e4f00000001"
    exs = ms.init(sid, 0.0)
    last = None
    for i in range(n + 1):
        exs.append(ms.get(sid, 1.0 + i * every, last=last, events=[(str(i + 1), ms.note(i + 1))]))
        last = str(i + 1)
    ms.write_jsonl("storm", exs, tmp_path)
    return tmp_path / "storm.jsonl"


def storms(doc: dict) -> list[dict]:
    return [f for f in doc["findings"] if f["rule"] == "reconnect_storm"]


def test_more_reconnects_in_a_minute_than_allowed_is_one_warning(tmp_path, monkeypatch):
    path = _storm(tmp_path, monkeypatch, every=3.0, n=12)  # 12 reconnects within 36 s
    found = storms(pipeline.run([str(path)]).document)
    assert len(found) == 1 and found[0]["severity"] == "warning"
    assert found[0]["message"].startswith("12 reconnects of one stream") and "more than 10" in found[0]["message"]
    assert len(found[0]["evidence"]) == 12 and found[0]["session_id"] == "5702a0c0ffee4d0b9b7a5e4f00000001"
    # the threshold is the Analysis value's: 12 is not more than 12
    assert storms(pipeline.run([str(path)], analysis=Analysis(reconnect_storm={"reconnects": 12})).document) == []


def test_reconnects_spread_over_minutes_are_no_storm(tmp_path, monkeypatch):
    path = _storm(tmp_path, monkeypatch, every=10.0, n=12)  # 12 reconnects, at most 6 in any minute
    assert storms(pipeline.run([str(path)]).document) == []
    assert len(storms(pipeline.run([str(path)], analysis=Analysis(reconnect_storm=Storm(reconnects=5))).document)) == 1


def test_the_option_sets_the_threshold(tmp_path, monkeypatch):
    path = _storm(tmp_path, monkeypatch, every=10.0, n=12)
    out = tmp_path / "o.json"
    for args, want in (([], 0), (["--reconnect-storm", "5"], 1)):
        r = CliRunner().invoke(main, ["analyze", str(path), "--json", str(out), "-q", "--fail-on", "never", *args])
        assert r.exit_code == 0, r.output
        assert len(storms(json.loads(out.read_text()))) == want, args
    r = CliRunner().invoke(main, ["analyze", str(path), "--reconnect-storm", "0"])
    assert r.exit_code == 2 and "--reconnect-storm" in r.output


def test_the_analysis_value_is_checked_frozen_and_travels(tmp_path):
    with pytest.raises(ValueError, match="no tunable rule 'storm'"):
        Analysis(storm={"reconnects": 3})
    with pytest.raises(ValueError, match="reconnect_storm"):
        Analysis(reconnect_storm={"per_hour": 3})
    with pytest.raises(ValueError):
        Storm(reconnects=0)
    a = Analysis(reconnect_storm={"reconnects": 3})
    assert a == Analysis(reconnect_storm=Storm(3)) and a.of("reconnect_storm").reconnects == 3
    assert Analysis().of("reconnect_storm") == Storm()
    assert pickle.loads(pickle.dumps(a)) == a  # (Spark sends it to its workers with their function)
    with pytest.raises(AttributeError):
        a.tuned = ()


def test_every_engine_judges_with_the_threshold_given(tmp_path, monkeypatch):
    """The single pass, a store read whole, its partitions merged in memory and written partition by partition."""
    path = _storm(tmp_path, monkeypatch, every=10.0, n=12)
    st = tmp_path / "store"
    assert CliRunner().invoke(main, ["ingest", str(path), "--store", str(st), "-q"]).exit_code == 0
    for extra in ([str(path)], ["--store", str(st)], ["--store", str(st), "--partitions", "2", "--html", str(tmp_path / "r.html")],
                  ["--store", str(st), "--partitions", "2"]):
        out = tmp_path / "o.json"
        r = CliRunner().invoke(main, ["analyze", *extra, "--json", str(out), "-q", "--fail-on", "never", "--reconnect-storm", "5"])
        assert r.exit_code == 0, (extra, r.output)
        assert len(storms(json.loads(out.read_text()))) == 1, extra


def test_spark_workers_judge_with_the_threshold_given(tmp_path, monkeypatch):
    from test_spark import spark_missing

    from needs import unavailable

    reason = spark_missing()
    if reason:
        unavailable(reason)
    path = _storm(tmp_path, monkeypatch, every=10.0, n=12)
    out = tmp_path / "o.json"
    r = CliRunner().invoke(main, ["analyze", str(path), "--engine", "spark", "--json", str(out), "-q", "--fail-on", "never",
                                  "--reconnect-storm", "5"])
    assert r.exit_code == 0, r.output
    assert len(storms(json.loads(out.read_text()))) == 1
