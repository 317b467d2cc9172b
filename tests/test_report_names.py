"""One name per session in the HTML report: the findings JSON's ``session`` key (``S10``).

The terminal and the JSON call a session by its key; the page used to number its sections by position
("Session 6 (S10, S11 in the JSON)"), so the page's "session 10" was another session than the JSON's S10.
Now every heading, permalink, table row, link and filter token is the key, and a section that holds
several per-capture sessions of one incident is named by all their keys.
"""
from __future__ import annotations

import copy
import os
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from analyzer import pipeline, report
from analyzer.report.view import _merged_sessions

ROOT = Path(__file__).resolve().parent.parent
KEY = re.compile(r"^S[0-9]+$")
# a session named by a number of the page's own: "Session 6", "session 24", "A new session (36)"
# (a session id in a log message, "session 7efb5e7b…", is no such name: \b fails inside the hex)
POSITION_NAME = re.compile(r"[Ss]ession #?\(?[0-9]+\b")


@pytest.fixture(scope="module")
def sample_doc() -> dict:
    cwd = os.getcwd()
    os.chdir(ROOT)  # sources named relative to the repository, as the README's command names them
    try:
        return pipeline.run(["sample_logs"]).document
    finally:
        os.chdir(cwd)


@pytest.fixture(scope="module")
def sample_html(sample_doc) -> str:
    return report.render(sample_doc)


class Named(HTMLParser):
    """The page's session elements (``id="session-…"``: a section or a row) with their ``data-s`` tokens
    and their name (a section's heading, a row's header cell), and the text of every link to one."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: dict[str, dict] = {}  # id -> {"tag", "s", "name"}
        self.links: list[tuple[str, str]] = []  # (href, text)
        self.data_s: list[str] = []
        self._open: list[tuple[str, str]] = []  # (what, key) being collected: ("name", id) / ("link", href)
        self._text: dict[tuple[str, str], str] = {}
        self._section: str | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "data-s" in a:
            self.data_s.append(a["data-s"])
        ident = a.get("id") or ""
        if ident.startswith("session-") and tag in ("section", "tr"):
            self.elements[ident] = {"tag": tag, "s": (a.get("data-s") or "").split(), "name": ""}
            if tag == "section":
                self._section = ident
            else:
                self._start(("name", ident), "tr")
        if tag == "h3" and self._section and a.get("id") == f"{self._section}-h":
            self._start(("name", self._section), "h3")
        if tag == "a" and (a.get("href") or "").startswith("#session-"):
            self._start(("link", a["href"] + f"#{len(self.links)}"), "a")
            self.links.append((a["href"], ""))

    def _start(self, key, tag):
        self._open.append((key, tag))
        self._text[key] = ""

    def handle_endtag(self, tag):
        if self._open and self._open[-1][1] == tag:
            (kind, ident), _ = self._open.pop()
            text = " ".join(self._text.pop((kind, ident)).split())
            if kind == "name":
                self.elements[ident]["name"] = text
            else:
                href, n = ident.rsplit("#", 1)
                self.links[int(n)] = (href, text)

    def handle_data(self, data):
        for key, _tag in self._open:
            self._text[key] += data


def named(html: str) -> Named:
    p = Named()
    p.feed(html)
    p.close()
    return p


def test_every_session_is_called_by_its_json_key(sample_doc, sample_html):
    page = named(sample_html)
    keys = [s["session"] for s in sample_doc["sessions"]]
    assert all(KEY.match(k) for k in keys)
    entries, group_of = _merged_sessions(sample_doc["sessions"])
    # one element per report entry (a section or a row), anchored by the key of its first session
    assert sorted(page.elements) == sorted(f"session-{e['session']}" for e in entries)
    seen: dict[str, str] = {}
    for ident, el in page.elements.items():
        entry = next(e for e in entries if f"session-{e['session']}" == ident)
        assert el["s"] == entry["members"], (ident, el)
        for k in el["s"]:
            assert k not in seen, (k, ident, seen.get(k))
            seen[k] = ident
            # the element's name says each of its sessions' keys, as a whole word
            assert re.search(rf"\b{k}\b", el["name"]), (ident, el["name"])
        assert not POSITION_NAME.search(el["name"]), el["name"]
    assert sorted(seen) == sorted(keys), "every session of the JSON is named on the page"


def test_the_incident_section_is_named_by_its_sessions(sample_doc, sample_html):
    """The JSON's S10 (gap.har) and S11 (gap.jsonl) are one session seen by two captures: one section,
    named by both keys and by no number of its own; the page's former "Session 10" is S18's section."""
    page = named(sample_html)
    by_key = {s["session"]: s for s in sample_doc["sessions"]}
    assert by_key["S10"]["session_id"] == by_key["S11"]["session_id"] and by_key["S11"]["incident"] == "S10"
    heading = page.elements["session-S10"]["name"]
    assert heading.startswith("Session S10") and "S11" in heading, heading
    assert "session-S11" not in page.elements
    assert not re.search(r"\bS1\b|\bS18\b", heading)
    assert "Session S18" in page.elements["session-S18"]["name"]


def test_no_position_number_names_remain(sample_doc, sample_html):
    assert not re.findall(r'id="session-[0-9]', sample_html)
    assert not re.findall(r'href="#session-[0-9]', sample_html)
    assert "in the JSON)" not in sample_html  # the old "(S10, S11 in the JSON)" beside a number of the page's own
    hits = [m.group(0) for m in POSITION_NAME.finditer(sample_html)]
    assert hits == [], hits[:10]
    page = named(sample_html)
    for tokens in page.data_s:  # the filter tokens are the keys too
        assert tokens == "" or all(KEY.match(t) for t in tokens.split()), tokens
    for href, text in page.links:  # every link to a session says which, by its key (or is a permalink, or a card's "Show it")
        assert text in ("Show it", "#") or KEY.match(text), (href, text)


def test_rows_name_the_session_of_their_record(sample_doc, sample_html):
    """The findings table, the worst reconnects and the cards say the key of their own record's session."""
    findings = sample_html[sample_html.index('<h2 id="findings">'): sample_html.index('<h2 id="inputs">')]
    for f in sample_doc["findings"][:200]:
        row = re.search(rf'<tr id="finding-{f["id"]}"[^>]*>(.*?)</tr>', findings, re.S)
        if row is None:  # not on the page (capped)
            continue
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row.group(1), re.S)
        assert re.search(rf">{f['session']}<", cells[2]), (f["id"], cells[2])
    where = sample_html[sample_html.index('<h3 id="sum-where">'): sample_html.index('<h3 id="sum-top">')]
    by_id = {b["boundary_id"]: b for b in sample_doc["boundaries"]}
    rows = re.findall(r'<tr data-f="w"[^>]*><th scope="row"[^>]*><a href="#boundary-(b\d+)">.*?</th><td[^>]*>(.*?)</td>', where, re.S)
    assert rows
    for bid, cell in rows:
        assert re.search(rf">{by_id[bid]['session']}<", cell), (bid, cell)
    for b in sample_doc["boundaries"]:
        head = re.search(rf'<h[35] class="chead" id="boundary-{b["boundary_id"]}-h">(.*?)</h[35]>', sample_html, re.S).group(1)
        assert f"session {b['session']}" in re.sub(r"<[^>]+>", "", head), head


def test_capped_pages_name_the_rows_by_key_too():
    """Sessions past the full sections are rows named by their keys; the compact cards say their session's key."""
    doc = pipeline.run([str(ROOT / "sample_logs" / "synthetic")]).document
    html = report.render(doc, max_full=2)
    page = named(html)
    rows = {i: el for i, el in page.elements.items() if el["tag"] == "tr"}
    assert rows and all(el["s"] and re.search(rf"\b{el['s'][0]}\b", el["name"]) for el in rows.values())
    assert not POSITION_NAME.search(html)
    for b in doc["boundaries"]:
        m = re.search(rf'<h[35] class="chead" id="boundary-{b["boundary_id"]}-h">(.*?)</h[35]>', html, re.S)
        if m:
            assert f"session {b['session']}" in re.sub(r"<[^>]+>", "", m.group(1))


def test_a_malformed_session_key_never_reaches_an_attribute(sample_doc):
    """Keys come from the document: one that is not ``S<n>`` is shown escaped, and its anchor and filter
    token are a hash of it (never a position, never its text)."""
    d = copy.deepcopy(sample_doc)
    bad = 'S10"><b onmouseover=x>'
    for part in ("sessions", "exchanges", "boundaries", "findings"):
        for r in d[part]:
            if r.get("session") == "S10":
                r["session"] = bad
    for s in d["sessions"]:
        if s.get("incident") == "S10":
            s["incident"] = bad
    html = report.render(d)
    assert "<b onmouseover" not in html and "S10&#34;&gt;&lt;b onmouseover=x&gt;" in html
    ids = re.findall(r' id="([^"]*)"', html)
    assert all(re.fullmatch(r"[A-Za-z0-9-]+", i) for i in ids)
    hashed = [i for i in ids if re.fullmatch(r"session-h[0-9a-f]{12}", i)]
    assert len(hashed) == 1
    assert all(re.fullmatch(r"(S[0-9]+|h[0-9a-f]{12})( (S[0-9]+|h[0-9a-f]{12}))*|", v) for v in re.findall(r' data-s="([^"]*)"', html))
