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

ROOT = Path(__file__).resolve().parent.parent
SYNTHETIC = ROOT / "sample_logs" / "synthetic"
CAPTURES = sorted(p for p in SYNTHETIC.glob("*") if p.suffix in (".jsonl", ".har"))

VOID = {"meta", "br", "link", "img", "input", "hr", "col", "area", "base", "embed", "source", "track", "wbr"}
# Every element the template emits; anything else in the output came from the data.
ALLOWED_TAGS = {
    "html", "head", "meta", "title", "style", "body", "header", "main", "footer", "nav", "section", "article",
    "h1", "h2", "h3", "h4", "h5", "h6", "p", "ul", "ol", "li", "dl", "dt", "dd", "div", "span", "strong", "a",
    "code", "br", "table", "caption", "thead", "tbody", "tr", "th", "td", "details", "summary",
    "svg", "g", "line", "rect", "circle", "text",
}

PAYLOADS = [
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(1)>',
    "</style><style>*{}</style>",
    "javascript:alert(1)",
    "line\u2028sep\u2029para",
    "</title></svg><svg onload=alert(1)>",
    "'><a href=https://evil.example/>x</a>",
]
HOSTILE = "".join(PAYLOADS)


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


def csp(html: str) -> str:
    m = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]*)">', html)
    assert m, "CSP meta missing"
    return m.group(1)


def session_chunks(html: str) -> dict[int, str]:
    """Session section number -> its HTML (up to the next session section or the quiet list)."""
    parts = re.split(r'(?=<section class="session" id="session-\d+")', html.split('<h2 id="quiet">')[0])
    out = {}
    for part in parts[1:]:
        n = int(re.match(r'<section class="session" id="session-(\d+)"', part).group(1))
        out[n] = part
    return out


def check_page(doc: dict, html: str) -> Collector:
    c = parse(html)
    assert not c.errors, c.errors[:5]
    assert not c.stack, f"unclosed: {c.stack}"
    assert html.startswith("<!DOCTYPE html>\n")
    tags = {t for t, _ in c.tags}
    assert tags <= ALLOWED_TAGS, tags - ALLOWED_TAGS
    assert "script" not in tags and "<script" not in html.lower()

    # CSP: strict, and its style hash is the hash of the one <style> text.
    policy = csp(html)
    css = style_text(html)
    digest = base64.b64encode(hashlib.sha256(css.encode()).digest()).decode()
    assert policy == (
        f"default-src 'none'; style-src 'sha256-{digest}'; img-src data:; base-uri 'none'; form-action 'none'"
    )
    assert html.index("Content-Security-Policy") < html.index("<style>")
    assert "@import" not in css and "url(" not in css

    ids = [a["id"] for _, a in c.tags if "id" in a]
    assert len(ids) == len(set(ids)), [i for i, n in Counter(ids).items() if n > 1]
    for tag, attrs in c.tags:
        assert "style" not in attrs, f"inline style on <{tag}> (CSP forbids it)"
        for name, value in attrs.items():
            assert not name.startswith("on"), (tag, name)
            if name in ("src", "href", "action", "xlink:href", "formaction", "poster", "data"):
                assert value is not None and value.startswith("#"), (tag, name, value)  # in-page links only
        if "id" in attrs:
            assert re.fullmatch(r"[a-z0-9-]+", attrs["id"]), attrs["id"]
    targets = set(ids)
    for _, attrs in c.tags:
        if "href" in attrs:
            assert attrs["href"][1:] in targets, f"dangling link {attrs['href']}"

    # Headings never skip a level going down.
    for a, b in zip(c.headings, c.headings[1:]):
        assert b <= a + 1, c.headings

    # One card per boundary, anchored by its id.
    cards = [a["id"] for t, a in c.tags if t == "article" and "card" in a.get("class", "")]
    assert cards == [f"boundary-{b['boundary_id']}" for b in _by_section_order(doc)]

    # One timeline mark per boundary in each session's SVG.
    chunks = session_chunks(html)
    want = Counter(b["session"] for b in doc["boundaries"])
    sessions = doc["sessions"]
    for n, chunk in chunks.items():
        sid = sessions[n - 1]["session"]
        svg = re.findall(r"<svg .*?</svg>", chunk, re.S)
        assert len(svg) == 1
        assert svg[0].count('<g class="bmark ') == want.get(sid, 0)
    assert sum(want.values()) == len(doc["boundaries"])
    assert sum(ch.count('<g class="bmark ') for ch in chunks.values()) == len(doc["boundaries"])
    return c


def _by_section_order(doc: dict) -> list[dict]:
    """Boundaries in page order: grouped by session in the sessions list's order."""
    pos = {s["session"]: n for n, s in enumerate(doc["sessions"])}
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


def _poison(doc: dict) -> dict:
    d = copy.deepcopy(doc)
    old_ids = {s["session_id"] for s in d["sessions"]}

    def sid(v):
        return HOSTILE + v if v in old_ids else v

    for s in d["sessions"]:
        s["session_id"] = sid(s["session_id"])
        s["protocol_version"] = HOSTILE
        s["sources"] = [HOSTILE + p for p in s["sources"]]
    for x in d["exchanges"]:
        x["session_id"] = sid(x["session_id"])
        x["url"] = "javascript:alert(1)//" + HOSTILE
        x["content_type"] = HOSTILE
        x["last_event_id"] = HOSTILE
        x["first_id"] = HOSTILE
        x["source"] = HOSTILE + x["source"]
    for b in d["boundaries"]:
        b["session_id"] = sid(b["session_id"])
        b["reason"] = HOSTILE
        b["last_event_id"] = HOSTILE
        b["lost_event_ids"] = [HOSTILE] * 3
        b["lost_count"] = 3
        b["http"]["request_session_id"] = HOSTILE
        b["http"]["replay_epoch_after"] = HOSTILE
        for ev in b["events_before"] + b["events_after"] + b["cut_off_before"]:
            ev["data"] = HOSTILE
            ev["id"] = HOSTILE
            ev["event"] = HOSTILE
        b["request"] = {"source": HOSTILE, "location": HOSTILE}
    for f in d["findings"]:
        f["session_id"] = sid(f["session_id"]) if f["session_id"] is not None else None
        f["message"] = HOSTILE
        f["effect"] = HOSTILE
        f["rule"] = HOSTILE
        f["evidence"] = [{"source": HOSTILE, "location": HOSTILE}]
    for a in d["anomalies"]:
        a["message"] = HOSTILE
        a["code"] = HOSTILE
    d["anomalies"].append({"source": HOSTILE, "location": HOSTILE, "code": HOSTILE, "severity": HOSTILE, "message": HOSTILE})
    for i in d["inputs"]:
        i["path"] = HOSTILE + i["path"]
        i["notes"] = [HOSTILE]
        i["error"] = HOSTILE
    d["skipped"] = [HOSTILE]
    d["tool"]["version"] = HOSTILE
    d["generated_at"] = HOSTILE
    return d


def test_hostile_content_is_inert(merged_doc):
    doc = _poison(merged_doc)
    html = report.render(doc)
    check_page(doc, html)
    lower = html.lower()
    assert "<script" not in lower
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
    assert "&#34;&gt;&lt;img src=x onerror=alert(1)&gt;" in html
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
    assert "<script" not in html.lower() and "<b>" not in html
    for _, attrs in c.tags:
        assert not any(k.startswith("on") for k in attrs)
        if "id" in attrs:
            assert re.fullmatch(r"[a-z0-9-]+", attrs["id"])
        assert "class" not in attrs or re.fullmatch(r"[a-z0-9_ -]+", attrs["class"]), attrs["class"]
    assert 'id="boundary-n1"' in html and 'class="card v-unknown"' in html


# --------------------------------------------------------------------------
# content details


def _one_boundary_doc(doc: dict) -> dict:
    d = copy.deepcopy(doc)
    d["boundaries"] = d["boundaries"][:1]
    return d


def test_card_details(merged_doc):
    d = _one_boundary_doc(merged_doc)
    b = d["boundaries"][0]
    b["lost_event_ids"] = [str(i) for i in range(100, 150)]
    b["lost_count"] = 1234
    b["events_after"][0]["data"] = "A" * 170 + "TAIL"
    b["handled_correctly"] = None
    html = report.render(d)
    assert "… 1214 more" in html
    assert "<code>119</code>" in html and "<code>120</code>" not in html
    assert "A" * 160 + "…" in html and "TAIL" not in html
    assert "capture ends first" in html
    b["handled_correctly"] = True
    b["verdict"] = "gap"
    assert "client re-initialized" in report.render(d)
    b["handled_correctly"] = False
    assert "client kept using the session" in report.render(d)


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
    assert "by position in the capture" in html


def test_quiet_sessions_are_a_compact_list(merged_doc):
    d = copy.deepcopy(merged_doc)
    template = d["sessions"][0]
    for n in range(50):
        s = copy.deepcopy(template)
        s.update(session=f"S{9000 + n}", session_id=f"quiet-{n}", boundaries=0, verdicts={})
        d["sessions"].append(s)
    html = report.render(d)
    check_page(d, html)
    sections = re.findall(r'<section class="session" id="session-(\d+)"', html)
    assert len(sections) == len({b["session"] for b in d["boundaries"]} | {f["session"] for f in d["findings"] if f["session"] is not None})
    quiet = html.split('<h2 id="quiet">')[1]
    assert "<details>" in quiet and quiet.count("quiet-") == 50


def test_many_quiet_sessions_are_listed_compactly(merged_doc):
    d = copy.deepcopy(merged_doc)
    template = d["sessions"][0]
    extra = []
    for n in range(20000):
        s = copy.deepcopy(template)
        s.update(session=f"S{90000 + n}", session_id=f"s{n}", boundaries=0, verdicts={}, sources=[])
        extra.append(s)
    d["sessions"] += extra
    d["exchanges"] += [dict(d["exchanges"][0], session=f"S{90000 + n}", session_id=f"s{n}", exchange_id=f"x{9000 + n}") for n in range(20000)]
    html = report.render(d)
    busy = {b["session"] for b in merged_doc["boundaries"]} | {f["session"] for f in merged_doc["findings"]}
    quiet = 20000 + sum(1 for s in merged_doc["sessions"] if s["session"] not in busy)
    # one row each up to the cap; the page says how many more the JSON has
    assert html.count('<tr id="session-') == report.MAX_ROWS
    assert f"{quiet - report.MAX_ROWS} more sessions are not listed on this page" in html
    check_page(d, html)


def test_only_the_worst_sessions_get_full_sections(merged_doc):
    busy = {b["session"] for b in merged_doc["boundaries"]} | {f["session"] for f in merged_doc["findings"]}
    html = report.render(merged_doc, max_full=2)
    assert len(re.findall(r'<section class="session" id="session-', html)) == 2
    assert html.count("More sessions with reconnects or findings") == 1
    # the two shown in full are among the ones with critical findings
    critical = {f["session"] for f in merged_doc["findings"] if f["severity"] == "critical"}
    shown = re.findall(r'<section class="session" id="session-(\d+)"', html)
    assert {merged_doc["sessions"][int(n) - 1]["session"] for n in shown} <= critical
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
        for fg in ("fg", "muted", "link", "ok", "bad", "unknown"):
            for bg in ("bg", "panel"):
                assert _contrast(root[fg], root[bg]) >= 4.5, (fg, bg, root[fg], root[bg])
            assert _contrast(root[fg], root["code"]) >= 4.5 or fg in ("ok", "bad", "unknown")
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
    monkeypatch.setattr(report, "__file__", str(tmp_path / "site" / "analyzer" / "report.py"))
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    assert report.template_dir() == installed


def test_template_dir_missing_names_both(tmp_path, monkeypatch):
    monkeypatch.setattr(report, "__file__", str(tmp_path / "site" / "analyzer" / "report.py"))
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "prefix"))
    with pytest.raises(FileNotFoundError) as exc:
        report.template_dir()
    msg = str(exc.value)
    assert str(tmp_path / "site" / "reports_templates") in msg
    assert str(tmp_path / "prefix" / "share" / "mcp-sse-audit" / "reports_templates") in msg
