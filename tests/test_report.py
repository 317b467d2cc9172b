"""Tests for analyzer.report: the self-contained HTML incident report.

Documents come from the real pipeline over sample_logs/synthetic/ (one per
capture and all merged), then are made hostile by injecting markup into every
log-derived string the page shows.
"""
from __future__ import annotations

import base64
import copy
import hashlib
import re
import sys
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import pytest

from analyzer import pipeline, report
from analyzer.document import names
import analyzer.report.page as report_page  # noqa: E402  (template_dir reads its __file__)
from analyzer.report.common import SUMMARY_ROWS
from analyzer.report.view import _merged_sessions
from reportdocs import CAPTURES, HOSTILE_SIDS, SYNTHETIC, hostile_capture, poison

ROOT = Path(__file__).resolve().parent.parent

VOID = {"meta", "br", "link", "img", "input", "hr", "col", "area", "base", "embed", "source", "track", "wbr"}
# Every element the template emits; anything else in the output came from the data.
ALLOWED_TAGS = {
    "html", "head", "meta", "title", "style", "script", "body", "header", "main", "footer", "nav", "section", "article",
    "h1", "h2", "h3", "h4", "h5", "h6", "p", "ul", "ol", "li", "dl", "dt", "dd", "div", "span", "strong", "a",
    "code", "br", "table", "caption", "thead", "tbody", "tr", "th", "td", "details", "summary",
    "form", "label", "select", "option", "input", "button", "output",
    "svg", "g", "line", "rect", "circle", "text", "path", "wbr",
}
# data-* attributes and the only values they may take: the script reads nothing else.
TOKENS = set(report.VERDICTS) | {"unknown"}
SEV_TOKENS = set(report.SEVERITIES) | {"none"}
DATA_ATTRS = {
    "data-f": lambda v: v in ("b", "f", "s", "r", "w"),
    # the name of the element's session (or, for a name not of names.py's form, a hash of it)
    "data-s": lambda v: v == "" or re.fullmatch(r"S(0|[a-z2-7]{1,52})|h[0-9a-f]{12}", v) is not None,
    "data-k": lambda v: v == "" or v.isdigit(),
    "data-v": lambda v: v == "" or set(v.split(" ")) <= TOKENS,
    "data-sev": lambda v: v == "" or set(v.split(" ")) <= SEV_TOKENS,
    "data-any": lambda v: set(v.split(" ")) <= TOKENS | SEV_TOKENS,
    "data-n": lambda v: v.isdigit(),  # a count (the overview's bars)
}


def _static_js() -> str:
    template = report._environment().get_template(report.TEMPLATE)
    return "".join(template.blocks["js"](template.new_context({})))


STATIC_JS = _static_js()


def _require_samples() -> None:
    if not CAPTURES:
        pytest.skip("no synthetic captures; run: python sample_logs/make_synthetic.py")


@pytest.fixture(scope="module")
def merged_doc() -> dict:
    _require_samples()
    return pipeline.run([str(SYNTHETIC)]).document


@pytest.fixture(scope="module", params=[p.name for p in CAPTURES] or ["none"])
def single_doc(request) -> dict:
    _require_samples()
    return pipeline.run([str(SYNTHETIC / request.param)]).document


# --------------------------------------------------------------------------
# helpers


class Collector(HTMLParser):
    """Collects tags and attributes; checks that every non-void element is closed in order."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.headings: list[int] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag in ("h1", "h2", "h3", "h4", "h5", "h6"):
            self.headings.append(int(tag[1]))
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
            return
        self.stack.pop()


def parse(html: str) -> Collector:
    c = Collector()
    c.feed(html)
    c.close()
    return c


def style_text(html: str) -> str:
    blocks = re.findall(r"<style>(.*?)</style>", html, re.S)
    assert len(blocks) == 1, "exactly one <style> element"
    return blocks[0]


def script_text(html: str) -> str:
    blocks = re.findall(r"<script>(.*?)</script>", html, re.S)
    assert len(blocks) == 1, "exactly one <script> element"
    return blocks[0]


def sha(text: str) -> str:
    return base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()


def csp(html: str) -> str:
    m = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]*)">', html)
    assert m, "CSP meta missing"
    return m.group(1)


def session_chunks(html: str) -> dict[str, str]:
    """Session section name (its id) -> its HTML (up to the next session section or the quiet list)."""
    parts = re.split(r'(?=<section class="session" id=")', html.split('<h2 id="quiet">')[0])
    out = {}
    for part in parts[1:]:
        key = re.match(r'<section class="session" id="([A-Za-z0-9-]+)"', part).group(1)
        out[key] = part
    return out


def check_page(doc: dict, html: str) -> Collector:
    c = parse(html)
    assert not c.errors, c.errors[:5]
    assert not c.stack, f"unclosed: {c.stack}"
    assert html.startswith("<!DOCTYPE html>\n")
    tags = {t for t, _ in c.tags}
    assert tags <= ALLOWED_TAGS, tags - ALLOWED_TAGS
    scripts = [a for t, a in c.tags if t == "script"]
    assert scripts == [{}], "one inline script, no src, no attributes"
    assert html.lower().count("<script") == 1

    # CSP: strict, and its hashes are the hashes of the one <style> and the one <script> text.
    policy = csp(html)
    css, js = style_text(html), script_text(html)
    assert policy == (
        f"default-src 'none'; style-src 'sha256-{sha(css)}'; script-src 'sha256-{sha(js)}'; img-src data:; "
        "base-uri 'none'; form-action 'none'; require-trusted-types-for 'script'; trusted-types 'none'"
    )
    assert "unsafe" not in policy
    assert html.index("Content-Security-Policy") < html.index("<style>")
    assert "@import" not in css and "url(" not in css
    assert js == STATIC_JS, "the script is static text: it never carries document content"

    ids = [a["id"] for _, a in c.tags if "id" in a]
    assert len(ids) == len(set(ids)), [i for i, n in Counter(ids).items() if n > 1]
    for tag, attrs in c.tags:
        assert "style" not in attrs, f"inline style on <{tag}> (CSP forbids it)"
        for name, value in attrs.items():
            assert not name.startswith("on"), (tag, name)
            if name.startswith("data-"):
                assert name in DATA_ATTRS and DATA_ATTRS[name](value), (tag, name, value)
            if name in ("src", "href", "action", "xlink:href", "formaction", "poster", "data"):
                assert value is not None and value.startswith("#"), (tag, name, value)  # in-page links only
        if "id" in attrs:  # (a reconnect's name has a dot: Sk3vq7m2a.r5xj2qd)
            assert re.fullmatch(r"[A-Za-z0-9.-]+", attrs["id"]), attrs["id"]
    targets = set(ids)
    for _, attrs in c.tags:
        if "href" in attrs:
            assert attrs["href"][1:] in targets, f"dangling link {attrs['href']}"

    # Headings never skip a level going down.
    for a, b in zip(c.headings, c.headings[1:]):
        assert b <= a + 1, c.headings

    # One card per boundary, its id the reconnect's name (a hand-made b<n>: boundary-b<n>).
    cards = [a["id"] for t, a in c.tags if t == "article" and "card" in a.get("class", "")]
    assert cards == [report.reconnect_anchor(b["boundary_id"], None) for b in _by_section_order(doc)]

    # One timeline mark per boundary in each session's SVG.
    chunks = session_chunks(html)
    want = Counter(report.session_anchor(b["session"]) for b in doc["boundaries"])  # (a section's id: its session's name)
    for n, chunk in chunks.items():
        svg = re.findall(r"<svg .*?</svg>", chunk, re.S)
        assert len(svg) == 1
        assert svg[0].count('<g class="bmark ') == want.get(n, 0)
    assert sum(want.values()) == len(doc["boundaries"])
    assert sum(ch.count('<g class="bmark ') for ch in chunks.values()) == len(doc["boundaries"])
    return c


def _name(session_id: str) -> str:
    """The name the analyzer gives a session of this Mcp-Session-Id (analyzer/document/names.py)."""
    return names.session_names([session_id])[session_id]


def _entries(doc: dict) -> list[dict]:
    """The page's session entries (one per session name, report.view._merged_sessions)."""
    return _merged_sessions(doc["sessions"])


def _by_section_order(doc: dict) -> list[dict]:
    """Boundaries in page order: grouped by session entry in the sessions list's order."""
    pos = {e["session"]: n for n, e in enumerate(_entries(doc))}
    return sorted(doc["boundaries"], key=lambda b: pos.get(b["session"], len(pos)))


# --------------------------------------------------------------------------
# real documents


def test_merged_sample_page(merged_doc):
    html = report.render(merged_doc)
    check_page(merged_doc, html)
    assert merged_doc["boundaries"], "the synthetic captures have reconnects"
    for f in merged_doc["findings"]:
        assert f["message"].replace("'", "&#39;").replace('"', "&#34;") in html
    assert report.render(merged_doc) == html


def test_each_capture_page(single_doc):
    html = report.render(single_doc)
    check_page(single_doc, html)
    verdicts = {b["verdict"] for b in single_doc["boundaries"]}
    for v in verdicts:
        assert f'class="badge v-{v}"' in html


def test_deterministic(merged_doc):
    a = report.render(merged_doc)
    b = report.render(copy.deepcopy(merged_doc))
    assert a == b


def test_headline(merged_doc):
    html = report.render(merged_doc)
    v = merged_doc["summary"]["verdicts"]
    diverged = sum(n for k, n in v.items() if k not in ("continuous", "unverifiable"))
    assert f"{diverged} reconnects diverged" in html
    quiet = copy.deepcopy(merged_doc)
    quiet["summary"]["verdicts"] = {k: 0 for k in v}
    quiet["summary"]["findings_by_severity"] = {"critical": 0, "error": 0, "warning": 0, "info": 0}
    assert "no divergence found" in report.render(quiet)


# --------------------------------------------------------------------------
# hostile content


def test_hostile_content_is_inert(merged_doc):
    doc = poison(merged_doc)
    html = report.render(doc)
    check_page(doc, html)
    lower = html.lower()
    assert lower.count("<script") == 1 and lower.count("</script") == 1  # ours: check_page proved it static
    assert "<img" not in lower
    assert "<svg onload" not in lower
    assert html.count("</style>") == 1
    assert html.count("<style>") == 1
    assert "\u2028" not in html and "\u2029" not in html
    assert '<span class="ctl">U+2028</span>' in html and "[U+2028]" in html  # visible in text and SVG titles
    # onerror= / javascript: / evil hrefs only ever inside escaped text or a
    # quoted attribute value, never as markup.
    for m in re.finditer(r"onerror=|onload=|javascript:|href=https", html):
        before = html[: m.start()]
        tag_start = before.rfind("<")
        if before.rfind(">") < tag_start:  # inside a tag: must be inside "…"
            assert before[tag_start:].count('"') % 2 == 1, html[tag_start : m.end()]
    # The escaped forms are shown.
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&lt;/script&gt;&lt;script&gt;alert(2)&lt;/script&gt;" in html
    assert "&#34;&gt;&lt;img src=x onerror=alert(3)&gt;" in html
    assert "&lt;/style&gt;" in html


def test_hostile_ids_and_enums_do_not_reach_attributes(merged_doc):
    doc = copy.deepcopy(merged_doc)
    b = doc["boundaries"][0]
    old = b["boundary_id"]
    b["boundary_id"] = 'b1" onmouseover="alert(1)'
    b["verdict"] = '"><script>x</script>'
    b["severity"] = "critical onclick=x"
    for f in doc["findings"]:
        if f["boundary"] == old:
            f["boundary"] = b["boundary_id"]
    doc["findings"][0]["id"] = "f1 x=y"
    doc["findings"][0]["severity"] = "<b>"
    html = report.render(doc)
    c = parse(html)
    assert not c.errors
    assert html.lower().count("<script") == 1 and "<b>" not in html
    for _, attrs in c.tags:
        assert not any(k.startswith("on") for k in attrs)
        if "id" in attrs:
            assert re.fullmatch(r"[A-Za-z0-9.-]+", attrs["id"])
        assert "class" not in attrs or re.fullmatch(r"[a-z0-9_ -]+", attrs["class"]), attrs["class"]
    assert 'id="boundary-n1"' in html and 'class="card v-unknown"' in html
    # filter tokens come from the fixed tables, whatever the document says
    card = re.search(r'<article class="card v-unknown"[^>]*>', html).group(0)
    assert 'data-v="unknown"' in card and 'data-sev="none"' in card


def test_hostile_capture_through_the_pipeline(tmp_path):
    """Markup in session ids, event data, URLs and bodies, as a server would send it."""
    doc = pipeline.run([str(hostile_capture(tmp_path / "h.jsonl"))]).document
    assert {s["session_id"] for s in doc["sessions"]} == set(HOSTILE_SIDS)
    assert [b["verdict"] for b in doc["boundaries"]] == ["gap", "session_invalid"]
    html = report.render(doc)
    check_page(doc, html)
    lower = html.lower()
    assert lower.count("<script") == 1 and "<img" not in lower and "<svg onload" not in lower
    assert "&lt;/script&gt;&lt;script&gt;alert(8)&lt;/script&gt;" in html  # the URL, escaped
    assert "sess&#34;onmouseover=&#34;alert(6)" in html and "sess&#39;&gt;&lt;svg onload=alert(7)&gt;" in html


# --------------------------------------------------------------------------
# content details


def _one_boundary_doc(doc: dict) -> dict:
    d = copy.deepcopy(doc)
    d["boundaries"] = d["boundaries"][:1]
    return d


def test_card_details(merged_doc):
    d = _one_boundary_doc(merged_doc)
    b = d["boundaries"][0]
    b["verdict"] = "gap"
    b["lost_event_ids"] = [str(i) for i in range(100, 150)]
    b["lost_count"] = 1234
    b["events_after"][0]["data"] = "HEAD" + "A" * 300 + "TAIL"
    b["handled_correctly"] = None
    html = report.render(d)
    # the first 20 ids, as a range, and how many more the JSON has
    assert "<code>100–119</code>" in html and "… 1214 more" in html and "<code>120" not in html
    # event data: head and tail, with what was left out between them
    assert "HEAD" + "A" * 116 + '<span class="elided"> … 148 chars … </span>' + "A" * 36 + "TAIL" in html
    assert "capture ends first" in html
    assert "The capture ends before the client re-initialized or used the session again." in html
    b["handled_correctly"] = True
    assert "client re-initialized" in report.render(d)
    b["handled_correctly"] = False
    assert "client kept using the session" in report.render(d)
    b["verdict"] = "continuous"
    html = report.render(d)
    assert "nothing to handle (stream was continuous)" in html and report.NO_EFFECT in html


def test_id_ranges():
    assert report._ranges(["6", "7", "8", "10", "12", "13"]) == ["6–8", "10", "12–13"]
    assert report._ranges(["5"]) == ["5"]
    assert report._ranges(["a_1", "a_2"]) == ["a_1", "a_2"]  # opaque ids stay as they are
    assert report._ranges(["01", "02"]) == ["01", "02"]  # not plain integers
    assert report._ranges([]) == []


def test_body_not_recorded_and_missing_times(merged_doc):
    d = copy.deepcopy(merged_doc)
    for x in d["exchanges"]:
        x["started"] = x["ended"] = None
        x["body_recorded"] = False
    for b in d["boundaries"]:
        b["started"] = None
    html = report.render(d)
    check_page(d, html)
    assert "not recorded (unknown, not empty)" in html
    assert "By position in the capture" in html


def test_quiet_sessions_are_a_compact_list(merged_doc):
    d = copy.deepcopy(merged_doc)
    template = d["sessions"][0]
    for n in range(50):
        s = copy.deepcopy(template)
        s.update(session=_name(f"quiet-{n}"), session_id=f"quiet-{n}", boundaries=0, verdicts={})
        d["sessions"].append(s)
    html = report.render(d)
    check_page(d, html)
    sections = re.findall(r'<section class="session" id="(S[a-z2-7]+|S0)"', html)
    assert len(sections) == len({b["session"] for b in d["boundaries"]} | {f["session"] for f in d["findings"] if f["session"] is not None})
    quiet = html.split('<h2 id="quiet">')[1]
    assert "<details>" in quiet and quiet.count("quiet-") == 50


def test_many_quiet_sessions_are_listed_compactly(merged_doc):
    d = copy.deepcopy(merged_doc)
    template = d["sessions"][0]
    extra = []
    for n in range(20000):
        s = copy.deepcopy(template)
        s.update(session=_name(f"s{n}"), session_id=f"s{n}", boundaries=0, verdicts={}, sources=[])
        extra.append(s)
    d["sessions"] += extra
    d["exchanges"] += [dict(d["exchanges"][0], session=s["session"], session_id=s["session_id"], exchange_id=f"x{9000 + n}")
                       for n, s in enumerate(extra)]
    html = report.render(d)
    entries = _entries(merged_doc)
    busy = {b["session"] for b in merged_doc["boundaries"]} | {f["session"] for f in merged_doc["findings"]}
    quiet = 20000 + sum(1 for e in entries if e["session"] not in busy)
    # one row each up to the cap; the page says how many more the JSON has
    assert len(re.findall(r'<tr id="S[a-z2-7]+"', html)) == report.MAX_ROWS
    assert f"{quiet - report.MAX_ROWS} more sessions not listed on this page" in html
    check_page(d, html)


def test_only_the_worst_sessions_get_full_sections(merged_doc):
    busy = {b["session"] for b in merged_doc["boundaries"]} | {f["session"] for f in merged_doc["findings"]}
    html = report.render(merged_doc, max_full=2)
    assert len(re.findall(r'<section class="session" id="', html)) == 2
    assert html.count("More sessions with findings") == 2  # the contents and the heading
    # the two shown in full are among the ones with critical findings
    critical = {f["session"] for f in merged_doc["findings"] if f["severity"] == "critical"}
    shown = re.findall(r'<section class="session" id="(S[a-z2-7]+|S0)"', html)
    assert len(shown) == 2 and set(shown) <= critical
    assert "Findings per rule" in html and len(busy) > 2


# --------------------------------------------------------------------------
# accessibility and colour


def _lum(hex_colour: str) -> float:
    h = hex_colour.lstrip("#")
    chans = [int(h[i : i + 2], 16) / 255 for i in (0, 2, 4)]
    lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in chans]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def _contrast(a: str, b: str) -> float:
    la, lb = sorted((_lum(a), _lum(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def _palettes(css: str) -> list[dict[str, dict[str, str]]]:
    light, dark = css.split("@media (prefers-color-scheme: dark)")[0], css.split("@media (prefers-color-scheme: dark)")[1].split("\n}\n")[0]
    out = []
    for part in (light, dark):
        rules = {}
        for sel, body in re.findall(r"(:root|\.[vs]-[a-z_]+) \{([^}]*)\}", part):
            rules[sel] = dict(re.findall(r"--([a-z-]+): (#[0-9a-f]{6})", body))
        out.append(rules)
    return out


def test_colour_contrast_light_and_dark(merged_doc):
    css = style_text(report.render(merged_doc))
    assert "@media (prefers-color-scheme: dark)" in css and "@media print" in css
    for rules in _palettes(css):
        root = rules[":root"]
        for fg in ("fg", "muted", "link", "ok", "bad", "unknown", "dup"):
            for bg in ("bg", "panel"):
                assert _contrast(root[fg], root[bg]) >= 4.5, (fg, bg, root[fg], root[bg])
            assert _contrast(root[fg], root["code"]) >= 4.5 or fg in ("ok", "bad", "unknown", "dup")
        verdicts = {k: v for k, v in rules.items() if k.startswith(".v-")}
        assert {f".v-{v}" for v in report.VERDICTS} <= set(verdicts)
        for sel, pal in verdicts.items():
            assert _contrast(pal["vf"], pal["vb"]) >= 4.5, (sel, pal)
            # Mark colour is used for SVG label text on the panel and the page.
            assert _contrast(pal["vm"], root["panel"]) >= 4.5, (sel, pal)
            assert _contrast(pal["vm"], root["bg"]) >= 4.5, (sel, pal)
        for sel, pal in rules.items():
            if sel.startswith(".s-"):
                assert _contrast(pal["sf"], pal["sb"]) >= 4.5, (sel, pal)


def test_tables_have_scoped_headers(merged_doc):
    c = parse(report.render(merged_doc))
    ths = [a for t, a in c.tags if t == "th"]
    assert ths and all(a.get("scope") in ("col", "row") for a in ths)


# --------------------------------------------------------------------------
# template location


def test_template_dir_source_checkout():
    assert report.template_dir() == ROOT / "reports_templates"


def test_template_dir_installed(tmp_path, monkeypatch):
    installed = tmp_path / "share" / "mcp-sse-audit" / "reports_templates"
    installed.mkdir(parents=True)
    (installed / report.TEMPLATE).write_text((ROOT / "reports_templates" / report.TEMPLATE).read_text())
    monkeypatch.setattr(report_page, "__file__", str(tmp_path / "site" / "analyzer" / "report" / "page.py"))
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    assert report.template_dir() == installed


def test_template_dir_missing_names_both(tmp_path, monkeypatch):
    monkeypatch.setattr(report_page, "__file__", str(tmp_path / "site" / "analyzer" / "report" / "page.py"))
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "prefix"))
    with pytest.raises(FileNotFoundError) as exc:
        report.template_dir()
    msg = str(exc.value)
    assert str(tmp_path / "site" / "reports_templates") in msg
    assert str(tmp_path / "prefix" / "share" / "mcp-sse-audit" / "reports_templates") in msg


# --------------------------------------------------------------------------
# summary, evidence, timeline


def _boundary_by_verdict(doc: dict, verdict: str) -> dict:
    return next(b for b in doc["boundaries"] if b["verdict"] == verdict)


def _card(html: str, bid: str) -> str:
    start = html.index(f'id="{report.reconnect_anchor(bid, None)}"')
    return html[start : html.index("</article>", start)]


def test_summary_answers_at_a_glance(merged_doc):
    html = report.render(merged_doc)
    assert '<p class="status s-critical">' in html
    summary = html[html.index('<h2 id="summary">') : html.index('<h2 id="findings">')]
    v = merged_doc["summary"]["verdicts"]
    diverged = sum(n for k, n in v.items() if k not in ("continuous", "unverifiable"))
    assert f"Diverged: <strong class=\"count\">{diverged}</strong>" in summary
    assert f"Could not be verified: <strong class=\"count\">{v['unverifiable']}</strong>" in summary
    # where: the worst reconnects, most harmful first (view.harm_order), each linked to its card
    from analyzer.report.view import harm_order

    where = summary[summary.index('<h3 id="sum-where">') : summary.index('<h3 id="sum-top">')]
    pos = {b["boundary_id"]: n for n, b in enumerate(merged_doc["boundaries"], start=1)}
    ranked = sorted((dict(b, _n=pos[b["boundary_id"]]) for b in merged_doc["boundaries"] if b["verdict"] != "continuous"), key=harm_order)
    assert _where_rows(html) == [b["boundary_id"] for b in ranked[:SUMMARY_ROWS]]
    links = re.findall(r'<a href="#(S[a-z2-7]+\.r[a-z2-7]+)">', where)
    assert links
    for bid in links:  # (a card's id is its reconnect's name)
        assert f'id="{bid}"' in html
    # how bad: critical findings first
    top = summary[summary.index('<h3 id="sum-top">') :]
    ranks = [report.SEV_RANK[s] for s in re.findall(r'<li><span class="sev s-(\w+)">', top)]
    assert ranks and ranks == sorted(ranks) and ranks[0] == 0
    # inputs and their anomalies
    assert "sse_<wbr>unterminated_<wbr>event</code> × 2" in summary
    assert "(17 har, 18 jsonl)" in summary
    quiet = copy.deepcopy(merged_doc)
    quiet["summary"]["verdicts"] = {k: 0 for k in v}
    quiet["summary"]["findings_by_severity"] = {"critical": 0, "error": 0, "warning": 0, "info": 0}
    assert '<p class="status s-ok">' in report.render(quiet)


def test_decisive_headers(merged_doc):
    html = report.render(merged_doc)
    want = {"session_invalid": "method / status", "epoch_change": "replay epoch before → after", "gap": "Last-Event-ID sent"}
    for verdict, row in want.items():
        card = _card(html, _boundary_by_verdict(merged_doc, verdict)["boundary_id"])
        assert f'<tr class="decisive"><th scope="row">{row} <span class="tag">decisive</span>' in card, verdict
        assert card.count('class="decisive"') == len(report.DECISIVE[verdict])


def test_client_reaction_located(merged_doc):
    """Where the client kept using the session (or re-initialized), as the verdict says."""
    html = report.render(merged_doc)
    for b in merged_doc["boundaries"]:
        card = _card(html, b["boundary_id"])
        if b["verdict"] == "continuous":
            assert "nothing to handle" in card
        elif b["handled_correctly"] is False:
            # the finding names the next use by its location; the card shows the same request
            f = next(f for f in merged_doc["findings"] if f["boundary"] == b["boundary_id"])
            loc = re.search(r"used the old session again \(([^)]*)\)", f["message"]).group(1)
            assert "on the old session without re-initializing" in card and f":{loc})" in card
            target = re.search(r'without re-initializing\. <a href="#(conn-x\d+)">', card).group(1)
            assert f'<tr id="{target}">' in html
        elif b["handled_correctly"] is True:
            assert re.search(r"A new session \((S[a-z2-7]+|S0)\) started with POST x\d+", card), card
        else:
            assert "The capture ends before the client re-initialized" in card
    # one marker per reconnect that was not continuous, in its session's timeline
    chunks = session_chunks(html)
    for n, chunk in chunks.items():
        want = sum(1 for b in merged_doc["boundaries"] if b["session"] == n and b["verdict"] != "continuous")
        assert chunk.count('<a class="react react-') == want


def test_unanswered_requests_on_the_card(merged_doc):
    html = report.render(merged_doc)
    b = _boundary_by_verdict(merged_doc, "cross_stream_replay")
    # the call the foreign answer left waiting (tools/call other, id 6) has one story: that finding, not request_unanswered
    (told,) = [f for f in merged_doc["findings"] if f["rule"] == "foreign_response_on_resume" and f["session"] == b["session"]]
    assert "tools/call other (id 6) never completed" in told["message"]
    assert not [f for f in merged_doc["findings"] if f["rule"] == "request_unanswered" and "tools/call other (id 6)" in f["message"]]
    card = _card(html, b["boundary_id"])
    assert f'<a href="#finding-{told["id"]}">{told["id"]}</a>' in card
    assert "None on the resumed stream." in _card(html, _boundary_by_verdict(merged_doc, "gap")["boundary_id"])


def test_timeline_shades_lost_and_duplicated(merged_doc):
    html = report.render(merged_doc)
    chunks = session_chunks(html)
    for n, chunk in chunks.items():
        members = {n}
        bs = [b for b in merged_doc["boundaries"] if b["session"] in members]
        svg = re.search(r"<svg class=\"timeline.*?</svg>", chunk, re.S).group(0)
        assert svg.count('<rect class="lost"') == sum(1 for b in bs if b["lost_count"])
        assert svg.count('<rect class="dup"') == sum(1 for b in bs if b["duplicated_count"])
        events = sum(x["events"] for x in merged_doc["exchanges"] if x["session"] in members)  # cut-off ones included
        ticks = sum(len(re.findall(r"v16", d)) for d in re.findall(r'<path class="ticks(?:-cut)?" d="([^"]*)"', svg))
        assert ticks == min(events, report.TICKS_PER_TIMELINE), (n, ticks, events)


def test_ticks_are_capped(merged_doc):
    d = _one_boundary_doc(merged_doc)
    sid = d["boundaries"][0]["session"]
    for x in d["exchanges"]:
        if x["session"] == sid:
            x["events"] = 10**6
    html = report.render(d)
    chunk = next(iter(session_chunks(html).values()))
    ticks = sum(len(re.findall(r"v16", p)) for p in re.findall(r'<path class="ticks(?:-cut)?" d="([^"]*)"', chunk))
    assert 0 < ticks <= report.TICKS_PER_TIMELINE


def test_no_dangling_links_when_sessions_are_capped(merged_doc):
    """Reconnects of sessions shown as one row link to that row, never to a card that is not there."""
    html = report.render(merged_doc, max_full=2)
    c = parse(html)
    targets = {a["id"] for _, a in c.tags if "id" in a}
    for _, a in c.tags:
        if "href" in a:
            assert a["href"][1:] in targets, a["href"]


def test_script_never_builds_markup():
    js = STATIC_JS
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "Function(", "setAttribute(\"on",
                 "srcdoc", "createContextualFragment", "DOMParser", "fetch(", "XMLHttpRequest", "localStorage"):
        assert sink not in js, sink
    assert "</" not in js  # cannot end its own element
    assert "{{" not in js and "{%" not in js
    # it reads the document through textContent and dataset only
    assert "textContent" in js and "dataset" in js


def test_page_size_stays_small_for_many_sessions(merged_doc):
    """200 full sessions with many connections and 20,000 quiet ones: a few MB, not more."""
    d = copy.deepcopy(merged_doc)
    busy = next(s for s in d["sessions"] if s["boundaries"])
    xs = [x for x in d["exchanges"] if x["session"] == busy["session"]]
    bs = [b for b in d["boundaries"] if b["session"] == busy["session"]]
    for n in range(300):
        key = f"S{50000 + n}"
        d["sessions"].append(dict(busy, session=key, session_id=f"busy-{n}"))
        d["exchanges"] += [dict(x, session=key, exchange_id=f"x{900000 + n * 100 + k}", events=500) for k, x in enumerate(xs * 20)]
        d["boundaries"] += [dict(b, session=key, boundary_id=f"b{90000 + n * 10 + k}") for k, b in enumerate(bs)]
    template = d["sessions"][0]
    d["sessions"] += [dict(template, session=f"S{100000 + n}", session_id=f"q{n}", boundaries=0, verdicts={}) for n in range(20000)]
    html = report.render(d)
    assert len(re.findall(r'<section class="session" id=', html)) == report.MAX_FULL_SESSIONS
    assert len(html.encode()) < 18_000_000, len(html.encode())


def test_critical_findings_first_names_every_critical_rule():
    """The summary's short list holds every rule that has a critical finding (it used to stop at the
    first ten, which left out the session-level reissued_request_ran_twice on all the samples)."""
    _require_samples()
    merged_doc = pipeline.run([str(SYNTHETIC.parent)]).document
    html = report.render(merged_doc)
    top = html[html.index('<h3 id="sum-top">') : html.index('<section aria-labelledby="findings">')]
    critical_rules = {f["rule"] for f in merged_doc["findings"] if f["severity"] == "critical"}
    assert "reissued_request_ran_twice" in critical_rules and len(critical_rules) > 1
    shown = {r.replace("<wbr>", "") for r in re.findall(r'<a href="#finding-[^"]+"><code class="name">(.+?)</code></a>', top)}
    assert critical_rules <= shown
    n_major = sum(1 for f in merged_doc["findings"] if f["severity"] in ("critical", "error"))
    assert top.count("<li>") == max(SUMMARY_ROWS, len(critical_rules)) < n_major
    assert f"{n_major - top.count('<li>')} more critical and error findings" in top
    # the terminal lists the same findings in the same order (issue [3/5] item 4: they differed)
    from analyzer import terminal
    said = [line for line in terminal.summary_text(merged_doc).splitlines() if line.startswith("  [")]
    listed = re.findall(r'<a href="#finding-([^"]+)"><code class="name">', top)
    by_id = {f["id"]: f for f in merged_doc["findings"]}
    assert [f"  [{by_id[i]['severity']}] {by_id[i]['rule']}," for i in listed] == [line[: line.index(",") + 1] for line in said]


def test_every_card_and_finding_says_what_to_do(merged_doc):
    """Issue [5/6] "What to do": each non-continuous reconnect's card and each finding carry the catalog's next step."""
    from analyzer import catalog
    from markupsafe import escape

    html = report.render(merged_doc)
    for b in merged_doc["boundaries"][:40]:
        card = _card(html, b["boundary_id"])
        if b["verdict"] == "continuous":
            assert "What to do:" not in card
        else:
            assert f"What to do:</span> {escape(catalog.VERDICT[b['verdict']].next_step)}" in card
    rule_table = html[html.index("<caption>Findings per rule</caption>"):]
    rule_table = rule_table[: rule_table.index("</table>")]
    for f in merged_doc["findings"]:  # once per rule, in the table of rules
        rows = re.findall(rf'<tr><th scope="row" class="rule"><code class="name">{re.escape(f["rule"].replace("_", "_<wbr>"))}</code></th>.*?</tr>', rule_table)
        want = (str(escape(f["effect"])), str(escape(catalog.next_step(f["rule"], f["boundary"] is not None))))
        assert any(want[0] in row and want[1] in row for row in rows), (f["rule"], rows)


def test_time_axis_has_round_time_ticks_between_its_end_labels():
    from datetime import datetime, timezone

    from analyzer.report import timeline

    lo = datetime(2026, 11, 13, 9, 0, 1, 100000, tzinfo=timezone.utc).timestamp()
    for span, fmt_len in ((1.4, 10), (45.0, 8), (3 * 3600.0, 5)):  # 09:00:01.4, 09:00:10, 09:30
        hi = lo + span

        def sx(v, lo=lo, hi=hi):
            return timeline.PLOT_X0 + (v - lo) / (hi - lo) * timeline.PLOT_W

        ticks = timeline._axis_ticks(lo, hi, sx)
        assert 2 <= len(ticks) <= timeline.AXIS_TICKS, (span, ticks)
        xs = [float(k["x"]) for k in ticks]
        assert xs == sorted(xs) and xs[0] >= timeline.PLOT_X0 + timeline.END_LABELS[0]
        assert xs[-1] <= timeline.PLOT_X0 + timeline.PLOT_W - timeline.END_LABELS[1]
        assert all(len(k["label"]) == fmt_len for k in ticks), ticks
        gaps = [b - a for a, b in zip(xs, xs[1:])]
        assert max(gaps) - min(gaps) <= 0.2, "evenly spaced (to the 0.1 px the SVG is written with)"
    assert timeline._axis_ticks(lo, lo, lambda v: 0.0) == []


def test_session_timelines_carry_time_ticks(merged_doc):
    html = report.render(merged_doc)
    svgs = re.findall(r'<svg class="timeline tl".*?</svg>', html, re.S)
    timed = [s for s in svgs if "(+" in s]  # a time axis ends with its span
    assert timed and all(re.search(r'<line class="axis" x1="[\d.]+" y1="[\d.]+" x2="[\d.]+" y2="[\d.]+"/><text', s) for s in timed)


def test_a_lost_range_never_starts_left_of_the_axis(merged_doc):
    from analyzer.report import timeline

    svgs = "".join(re.findall(r'<svg class="timeline tl".*?</svg>', report.render(merged_doc), re.S))  # not the legend's swatch
    xs = [float(x) for x in re.findall(r'<rect class="lost" x="([\d.-]+)"', svgs)]
    ws = [float(w) for w in re.findall(r'<rect class="lost" x="[\d.-]+" y="[\d.-]+" width="([\d.-]+)"', svgs)]
    assert xs and min(xs) >= timeline.PLOT_X0 and min(ws) > 0


def test_overview_counts_every_timed_reconnect_and_states_the_window(merged_doc):
    """Issue [5/6]: an overview across sessions over the incident's window, the window in the summary."""
    html = report.render(merged_doc)
    ov = re.search(r'<svg class="overview tl".*?</svg>', html, re.S).group(0)

    def total(*classes):
        return sum(int(n) for c, n in re.findall(r'<rect class="ov-(\w+)"[^>]* data-n="(\d+)"', ov) if c in classes)

    timed = [b for b in merged_doc["boundaries"] if b.get("started")]
    assert timed and total("div", "unv", "ok") == len(timed)
    assert total("ok") == sum(1 for b in timed if b["verdict"] == "continuous")
    assert total("lost") == sum(b["lost_count"] for b in timed) > 0
    assert total("dup") == sum(b["duplicated_count"] for b in timed) > 0
    starts = sorted(x["started"] for x in merged_doc["exchanges"] if x["started"])
    window = re.search(r"Window: <strong>([^<]*)</strong>", html).group(1)
    assert window.startswith(starts[0][:23]) and " → " in window and window.endswith(")")
    untimed = copy.deepcopy(merged_doc)
    for x in untimed["exchanges"]:
        x["started"] = x["ended"] = None
    assert "No exchange has a time: the window is unknown." in report.render(untimed)


def test_client_reactions_name_their_reconnect_and_never_cover_one_another():
    """Issue [5/6]: neighbouring reconnects' reaction marks overlapped; each now names its reconnect and
    takes a row of the lane where it clears the previous one."""
    from analyzer.report import timeline

    _require_samples()
    doc = pipeline.run([str(SYNTHETIC.parent / "real-python-resurrection-loop.jsonl")]).document
    html = report.render(doc)
    reacts = re.findall(r'<a class="react react-\w+" href="#(S[a-z2-7]+\.r[a-z2-7]+)">.*?<text x="[\d.]+" y="([\d.]+)"[^>]*>([^<]*)</text></a>', html)
    xs = re.findall(r'<a class="react react-\w+" href="#S[a-z2-7]+\.r[a-z2-7]+"><title>[^<]*</title><path d="M([\d.]+)', html)
    assert len(reacts) == len(xs) == sum(1 for b in doc["boundaries"] if b["verdict"] != "continuous") > 5
    # each mark says its reconnect's name without its session's (the timeline's own): Sk3vq7m2a.r5xj2qd -> r5xj2qd
    assert all(bid.endswith("." + label) and label.startswith("r") for bid, _y, label in reacts)
    rows: dict[str, list[float]] = {}
    for (_bid, y, _l), x in zip(reacts, xs):
        rows.setdefault(y, []).append(float(x))
    assert len(rows) > 1, "the loop's reactions need a second row"
    for row in rows.values():
        row.sort()
        assert all(b - a >= timeline.REACT_GAP - 12 for a, b in zip(row, row[1:])), row  # (path starts 5-6 px left of the centre)


def test_one_long_stream_does_not_squeeze_the_reconnects():
    """Issue [5/6]: a long connection squeezed the others into a sliver; the axis zooms to the reconnects."""
    from analyzer.report import timeline

    # a standalone GET open for an hour, and a burst of short connections and a reconnect in its first 10 s
    spans = [(0.0, 3600.0)] + [(i * 1.0, i * 1.0 + 0.5) for i in range(10)]
    lo, hi = timeline._zoom(spans, [5.2], 0.0, 3600.0)
    assert lo == 0.0 and 9.5 < hi < 11.0
    assert timeline._zoom([(0.0, 10.0), (2.0, 9.0)], [5.0], 0.0, 10.0) is None  # nothing dominates: the whole span
    assert timeline._zoom(spans, [], 0.0, 3600.0) is None  # no reconnect: nothing to zoom to
    assert timeline._zoom(spans + [(3000.0, 3000.5)], [5.2], 0.0, 3600.0) is None  # a late connection keeps the span

    _require_samples()
    html = report.render(pipeline.run([str(SYNTHETIC.parent)]).document)
    zoomed = [m for m in re.findall(r'<p class="legend">.*?</svg>', html, re.S) if "Zoomed to the reconnects" in m]
    assert zoomed and all('<path class="cutarrow"' in z for z in zoomed)


def test_a_verdict_and_a_history_rule_of_one_name_keep_their_own_next_steps(merged_doc):
    """cross_stream_replay is both a verdict (a boundary's finding) and a history rule: the findings table
    gives each its own row with its own next step, even at one severity."""
    from analyzer import catalog
    from markupsafe import escape

    d = copy.deepcopy(merged_doc)
    b_find = next(f for f in d["findings"] if f["rule"] == "cross_stream_replay" and f["boundary"] is not None)
    d["findings"].append(dict(b_find, id="f9999", boundary=None, effect=catalog.FINDING["cross_stream_replay"].effect))
    html = report.render(d)
    table = html[html.index("<caption>Findings per rule</caption>"):]
    rows = re.findall(r'<tr><th scope="row" class="rule"><code class="name">cross_<wbr>stream_<wbr>replay</code></th>.*?</tr>', table[: table.index("</table>")])
    assert len(rows) == 2
    for boundary in (True, False):
        assert any(str(escape(catalog.next_step("cross_stream_replay", boundary))) in r for r in rows)


# --------------------------------------------------------------------------
# the worst reconnects by harm, ids in number order, the "When?" chart, rule names, the other sessions


def _handmade_boundary(n: int, verdict: str, severity: str | None, session: str = "S1", **kw) -> dict:
    """A boundary record of the document's shape (schemas/findings.schema.json), written by hand."""
    b = {
        "boundary_id": f"b{n}", "session": session, "session_id": f"sid-{session}", "stream": "s1",
        "request": {"source": "hand.jsonl", "location": f"line {n}"}, "request_exchange": "x1", "resumes_exchange": None,
        "resumes": None, "last_event_id": "5", "last_before": "5", "first_event_id_after": "6", "verdict": verdict,
        "rule_id": "hand", "evidence": "ids", "reason": f"hand-made {verdict}", "severity": severity,
        "lost_event_ids": [], "lost_count": 0, "duplicated_event_ids": [], "duplicated_count": 0,
        "handled_correctly": True if verdict == "continuous" else False, "reaction_exchange": None, "owed_requests": [],
        "wrong_result": None, "id_scheme": "integer", "boundary_event_resent": False,
        "started": f"2026-11-13T09:00:{n:02d}.000000Z",
        "http": {"method": "GET", "status": 200, "request_session_id": f"sid-{session}", "response_session_id": None,
                 "protocol_version": "2025-06-18", "content_type": "text/event-stream", "replay_epoch_before": None,
                 "replay_epoch_after": None, "end_reason": "complete"},
        "events_before": [], "events_after": [], "cut_off_before": [], "views": [],
    }
    b.update(kw)
    return b


def _handmade_doc(boundaries: list[dict], findings: list[dict] | None = None) -> dict:
    """A findings document with one session per key the boundaries name and one finding per boundary that is
    not continuous (as the rules give), unless ``findings`` is given."""
    keys = sorted({b["session"] for b in boundaries}, key=lambda k: int(k[1:]))
    sessions = [{"session": k, "incident": k, "session_id": f"sid-{k}", "protocol_version": "2025-06-18", "era": "sessions",
                 "id_scheme": "integer", "first_seen": "2026-11-13T09:00:00.000000Z", "last_seen": "2026-11-13T09:01:00.000000Z",
                 "exchanges": 1, "streams": 1, "events": 3, "boundaries": sum(b["session"] == k for b in boundaries),
                 "verdicts": dict(Counter(b["verdict"] for b in boundaries if b["session"] == k)),
                 "initialize_results": 1, "sources": ["hand.jsonl"]} for k in keys]
    exchanges = [{"exchange_id": "x1", "session": keys[0], "session_id": f"sid-{keys[0]}", "stream": "s1", "source": "hand.jsonl",
                  "location": "line 1", "conn": "c1", "started": "2026-11-13T09:00:00.000000Z", "ended": "2026-11-13T09:00:01.000000Z",
                  "method": "GET", "url": "http://127.0.0.1:9/mcp", "status": 200, "content_type": "text/event-stream",
                  "last_event_id": None, "end_reason": "eof", "body_recorded": True, "events": 3, "cut_off_events": 0,
                  "first_id": "1", "last_id": "3", "event_offsets_ms": None, "cut_off_offsets_ms": None}]
    if findings is None:
        findings = [{"id": f"f{n}", "rule": b["verdict"], "severity": b["severity"], "session": b["session"],
                     "session_id": b["session_id"], "boundary": b["boundary_id"], "exchange": "x1", "message": b["reason"],
                     "effect": "hand-made effect", "evidence": [b["request"]]}
                    for n, b in enumerate((b for b in boundaries if b["verdict"] != "continuous"), start=1)]
    verdicts = Counter(b["verdict"] for b in boundaries)
    by_sev = Counter(f["severity"] for f in findings)
    return {
        "schema_version": 1, "tool": {"name": "mcp-sse-audit", "version": "0"}, "generated_at": "2026-11-13T10:00:00Z",
        "summary": {"inputs": 1, "inputs_unreadable": 0, "records": 10, "rejected": 0, "sessions": len(sessions),
                    "exchanges": 1, "events": 3, "messages": 0, "boundaries": len(boundaries),
                    "verdicts": {v: verdicts.get(v, 0) for v in report.VERDICTS},
                    "findings_by_severity": {s: by_sev.get(s, 0) for s in report.SEVERITIES},
                    "anomalies": 0, "anomalies_by_severity": {}},
        "inputs": [{"path": "hand.jsonl", "format": "jsonl", "records": 10, "rejected": 0, "error": None, "notes": []}],
        "skipped": [], "sessions": sessions, "exchanges": exchanges, "boundaries": boundaries, "findings": findings,
        "anomalies": [],
    }


def _where_rows(html: str) -> list[str]:
    where = html[html.index('<h3 id="sum-where">'): html.index('<h3 id="sum-top">')]
    return re.findall(r'<tr data-f="w"[^>]*><th scope="row"[^>]*>(?:<a href="#[^"]*">)?(b\d+|S[a-z2-7]+\.r[a-z2-7]+)<', where)


def _where_caption(html: str) -> str:
    where = html[html.index('<h3 id="sum-where">'): html.index('<h3 id="sum-top">')]
    return re.search(r"<caption>(.*?)</caption>", where, re.S).group(1)


def test_worst_reconnects_by_harm_on_a_handmade_document():
    """Issue item 2: a wrong result first, then lost or duplicated events (more first), then the other critical
    and error verdicts, then the others, a session_invalid the client handled last; continuous never."""
    bs = [
        _handmade_boundary(1, "session_invalid", "critical"),  # the client kept using the dead session
        _handmade_boundary(2, "session_invalid", "warning", handled_correctly=True),  # 404, re-initialized: harmless
        _handmade_boundary(3, "gap", "critical", lost_event_ids=["6", "7", "8"], lost_count=3),
        _handmade_boundary(4, "replay_reset", "error", handled_correctly=None, duplicated_event_ids=[str(i) for i in range(1, 11)],
                           duplicated_count=10),
        _handmade_boundary(5, "cross_stream_replay", "error", handled_correctly=None,
                           wrong_result={"call": "tools/call a (id 2)", "got": "tools/call b (id 1)", "preview": "x"}),
        _handmade_boundary(6, "continuous", None),
        _handmade_boundary(7, "unverifiable", "warning"),
        _handmade_boundary(8, "session_resurrected", "error", handled_correctly=None),
    ]
    doc = _handmade_doc(bs)
    html = report.render(doc)
    check_page(doc, html)
    assert _where_rows(html) == ["b5", "b4", "b3", "b1", "b8", "b7", "b2"]
    from analyzer.report.view import harm_order

    assert [b["boundary_id"] for b in sorted((b for b in bs if b["verdict"] != "continuous"), key=harm_order)] == _where_rows(html)
    caption = _where_caption(html)
    assert "critical first" not in caption and "most harmful first" in caption, caption
    # without a critical finding the heading is plain
    calm = _handmade_doc([b for b in bs if b["severity"] != "critical"])
    caption = _where_caption(report.render(calm))
    assert caption.startswith("The worst reconnects (") and "critical" not in caption, caption


def test_worst_reconnects_by_harm_on_the_samples():
    """The sample logs' top ten used to be ten 404s with nothing lost: now the wrong results lead, then the
    reconnects that lost or duplicated events, and a session_invalid the client handled comes last."""
    _require_samples()
    doc = pipeline.run([str(SYNTHETIC.parent)]).document
    html = report.render(doc)
    by_id = {b["boundary_id"]: b for b in doc["boundaries"]}
    rows = [by_id[i] for i in _where_rows(html)]
    assert len(rows) == SUMMARY_ROWS

    def tier(b):
        if b["wrong_result"]:
            return 0
        if b["lost_count"] or b["duplicated_count"]:
            return 1
        if b["verdict"] == "session_invalid" and b["handled_correctly"] is True:
            return 4
        return 2 if b["severity"] in ("critical", "error") else 3

    tiers = [tier(b) for b in rows]
    assert tiers == sorted(tiers) and tiers[0] == 0, tiers
    wrong = [b for b in doc["boundaries"] if b["wrong_result"]]
    assert {b["boundary_id"] for b in rows[: len(wrong)]} == {b["boundary_id"] for b in wrong}
    harmed = [b["lost_count"] + b["duplicated_count"] for b in rows if tier(b) == 1]
    assert harmed and harmed == sorted(harmed, reverse=True)
    assert {b["verdict"] for b in rows} != {"session_invalid"}
    assert all(b["verdict"] != "continuous" for b in rows)
    assert "most harmful first" in _where_caption(html)


def test_integer_ids_are_listed_in_number_order():
    """Issue item 3: ids listed as 1, 10, 100, 11, 2 (the order they came in) read as one number each; the card
    lists them by number, as ranges: 1–2, 10–11, 100."""
    ids = ["1", "10", "100", "11", "2"]
    b = _handmade_boundary(1, "gap", "critical", lost_event_ids=ids, lost_count=5, duplicated_event_ids=list(reversed(ids)),
                           duplicated_count=5)
    html = report.render(_handmade_doc([b]))
    card = _card(html, "b1")
    assert "Lost ids:</span> <strong>5</strong> — <code>1–2</code>, <code>10–11</code>, <code>100</code>" in card
    assert "Duplicated ids:</span> <strong>5</strong> — <code>1–2</code>, <code>10–11</code>, <code>100</code>" in card
    svg = re.search(r'<svg class="timeline tl".*?</svg>', html, re.S).group(0)
    assert "ids 1–2 10–11 100" in svg
    from analyzer.report.common import natural_key

    # all-digit ids by number, the others after them, digit runs by number there too (as the page's sortable columns)
    assert sorted(["b", "10", "a_10", "2", "a_9", "007"], key=natural_key) == ["2", "007", "10", "a_9", "a_10", "b"]


def test_the_when_chart_has_a_legend_and_dates_across_days():
    """Issue item 4: the chart says what each colour means, and its axis carries dates when its window spans days."""
    _require_samples()
    doc = pipeline.run([str(SYNTHETIC.parent)]).document
    html = report.render(doc)
    when = html[html.index('<h3 id="sum-when">'): html.index('<h3 id="sum-where">')]
    legend = re.search(r'<ul class="legend[^"]*">(.*?)</ul>', when, re.S)
    assert legend, "the When? chart has a legend"
    for cls in ("ov-div", "ov-unv", "ov-ok", "ov-lost", "ov-dup"):
        assert f'class="{cls}"' in legend.group(1), cls
    for words in ("diverged", "not verifiable", "continuous", "lost", "twice"):
        assert words in legend.group(1), words
    ov = re.search(r'<svg class="overview tl".*?</svg>', when, re.S).group(0)
    labels = re.findall(r'<text x="[\d.]+" y="[\d.]+" text-anchor="(?:start|middle|end)">([^<]*)</text>', ov)
    starts = sorted(x["started"] for x in doc["exchanges"] if x["started"])
    assert starts[0][:10] != starts[-1][:10], "the samples span days"
    assert labels[0].startswith(starts[0][:10]) and labels[-1].startswith(max(x["ended"] or x["started"] for x in doc["exchanges"] if x["started"])[:10])
    assert len(set(labels)) == len(labels), labels  # never "00:00" twice
    assert all(re.match(r"\d{4}-\d\d-\d\d|\d\d-\d\d\b", t) for t in labels), labels
    # within one day: times alone
    one_day = report.render(merged_doc_of(SYNTHETIC / "gap.jsonl"))
    ov = re.search(r'<svg class="overview tl".*?</svg>', one_day, re.S).group(0)
    labels = re.findall(r'<text x="[\d.]+" y="[\d.]+" text-anchor="(?:start|middle|end)">([^<]*)</text>', ov)
    assert labels and all(re.fullmatch(r"\d\d:\d\d(:\d\d(\.\d+)?Z?)?", t) for t in labels), labels


def merged_doc_of(path: Path) -> dict:
    return pipeline.run([str(path)]).document


def test_the_axis_labels_carry_dates_only_across_days():
    from datetime import datetime, timezone

    from analyzer.report import timeline

    lo = datetime(2026, 11, 13, 9, 0, 0, tzinfo=timezone.utc).timestamp()

    def sx_of(lo, hi):
        return lambda v: timeline.PLOT_X0 + (v - lo) / (hi - lo) * timeline.PLOT_W

    same = timeline._axis_ticks(lo, lo + 3600, sx_of(lo, lo + 3600))
    assert same and all(re.fullmatch(r"\d\d:\d\d", k["label"]) for k in same)
    for span in (20 * 3600, 3 * 86400, 21 * 86400):
        hi = lo + span
        ticks = timeline._axis_ticks(lo, hi, sx_of(lo, hi))
        assert ticks and all(re.match(r"\d\d-\d\d", k["label"]) for k in ticks), (span, ticks)
        assert len({k["label"] for k in ticks}) == len(ticks)
    assert timeline._axis_label(lo, True) == "09:00:00.000Z"
    assert timeline._axis_label(lo, True, dated=True) == "2026-11-13 09:00:00.000Z"


def test_timelines_take_the_page_width(merged_doc):
    """Issue item 4: the SVGs were 960 px wide on a 1200 px page; they are drawn at the page's width and scale with it."""
    from analyzer.report import timeline

    html = report.render(merged_doc)
    css = style_text(html)
    assert re.search(r"svg\.timeline, svg\.overview \{[^}]*width: 100%", css)
    assert timeline.SVG_W >= 1200
    for w in re.findall(r'<svg class="(?:timeline|overview) tl"[^>]* width="(\d+)"', html):
        assert int(w) == timeline.SVG_W


def test_rule_names_break_at_underscores_only(merged_doc):
    """Issue item 4: rule names broke mid-word in narrow columns (wrong_re|sult_del|ivered); now only after an
    underscore (<wbr>), never inside a word."""
    html = report.render(merged_doc)
    css = style_text(html)
    assert re.search(r"code\.name \{[^}]*overflow-wrap: normal;[^}]*word-break: keep-all", css)
    rules = {f["rule"] for f in merged_doc["findings"]}
    table = html[html.index("<caption>Findings per rule</caption>"):]
    table = table[: table.index("</table>")]
    for rule in rules:
        assert f'<code class="name">{rule.replace("_", "_<wbr>")}</code>' in table, rule
    findings = html[html.index('<table class="findings sortable">'):]
    assert '<td class="rule"><code class="name">' in findings and "foreign_<wbr>response_<wbr>on_<wbr>resume" in findings
    assert not re.search(r"td\.rule \{[^}]*nowrap", css)


def test_other_sessions_list_only_sessions_with_findings_and_their_verdicts(merged_doc):
    """Issue item 4: "Other sessions with findings" listed sessions without findings too (a continuous reconnect is
    not a finding) and said nothing of their verdicts; now only sessions with findings, each with its verdict counts."""
    html = report.render(merged_doc, max_full=2)
    c = parse(html)
    assert not c.errors and all(b <= a + 1 for a, b in zip(c.headings, c.headings[1:])), c.headings  # compact cards: h2, h3
    with_findings = {f["session"] for f in merged_doc["findings"] if f["session"]}
    busy = html[html.index('<h2 id="busy">'):]
    busy = busy[: busy.index("</table>")]
    rows = re.findall(r'<tr id="(S[a-z2-7]+|S0)"[^>]*>(.*?)</tr>', busy, re.S)
    assert rows
    for key, row in rows:
        assert key in with_findings, key
        verdicts = Counter(b["verdict"] for b in merged_doc["boundaries"] if b["session"] == key)
        for v, n in verdicts.items():
            assert f'<span class="vcount v-{v}">{v} {n}</span>' in row, (key, v, row)
    listed = {k for k, _ in rows}
    shown_full = set(re.findall(r'<section class="session" id="(S[a-z2-7]+|S0)"', html))
    assert with_findings - shown_full == listed
    # a session with reconnects but no findings is in the list of sessions without findings, with its reconnects
    quiet = html[html.index('<h2 id="quiet">'):]
    no_findings = {b["session"] for b in merged_doc["boundaries"]} - with_findings - shown_full
    assert no_findings
    for key in no_findings:
        assert f'<tr id="{key}"' in quiet


def test_a_capture_blind_reconnect_is_not_blamed_on_the_client():
    """A HAR of streamed responses keeps no bodies: its reconnects are unverifiable for the capture's sake, and the
    client's reaction is counted as not judged, not as "kept using the session"."""
    doc = pipeline.run([str(Path(__file__).resolve().parent.parent / "sample_logs" / "real-python-resume-dense.mitm-streamed.har")]).document
    assert [b["handled_correctly"] for b in doc["boundaries"]] == [None, None]
    html = report.render(doc)
    assert "<dt>not judged (the capture lacks what the client got)</dt><dd>2</dd>" in html
    assert "<dt>kept using the session</dt><dd>0</dd>" in html
    assert "not judged: the capture lacks what the client received" in html
