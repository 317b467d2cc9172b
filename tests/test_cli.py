"""The command line: exit codes, stdout/stderr, --json -, --help."""
from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from analyzer.cli import main

ROOT = Path(__file__).resolve().parent.parent
SYN = ROOT / "sample_logs" / "synthetic"
SCHEMA = json.loads((ROOT / "schemas" / "findings.schema.json").read_text())


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_help_has_an_example():
    r = run("analyze", "--help")
    assert r.exit_code == 0
    assert "mcp-sse-audit analyze sample_logs/" in r.output and "Exit codes" in r.output


def test_clean_capture_exits_0_and_prints_summary():
    r = run("analyze", str(SYN / "continuous.jsonl"))
    assert r.exit_code == 0, r.output
    assert "reconnect verdicts: continuous 1" in r.stdout
    assert r.stderr == ""


def test_critical_finding_exits_1_and_fail_on_never_exits_0():
    assert run("analyze", str(SYN / "gap.jsonl")).exit_code == 1
    assert run("analyze", str(SYN / "gap.jsonl"), "--fail-on", "never").exit_code == 0


def test_fail_on_thresholds():
    # unverifiable is a warning: fails only with --fail-on warning
    assert run("analyze", str(SYN / "unverifiable.har")).exit_code == 0
    assert run("analyze", str(SYN / "unverifiable.har"), "--fail-on", "warning").exit_code == 1
    # replay_reset handled by re-initializing is a warning; critical threshold passes it
    assert run("analyze", str(SYN / "replay_reset.jsonl"), "--fail-on", "critical").exit_code == 0


def test_json_to_stdout_is_valid_and_summary_moves_to_stderr():
    r = run("analyze", str(SYN / "gap.har"), "--json", "-")
    doc = json.loads(r.stdout)
    jsonschema.validate(doc, SCHEMA)
    assert doc["boundaries"][0]["verdict"] == "gap"
    assert "reconnect verdicts: gap 1" in r.stderr


def test_html_and_json_files(tmp_path):
    r = run("analyze", str(SYN), "--json", str(tmp_path / "f.json"), "--html", str(tmp_path / "r.html"))
    assert r.exit_code == 1
    doc = json.loads((tmp_path / "f.json").read_text())
    # 15 scenarios, each written as JSONL and HAR of the same traffic (one of them, stateless_reissue,
    # has no reconnect: revision 2026-07-28 has no resumption): the two views of each reconnect are one
    # boundary, and both captures are named.  And the three-capture incident, whose reconnect only the
    # client's capture saw (the resume went through another balancer node)
    assert doc["summary"]["boundaries"] == 15
    views = {b["request"]["source"]: len(b["views"]) for b in doc["boundaries"]}
    assert [n for s, n in views.items() if "three_captures" in s] == [1]
    assert all(n == 2 for s, n in views.items() if "three_captures" not in s)
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")


def test_unreadable_only_input_exits_2_with_one_line_naming_the_file(tmp_path):
    bad = tmp_path / "capture.har"
    bad.write_text('{"log": {"entries": [')
    r = run("analyze", str(bad))
    assert r.exit_code == 2
    assert r.stderr.splitlines()[0].startswith(f"error: {bad}: not a complete HAR document")
    assert "Traceback" not in r.output


def test_one_bad_file_among_good_ones_is_reported_and_the_rest_analyzed(tmp_path):
    bad = tmp_path / "junk.jsonl"
    bad.write_text("hello\n")
    r = run("analyze", str(bad), str(SYN / "continuous.jsonl"))
    assert r.exit_code == 1  # an unreadable input is an error anomaly: it fails the default --fail-on error
    assert f"error: {bad}: not a proxy JSONL log or a HAR file" in r.stderr
    assert "1 unreadable" in r.stdout
    assert run("analyze", str(bad), str(SYN / "continuous.jsonl"), "--fail-on", "critical").exit_code == 0


def test_missing_path_is_one_line_and_the_outputs_say_so(tmp_path):
    """A missing PATH is an unreadable input, as README's exit codes say: named in one line, counted in
    inputs_unreadable, and the outputs asked for are still written (a nightly job's report says what went wrong)."""
    out = tmp_path / "f.json"
    r = run("analyze", "/nonexistent/capture.har", "--json", str(out))
    assert r.exit_code == 2
    assert r.stderr.splitlines() == [f"error: /nonexistent/capture.har: does not exist (check the path; it is counted as an unreadable "
                                     f"input); nothing to analyze; the outputs written say so: {out}"]
    doc = json.loads(out.read_text())
    assert doc["summary"]["inputs_unreadable"] == 1 and doc["inputs"][0]["error"].startswith("does not exist")
    # beside a readable input it is lost input: exit 1 at the default --fail-on error, the rest analyzed
    r = run("analyze", "/nonexistent/capture.har", str(SYN / "continuous.jsonl"), "--json", str(out))
    assert r.exit_code == 1 and "error: /nonexistent/capture.har: does not exist" in r.stderr
    assert json.loads(out.read_text())["summary"]["boundaries"] == 1
    assert run("analyze", "/nonexistent/capture.har", str(SYN / "continuous.jsonl"), "--fail-on", "critical").exit_code == 0


def test_terminal_summary_escapes_control_characters(tmp_path, capture):
    capture.initialize(sid="evil\x1b[2Jsid").stream(sid="evil\x1b[2Jsid", ids=[1]).stream(sid="evil\x1b[2Jsid", last="1", ids=[5])
    p = capture.write(tmp_path / "e.jsonl")
    r = run("analyze", str(p))
    assert "\x1b" not in r.stdout and "\\x1b" in r.stdout


def test_port_narrows_pcap_analysis():
    cap = str(ROOT / "sample_logs" / "real-python-resume-dense.pcap")
    every = json.loads(run("analyze", cap, "--json", "-", "-q", "--fail-on", "never").stdout)
    other = json.loads(run("analyze", cap, "--json", "-", "-q", "--fail-on", "never", "--port", "1").stdout)
    assert every["summary"]["exchanges"] > 0 and other["summary"]["exchanges"] == 0


def test_json_lines_has_every_record_once():
    r = run("analyze", str(SYN / "gap.jsonl"), "--json-lines", "-")
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert lines[0]["type"] == "summary" and lines[0]["summary"]["boundaries"] == 1
    doc = json.loads(run("analyze", str(SYN / "gap.jsonl"), "--json", "-").stdout)
    for kind, key in (("session", "sessions"), ("exchange", "exchanges"), ("boundary", "boundaries"), ("finding", "findings")):
        got = [{k: v for k, v in x.items() if k != "type"} for x in lines if x["type"] == kind]
        assert got == doc[key]
    assert "reconnect verdicts: gap 1" in r.stderr


def test_progress_goes_to_a_terminal_only(monkeypatch):
    from analyzer import pipeline

    seen = []
    pipeline.run([str(SYN / "gap.jsonl")], progress=seen.append)
    assert seen[0].startswith("[1/1]") and "MB/s" in seen[0]
    # every phase after the reading says it began: the analysis is no silent stretch
    assert [m.split(" ")[0] for m in seen[1:]] == ["analyzing", "rebuilding", "judging", "1"], seen
    assert seen[-1].startswith("1 reconnect judged; checking the whole history")
    r = run("analyze", str(SYN / "gap.jsonl"))  # CliRunner's stderr is no terminal: no progress lines
    assert "MB/s" not in r.stderr


_PANDAS_PROBE = """
import importlib.util, json, sys
from analyzer.cli import main
if importlib.util.find_spec("pandas") is None:
    print(json.dumps({"installed": False}))
    sys.exit(0)
try:
    main(sys.argv[1:], standalone_mode=False)
except SystemExit:
    pass
loaded = "pandas" in sys.modules
import pyarrow as pa
frame = pa.table({"a": [1, 2]}).to_pandas()  # pyarrow still gives pandas to whoever asks for it
print(json.dumps({"installed": True, "loaded": loaded, "to_pandas": frame["a"].tolist()}))
"""


def test_the_analysis_does_not_import_pandas(tmp_path):
    """pyarrow imports pandas, when it is installed, at its first conversion of Python objects (+47 MiB,
    0.3 s); the CLI's single pass keeps it out (analyzer.tables.keep_pandas_out).  (A store's reads and
    writes import pyarrow.dataset, which imports pandas itself.)"""
    import subprocess
    import sys

    args = ["analyze", str(ROOT / "sample_logs" / "real-python-resume-dense.jsonl"), "--json", str(tmp_path / "f.json")]
    out = subprocess.run([sys.executable, "-c", _PANDAS_PROBE, *args], capture_output=True, text=True, timeout=120, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    if not got["installed"]:
        pytest.skip("pandas is not installed here (the spark extra installs it)")
    assert got == {"installed": True, "loaded": False, "to_pandas": [1, 2]}


_ALLOCATOR_PROBE = """
import json, os, sys
from analyzer.__main__ import JEMALLOC_VARIABLE, tune_allocator
if sys.argv[1] == "polars-first":
    import polars  # noqa: F401
tune_allocator()
print(json.dumps(os.environ.get(JEMALLOC_VARIABLE)))
"""


@pytest.mark.parametrize(("env", "order", "want"), [
    (None, "command-first", "narenas:1,dirty_decay_ms:100,muzzy_decay_ms:0,background_thread:false"),  # the command's defaults, set before Polars loads
    ("dirty_decay_ms:0,narenas:4", "command-first",
     "narenas:1,dirty_decay_ms:100,muzzy_decay_ms:0,background_thread:false,dirty_decay_ms:0,narenas:4"),  # the user's after ours: theirs win
    (None, "polars-first", "narenas"),  # too late to take effect: Polars' own options, not ours
])
def test_the_command_sets_the_allocator_defaults_before_polars_loads(env, order, want):
    import os
    import subprocess
    import sys

    from analyzer.__main__ import JEMALLOC_VARIABLE

    environ = {k: v for k, v in os.environ.items() if k != JEMALLOC_VARIABLE}
    if env is not None:
        environ[JEMALLOC_VARIABLE] = env
    out = subprocess.run([sys.executable, "-c", _ALLOCATOR_PROBE, order], capture_output=True, text=True, timeout=60, check=True, env=environ)
    # Polars (2.1) sets the variable when it loads: its own decay options, then the user's
    got = json.loads(out.stdout)
    assert (want not in got) if order == "polars-first" else got == want


_BLAS_PROBE = """
import json, os, sys
from analyzer.__main__ import tune_allocator
tune_allocator()
from analyzer import cli, pipeline  # noqa: F401  (what the command loads: PyArrow, which loads NumPy)
print(json.dumps([os.environ.get("OPENBLAS_NUM_THREADS"), len(os.listdir("/proc/self/task")), "numpy" in sys.modules]))
"""


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads in /proc")
def test_the_command_starts_no_openblas_threads_and_keeps_a_users_setting():
    """NumPy's OpenBLAS (loaded by PyArrow, never used here) starts spinning threads unless told one thread: the
    command tells it so before NumPy loads, and one more thread is there when the user asks for two."""
    import os
    import subprocess
    import sys

    def probe(value):
        environ = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
        if value is not None:
            environ["OPENBLAS_NUM_THREADS"] = value
        out = subprocess.run([sys.executable, "-c", _BLAS_PROBE], capture_output=True, text=True, timeout=60, check=True, env=environ)
        return json.loads(out.stdout.strip().splitlines()[-1])

    ours, users = probe(None), probe("2")
    assert ours[0] == "1" and users[0] == "2"
    if ours[2]:  # (NumPy installed: its OpenBLAS started a thread for the user's two, none for ours)
        assert users[1] == ours[1] + 1


def test_the_installed_command_runs_through_the_allocator_entry():
    """pyproject's script is analyzer.__main__:main (which runs analyzer.cli.main), and it exits as the CLI does."""
    import subprocess
    import sys
    import tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["mcp-sse-audit"] == "analyzer.__main__:main"
    out = subprocess.run([sys.executable, "-m", "analyzer", "analyze", str(SYN / "nope.jsonl")], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "nope.jsonl" in out.stderr


def test_release_freed_is_best_effort(monkeypatch):
    """After the read the single pass hands freed memory back (PyArrow's pool, the C library's heap); on a
    C library without malloc_trim (musl, macOS) that is skipped, not an error."""
    import ctypes

    from analyzer import pipeline

    calls = []

    class NoTrim:
        def __init__(self, name):
            calls.append(name)

        def __getattr__(self, attr):
            raise AttributeError(attr)

    pipeline.release_freed()  # glibc here: trims
    monkeypatch.setattr(ctypes, "CDLL", NoTrim)
    pipeline.release_freed()
    assert calls == [None]


def test_ingest_names_a_missing_path_and_exits_as_analyze_does(tmp_path):
    """A missing PATH is lost input for ingest too: named on stderr, the rest stored, exit 1 (2 when nothing was)."""
    r = run("ingest", "/nonexistent/night.jsonl", str(SYN / "gap.jsonl"), "--store", str(tmp_path / "s"))
    assert r.exit_code == 1 and "error: /nonexistent/night.jsonl: does not exist" in r.stderr
    assert "stored 1 new input(s), 0 already" in r.stdout and "1 unreadable" in r.stdout
    r = run("ingest", "/nonexistent/night.jsonl", "--store", str(tmp_path / "t"))
    assert r.exit_code == 2 and "error: /nonexistent/night.jsonl: does not exist" in r.stderr


def test_junit_and_annotations_are_written_over_a_store_in_partitions(tmp_path):
    """--junit and --github-annotations need the whole document: with --partitions N it is merged in memory, as for
    --html, rather than the outputs being left unwritten by the spilling writer."""
    store = tmp_path / "store"
    run("ingest", str(SYN / "gap.jsonl"), str(SYN / "continuous.jsonl"), "--store", str(store), "-q")
    xml = tmp_path / "j.xml"
    r = run("analyze", "--store", str(store), "--partitions", "2", "--junit", str(xml), "--github-annotations")
    assert r.exit_code == 1
    assert "<testsuites" in xml.read_text() and 'failures="1"' in xml.read_text()
    assert r.stdout.startswith("::error file=") and "gap" in r.stdout


def test_a_usage_error_reads_no_key_log(tmp_path, monkeypatch):
    """The key log pre-pass runs after the usage check, not inside the option decorator (issue 43)."""
    from analyzer import options as options_mod

    read = []
    monkeypatch.setattr(options_mod, "key_log", lambda *a, **k: read.append(a) or options_mod.tls.KeyLog())
    keys = tmp_path / "keys.log"
    keys.write_text("CLIENT_RANDOM " + "00" * 32 + " " + "11" * 48 + "\n")
    r = CliRunner().invoke(main, ["analyze", "--tls-keylog", str(keys), "--partitions", "2", str(SYN / "gap.jsonl")])
    assert r.exit_code == 2 and "--partitions" in r.output and read == []
    r = CliRunner().invoke(main, ["analyze", "--tls-keylog", str(keys), str(SYN / "gap.jsonl"), "-q", "--fail-on", "never"])
    assert r.exit_code == 0 and len(read) == 1
