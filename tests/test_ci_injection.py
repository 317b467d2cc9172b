"""No capture content steers the CI runner that reads the tool's output (issue [2/5] item 1).

GitHub's runner reads workflow commands from standard output and standard error: ``::name::`` at a line's start
(after white space) and ``##[name]`` anywhere in a line.  A JSON-RPC method, a tool name, a session id and a file
name carry such sequences here; in every mode no line the tool prints holds one, except the tool's own annotations.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SYN = ROOT / "sample_logs" / "synthetic"
COMMAND_AT_START = re.compile(r"^[ \t]*::")
OWN = re.compile(r"^::(error|warning|notice)( [a-z]+=[^:]*)?::")  # the annotations --github-annotations writes


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("inject")
    out = []
    for line in (SYN / "gap.jsonl").read_text().splitlines():
        r = json.loads(line)
        h = r.get("headers") or {}
        if "mcp-session-id" in h:
            h["mcp-session-id"] = "##[error]forged-" + h["mcp-session-id"]
        for key in ("body", "data"):
            if isinstance(r.get(key), str) and r[key].startswith("{"):
                msg = json.loads(r[key])
                if msg.get("method") == "tools/call":
                    msg["params"]["name"] = "##[add-mask]tool\n::stop-commands::zz"
                elif msg.get("method", "").startswith("notifications/"):
                    msg["method"] = "::stop-commands::x"
                r[key] = json.dumps(msg)
        out.append(json.dumps(r))
    (d / "gap.jsonl").write_text("\n".join(out) + "\n")
    (d / "##[stop-commands]zz.har").write_text("not a capture\n")
    return d


@pytest.mark.parametrize("mode", [[], ["--github-annotations"], ["--json", "-"], ["--json-lines", "-"], ["--junit", "-"],
                                  ["--html", "-"], ["--metrics", "-"]])
def test_no_line_printed_is_a_workflow_command(hostile, mode):
    r = subprocess.run([sys.executable, "-c", "from analyzer.cli import main; main()", "analyze", str(hostile), *mode],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode in (1, 2), r.stderr
    lines = (r.stdout + "\n" + r.stderr).splitlines()
    assert any("stop-commands" in line for line in lines)  # the hostile text is shown ...
    for line in lines:  # ... harmlessly
        assert "##[" not in line, line
        assert not COMMAND_AT_START.match(line) or (mode == ["--github-annotations"] and OWN.match(line)), line
