"""Exit codes: 0 clean, 1 findings or damaged input at or above --fail-on, 2 usage / nothing readable, 3 internal error.

Issue "[2/6] A data path that survives faults", item 6: a crash must not read as "findings" (1), and a
broken night (an unreadable or damaged input) must fail a job run with the default --fail-on error.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from analyzer import exits, pipeline
from analyzer.cli import main

ROOT = Path(__file__).resolve().parent.parent
SYN = ROOT / "sample_logs" / "synthetic"
SCHEMA = json.loads((ROOT / "schemas" / "findings.schema.json").read_text())


def run(*args, **kw):
    return CliRunner().invoke(main, list(args), **kw)


def _boom(*_a, **_k):
    raise KeyError("no such column")


def test_help_documents_every_exit_code():
    out = run("analyze", "--help").output
    for text in ("0 ", "1 findings", "2 usage error", "3 internal error", "--debug"):
        assert text in out, text


def test_internal_error_exits_3_with_one_line_naming_it(monkeypatch):
    monkeypatch.setattr(pipeline, "run", _boom)
    r = run("analyze", str(SYN / "continuous.jsonl"))
    assert r.exit_code == 3, r.output  # before: 1 (the code for findings) and a traceback
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and "KeyError" in lines[0] and "no such column" in lines[0] and "--debug" in lines[0]
    assert "Traceback" not in r.output


def test_debug_prints_the_traceback_and_still_exits_3(monkeypatch):
    monkeypatch.setattr(pipeline, "run", _boom)
    for args in (["--debug", "analyze", str(SYN / "continuous.jsonl")], ["analyze", str(SYN / "continuous.jsonl"), "--debug"]):
        r = run(*args)
        assert r.exit_code == 3, r.output
        assert "Traceback (most recent call last)" in r.stderr and "_boom" in r.stderr


@pytest.mark.parametrize("where", ["jsonl_typed.decode", "jsonrpc.event_rpc", "polars.collect_all"])
def test_an_error_in_a_worker_thread_exits_3_and_writes_no_json(tmp_path, monkeypatch, where):
    """The JSONL reader, Builder.finish and the findings document each run Polars work in a worker thread
    (ingest/jsonl._with_columns, tables.Builder.finish, document/build.build_document): a failure there is
    raised in the main thread, at its place, and ends the run as an internal error: not a hang, not a
    document with part of the input."""
    import polars

    from analyzer.decode import jsonrpc
    from analyzer.ingest import jsonl_typed

    calls = []

    def boom(*_a, **_k):
        import threading

        calls.append(threading.current_thread().name)
        raise KeyError("no such column")

    owner = {"jsonl_typed": jsonl_typed, "jsonrpc": jsonrpc, "polars": polars}[where.split(".")[0]]
    monkeypatch.setattr(owner, where.split(".")[1], boom)
    out = tmp_path / "f.json"
    r = run("analyze", str(SYN / "continuous.jsonl"), "--json", str(out))
    assert r.exit_code == 3, r.output
    assert r.stderr.count("\n") == 1 and "internal error" in r.stderr and "no such column" in r.stderr
    assert calls and all(name != "MainThread" for name in calls), calls  # it did fail in the worker
    assert not out.exists()


def test_a_panic_in_compiled_code_exits_3_in_one_line(tmp_path, monkeypatch):
    """A Rust panic comes into Python as pyo3's PanicException, a BaseException (each pyo3 module has its own class, so
    the command tells it by its name): before, it passed the last line of defence, printed a traceback and exited 1,
    which reads as "findings" (Polars 2.1's pl.format panicked so at 1M events with 8 threads: analyzer/formatted.py).
    Now one line and exit 3."""
    from polars.exceptions import PanicException

    from analyzer.signals import boundaries

    assert not issubclass(PanicException, Exception)

    def panics(*_a, **_k):
        raise PanicException("assertion failed: i < self.len()")

    monkeypatch.setattr(boundaries, "facts", panics)
    out = tmp_path / "f.json"
    r = run("analyze", str(SYN / "continuous.jsonl"), "--json", str(out))
    assert r.exit_code == 3, r.output
    assert r.stderr.count("\n") == 1 and "internal error" in r.stderr and "PanicException" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not out.exists()


def test_internal_error_in_ingest_exits_3(tmp_path, monkeypatch):
    from analyzer.scale import store

    monkeypatch.setattr(store, "ingest", _boom)
    r = run("ingest", str(SYN / "continuous.jsonl"), "--store", str(tmp_path / "s"))
    assert r.exit_code == 3 and "internal error" in r.stderr


def test_usage_errors_and_click_exits_are_not_internal_errors():
    assert run("analyze").exit_code == 2
    assert run("analyze", "--fail-on", "bogus", str(SYN)).exit_code == 2
    assert run("--version").exit_code == 0


def test_unreadable_input_among_good_ones_fails_fail_on_error(tmp_path):
    bad = tmp_path / "junk.jsonl"
    bad.write_text("hello\n")
    r = run("analyze", str(bad), str(SYN / "continuous.jsonl"))
    assert r.exit_code == 1, r.output  # before: 0, a broken night passed
    assert run("analyze", str(bad), str(SYN / "continuous.jsonl"), "--fail-on", "critical").exit_code == 0
    assert run("analyze", str(bad), str(SYN / "continuous.jsonl"), "--fail-on", "never").exit_code == 0


def test_lost_records_fail_fail_on_error_and_the_summary_counts_them(tmp_path):
    log = tmp_path / "cut.jsonl"
    log.write_bytes((SYN / "continuous.jsonl").read_bytes() + b'{"kind": "request", "ts"\n')  # a line cut mid-record
    r = run("analyze", str(log), "--json", "-", "-q")
    assert r.exit_code == 1, r.stderr
    doc = json.loads(r.stdout)
    jsonschema.validate(doc, SCHEMA)
    assert doc["summary"]["anomalies_by_severity"]["error"] == 1 and doc["findings"] == []
    assert exits.fails(doc["summary"], "error") and exits.fails(doc["summary"], "warning")
    assert not exits.fails(doc["summary"], "critical")


def test_warning_anomalies_alone_do_not_fail(tmp_path):
    log = tmp_path / "badts.jsonl"
    log.write_bytes((SYN / "continuous.jsonl").read_bytes().replace(b'"2026-11-13T09:00:00.000000Z"', b'"yesterday"', 1))
    r = run("analyze", str(log), "--fail-on", "warning", "--json", "-", "-q")
    assert r.exit_code == 0, r.output  # a record kept without its time is a warning: it never fails a run
    assert json.loads(r.stdout)["summary"]["anomalies_by_severity"] == {"error": 0, "warning": 1, "info": 0}


def test_summaries_without_anomaly_counts_still_decide():
    # documents written before anomalies_by_severity (and partial summaries) are judged by their findings
    assert not exits.fails({"findings_by_severity": {"critical": 0}}, "error")


def test_file_names_on_the_terminal_are_escaped(tmp_path):
    bad = tmp_path / "evil\x1b[2J\nname.jsonl"
    bad.write_text("hello\n")
    r = run("analyze", str(bad), str(SYN / "continuous.jsonl"))
    assert "\x1b" not in r.stderr and "\\x1b[2J\\x0aname.jsonl" in r.stderr
    assert all(line.startswith(("error:", "skipped:")) for line in r.stderr.splitlines())


def test_installed_command_exits_3_on_an_internal_error(tmp_path):
    # the real entry point (not CliRunner): an exception escaping a command is 3, never Python's 1
    code = (
        "import analyzer.pipeline as p\n"
        "def boom(*a, **k): raise RuntimeError('store fault')\n"
        "p.run = boom\n"
        "from analyzer.cli import main; main()\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, "analyze", str(SYN / "continuous.jsonl")], capture_output=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 3, proc.stderr.decode()
    assert proc.stderr.decode().count("\n") == 1 and "RuntimeError: store fault" in proc.stderr.decode()


def test_progress_lines_escape_file_names(tmp_path, monkeypatch):
    import analyzer.cli as cli

    class _Tty:
        def __init__(self, stream):
            self._stream = stream

        def isatty(self):
            return True

        def __getattr__(self, name):
            return getattr(self._stream, name)

    class _Sys:  # the CLI's view of sys: stderr is a terminal, so progress lines are printed
        def __getattr__(self, name):
            value = getattr(sys, name)
            return _Tty(value) if name == "stderr" else value

    monkeypatch.setattr(cli, "sys", _Sys())
    log = tmp_path / "evil\x1b]0;title\x07.jsonl"
    log.write_bytes((SYN / "continuous.jsonl").read_bytes())
    r = run("analyze", str(log))
    assert r.exit_code == 0, r.output
    assert "MB/s" in r.stderr and "\x1b" not in r.stderr and "\x07" not in r.stderr and "\\x1b]0;title\\x07" in r.stderr


def test_unreadable_path_given_with_store_fails_the_run(tmp_path):
    """`analyze --store DIR PATH...`: a PATH that could not be read is lost input, like without --store."""
    from click.testing import CliRunner

    from analyzer.cli import main

    good = Path(__file__).resolve().parent.parent / "sample_logs" / "synthetic" / "continuous.jsonl"
    bad = tmp_path / "broken.jsonl"
    bad.write_bytes(b"\x00\x01 not a capture at all\n")
    store = tmp_path / "store"
    r = CliRunner().invoke(main, ["analyze", "--store", str(store), str(good), str(bad), "--json", str(tmp_path / "f.json")])
    assert r.exit_code == 1, r.output
    assert "broken.jsonl" in r.output and "could not be read" in r.output
    r = CliRunner().invoke(main, ["analyze", "--store", str(store), str(good), str(bad), "--fail-on", "critical", "--json", str(tmp_path / "g.json")])
    assert r.exit_code == 0, r.output


def test_nothing_to_judge_exits_2_on_every_engine_path(tmp_path):
    """A store of TLS captures no key decrypted has nothing to judge: exit 2 on the single pass, with --partitions N
    in memory (--html) and written partition by partition (no --html), which exited 0 (issue [5/5] item 1)."""
    from analyzer.cli import main as cli_main

    store = tmp_path / "store"
    tls = ROOT / "sample_logs" / "tls"
    assert CliRunner().invoke(cli_main, ["ingest", str(tls / "real-python-tls13-h2-resume.pcap"),
                                         str(tls / "real-python-tls12-chacha-h1-resume.pcap"), "--store", str(store), "-q"]).exit_code == 0
    for extra in ([], ["--partitions", "2", "--html", str(tmp_path / "r.html")], ["--partitions", "2", "--json", str(tmp_path / "o.json")]):
        r = CliRunner().invoke(cli_main, ["analyze", "--store", str(store), "--fail-on", "never", *extra])
        assert r.exit_code == 2 and "nothing to judge" in r.stderr, (extra, r.output)


@pytest.mark.parametrize("args", [["--json", "-", "-q"], ["--json-lines", "-", "-q"], []])
def test_standard_output_on_a_full_disk_is_exit_2_in_one_line(args):
    """``> /dev/full``: every write fails with ENOSPC.  Exit 2 and one line, as a file on a full disk (was exit 3)."""
    import subprocess
    import sys

    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-c", "from analyzer.cli import main; main()", "analyze", str(SYN / "gap.jsonl"), *args],
                           cwd=ROOT, stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert "cannot write to standard output" in r.stderr and "the output is incomplete" in r.stderr
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr


def test_the_exit_policy_is_written_once():
    """analyze's and ingest's exit codes, the fail levels and "damaged input fails the run" come from analyzer.exits
    alone: the pipeline, the command line, the CI outputs and the spilling writer restate none of it."""
    import inspect

    from analyzer import cli, run as runs
    from analyzer.document import ci
    from analyzer.scale import spill

    summary = {"exchanges": 3, "findings_by_severity": {"warning": 1}, "anomalies_by_severity": {"error": 0}}
    assert exits.analyze(summary, "error") == (0, None) and exits.analyze(summary, "warning") == (1, None)
    assert exits.analyze(summary, "error", lost=True) == (1, None)
    assert exits.analyze(summary, "error", readable=False)[0] == exits.analyze(summary, "error", hollow=True)[0] == 2
    assert exits.analyze({"exchanges": 0, "findings_by_severity": {}}, "never", encrypted=2)[1].startswith("error: nothing to judge")
    assert [exits.ingest(0, 3, 0), exits.ingest(1, 3, 0), exits.ingest(1, 0, 0), exits.ingest(0, 3, 1)] == [0, 1, 2, 2]
    assert exits.lost_input(["x"], "error") and not exits.lost_input(["x"], "critical")
    assert ci.FAIL_ON is exits.FAIL_LEVELS
    for module in (pipeline, cli, runs, ci, spill):
        text = inspect.getsource(module)
        assert '("error", "warning")' not in text and "def fails(summary" not in text and "EXIT_INTERNAL =" not in text, module
    assert not hasattr(pipeline, "exit_code") and not hasattr(pipeline, "FAIL_LEVELS")
