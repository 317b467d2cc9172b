"""The trend over a store's days (analyzer/document/trend.py), in the JSON and in the report's Trend section.

``python tests/test_trend.py --screenshot OUT.png`` renders a store of several days and hosts (a hostile one among
them) with the system's Chromium and saves the Trend section's screenshot: look at it after changing the chart.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import sys
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from analyzer import catalog
from analyzer.cli import main
from analyzer.document import trend

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_logs"
SYN = SAMPLES / "synthetic"
SCHEMA = json.loads((ROOT / "schemas" / "findings.schema.json").read_text())
EPOCH = {"SOURCE_DATE_EPOCH": "1764547200"}
HOSTILE = '<img src=x onerror=alert(1)>"q\\'  # an authority (no "/", "?" or "#") that is markup, a quote and a backslash
_SID = re.compile(r'"mcp-session-id": "([^"]+)"')


def shifted(src: Path, dst: Path, day: str, host: str, tag: str) -> Path:
    """The synthetic capture ``src`` (2026-11-13, http://127.0.0.1:8765) moved to ``day`` and ``host``, its session ids
    made its own (``tag`` appended: copies must not be one incident)."""
    text = src.read_text()
    for sid in set(_SID.findall(text)):
        text = text.replace(sid, sid + tag)
    lines = []
    for line in text.splitlines():
        rec = json.loads(line)
        if "url" in rec:
            rec["url"] = rec["url"].replace("127.0.0.1:8765", host)
        lines.append(json.dumps(rec).replace('"2026-11-13T', f'"{day}T'))
    dst.write_text("\n".join(lines) + "\n")
    return dst


def days_store(tmp: Path) -> Path:
    """A store of captures over five days to two hosts (one hostile), with gaps, resets and continuous reconnects."""
    caps = tmp / "caps"
    caps.mkdir()
    plan = [("2026-11-13", "mcp.example.com", ("gap", "continuous")), ("2026-11-14", "mcp.example.com", ("continuous",)),
            ("2026-11-16", "mcp.example.com", ("replay_reset", "gap", "epoch_change")), ("2026-11-16", HOSTILE, ("gap",)),
            ("2026-11-17", HOSTILE, ("continuous", "unverifiable"))]
    n = 0
    for day, host, names in plan:
        for name in names:
            n += 1
            shifted(SYN / f"{name}.jsonl", caps / f"{day}-{n}-{name}.jsonl", day, host, f"d{n}")
    st = tmp / "st"
    r = CliRunner().invoke(main, ["ingest", str(caps), "--store", str(st), "-q"])
    assert r.exit_code == 0, r.output
    return st


def test_per_day_adds_plain_rows_up_by_day_and_host():
    rows = [{"day": "2026-11-14", "host": "b", "diverged": True, "events_lost": 3},
            {"day": None, "host": "a", "diverged": False, "events_lost": 0},
            {"day": "2026-11-14", "host": "a", "diverged": False, "events_lost": 0},
            {"day": "2026-11-13", "host": "b", "diverged": False, "events_lost": None},
            {"day": "2026-11-14", "host": "b", "diverged": True, "events_lost": 2}]
    assert trend.per_day(rows) == [
        {"day": "2026-11-13", "host": "b", "judged": 1, "diverged": 0, "events_lost": 0},
        {"day": "2026-11-14", "host": "a", "judged": 1, "diverged": 0, "events_lost": 0},
        {"day": "2026-11-14", "host": "b", "judged": 2, "diverged": 2, "events_lost": 5},
        {"day": None, "host": "a", "judged": 1, "diverged": 0, "events_lost": 0},
    ]
    assert trend.per_day([]) == []


def test_the_samples_store_has_its_trend_per_day_and_host(samples_store, tmp_path):
    """The sample logs span 2026-11-13 .. 2026-12-05: every reconnect of the store's document counted once, on the
    UTC day of its request and under the host of its request's URL, diverged as the summary counts it."""
    out = tmp_path / "f.json"
    r = CliRunner().invoke(main, ["analyze", "--store", str(samples_store), "--json", str(out), "-q"], env=EPOCH)
    assert r.exit_code == 1, r.output
    doc = json.loads(out.read_text())
    jsonschema.validate(doc, SCHEMA)
    got = doc["trend"]
    s = doc["summary"]
    assert sum(d["judged"] for d in got) == s["boundaries"] > 20
    assert sum(d["diverged"] for d in got) == sum(s["verdicts"][v] for v in catalog.DIVERGED) > 0
    assert sum(d["events_lost"] for d in got) == sum(b["lost_count"] for b in doc["boundaries"]) > 0
    assert {d["day"] for d in got} == {"2026-11-13", "2026-12-02", "2026-12-03", "2026-12-04", "2026-12-05"}
    # the same counts made another way: the request's URL split by urllib
    from urllib.parse import urlsplit

    url = {x["exchange_id"]: x["url"] for x in doc["exchanges"]}
    expect = Counter()
    for b in doc["boundaries"]:
        key = (b["started"][:10], urlsplit(url[b["request_exchange"]]).netloc)
        expect[key + ("judged",)] += 1
        expect[key + ("diverged",)] += b["verdict"] in catalog.DIVERGED
    assert {(d["day"], d["host"], k): d[k] for d in got for k in ("judged", "diverged")} == {k: v for k, v in expect.items()}
    assert got == sorted(got, key=lambda d: (d["day"], d["host"]))
    # PATHs without a store: no trend (the store's days are what it shows)
    r = CliRunner().invoke(main, ["analyze", str(SYN / "gap.jsonl"), "--json", "-", "-q"])
    assert "trend" not in json.loads(r.stdout)


def test_a_store_in_partitions_written_as_it_goes_has_the_same_trend(tmp_path):
    """--partitions N without --html spills the JSON: its trend is added up boundary by boundary, and equals the
    whole document's."""
    st = days_store(tmp_path)
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    for out, more in ((one, []), (two, ["--partitions", "3"])):
        r = CliRunner().invoke(main, ["analyze", "--store", str(st), "--json", str(out), "-q", *more], env=EPOCH)
        assert r.exit_code == 1, r.output
    a, b = json.loads(one.read_text()), json.loads(two.read_text())
    assert len(a["trend"]) == 5 and list(b)[-1] == "trend"
    assert a == b


def test_the_report_draws_the_trend_per_host_with_hosts_escaped(tmp_path):
    st = days_store(tmp_path)
    html_out, json_out = tmp_path / "r.html", tmp_path / "f.json"
    r = CliRunner().invoke(main, ["analyze", "--store", str(st), "--html", str(html_out), "--json", str(json_out), "-q"], env=EPOCH)
    assert r.exit_code == 1, r.output
    doc = json.loads(json_out.read_text())
    hostile = HOSTILE.lower()
    assert doc["trend"] == [
        {"day": "2026-11-13", "host": "mcp.example.com", "judged": 2, "diverged": 1, "events_lost": 3},  # gap (3 lost), continuous
        {"day": "2026-11-14", "host": "mcp.example.com", "judged": 1, "diverged": 0, "events_lost": 0},
        {"day": "2026-11-16", "host": hostile, "judged": 1, "diverged": 1, "events_lost": 3},
        {"day": "2026-11-16", "host": "mcp.example.com", "judged": 3, "diverged": 3, "events_lost": 3},  # replay_reset, gap, epoch_change
        {"day": "2026-11-17", "host": hostile, "judged": 2, "diverged": 0, "events_lost": 0},
    ]
    html = html_out.read_text()
    section = html[html.index('<section aria-labelledby="sum-trend">'):html.index('<section aria-labelledby="findings">')]
    tags = _Tags()
    tags.feed(section)
    assert "img" not in tags.seen and tags.seen <= {"section", "h3", "h4", "p", "code", "svg", "text", "line", "rect", "title",
                                                    "ul", "li", "div", "table", "caption", "thead", "tbody", "tr", "th", "td"}
    assert html.index('id="sum-top"') < html.index('id="sum-trend"') < html.index('id="findings"')  # the Summary's last part
    assert "&lt;img src=x onerror=alert(1)&gt;&#34;q\\" in section and "<img" not in html
    assert section.count("<svg class=\"overview tl\"") == 2  # one chart per host
    # a chart per host over the same five days: 2026-11-13 .. 2026-11-17, the 15th drawn empty
    assert section.count('class="ov-div"') == 2 + 1 + 1  # diverged bars, plus the legend's swatch
    rows = re.findall(r"<tr><td>([^<]*)</td><td><code>([^<]*)</code></td>", section)
    assert [d for d, _ in rows] == ["2026-11-13", "2026-11-14", "2026-11-16", "2026-11-16", "2026-11-17"]
    assert "from 2026-11-13 to 2026-11-17: 2 host(s)" in section
    # the report of PATHs (no store) has no Trend section
    r = CliRunner().invoke(main, ["analyze", str(SYN / "gap.jsonl"), "--html", "-", "-q"])
    assert r.exit_code == 1 and "sum-trend" not in r.stdout and "<h3 id=\"sum-when\">" in r.stdout


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()

    def handle_starttag(self, tag, attrs) -> None:
        self.seen.add(tag)


def _screenshot(out: Path) -> None:
    """The Trend section of a store of several days, in the system's Chromium (headless), saved to ``out``."""
    import tempfile

    chromium = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        st = days_store(tmp)
        page = tmp / "r.html"
        r = CliRunner().invoke(main, ["analyze", "--store", str(st), "--html", str(page), "-q"], env=EPOCH)
        assert r.exit_code == 1, r.output
        from playwright.sync_api import sync_playwright

        args = ["--no-sandbox"] if os.geteuid() == 0 else []  # Chromium refuses to sandbox as root (containers)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium, args=args)
            for scheme, path in (("light", out), ("dark", out.with_name(out.stem + "-dark" + out.suffix))):
                view = browser.new_page(viewport={"width": 1200, "height": 900}, color_scheme=scheme)
                view.goto(page.as_uri())
                view.locator('section[aria-labelledby="sum-trend"]').screenshot(path=str(path))
            browser.close()


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--screenshot":
        _screenshot(Path(sys.argv[2]).resolve())
    else:
        print("usage: python tests/test_trend.py --screenshot OUT.png", file=sys.stderr)
        sys.exit(2)
