"""The command line at 3am and in cron (issue [5/6], CLI): streams in, one output to stdout, a reader that
goes away, nothing readable, a --port that matches nothing, -V, shell completion, one name per session."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from analyzer.cli import main
from analyzer.ingest.reading import Reading
from analyzer.terminal import session_name

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "sample_logs" / "real-ts-resume.jsonl"
CLI = [sys.executable, "-c", "from analyzer.cli import main; main()"]


def run(*args, **kw):
    return CliRunner().invoke(main, [str(a) for a in args], **kw)


def test_a_named_pipe_is_read_like_a_file(tmp_path):
    """Process substitution (``<(zcat log.gz)``) and mkfifo hand the command a pipe: it is read, once."""
    want = json.loads(run("analyze", SAMPLE, "-q", "--json", "-").stdout)
    fifo = tmp_path / "capture.jsonl"
    os.mkfifo(fifo)
    writer = subprocess.Popen(["sh", "-c", f'cat "{SAMPLE}" > "{fifo}"'])
    try:
        got = subprocess.run([*CLI, "analyze", str(fifo), "-q", "--json", "-"], capture_output=True, timeout=120, cwd=ROOT)
    finally:
        writer.wait(timeout=30)
    assert got.returncode == 1, got.stderr  # the sample holds error findings
    doc = json.loads(got.stdout)
    assert doc["inputs"][0]["records"] == want["inputs"][0]["records"] > 0
    assert doc["summary"]["boundaries"] == want["summary"]["boundaries"]


def test_a_pipe_cannot_go_into_a_store(tmp_path):
    fifo = tmp_path / "p.jsonl"
    os.mkfifo(fifo)
    r = run("analyze", fifo, "--store", tmp_path / "store")
    assert r.exit_code == 2 and "a pipe cannot go into a store" in r.stderr


def test_a_fifo_inside_a_directory_is_still_skipped(tmp_path):
    os.mkfifo(tmp_path / "stuck.jsonl")
    (tmp_path / "ok.jsonl").write_bytes(SAMPLE.read_bytes())
    r = run("analyze", tmp_path, "--json", tmp_path / "out.json")
    assert r.exit_code == 1 and "stuck.jsonl: FIFO" in r.stderr


def test_html_to_stdout_and_two_outputs_to_stdout_refused():
    r = run("analyze", SAMPLE, "-q", "--html", "-")
    assert r.exit_code == 1 and r.stdout.startswith("<!DOCTYPE html>")
    r = run("analyze", SAMPLE, "--json", "-", "--html", "-")
    assert r.exit_code == 2 and "--json and --html both write to standard output" in r.stderr


def test_a_reader_that_goes_away_is_not_a_crash_nor_findings():
    """``| head`` closes the pipe: exit 2 with one line saying the output is incomplete, never 1 or 3."""
    p = subprocess.Popen([*CLI, "analyze", str(ROOT / "sample_logs"), "-q", "--json", "-"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, cwd=ROOT)
    p.stdout.close()  # before a byte was written: the first write meets a closed pipe
    err = p.stderr.read().decode()
    assert p.wait(timeout=300) == 2, err
    assert "standard output was closed before the output was complete" in err and "Traceback" not in err


def test_nothing_readable_writes_outputs_that_say_so_and_exits_2(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("not a capture")
    r = run("analyze", empty, "--json", tmp_path / "f.json", "--html", tmp_path / "r.html")
    assert r.exit_code == 2
    assert "no input was readable" in r.stderr and "the outputs written say so" in r.stderr
    doc = json.loads((tmp_path / "f.json").read_text())
    assert doc["summary"]["inputs"] == 0 and doc["skipped"] == [str(empty / "notes.txt")]
    html = (tmp_path / "r.html").read_text()
    assert "nothing was analyzed: no input was readable (0 inputs, 0 unreadable, 1 file skipped)" in html
    assert "no divergence found" not in html


def test_a_port_that_matches_nothing_says_so():
    r = run("analyze", ROOT / "sample_logs" / "real-ts-resume.pcap", "--port", "9999", "--json", "-")
    assert r.exit_code == 0
    assert "warning: no HTTP exchange on port 9999" in r.stderr
    r = run("analyze", ROOT / "sample_logs" / "real-ts-resume.pcap", "-q", "--json", "-")
    assert "no HTTP exchange on port" not in r.stderr


def test_short_version_flag():
    r = run("-V")
    assert r.exit_code == 0 and r.stdout.startswith("mcp-sse-audit, version ")


def test_shell_completion_as_the_readme_documents():
    readme = (ROOT / "README.md").read_text()
    assert 'eval "$(_MCP_SSE_AUDIT_COMPLETE=bash_source mcp-sse-audit)"' in readme
    env = {**os.environ, "_MCP_SSE_AUDIT_COMPLETE": "bash_source"}
    cmd = [sys.executable, "-c", "from analyzer.cli import main; main(prog_name='mcp-sse-audit')"]  # as the installed command
    got = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert got.returncode == 0 and "complete -o nosort -F" in got.stdout and "_mcp_sse_audit_completion" in got.stdout


def test_the_terminal_names_sessions_as_the_json_does():
    r = run("analyze", SAMPLE, "--json", "-")
    doc = json.loads(r.stdout)
    f = doc["findings"][0]
    assert f", {session_name(f)}, at " in r.stderr and session_name(f).startswith(f"session {f['session']} {f['session_id'][:12]}")
    assert session_name({"session": "S9", "session_id": ""}) == "session S9, no Mcp-Session-Id"


def test_the_summary_points_only_to_outputs_that_were_written(tmp_path):
    r = run("analyze", ROOT / "sample_logs")
    assert "more with --json FILE or --html FILE" in r.stdout and "JSON/HTML output" not in r.stdout
    r = run("analyze", ROOT / "sample_logs", "--html", tmp_path / "r.html")
    assert f"more in {tmp_path / 'r.html'}" in r.stdout and (tmp_path / "r.html").is_file()


def test_a_store_filter_that_matches_nothing_says_so(tmp_path):
    store = tmp_path / "store"
    assert run("ingest", SAMPLE, "--store", store, "-q").exit_code == 0
    for extra in ([], ["--partitions", "2", "--json", tmp_path / "p.json"]):
        r = run("analyze", "--store", store, "--session", "no-such-session", "-q", *extra)
        assert r.exit_code == 0, r.stderr  # nothing matched is not "no input readable" (2)
        assert "warning: no exchange in the store matches --session no-such-session" in r.stderr
    r = run("analyze", "--store", store, "-q")
    assert r.exit_code == 1 and "no exchange in the store matches" not in r.stderr


class _Recorder:
    def __init__(self):
        self.calls = []

    def begin(self, n, total, path, size):
        self.calls.append(("begin", n, total, path, size))

    def at(self, position):
        self.calls.append(("at", position))

    def done(self, records):
        self.calls.append(("done", records))

    def end(self, inputs, skipped, stored=None):
        self.calls.append(("end", inputs, skipped, stored))


def test_the_meter_follows_every_input_to_its_end():
    """Progress inside a long file: each input's position rises to its size (a .gz: its compressed size)."""
    from analyzer import pipeline

    paths = [str(ROOT / "sample_logs" / n) for n in ("real-python-server-restart.pcap.gz", "real-ts-resume.har", "real-ts-resume.jsonl")]
    rec = _Recorder()
    got = pipeline.read_inputs(paths, Reading(meter=rec))
    assert len(got.parts) == 3 and rec.calls[-1] == ("end", 3, 0, None)  # the summary's counts: 3 inputs, 0 skipped
    begins = [i for i, c in enumerate(rec.calls) if c[0] == "begin"]
    assert [rec.calls[i][1:4] for i in begins] == [(n, 3, p) for n, p in enumerate(sorted(paths), start=1)]
    for k, i in enumerate(begins):
        size = rec.calls[i][4]
        calls = rec.calls[i + 1 : begins[k + 1] if k + 1 < len(begins) else -1]
        positions = [c[1] for c in calls if c[0] == "at"]
        assert calls[-1] == ("done", got.parts[k].records)
        assert size == Path(rec.calls[i][3]).stat().st_size
        assert positions == sorted(positions) and positions[-1] == size


def test_the_terminal_meter_draws_one_line_in_place():
    import io

    from analyzer.terminal import TerminalMeter

    out = io.StringIO()
    m = TerminalMeter(out)
    m.EVERY = 0  # every position drawn
    m.begin(1, 2, "a\x1b[31m.jsonl", 2_000_000)
    m.at(1_000_000)
    m.done(1234)
    m.begin(2, 2, "b.pcap", 1_000_000)
    m.at(1_000_000)
    m.done(10)
    m.end(2, 0)
    text = out.getvalue()
    assert text.count("\n") == 1 and text.endswith("\n") and text.rstrip(" \n").endswith("MB/s)") and "\x1b" not in text
    assert "read 2 inputs, 0 skipped, 1,244 records, 3.0 MB in " in text and "1,234 records so far" in text and "\x1b[31m" not in text and "a\\x1b[31m.jsonl" in text
    # how far into an input only once it has begun, and only for one of 1 MiB or more: no "0% of 0.0 MB" lines
    assert "reading [1/2]  50% of 2.0 MB" in text and " 0% of" not in text and "of 1.0 MB" not in text
