"""One name per session and reconnect in the HTML report: the findings JSON's (analyzer/document/names.py).

The terminal and the JSON call a session by its name; the page used to number its sections by position
("Session 6 (S10, S11 in the JSON)"), then by the JSON's positional key under an anchor of its own
(``#session-S10``), so ``report.html#S4`` did not scroll anywhere.  Now every heading, table row, link and
filter token is the name, a session's element (its section or its row) has the name as its ``id``, and so
has a reconnect's card: ``report.html#<name>`` scrolls there.  The per-capture records of one
Mcp-Session-Id share its name and are one section.
"""
from __future__ import annotations

import copy
import os
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from analyzer import pipeline, report
from analyzer.document.names import RECONNECT_NAME, SESSION_NAME
from analyzer.report.view import _merged_sessions

ROOT = Path(__file__).resolve().parent.parent
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
    # every session in full: sample_logs has more sessions with findings than the page's cap (MAX_FULL_SESSIONS, whose
    # rows and compact cards test_report.py checks), and these tests follow every element's name
    return report.render(sample_doc, max_full=len(sample_doc["sessions"]))


class Named(HTMLParser):
    """The page's session elements (``id`` a session's name: a section or a row) with their ``data-s`` tokens
    and their name (a section's heading, a row's header cell), the text of every link to one, and every
    element's id."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: dict[str, dict] = {}  # id -> {"tag", "s", "name"}
        self.links: list[tuple[str, str]] = []  # (href, text)
        self.data_s: list[str] = []
        self.ids: list[str] = []
        self._open: list[tuple[str, str]] = []  # (what, key) being collected: ("name", id) / ("link", href)
        self._text: dict[tuple[str, str], str] = {}
        self._section: str | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "data-s" in a:
            self.data_s.append(a["data-s"])
        ident = a.get("id") or ""
        if ident:
            self.ids.append(ident)
        if (SESSION_NAME.fullmatch(ident) or ident.startswith("session-")) and tag in ("section", "tr"):
            self.elements[ident] = {"tag": tag, "s": (a.get("data-s") or "").split(), "name": ""}
            if tag == "section":
                self._section = ident
            else:
                self._start(("name", ident), "tr")
        if tag == "h3" and self._section and a.get("id") == f"{self._section}-h":
            self._start(("name", self._section), "h3")
        if tag == "a" and SESSION_NAME.fullmatch((a.get("href") or "")[1:]):
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


def test_every_session_is_called_by_its_name(sample_doc, sample_html):
    page = named(sample_html)
    keys = [s["session"] for s in sample_doc["sessions"]]
    assert all(SESSION_NAME.fullmatch(k) for k in keys)
    entries = _merged_sessions(sample_doc["sessions"])
    assert len(entries) == len(set(keys)) < len(keys)  # one entry per name; the captures of a session share it
    # one element per entry (a section or a row), its id the name
    assert sorted(page.elements) == sorted(set(keys))
    for ident, el in page.elements.items():
        assert el["s"] == [ident], (ident, el)
        # the element's name says the session's name, as a whole word
        assert re.search(rf"(?<![\w.]){ident}(?![\w.])", el["name"]), (ident, el["name"])
        assert not POSITION_NAME.search(el["name"]), el["name"]


def test_the_captures_of_one_session_are_one_section_by_its_name(sample_doc, sample_html):
    """gap.har and gap.jsonl are one session seen by two captures: two records of the JSON with one name, one
    section, which lists both captures."""
    page = named(sample_html)
    gap = [s for s in sample_doc["sessions"] if any(p.endswith("synthetic/gap.har") or p.endswith("synthetic/gap.jsonl") for p in s["sources"])]
    assert len(gap) == 2 and gap[0]["session_id"] == gap[1]["session_id"]
    name = gap[0]["session"]
    assert gap[1]["session"] == name and gap[0]["incident"] == gap[1]["incident"] == name
    heading = page.elements[name]["name"]
    assert heading.startswith(f"Session {name}"), heading
    section = sample_html[sample_html.index(f'<section class="session" id="{name}"'):]
    section = section[: section.index("</section>")]
    assert "Seen by 2 captures" in section


def test_every_name_is_the_id_of_its_element(sample_doc, sample_html):
    """``report.html#<name>`` scrolls to the session's section (or row) and to the reconnect's card: each
    element's ``id`` is the JSON's name, as the terminal's last line points to it; every in-page link lands."""
    page = named(sample_html)
    ids = set(page.ids)
    assert len(ids) == len(page.ids)
    for s in sample_doc["sessions"]:
        assert s["session"] in ids, s["session"]
    cards = re.findall(r'<article class="card[^"]*" id="([^"]*)"', sample_html)
    assert cards and sorted(cards) == sorted(b["boundary_id"] for b in sample_doc["boundaries"])
    assert all(RECONNECT_NAME.fullmatch(c) for c in cards)
    for href in re.findall(r' href="#([^"]*)"', sample_html):
        assert href in ids, href
    # the terminal's next step: "open out/report.html#<name>"
    from analyzer import terminal

    last = terminal.summary_text(sample_doc, ("out/report.html",)).splitlines()[-1]
    target = re.search(r"out/report\.html#(\S+) ", last).group(1)
    assert target == sample_doc["findings"][0]["session"] and target in ids


def test_no_position_number_names_remain(sample_doc, sample_html):
    assert not re.findall(r' id="(?:session-|boundary-)', sample_html)
    assert not re.findall(r' (?:id|href)="#?S[1-9][0-9]*"', sample_html)  # (S0 is the traffic without a session)
    assert "in the JSON)" not in sample_html  # the old "(S10, S11 in the JSON)" beside a number of the page's own
    hits = [m.group(0) for m in POSITION_NAME.finditer(sample_html)]
    assert hits == [], hits[:10]
    page = named(sample_html)
    for tokens in page.data_s:  # the filter tokens are the names too
        assert tokens == "" or SESSION_NAME.fullmatch(tokens), tokens
    assert page.links
    for href, text in page.links:  # every link to a session says which, by its name (or is a permalink, or a card's "Show it")
        assert text in ("Show it", "#") or text == href[1:], (href, text)


def test_rows_name_the_session_of_their_record(sample_doc, sample_html):
    """The findings table, the worst reconnects and the cards say the name of their own record's session."""
    findings = sample_html[sample_html.index('<h2 id="findings">'): sample_html.index('<h2 id="inputs">')]
    for f in sample_doc["findings"][:200]:
        row = re.search(rf'<tr id="finding-{f["id"]}"[^>]*>(.*?)</tr>', findings, re.S)
        if row is None:  # not on the page (capped)
            continue
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row.group(1), re.S)
        assert re.search(rf">{f['session']}<", cells[2]), (f["id"], cells[2])
    where = sample_html[sample_html.index('<h3 id="sum-where">'): sample_html.index('<h3 id="sum-top">')]
    by_id = {b["boundary_id"]: b for b in sample_doc["boundaries"]}
    rows = re.findall(r'<tr data-f="w"[^>]*><th scope="row"[^>]*><a href="#([^"]+)">(.*?)</a></th><td[^>]*>(.*?)</td>', where, re.S)
    assert rows
    for bid, text, cell in rows:
        assert text == bid and re.search(rf">{by_id[bid]['session']}<", cell), (bid, cell)
    for b in sample_doc["boundaries"]:
        head = re.search(rf'<h[35] class="chead" id="{re.escape(b["boundary_id"])}-h">(.*?)</h[35]>', sample_html, re.S).group(1)
        text = re.sub(r"<[^>]+>", "", head)
        assert f"Reconnect {b['boundary_id']} " in text and f"session {b['session']}" in text, head


def test_capped_pages_name_the_rows_by_name_too():
    """Sessions past the full sections are rows named by their names; the compact cards say their session's name."""
    doc = pipeline.run([str(ROOT / "sample_logs" / "synthetic")]).document
    html = report.render(doc, max_full=2)
    page = named(html)
    rows = {i: el for i, el in page.elements.items() if el["tag"] == "tr"}
    assert rows and all(el["s"] == [i] and re.search(rf"\b{i}\b", el["name"]) for i, el in rows.items())
    assert not POSITION_NAME.search(html)
    for b in doc["boundaries"]:
        m = re.search(rf'<h[35] class="chead" id="{re.escape(b["boundary_id"])}-h">(.*?)</h[35]>', html, re.S)
        if m:
            assert f"session {b['session']}" in re.sub(r"<[^>]+>", "", m.group(1))


def test_a_malformed_session_name_never_reaches_an_attribute(sample_doc):
    """Names come from the document: one not of names.py's form is shown escaped, and its anchor and filter
    token are a hash of it (never a position, never its text)."""
    d = copy.deepcopy(sample_doc)
    victim = d["findings"][0]["session"]
    bad = victim + '"><b onmouseover=x>'
    for part in ("sessions", "exchanges", "boundaries", "findings"):
        for r in d[part]:
            if r.get("session") == victim:
                r["session"] = bad
    for s in d["sessions"]:
        if s.get("incident") == victim:
            s["incident"] = bad
    html = report.render(d)
    assert "<b onmouseover" not in html and f"{victim}&#34;&gt;&lt;b onmouseover=x&gt;" in html
    ids = re.findall(r' id="([^"]*)"', html)
    assert all(re.fullmatch(r"[A-Za-z0-9.-]+", i) for i in ids)
    hashed = [i for i in ids if re.fullmatch(r"session-h[0-9a-f]{12}", i)]
    assert len(hashed) == 1
    assert all(re.fullmatch(r"S(0|[a-z2-7]+)|h[0-9a-f]{12}|", v) for v in re.findall(r' data-s="([^"]*)"', html))
