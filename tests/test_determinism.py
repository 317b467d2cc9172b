"""Deterministic output (issue #6, item 8): audit jobs diff two runs.

* Two runs of the CLI, in separate processes with other hash seeds and other Polars thread counts, with
  SOURCE_DATE_EPOCH set, write byte-identical findings JSON, NDJSON and HTML.
* The order the inputs are given in changes nothing.
* Without SOURCE_DATE_EPOCH only the generation time differs (nothing else reads the clock).
* A malformed SOURCE_DATE_EPOCH is a usage error, never silently replaced by the clock.
"""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from analyzer import cli, document, outputs, pipeline

ROOT = Path(__file__).resolve().parent.parent
EPOCH = "1767225600"  # 2026-01-01T00:00:00Z
# What the properties need of the samples, not all of them (each sample's own analysis is pinned by its golden
# file, tests/test_golden.py): every input format, and what ties inputs together, where order could leak in -- the
# multi-capture incident (one session in three captures, two formats), one traffic recorded three ways (HAR, JSONL,
# pcap: findings seen in several formats), a compressed pcap, a pcapng carrying its TLS secrets, stateless traffic.
CAPTURES = sorted([
    "sample_logs/synthetic/three_captures/client.har",
    "sample_logs/synthetic/three_captures/lb-proxy.jsonl",
    "sample_logs/synthetic/three_captures/server-a.jsonl",
    "sample_logs/real-python-shared-store.har",
    "sample_logs/real-python-shared-store.jsonl",
    "sample_logs/real-python-shared-store.pcap",
    "sample_logs/real-python-server-restart.pcap.gz",
    "sample_logs/tls/real-python-tls13-h1-resume.pcapng",
    "sample_logs/synthetic/stateless_reissue.jsonl",
    "sample_logs/synthetic/gap.har",
])
# folders walked: nested (synthetic/three_captures/) and with files that are no captures (the key logs of tls/)
FOLDERS = ["sample_logs/synthetic/", "sample_logs/tls/"]


def _cli(args: list[str], out: Path, env: dict[str, str]) -> dict[str, bytes]:
    """One CLI run in its own interpreter; returns the bytes of every output file."""
    out.mkdir(parents=True, exist_ok=True)
    files = {"json": out / "f.json", "ndjson": out / "f.ndjson", "html": out / "r.html"}
    cmd = [sys.executable, "-c", "import sys; from analyzer.cli import main; sys.exit(main())", "analyze", *args,
           "--json", str(files["json"]), "--json-lines", str(files["ndjson"]), "--html", str(files["html"]), "--quiet"]
    full_env = {k: v for k, v in os.environ.items() if k not in ("SOURCE_DATE_EPOCH", "PYTHONHASHSEED", "POLARS_MAX_THREADS")}
    full_env.update(env)
    r = subprocess.run(cmd, cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=600)
    assert r.returncode in (0, 1), r.stderr
    return {k: p.read_bytes() for k, p in files.items()}


def _generated(tmp: Path) -> str:
    """A mid-sized capture from the bench generator (many sessions: group-bys and joins with real work)."""
    subprocess.run([sys.executable, str(ROOT / "bench" / "generate.py"), "--events", "4000", "--concurrency", "16", "--formats", "jsonl",
                    "--out", str(tmp)], check=True, capture_output=True, timeout=300)
    (path,) = tmp.glob("traffic-*.jsonl")
    return str(path)


def test_two_processes_write_byte_identical_json_ndjson_and_html(tmp_path):
    big = _generated(tmp_path / "gen")
    args = [*CAPTURES, big]
    a = _cli(args, tmp_path / "a", {"SOURCE_DATE_EPOCH": EPOCH, "PYTHONHASHSEED": "1", "POLARS_MAX_THREADS": "1"})
    b = _cli(args, tmp_path / "b", {"SOURCE_DATE_EPOCH": EPOCH, "PYTHONHASHSEED": "4242", "POLARS_MAX_THREADS": "4"})
    for kind in a:
        assert a[kind] == b[kind], f"{kind} differs between two runs"
    doc = json.loads(a["json"])
    assert doc["generated_at"] == "2026-01-01T00:00:00Z"
    assert doc["summary"]["boundaries"] > 50  # (the comparison had something to compare)
    assert b"2026-01-01T00:00:00Z" in a["html"]


def _document(paths: list[str], monkeypatch) -> str:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH)
    monkeypatch.chdir(ROOT)
    return outputs.document_json(pipeline.run(paths).document)


def test_the_order_of_the_inputs_changes_nothing(monkeypatch):
    in_order = _document(CAPTURES, monkeypatch)
    shuffled = list(CAPTURES)
    random.Random(6).shuffle(shuffled)
    assert _document(list(reversed(CAPTURES)), monkeypatch) == in_order
    assert _document(shuffled, monkeypatch) == in_order
    doc = json.loads(in_order)
    assert [i["path"] for i in doc["inputs"]] == sorted(CAPTURES)


def test_a_directory_and_its_files_listed_give_the_same_analysis(monkeypatch):
    files = sorted(str(p.relative_to(ROOT)) for folder in FOLDERS for p in (ROOT / folder).rglob("*")
                   if p.is_file() and p.name.endswith((".jsonl", ".har", ".pcap", ".pcapng", ".gz")))
    assert any("three_captures" in f for f in files) and any(f.endswith(".pcapng") for f in files)
    listed = json.loads(_document(list(reversed(files)), monkeypatch))
    walked = json.loads(_document(FOLDERS, monkeypatch))
    assert walked["skipped"] and not listed["skipped"]  # (the walk lists the key logs of tls/ as skipped)
    walked["skipped"] = listed["skipped"] = []
    walked["summary"]["inputs_skipped"] = listed["summary"]["inputs_skipped"] = 0  # (the count of those, analyzer/document/facts.py)
    assert walked == listed


def test_without_source_date_epoch_only_the_generation_time_differs(tmp_path):
    args = ["sample_logs/synthetic/", "sample_logs/real-ts-resume.pcap"]
    fixed = _cli(args, tmp_path / "fixed", {"SOURCE_DATE_EPOCH": "0", "PYTHONHASHSEED": "1"})
    clock = _cli(args, tmp_path / "clock", {"PYTHONHASHSEED": "2"})
    a, b = json.loads(fixed["json"]), json.loads(clock["json"])
    assert a["generated_at"] == "1970-01-01T00:00:00Z" and b["generated_at"] > "2026"
    a_time, b_time = a.pop("generated_at"), b.pop("generated_at")
    assert a == b
    # the HTML and NDJSON show the time verbatim and differ nowhere else
    for kind in ("html", "ndjson"):
        assert fixed[kind].count(a_time.encode()) >= 1
        assert fixed[kind].replace(a_time.encode(), b"T") == clock[kind].replace(b_time.encode(), b"T"), kind


def test_an_empty_source_date_epoch_counts_as_unset(monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "")
    assert document.generated_at() > "2026"


def test_a_malformed_source_date_epoch_is_an_error_that_says_so(tmp_path):
    capture = str(ROOT / "sample_logs" / "synthetic" / "continuous.jsonl")
    for bad in ("yesterday", "-5", "1.5", "١٢٣", "9" * 30):
        r = CliRunner().invoke(cli.main, ["analyze", capture, "--json", str(tmp_path / "f.json")], env={"SOURCE_DATE_EPOCH": bad})
        assert r.exit_code == 2, (bad, r.output)
        assert "SOURCE_DATE_EPOCH" in r.stderr
        assert not (tmp_path / "f.json").exists()  # failed before the analysis, wrote nothing


def test_help_documents_source_date_epoch():
    r = CliRunner().invoke(cli.main, ["analyze", "--help"])
    assert r.exit_code == 0
    assert "SOURCE_DATE_EPOCH" in r.output and "byte-identical" in r.output
