"""Odd environments (issue [3/5] item 6): an internal error is always exit 3 in one line, and a reader that
closes standard output early is never a clean exit."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GAP = str(ROOT / "sample_logs" / "synthetic" / "gap.jsonl")
BIG = sorted(str(p) for p in (ROOT / "sample_logs").glob("real-python-*.jsonl"))  # a page of about 500 KiB


@pytest.mark.parametrize("unbuffered", ["", "1"])
def test_a_reader_that_stops_early_is_exit_2_also_unbuffered(unbuffered):
    """With PYTHONUNBUFFERED=1 (many container images) standard output is the raw file: one write() took the
    pipe's 64 KiB and the rest was dropped, exit 0, no word."""
    env = {**os.environ, "PYTHONUNBUFFERED": unbuffered}
    proc = subprocess.Popen([sys.executable, "-m", "analyzer", "analyze", *BIG, "--html", "-", "--fail-on", "never"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    head = proc.stdout.read(1000)
    proc.stdout.close()  # the reader goes away (| head -c 1000)
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 2 and head.startswith(b"<!DOCTYPE html>")
    assert "standard output was closed before the output was complete" in err


def test_the_whole_output_when_the_reader_reads_it_unbuffered():
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    got = subprocess.run([sys.executable, "-m", "analyzer", "analyze", *BIG, "--html", "-", "--fail-on", "never"],
                         cwd=ROOT, env=env, capture_output=True, timeout=120)
    assert got.returncode == 0 and len(got.stdout) > 1 << 17 and got.stdout.rstrip().endswith(b"</html>")


LOADER = """
import sys
FAILING = sys.argv[1]
class Fail:
    def find_spec(self, name, path=None, target=None):
        if name == FAILING:
            raise {exc}
sys.meta_path.insert(0, Fail())
from analyzer.__main__ import main
sys.argv = ["mcp-sse-audit", "analyze", sys.argv[2]]
sys.exit(main())
"""


@pytest.mark.parametrize("exc", ["MemoryError()", "ImportError('x.so: failed to map segment from shared object')", "NameError('PySeries')"])
@pytest.mark.parametrize("module", ["analyzer.cli", "polars"])
def test_a_failure_while_loading_is_exit_3_in_one_line(exc, module):
    """Under `prlimit --as=500M` loading failed as MemoryError, as an ImportError of a native module, or with Polars
    half-loaded: a traceback of 13-30 lines and exit 1, which reads as 'findings'."""
    got = subprocess.run([sys.executable, "-c", LOADER.format(exc=exc), module, GAP], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert got.returncode == 3, got.stderr
    lines = got.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: internal error: the program could not load (") and "raise it" in lines[0]
