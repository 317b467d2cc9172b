"""Same facts everywhere (analyzer/document/facts.py): the inputs a run read, could not read and skipped are one count
each, given alike by the terminal (its reading line and its summary), the findings JSON and the HTML report; an input
nothing could be read from says why on stderr and counts as unreadable; plurals agree with their number.

The reading line is drawn on a terminal only, so these runs get one: a pseudo-terminal as stderr."""
from __future__ import annotations

import json
import os
import pty
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_logs"
SYN = SAMPLES / "synthetic"

# a HAR whose only entry has no response: it opens, and nothing can be read from it
NO_RESPONSE_HAR = json.dumps({"log": {"version": "1.2", "creator": {"name": "x", "version": "1"}, "entries": [
    {"startedDateTime": "2026-12-01T10:00:00.000Z", "time": 1,
     "request": {"method": "GET", "url": "http://h/mcp", "httpVersion": "HTTP/1.1", "headers": [], "queryString": [], "cookies": [],
                 "headersSize": -1, "bodySize": 0},
     "cache": {}, "timings": {"send": 0, "wait": 0, "receive": 0}}]}})


def on_a_terminal(*args: str, cwd: Path = ROOT) -> tuple[str, str, int]:
    """``mcp-sse-audit ARGS`` with a pseudo-terminal as stderr (the progress is drawn there): stdout, stderr, exit code."""
    master, slave = pty.openpty()
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="400")
    env.pop("SOURCE_DATE_EPOCH", None)
    p = subprocess.Popen([sys.executable, "-m", "analyzer", *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    drained: list[bytes] = []
    reader = threading.Thread(target=lambda: drained.append(p.stdout.read()))  # a large stdout must not block the child
    reader.start()
    got = []
    while True:
        try:
            chunk = os.read(master, 1 << 16)
        except OSError:  # EIO: the process closed the terminal
            break
        if not chunk:
            break
        got.append(chunk)
    os.close(master)
    p.wait(timeout=600)
    reader.join()
    out = drained[0].decode()
    # the status line is redrawn in place: the lines as a reader's terminal keeps them
    err = "\n".join(part.rstrip() for part in b"".join(got).decode(errors="replace").replace("\r\n", "\n").split("\r"))
    return out, err, p.returncode


def the_three(out: str, err: str, doc: dict, html: str, store: int | None = None) -> dict:
    """Each count as the terminal's summary, its reading line, the JSON and the page give it; asserts they agree."""
    s = doc["summary"]
    counts = {"inputs": s["inputs"], "records": s["records"], "rejected": s["rejected"], "unreadable": s["inputs_unreadable"],
              "skipped": s["inputs_skipped"]}
    # the JSON: each count is its rows
    assert counts["inputs"] == len(doc["inputs"]) and counts["skipped"] == len(doc["skipped"])
    assert counts["unreadable"] == sum(1 for r in doc["inputs"] if r["error"])
    # the terminal's summary
    assert (f"inputs: {counts['inputs']} ({counts['records']} records, {counts['rejected']} rejected, {counts['unreadable']} unreadable, "
            f"{counts['skipped']} skipped)") in out.splitlines()
    # the terminal's reading line: the same inputs (a store's ingest: the new ones, beside those it held) and skipped
    line = next(x for x in err.splitlines() if x.startswith("read "))
    if store is None:
        word = "input" if counts["inputs"] == 1 else "inputs"
        assert line.startswith(f"read {counts['inputs']} {word}, {counts['skipped']} skipped, {counts['records']:,} records, "), line
    else:
        assert re.match(rf"read \d+ new inputs? into the store \({store} already in it\), {counts['skipped']} skipped, ", line), line
    # the page
    assert re.search(rf"<dt>inputs</dt><dd>{counts['inputs']}( \(|</dd>)", html)
    for label in ("records", "rejected", "unreadable", "skipped"):
        assert f"<dt>{label}</dt><dd>{counts[label]}</dd>" in html, label
    assert (f"Skipped files ({counts['skipped']})" in html) == bool(counts["skipped"])
    return counts


def test_the_samples_are_counted_alike_by_the_terminal_the_json_and_the_page(tmp_path):
    """The reading line said "(2 skipped: not a capture)" (the walked .json files alone) where the JSON and the page
    said 29 (every file passed over, most by their name)."""
    out, err, code = on_a_terminal("analyze", "sample_logs/", "--json", str(tmp_path / "f.json"), "--html", str(tmp_path / "r.html"))
    assert code == 1, err
    doc = json.loads((tmp_path / "f.json").read_text())
    counts = the_three(out, err, doc, (tmp_path / "r.html").read_text())
    assert counts["skipped"] > 2 and "sample_logs/README.md" in doc["skipped"]
    assert "sample_logs/recording/ts/package.json" in doc["skipped"]  # passed over by its content: one count with the rest


def test_a_store_window_is_counted_alike(tmp_path, samples_store):
    """``analyze PATHS --store S --since``: the reading line is the store's ingest ("read 0 new inputs into the store (N
    already in it)", it said "read 0 input(s)" beside a summary of 64), the summary, JSON and page count the inputs the
    window read, and the files the PATHs held that are no capture are skipped in all of them (the JSON had none)."""
    st = tmp_path / "st"
    shutil.copytree(samples_store, st)
    on_a_terminal("analyze", "sample_logs/", "--json", str(tmp_path / "all.json"), "-q")
    files = json.loads((tmp_path / "all.json").read_text())["summary"]["inputs"]  # every capture file (two hold the same bytes)
    args = ["--since", "2026-12-01", "--json", str(tmp_path / "w.json"), "--html", str(tmp_path / "w.html")]
    out, err, code = on_a_terminal("analyze", "sample_logs/", "--store", str(st), *args)
    assert code == 1, err
    doc = json.loads((tmp_path / "w.json").read_text())
    counts = the_three(out, err, doc, (tmp_path / "w.html").read_text(), store=files)
    assert 0 < counts["inputs"] < files and counts["skipped"] > 2
    # the same window over the files: the same files skipped
    plain, _, _ = on_a_terminal("analyze", "sample_logs/", "--since", "2026-12-01", "--json", str(tmp_path / "p.json"))
    assert json.loads((tmp_path / "p.json").read_text())["skipped"] == doc["skipped"]
    # the store alone (no PATHs): nothing passed over, nothing read by a reading line
    out, err, code = on_a_terminal("analyze", "--store", str(st), *args)
    doc = json.loads((tmp_path / "w.json").read_text())
    assert doc["summary"]["inputs_skipped"] == 0 and doc["skipped"] == []
    assert f"inputs: {counts['inputs']} ({counts['records']} records, {counts['rejected']} rejected, 0 unreadable, 0 skipped)" in out


def test_a_folder_with_files_that_are_no_captures(tmp_path):
    """A folder of one capture, a client's own JSON Lines log, a package.json, notes, a HAR whose only entry has no
    response and an empty log: three inputs (one unreadable, one read with 0 records), three files skipped, alike in
    every output; stderr names the unreadable one with its reason, and the empty one."""
    d = tmp_path / "night"
    d.mkdir()
    shutil.copy(SYN / "gap.jsonl", d / "gap.jsonl")
    (d / "client.jsonl").write_text('{"level": "info", "msg": "connected"}\n{"level": "info", "msg": "bye"}\n')
    (d / "package.json").write_text('{"name": "x"}\n')
    (d / "notes.txt").write_text("night shift\n")
    (d / "noresp.har").write_text(NO_RESPONSE_HAR)
    (d / "quiet.jsonl").write_text("")
    out, err, code = on_a_terminal("analyze", str(d), "--json", str(tmp_path / "f.json"), "--html", str(tmp_path / "r.html"))
    assert code == 1, err  # the gap is critical; the unreadable HAR is lost input too
    doc = json.loads((tmp_path / "f.json").read_text())
    counts = the_three(out, err, doc, (tmp_path / "r.html").read_text())
    assert counts["inputs"] == 3 and counts["unreadable"] == 1 and counts["skipped"] == 3
    assert sorted(Path(p).name for p in doc["skipped"]) == ["client.jsonl", "notes.txt", "package.json"]
    rows = {Path(r["path"]).name: r for r in doc["inputs"]}
    assert rows["noresp.har"]["error"].startswith("no record could be read") and rows["quiet.jsonl"]["error"] is None
    assert f"error: {d / 'noresp.har'}: no record could be read: its one record was rejected" in err
    assert "[har_entry_invalid]" in err and "needs `request` and `response` objects" in err
    assert f"warning: {d / 'quiet.jsonl'}: it holds no records" in err
    assert f"skipped: {d / 'client.jsonl'}: not a capture" in err


def test_an_input_nothing_could_be_read_from_names_its_reason(tmp_path):
    """Unreadable: a HAR whose only entry has no response (the run said only "no input was readable", and the JSON
    counted 0 unreadable), a JSON file that is no HAR.  Read with 0 records: an empty JSONL log, a HAR without entries
    (an empty log said "not a proxy JSONL log or a HAR file", unreadable).  The store's analysis says what the single
    pass says."""
    from click.testing import CliRunner

    from analyzer.cli import main

    cases = {
        "noresp.har": (NO_RESPONSE_HAR, 2, "no record could be read: its one record was rejected (its anomalies say why); "
                                           "entry 1: [har_entry_invalid]"),
        "other.json": ('{"hello": "world"}', 2, "JSON, but neither proxy JSONL"),
        # read, not unreadable; but a run whose inputs hold no record at all is no clean night: exit 2 (analyzer/run.py)
        "empty.jsonl": ("", 2, None),
        "noentries.har": ('{"log": {"version": "1.2", "entries": []}}', 2, None),
    }
    for name, (text, exit_code, why) in cases.items():
        p = tmp_path / name
        p.write_text(text)
        js = tmp_path / f"{name}.json"
        r = CliRunner().invoke(main, ["analyze", str(p), "--json", str(js), "--html", str(tmp_path / f"{name}.html")])
        assert r.exit_code == exit_code, (name, r.output)
        doc = json.loads(js.read_text())
        row = doc["inputs"][0]
        if why:
            assert r.stderr.startswith(f"error: {p}: ") and why in r.stderr, (name, r.stderr)
            assert doc["summary"]["inputs_unreadable"] == 1 and row["error"], name
            assert "nothing was analyzed: no input was readable (1 input, 1 unreadable, 0 files skipped)" in (tmp_path / f"{name}.html").read_text()
        else:
            assert f"warning: {p}: it holds no records (read, with 0 records" in r.stderr, (name, r.stderr)
            assert doc["summary"]["inputs_unreadable"] == 0 and row["error"] is None and row["records"] == 0, name
            assert [a["code"] for a in doc["anomalies"]] == ["input_empty"], name
            assert "error: the inputs hold no record at all (empty captures); nothing to analyze" in r.stderr, name
    # through a store: the same row, the same count
    st = tmp_path / "st"
    CliRunner().invoke(main, ["ingest", str(tmp_path / "noresp.har"), str(SYN / "gap.jsonl"), "--store", str(st), "-q"])
    r = CliRunner().invoke(main, ["analyze", "--store", str(st), "--json", str(tmp_path / "st.json")])
    single = CliRunner().invoke(main, ["analyze", str(tmp_path / "noresp.har"), str(SYN / "gap.jsonl"), "--json", str(tmp_path / "s.json")])
    stored, plain = (json.loads((tmp_path / n).read_text()) for n in ("st.json", "s.json"))
    assert stored["summary"]["inputs_unreadable"] == plain["summary"]["inputs_unreadable"] == 1
    assert [row["error"] for row in stored["inputs"]] == [row["error"] for row in plain["inputs"]]
    assert r.exit_code == single.exit_code == 1 and f"error: {tmp_path / 'noresp.har'}: no record could be read" in r.stderr


def test_one_of_each_is_said_in_the_singular(tmp_path):
    """ "1 reconnects judged in 1 sessions": one helper (facts.plural) words every count of the terminal, the page and
    JUnit."""
    out, err, code = on_a_terminal("analyze", str(SYN / "gap.jsonl"), "--html", str(tmp_path / "r.html"), "--junit", str(tmp_path / "j.xml"),
                                   "--fail-on", "warning")
    html = (tmp_path / "r.html").read_text()
    assert "1 reconnect judged in 1 session<" in html and "reconnects judged" not in html
    assert "After the 1 reconnect that was not continuous, the client" in html
    assert re.search(r"Timeline of session [^:]+: \d+ connections?, 1 reconnect<", html)
    assert "(1 of 1, in 1 session)" in html
    assert re.search(r"^read 1 input, 0 skipped, ", err, re.M) and "1 reconnect judged; checking" in err
    # JUnit: a damaged input with one error anomaly
    damaged = tmp_path / "cut.jsonl"
    damaged.write_text((SYN / "gap.jsonl").read_text() + '{"kind": "sse", "conn": \n')
    from analyzer.document import ci

    doc = json.loads(subprocess.run([sys.executable, "-m", "analyzer", "analyze", str(damaged), "--json", "-", "-q"], cwd=ROOT,
                                    env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True).stdout)
    xml = ci.junit_xml(doc, "error")
    assert "1 error-severity anomaly" in xml and "1 error-severity anomalies" not in xml
