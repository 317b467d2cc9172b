"""Fingerprints and --baseline: a nightly audit alerts on what is new, not on what it already reported."""
from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from analyzer import pipeline
from analyzer.cli import main
from analyzer.document import records

ROOT = Path(__file__).resolve().parent.parent
SYN = ROOT / "sample_logs" / "synthetic"
SCHEMA = json.loads((ROOT / "schemas" / "findings.schema.json").read_text())


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def findings(*paths) -> list[dict]:
    return records.plain(pipeline.run([str(p) for p in paths]).document)["findings"]


def test_every_finding_carries_fingerprint_time_and_what_to_do():
    fs = findings(SYN)
    assert fs and all(len(f["fingerprint"]) == 24 and int(f["fingerprint"], 16) >= 0 for f in fs)
    assert all(f["time"] and f["what"] and f["next_step"] for f in fs)
    assert list(fs[0])[:3] == ["id", "fingerprint", "rule"]


def test_the_fingerprint_is_content_not_position(tmp_path):
    """The same capture alone, among others (other S/b/x/f numbers), renamed in another folder, and with its records
    moved down the file (other line numbers in every message): the same fingerprints."""
    alone = findings(SYN / "gap.jsonl")
    among = [f for f in findings(SYN) if any(e["source"].endswith("synthetic/gap.jsonl") for e in f["evidence"])]
    moved = tmp_path / "elsewhere" / "night-2026-11-13.jsonl"
    moved.parent.mkdir()
    lines = (SYN / "gap.jsonl").read_text().splitlines(keepends=True)
    # two unrelated connections' records first: every line number of gap.jsonl's records changes
    noise = [json.dumps({"kind": "close", "ts": "2026-11-13T08:00:00Z", "conn": f"other-{i}", "reason": "eof"}) + "\n" for i in range(2)]
    moved.write_text("".join(noise + lines))
    shifted = findings(moved)
    assert alone and [f["message"] for f in shifted] != [f["message"] for f in alone]  # the messages name other lines
    assert sorted(f["fingerprint"] for f in shifted) == sorted(f["fingerprint"] for f in alone)
    # in the folder the HAR of the same traffic is beside it (its finding reported once, seen in both): the same fingerprint
    assert {f["fingerprint"] for f in alone} <= {f["fingerprint"] for f in among}


def test_fingerprints_tell_findings_apart(samples_run):
    """Within the samples, two findings share a fingerprint only when they are one thing seen twice: the HAR and
    the proxy log of the same stateless traffic, which no session id ties into one finding."""
    fs = records.plain(samples_run)["findings"]  # the samples' document, analyzed once per session (tests/conftest.py)
    seen: dict[str, list[dict]] = {}
    for f in fs:
        seen.setdefault(f["fingerprint"], []).append(f)
    shared = [group for group in seen.values() if len(group) > 1]
    for group in shared:
        assert len({(f["rule"], f["session_id"], f["time"]) for f in group}) == 1
        assert all(not f["session_id"] for f in group)
        assert len({f["evidence"][0]["source"].rsplit(".", 1)[0] for f in group}) == 1  # one traffic, two formats
    assert len(seen) >= len(fs) - len(shared)


def test_baseline_counts_only_new_findings(tmp_path):
    base = tmp_path / "base.json"
    # last night: the gap capture alone (a critical finding); tonight: the gap capture and the epoch change
    assert run("analyze", str(SYN / "gap.jsonl"), "--json", str(base)).exit_code == 1
    out = tmp_path / "tonight.json"
    r = run("analyze", str(SYN / "gap.jsonl"), str(SYN / "epoch_change.jsonl"), "--baseline", str(base), "--json", str(out))
    doc = json.loads(out.read_text())
    jsonschema.validate(doc, SCHEMA)
    old = {f["fingerprint"] for f in json.loads(base.read_text())["findings"]}
    for f in doc["findings"]:
        assert f["baseline"] == ("known" if f["fingerprint"] in old else "new")
    b = doc["summary"]["baseline"]
    assert b["known"] == len(old) and b["new"] == len(doc["findings"]) - len(old) > 0 and b["gone"] == 0
    assert r.exit_code == 1  # the epoch change is new and critical
    assert f"findings: {b['new']} new ({b['known']} known, 0 gone) against the baseline {base}" in r.stdout
    assert "epoch_change" in r.stdout and "  [critical] gap" not in r.stdout  # only new findings are listed
    # the same night again, with tonight's run as the baseline: nothing new, exit 0 although criticals exist
    r = run("analyze", str(SYN / "gap.jsonl"), str(SYN / "epoch_change.jsonl"), "--baseline", str(out))
    assert r.exit_code == 0 and "findings: 0 new (" in r.stdout and "all findings of this run: 2 critical" in r.stdout
    # and damaged input still fails the run: the baseline is about findings, not about lost input
    r = run("analyze", str(SYN / "gap.jsonl"), str(SYN / "epoch_change.jsonl"), "/nonexistent.jsonl", "--baseline", str(out))
    assert r.exit_code == 1


def test_gone_findings_are_counted_and_listed(tmp_path):
    base = tmp_path / "base.jsonl"
    assert run("analyze", str(SYN / "gap.jsonl"), str(SYN / "epoch_change.jsonl"), "--json-lines", str(base)).exit_code == 1
    out = tmp_path / "f.json"
    r = run("analyze", str(SYN / "gap.jsonl"), "--baseline", str(base), "--json", str(out))  # a JSON Lines baseline
    doc = json.loads(out.read_text())
    b = doc["summary"]["baseline"]
    assert b["new"] == 0 and b["known"] == len(doc["findings"]) and b["gone"] >= 1
    assert {g["rule"] for g in b["gone_findings"]} == {"epoch_change"}
    assert r.exit_code == 0


@pytest.mark.parametrize("content, says", [
    ("not json at all", "not a findings document of mcp-sse-audit"),
    ('{"findings": []}', "not a findings document of mcp-sse-audit"),
    (json.dumps({"tool": {"name": "mcp-sse-audit", "version": "0.0.9"}, "findings": [{"rule": "gap", "severity": "critical"}]}),
     "its findings have no fingerprints (written by mcp-sse-audit 0.0.9"),
])
def test_a_baseline_that_cannot_be_used_is_one_clear_error(tmp_path, content, says):
    base = tmp_path / "base.json"
    base.write_text(content)
    out = tmp_path / "f.json"
    r = run("analyze", str(SYN / "gap.jsonl"), "--baseline", str(base), "--json", str(out))
    assert r.exit_code == 2 and says in r.stderr and str(base) in r.stderr and len(r.stderr.splitlines()) == 1
    assert not out.exists()  # it fails before the analysis
    r = run("analyze", str(SYN / "gap.jsonl"), "--baseline", str(tmp_path))  # a folder: not a first run, a mistake
    assert r.exit_code == 2 and "is a directory" in r.stderr
    (tmp_path / "dangling.json").symlink_to(tmp_path / "gone" / "x.json")  # a link to nothing: a mistake too
    r = run("analyze", str(SYN / "gap.jsonl"), "--baseline", str(tmp_path / "dangling.json"))
    assert r.exit_code == 2 and "cannot read it" in r.stderr


def test_the_same_fingerprints_through_a_store(tmp_path):
    """Engines differ in how they number things; the fingerprints do not."""
    shutil.copy(SYN / "gap.jsonl", tmp_path / "gap.jsonl")
    store = tmp_path / "store"
    assert run("ingest", str(tmp_path / "gap.jsonl"), str(SYN / "epoch_change.har"), "--store", str(store), "-q").exit_code == 0
    out = tmp_path / "f.json"
    run("analyze", "--store", str(store), "--json", str(out), "-q")
    direct = findings(tmp_path / "gap.jsonl", SYN / "epoch_change.har")
    assert sorted(f["fingerprint"] for f in json.loads(out.read_text())["findings"]) == sorted(f["fingerprint"] for f in direct)


def test_the_report_says_new_known_and_gone(tmp_path):
    base, page = tmp_path / "base.json", tmp_path / "r.html"
    run("analyze", str(SYN / "gap.jsonl"), "--json", str(base))
    run("analyze", str(SYN / "gap.jsonl"), str(SYN / "epoch_change.jsonl"), "--baseline", str(base), "--html", str(page))
    html = page.read_text()
    assert f"Against the baseline <code>{base}</code>" in html and "<strong>1 new</strong>, 1 known, 0 gone" in html
    assert html.count('data-baseline="new"') >= 1 and html.count('data-baseline="known"') >= 1


def test_a_baseline_over_a_store_in_partitions_is_the_same(tmp_path):
    """The spilling writer (--partitions N, no --html) marks and counts as the whole document does: same bytes."""
    store = tmp_path / "store"
    run("ingest", str(SYN / "gap.jsonl"), str(SYN / "epoch_change.jsonl"), str(SYN / "replay_reset.jsonl"), "--store", str(store), "-q")
    base = tmp_path / "base.json"
    run("analyze", str(SYN / "gap.jsonl"), "--json", str(base), "-q")
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    env = {"SOURCE_DATE_EPOCH": "1764547200"}
    r1 = CliRunner().invoke(main, ["analyze", "--store", str(store), "--baseline", str(base), "--json", str(one), "-q"], env=env)
    r2 = CliRunner().invoke(main, ["analyze", "--store", str(store), "--partitions", "2", "--baseline", str(base), "--json", str(two), "-q"],
                            env=env)
    assert r1.exit_code == r2.exit_code == 1
    a, b = json.loads(one.read_text()), json.loads(two.read_text())
    assert a["summary"]["baseline"] == b["summary"]["baseline"] and a["summary"]["baseline"]["known"] >= 1
    assert [f["baseline"] for f in a["findings"]] == [f["baseline"] for f in b["findings"]]
    assert a == b


# --- a baseline is input too: bounded, validated, redacted again (issue [2/5] item 8) -------------------------


def _doc(findings) -> str:
    return json.dumps({"tool": {"name": "mcp-sse-audit", "version": "0.1.0"}, "generated_at": "2026-12-01T00:00:00Z", "findings": findings})


GOOD = {"fingerprint": "0123456789abcdef01234567", "rule": "gap", "severity": "critical", "session_id": "s", "time": "2026-11-13T09:00:03.000000Z"}


@pytest.mark.parametrize("content", [
    "[" * 100_000 + "]" * 100_000,  # nesting past the parser's recursion
    _doc([GOOD]).replace('"time": "2026-11-13T09:00:03.000000Z"', '"time": ' + "9" * 5000),  # past Python's int digits
    _doc([GOOD | {"time": 12}]),  # a time of another type
    _doc([GOOD | {"fingerprint": "x" * 24}]),
    _doc([GOOD | {"rule": "<script>"}]),
    _doc([GOOD]).replace('"session_id": "s"', '"session_id": NaN'),
])
def test_a_hostile_baseline_is_one_clear_error(tmp_path, content):
    base = tmp_path / "base.json"
    base.write_text(content)
    r = run("analyze", str(SYN / "gap.jsonl"), "--baseline", str(base), "--json", str(tmp_path / "f.json"))
    assert r.exit_code == 2 and str(base) in r.stderr and len(r.stderr.splitlines()) == 1, r.output
    assert "Traceback" not in r.output


def test_a_baseline_is_read_within_bounds_never_from_a_device_or_a_pipe(tmp_path):
    (tmp_path / "zero.json").symlink_to("/dev/zero")
    r = run("analyze", str(SYN / "gap.jsonl"), "--baseline", str(tmp_path / "zero.json"))
    assert r.exit_code == 2 and "not a regular file" in r.stderr
    os.mkfifo(tmp_path / "fifo.json")  # nobody writes to it: reading it would block forever
    r = run("analyze", str(SYN / "gap.jsonl"), "--baseline", str(tmp_path / "fifo.json"))
    assert r.exit_code == 2 and "not a regular file" in r.stderr


def test_a_baseline_with_a_bom_secrets_and_lone_surrogates_is_read_and_nothing_leaks(tmp_path):
    """A UTF-8 BOM is read; a message holding a JWT or a lone surrogate is redacted again / made writable before
    it is copied into tonight's outputs (gone_findings)."""
    jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
    gone = GOOD | {"fingerprint": "fedcba9876543210fedcba98", "message": f"token {jwt} \ud800 end"}
    (tmp_path / "base.json").write_bytes(b"\xef\xbb\xbf" + _doc([gone]).encode())
    out = tmp_path / "f.json"
    r = run("analyze", str(SYN / "gap.jsonl"), "--baseline", str(tmp_path / "base.json"), "--json", str(out))
    assert r.exit_code == 1, r.output
    text = out.read_text()
    assert jwt not in text and "\\ud800" not in text
    [g] = json.loads(text)["summary"]["baseline"]["gone_findings"]
    assert g["fingerprint"] == gone["fingerprint"] and g["message"].endswith(" end")


# ---------------------------------------------------------------- the baseline leads every output

NIGHT = [str(SYN / n) for n in ("gap.jsonl", "epoch_change.jsonl", "replay_reset.jsonl", "unverifiable.jsonl")]


def _night(tmp_path, base: Path, name: str):
    """Tonight's run against ``base``: its stdout, document, page and JUnit report."""
    out = {k: tmp_path / f"{name}.{k}" for k in ("json", "html", "xml")}
    # (COLUMNS unset: the terminal's lines whole, whatever the environment running the tests sets)
    r = CliRunner().invoke(main, ["analyze", *NIGHT, "--baseline", str(base), "--json", str(out["json"]), "--html", str(out["html"]),
                                  "--junit", str(out["xml"])], catch_exceptions=False, env={"COLUMNS": None})
    return r, json.loads(out["json"].read_text()), out["html"].read_text(), out["xml"].read_text()


def _findings_line(stdout: str) -> str:
    return next(line for line in stdout.splitlines() if line.startswith("findings:"))


def _rows(html: str, attr: str) -> dict[str, str]:
    """The opening tags of the page's rows/items marked ``data-f="<attr>"``, by their id (or their text)."""
    return {m[1]: m[0] for m in re.finditer(r'<tr id="([^"]+)"[^>]*data-f="' + attr + '"[^>]*>', html)}


def test_a_baseline_of_the_night_itself_gives_0_new_in_every_output(tmp_path):
    """Night two with night one's findings as the baseline: every output leads with "0 new (N known, 0 gone)"; the
    page is not red although criticals exist (they are known), and each known finding is muted and says "known"."""
    from junitparser import JUnitXml, Skipped

    base = tmp_path / "night1.json"
    assert run("analyze", *NIGHT, "--json", str(base)).exit_code == 1
    n = len(json.loads(base.read_text())["findings"])
    r, doc, html, xml = _night(tmp_path, base, "night2")
    assert r.exit_code == 0 and doc["summary"]["findings_by_severity"]["critical"] >= 2
    head = f"0 new ({n} known, 0 gone)"
    # the terminal: the first findings line is the baseline's; no finding listed; "next:" points at none
    assert _findings_line(r.stdout).startswith(f"findings: {head} against the baseline {base}")
    assert "  [critical]" not in r.stdout and f"{n} known findings (in the baseline) not listed" in r.stdout
    assert "next: nothing new against the baseline" in r.stdout
    # the page: the banner says the same and takes its colour from the new findings (none: green), not the critical ones
    banner = re.search(r'<p class="status ([a-z-]+)">([^<]*)</p>', html)
    assert banner[1] == "s-ok" and banner[2].startswith(head) and f"<title>mcp-sse-audit report: {head}" in html
    # every list where findings appear: each known one muted (a class) and marked in words
    findings_rows = _rows(html, "f")
    assert len(findings_rows) == n and all('class="known"' in tag for tag in findings_rows.values())
    where = html[html.index('<h3 id="sum-where">'):html.index('<h3 id="sum-top">')]
    worst = re.findall(r"<tr[^>]*data-f=\"w\"[^>]*>.*?</tr>", where, re.S)
    assert worst and all('class="known"' in row and '<span class="tag tag-known">known</span>' in row for row in worst)
    top = html[html.index('<h3 id="sum-top">'):html.index('<h2 id="findings">')]
    items = re.findall(r"<li[^>]*>.*?</li>", top, re.S)
    assert items and all(item.startswith('<li class="known">') and "tag-known" in item for item in items)
    muted = set(re.findall(r'<article class="card [^"]* known" id="([^"]+)"', html))
    carded = {f["boundary"] for f in doc["findings"] if f.get("boundary")}  # (a retry's later attempts are muted with it)
    assert carded and carded <= muted
    assert ".card.known {" in html and "tr.known > th" in html  # the muting is in the page's CSS
    # JUnit: the run's title says it, the known findings are skipped cases, nothing fails
    root = JUnitXml.fromstring(xml.encode())
    assert root.name == f"mcp-sse-audit: {head} against the baseline {base}; known findings are skipped cases"
    assert root.failures == 0 and root.skipped >= 1
    skipped = [c for s in root for c in s if any(isinstance(x, Skipped) for x in c.result)]
    assert len(skipped) == root.skipped


def test_a_baseline_missing_one_finding_gives_1_new_and_it_leads(tmp_path):
    """The baseline lacks the night's worst finding: "1 new" everywhere, that finding is the one listed and the one
    "next:" points at, the banner is red for it, and it alone is not muted."""
    from junitparser import JUnitXml

    night1 = tmp_path / "night1.json"
    run("analyze", *NIGHT, "--json", str(night1))
    full = json.loads(night1.read_text())
    worst = full["findings"][0]  # f1: the worst
    assert worst["severity"] == "critical"
    full["findings"] = full["findings"][1:]
    base = tmp_path / "base.json"
    base.write_text(json.dumps(full))
    n = len(full["findings"])
    r, doc, html, xml = _night(tmp_path, base, "night2")
    assert r.exit_code == 1
    head = f"1 new ({n} known, 0 gone)"
    assert _findings_line(r.stdout).startswith(f"findings: {head} against the baseline {base}; new: 1 critical")
    listed = [line for line in r.stdout.splitlines() if line.startswith("  [")]
    assert len(listed) == 1 and listed[0].startswith(f"  [critical] {worst['rule']}, session {worst['session']} ")
    nxt = next(line for line in r.stdout.splitlines() if line.startswith("next:"))
    assert nxt.startswith(f"next: open {tmp_path / 'night2.html'}#{worst['session']} ({worst['rule']})")
    banner = re.search(r'<p class="status ([a-z-]+)">([^<]*)</p>', html)
    assert banner[1] == "s-critical" and banner[2].startswith(head)
    new = [f for f in doc["findings"] if f["baseline"] == "new"]
    assert [f["fingerprint"] for f in new] == [worst["fingerprint"]]
    rows = _rows(html, "f")
    anchor = f"finding-{new[0]['id']}"
    assert 'class="known"' not in rows[anchor] and sum('class="known"' in tag for tag in rows.values()) == len(rows) - 1
    assert re.search(rf'<tr id="{anchor}"[^>]*>.*?<strong data-baseline="new">new:</strong>', html, re.S)
    # the summary's lists lead with it, unmuted
    top = html[html.index('<h3 id="sum-top">'):html.index('<h2 id="findings">')]
    first = re.search(r"<li[^>]*>.*?</li>", top, re.S)[0]
    assert first.startswith("<li>") and f'href="#{anchor}"' in first and "tag-known" not in first
    where = html[html.index('<h3 id="sum-where">'):html.index('<h3 id="sum-top">')]
    row = re.search(r"<tr[^>]*data-f=\"w\"[^>]*>.*?</tr>", where, re.S)[0]
    assert 'class="known"' not in row and f">{worst['boundary']}</a>" in row
    card = re.search(rf'<article class="card[^"]*" id="{re.escape(worst["boundary"])}"', html)[0]
    assert " known" not in card
    root = JUnitXml.fromstring(xml.encode())
    assert root.name.startswith(f"mcp-sse-audit: {head}") and root.failures == 1
