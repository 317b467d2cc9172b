"""The HTML incident report: one self-contained page from the findings document.

Everything the page shows comes from log content an attacker may control
(session ids, URLs, event data, file names), so:

* the jinja2 environment autoescapes every expression; nothing from the
  document is ever marked safe. The only Markup built here is in ``_text``,
  which escapes each piece itself and adds fixed ``<span>`` markers for
  invisible characters (bidi overrides, U+2028, controls) so they show;
* ``id``/``href`` values are never taken from the document: sessions are
  anchored by their index, boundaries and findings by their ids only when
  those match the schema's ``b<n>``/``f<n>`` pattern, and class names come
  from fixed tables;
* there is no script, no JSON and no remote resource; a Content-Security-Policy
  allows only the one inline ``<style>``, by its sha256, which ``render``
  computes over the exact text it emits. No ``style=`` attributes: the SVG
  uses presentation attributes (``x=``, ``fill=``), which CSP allows.

The page is a pure function of the document (no clock, stable order), and all
grouping is done here with dicts so the template never searches lists: a
capture with 100k sessions renders in one pass.
"""
from __future__ import annotations

import base64
import hashlib
import re
import sys
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup, escape

from .verdicts import VERDICT_ORDER

TEMPLATE = "report.html.j2"

VERDICTS = VERDICT_ORDER
# Verdicts that prove the stream diverged; unverifiable is counted apart.
DIVERGED = set(VERDICTS) - {"unverifiable", "continuous"}
SEVERITIES = ["critical", "error", "warning", "info"]
SEV_RANK = {s: i for i, s in enumerate(SEVERITIES)}

COLLAPSE_ROWS = 20  # tables longer than this go inside a closed <details>
# A capture of 100k sessions must still give a page of a few MB: the worst sessions in full, the
# rest as one row each up to a cap, and everything in the JSON.
MAX_FULL_SESSIONS = 200
MAX_ROWS = 1000
IDS_SHOWN = 20  # lost/duplicated ids listed before "… N more"
DATA_CHARS = 160  # event data shown per event
TIMELINE_ROWS = 300  # connections drawn per session timeline

# Timeline geometry (SVG user units = CSS px at 100%).
SVG_W = 960
LABEL_W = 190
PLOT_X0 = LABEL_W + 10
PLOT_W = SVG_W - PLOT_X0 - 20
TOP = 30  # band above the rows for reconnect labels
ROW_H = 18
BAR_H = 12

_ANCHOR_OK = re.compile(r"^[bf][0-9]{1,12}$")
# Invisible or deceptive characters made visible: C0/C1 controls (tab and
# newline kept), DEL, zero-width and bidi controls, line/paragraph separators
# (U+2028/2029 also break naive JavaScript embedding), BOM.
_INVISIBLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")


# --------------------------------------------------------------------------
# templates


def template_dir() -> Path:
    """Source checkout / editable install first, then the data-files install."""
    here = Path(__file__).resolve().parent.parent / "reports_templates"
    installed = Path(sys.prefix) / "share" / "mcp-sse-audit" / "reports_templates"
    for candidate in (here, installed):
        if (candidate / TEMPLATE).is_file():
            return candidate
    raise FileNotFoundError(
        f"HTML report template {TEMPLATE} not found in {here} nor in {installed}; "
        "reinstall mcp-sse-audit (pip install .) or run from a source checkout"
    )


def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(str(template_dir())),
        autoescape=True,  # every {{ }} is escaped, whatever the template's name
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["t"] = _text
    env.filters["o"] = _or_dash
    env.filters["sid"] = _session_id
    env.filters["plain"] = _plain
    env.filters["ref"] = _ref
    env.filters["trunc"] = _truncate
    return env


# --------------------------------------------------------------------------
# filters


_DASH = Markup('<span class="muted">—</span>')


def _text(value) -> Markup:
    """Escape ``value`` and show invisible characters as visible ``U+XXXX`` marks."""
    if value is None:
        return Markup("")
    s = str(value)
    if not _INVISIBLE.search(s):
        return escape(s)
    out = []
    pos = 0
    for m in _INVISIBLE.finditer(s):
        out.append(escape(s[pos : m.start()]))
        out.append(Markup('<span class="ctl">U+%s</span>') % format(ord(m.group()), "04X"))
        pos = m.end()
    out.append(escape(s[pos:]))
    return Markup("").join(out)


def _or_dash(value) -> Markup:
    """``_text``, or a muted dash for null (so "not known" never looks like "empty")."""
    return _DASH if value is None else _text(value)


def _session_id(value) -> Markup:
    if value is None:
        return Markup('<span class="muted">(none)</span>')
    if value == "":
        return Markup('<span class="muted">(no Mcp-Session-Id)</span>')
    return Markup("<code>%s</code>") % _text(value)


def _plain(value) -> str:
    """For SVG <title>s (text only): invisible characters as ``[U+XXXX]``; escaped later."""
    if value is None:
        return ""
    return _INVISIBLE.sub(lambda m: "[U+%04X]" % ord(m.group()), str(value))


def _ref(ref) -> str:
    if not ref:
        return ""
    return f"{ref.get('source', '')}:{ref.get('location', '')}"


def _truncate(value, n: int = DATA_CHARS) -> str:
    s = "" if value is None else str(value)
    return s if len(s) <= n else s[:n] + "…"


# --------------------------------------------------------------------------
# helpers


def _plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n} {word if n == 1 else (many or word + 's')}"


def _ts(value) -> float | None:
    if not value:
        return None
    try:
        when = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:  # never the local zone: the page must not depend on TZ
        when = when.replace(tzinfo=timezone.utc)
    return when.timestamp()


def _verdict_class(verdict) -> str:
    return f"v-{verdict}" if verdict in VERDICTS else "v-unknown"


def _sev_class(sev) -> str:
    return f"s-{sev}" if sev in SEVERITIES else "s-none"


def _anchor(kind: str, ident, fallback: int) -> str:
    """``boundary-b3`` / ``finding-f7`` when the id is well-formed, else by index."""
    if isinstance(ident, str) and _ANCHOR_OK.match(ident):
        return f"{kind}-{ident}"
    return f"{kind}-n{fallback}"


def _shorten(ids: list, count: int) -> dict:
    shown = [str(i) for i in ids[:IDS_SHOWN]]
    return {"count": count, "shown": shown, "more": max(count - len(shown), 0)}


def _handled_words(value, verdict) -> str:
    if value is None:
        return "capture ends first"
    if value is True:
        return "client continued (stream was continuous)" if verdict == "continuous" else "client re-initialized"
    return "client kept using the session"


def _headline(doc: dict) -> str:
    summary = doc.get("summary", {})
    verdicts = summary.get("verdicts", {})
    by_sev = summary.get("findings_by_severity", {})
    diverged = sum(verdicts.get(v, 0) for v in DIVERGED)
    unverifiable = verdicts.get("unverifiable", 0)
    crit = by_sev.get("critical", 0)
    parts = []
    if diverged:
        parts.append(f"{_plural(diverged, 'reconnect')} diverged")
    else:
        parts.append("no divergence found")
    if crit or diverged:
        parts.append(f"{_plural(crit, 'critical finding')}")
    if unverifiable:
        parts.append(f"{_plural(unverifiable, 'reconnect')} could not be verified")
    total = summary.get("boundaries", 0)
    return ", ".join(parts) + f" ({_plural(total, 'reconnect')} judged)"


# --------------------------------------------------------------------------
# timeline


def _timeline(exchanges: list[dict], boundaries: list[dict], by_ref: dict) -> dict:
    """Geometry for one session's SVG: one bar per SSE connection, one mark per boundary.

    Time axis when every drawn connection has a parseable start, else position
    axis (order in the merged history), so bars are never placed by guesswork.
    """
    wanted = {id(by_ref[k]) for b in boundaries for k in (_key(b.get("request")), _key(b.get("resumes"))) if k in by_ref}
    rows = [
        x
        for x in exchanges
        if x.get("events") or x.get("last_event_id") is not None or id(x) in wanted
        or str(x.get("content_type") or "").lower().startswith("text/event-stream")
    ]
    hidden = max(len(rows) - TIMELINE_ROWS, 0)
    rows = rows[:TIMELINE_ROWS]
    position = {id(x): n for n, x in enumerate(exchanges)}
    starts = [_ts(x.get("started")) for x in rows]
    timed = bool(rows) and all(s is not None for s in starts)

    spans = []
    if timed:
        for x, s in zip(rows, starts):
            e = _ts(x.get("ended"))
            spans.append((s, e if e is not None and e >= s else None))
        lo = min(s for s, _ in spans)
        hi = max(max(e if e is not None else s for s, e in spans), lo)
        for b in boundaries:
            bt = _ts(b.get("started"))
            if bt is not None:
                lo, hi = min(lo, bt), max(hi, bt)
    else:
        for x in rows:
            p = position[id(x)]
            spans.append((float(p), float(p) + 0.8))
        lo = min((s for s, _ in spans), default=0.0)
        hi = max((e for _, e in spans), default=1.0)
    width = (hi - lo) or 1.0

    def sx(v: float) -> float:
        return min(max(PLOT_X0 + (v - lo) / width * PLOT_W, PLOT_X0), PLOT_X0 + PLOT_W)

    row_of = {}
    bars = []
    for n, (x, (s, e)) in enumerate(zip(rows, spans)):
        row_of[id(x)] = n
        x0 = sx(s)
        if e is not None:
            x1 = sx(e)
        elif x.get("end_reason") in ("open", "capture_end"):
            x1 = PLOT_X0 + PLOT_W  # still open when the capture ended: runs off the right edge
        else:
            x1 = x0
        y = TOP + n * ROW_H + (ROW_H - BAR_H) / 2
        ids = ""
        if x.get("first_id") is not None or x.get("last_id") is not None:
            ids = f", ids {x.get('first_id')}…{x.get('last_id')}"
        bars.append(
            {
                "x": f"{x0:.1f}",
                "y": f"{y:.1f}",
                "w": f"{max(x1 - x0, 3.0):.1f}",
                "h": BAR_H,
                "ty": f"{y + BAR_H - 2:.1f}",
                "label": f"{x.get('exchange_id', '')} {x.get('method') or '?'} {x.get('status') if x.get('status') is not None else '—'}",
                "open": e is None and x.get("end_reason") in ("open", "capture_end"),
                "recorded": bool(x.get("body_recorded", True)),
                "cls": "bar-ok" if (x.get("status") or 0) // 100 == 2 else "bar-bad",
                "title": (
                    f"{x.get('exchange_id', '')} {x.get('method') or '?'} {x.get('status')} "
                    f"{x.get('content_type') or ''}: {_plural(x.get('events') or 0, 'event')}{ids}; "
                    f"ended: {x.get('end_reason')}; {x.get('started') or ''} → {x.get('ended') or 'open'}"
                    f"{'' if x.get('body_recorded', True) else '; body not recorded (unknown, not empty)'}"
                ),
            }
        )
    axis_y = TOP + max(len(rows), 1) * ROW_H + 6
    height = axis_y + 20

    marks = []
    for b in boundaries:
        req = by_ref.get(_key(b.get("request")))
        exact = True
        if timed and _ts(b.get("started")) is not None:
            x = sx(_ts(b["started"]))
        elif req is not None and id(req) in row_of:
            x = float(bars[row_of[id(req)]]["x"])
        elif timed and req is not None and _ts(req.get("started")) is not None:
            x = sx(_ts(req["started"]))
        else:
            x, exact = PLOT_X0 + PLOT_W, False  # nowhere to put it: at the end, dashed
        row = row_of.get(id(req)) if req is not None else None
        marks.append(
            {
                "x": f"{x:.1f}",
                "y2": axis_y,
                "cy": f"{TOP + row * ROW_H + ROW_H / 2:.1f}" if row is not None else None,
                "exact": exact,
                "verdict": b.get("verdict"),
                "boundary_id": b.get("boundary_id", ""),
                "anchor": b["_anchor"],
                "cls": _verdict_class(b.get("verdict")),
                "title": (
                    f"{b.get('boundary_id', '')}: {b.get('verdict')} — {b.get('reason', '')}"
                    f" (Last-Event-ID {b.get('last_event_id')!s}, first id after {b.get('first_event_id_after')!s})"
                    + ("" if exact else "; time and request unknown, drawn at the end")
                ),
            }
        )
    # Marks closer than a label's width share one label ("b3 +4"); neighbouring
    # labels alternate between two lines. Every mark keeps its own line and link.
    clusters: list[list[dict]] = []
    for m in sorted(marks, key=lambda m: float(m["x"])):
        if clusters and float(m["x"]) - float(clusters[-1][0]["x"]) < 30:
            clusters[-1].append(m)
        else:
            clusters.append([m])
    for n, group in enumerate(clusters):
        ly = 12 + (n % 2) * 12
        for k, m in enumerate(group):
            m["ly"] = ly
            m["label"] = (m["boundary_id"][:8] + (f" +{len(group) - 1}" if len(group) > 1 else "")) if k == 0 else None
            m["y1"] = ly + 3 if k == 0 else TOP - 2
            m["clustered"] = len(group) > 1
    return {
        "timed": timed,
        "width": SVG_W,
        "height": height,
        "plot_x0": PLOT_X0,
        "plot_x1": PLOT_X0 + PLOT_W,
        "axis_y": axis_y,
        "bars": bars,
        "marks": marks,
        "hidden": hidden,
        "lo_label": _axis_label(lo, timed),
        "hi_label": _axis_label(hi, timed),
        "span_label": f"{hi - lo:.3f} s" if timed else "",
    }


def _axis_label(v: float, timed: bool) -> str:
    if not timed:
        return f"exchange #{int(v) + 1}"
    return datetime.fromtimestamp(v, timezone.utc).strftime("%H:%M:%S.%f")[:-3] + "Z"


def _key(ref) -> tuple | None:
    if not ref:
        return None
    return (ref.get("source"), ref.get("location"))


# --------------------------------------------------------------------------
# context


def _context(doc: dict, max_full: int = MAX_FULL_SESSIONS, max_rows: int = MAX_ROWS) -> dict:
    sessions = list(doc.get("sessions", []))
    exchanges = doc.get("exchanges", [])
    boundaries = doc.get("boundaries", [])
    findings = doc.get("findings", [])

    x_by_session: dict[str, list] = defaultdict(list)
    by_ref: dict[tuple, dict] = {}
    for x in exchanges:
        x_by_session[x.get("session")].append(x)
        by_ref.setdefault((x.get("source"), x.get("location")), x)

    f_by_boundary: dict[str, list] = defaultdict(list)
    f_by_session: dict[str, list] = defaultdict(list)
    prepared_findings = []
    for n, f in enumerate(findings, start=1):
        pf = dict(f)
        pf["_anchor"] = _anchor("finding", f.get("id"), n)
        pf["_sev_cls"] = _sev_class(f.get("severity"))
        prepared_findings.append(pf)
        if f.get("boundary") is not None:
            f_by_boundary[f["boundary"]].append(pf)
        if f.get("session") is not None:
            f_by_session[f["session"]].append(pf)
    # Severity, then the reconnect's position (the document sorts boundary ids
    # as strings: b10 before b2), then session-level findings in document order.
    b_pos = {b.get("boundary_id"): n for n, b in enumerate(boundaries)}
    order = {id(f): n for n, f in enumerate(prepared_findings)}
    prepared_findings.sort(
        key=lambda f: (
            SEV_RANK.get(f.get("severity"), len(SEVERITIES)),
            b_pos.get(f.get("boundary"), len(b_pos)),
            order[id(f)],
        )
    )

    b_by_session: dict[str, list] = defaultdict(list)
    b_anchor: dict[str, str] = {}
    for n, b in enumerate(boundaries, start=1):
        pb = dict(b)
        pb["_anchor"] = _anchor("boundary", b.get("boundary_id"), n)
        b_anchor.setdefault(b.get("boundary_id"), pb["_anchor"])
        pb["_cls"] = _verdict_class(b.get("verdict"))
        pb["_sev_cls"] = _sev_class(b.get("severity"))
        pb["_handled"] = _handled_words(b.get("handled_correctly"), b.get("verdict"))
        pb["_handled_cls"] = {True: "ok", False: "bad", None: "unknown"}.get(b.get("handled_correctly"), "unknown")
        pb["_findings"] = f_by_boundary.get(b.get("boundary_id"), [])
        effects = []
        for f in pb["_findings"]:
            if f.get("effect") and f["effect"] not in effects:
                effects.append(f["effect"])
        pb["_effects"] = effects
        pb["_lost"] = _shorten(b.get("lost_event_ids") or [], b.get("lost_count", len(b.get("lost_event_ids") or [])))
        pb["_dup"] = _shorten(
            b.get("duplicated_event_ids") or [], b.get("duplicated_count", len(b.get("duplicated_event_ids") or []))
        )
        b_by_session[b.get("session")].append(pb)

    for f in prepared_findings:
        f["_boundary_anchor"] = b_anchor.get(f.get("boundary")) if f.get("boundary") is not None else None

    # Boundaries or findings naming a session the sessions list lacks still get a section.
    known = {s.get("session") for s in sessions}
    for sid in list(b_by_session) + list(f_by_session):
        if sid not in known:
            known.add(sid)
            sessions.append(
                {"session": sid, "session_id": sid, "protocol_version": None, "id_scheme": None, "first_seen": None, "last_seen": None,
                 "exchanges": len(x_by_session.get(sid, [])), "streams": None, "events": None,
                 "boundaries": len(b_by_session.get(sid, [])), "verdicts": {}, "initialize_results": None,
                 "sources": [], "_orphan": True}
            )

    s_anchor: dict[str, str] = {}
    full, quiet, busy = [], [], []
    # the worst sessions get full sections: by their worst finding, then how many, then position
    def badness(s: dict) -> tuple:
        fs = f_by_session.get(s.get("session"), [])
        worst = min((SEV_RANK.get(f.get("severity"), len(SEVERITIES)) for f in fs), default=len(SEVERITIES))
        return (worst, -len(fs), -len(b_by_session.get(s.get("session"), [])))

    ranked = sorted((s for s in sessions if b_by_session.get(s.get("session")) or f_by_session.get(s.get("session"))), key=badness)
    shown_full = {id(s) for s in ranked[:max_full]}
    for n, s in enumerate(sessions, start=1):
        sid = s.get("session")
        anchor = f"session-{n}"
        bs = b_by_session.get(sid, [])
        fs = f_by_session.get(sid, [])
        entry = {"s": s, "anchor": anchor, "n": n, "boundaries": bs, "findings": fs}
        if not bs and not fs:
            if len(quiet) < max_rows:
                quiet.append(entry)
                s_anchor.setdefault(sid, anchor)
            continue
        if id(s) not in shown_full:
            if len(busy) < max_rows:
                entry["worst"] = next((f.get("severity") for f in sorted(fs, key=lambda f: SEV_RANK.get(f.get("severity"), 9))), None)
                busy.append(entry)
                s_anchor.setdefault(sid, anchor)
            continue
        s_anchor.setdefault(sid, anchor)
        xs = x_by_session.get(sid, [])
        entry.update(
            {
                "exchanges": xs,
                "boundaries": bs,
                "findings": fs,
                "verdicts": [(v, s.get("verdicts", {}).get(v, 0), _verdict_class(v)) for v in VERDICTS if s.get("verdicts", {}).get(v)],
                "timeline": _timeline(xs, bs, by_ref),
            }
        )
        full.append(entry)
    for f in prepared_findings:
        f["_session_anchor"] = s_anchor.get(f.get("session"))

    summary = doc.get("summary", {})
    verdict_counts = summary.get("verdicts", {})
    by_sev = summary.get("findings_by_severity", {})
    return {
        "doc": doc,
        "tool": doc.get("tool", {}),
        "headline": _headline(doc),
        "summary": summary,
        "verdict_badges": [(v, verdict_counts.get(v, 0), _verdict_class(v)) for v in VERDICTS],
        "severity_badges": [(s, by_sev.get(s, 0), _sev_class(s)) for s in SEVERITIES],
        "major_findings": [f for f in prepared_findings if f.get("severity") in ("critical", "error")][:max_rows],
        "minor_findings": [f for f in prepared_findings if f.get("severity") not in ("critical", "error")][:max_rows],
        "findings_left_out": max(0, sum(1 for f in prepared_findings if f.get("severity") in ("critical", "error")) - max_rows)
        + max(0, sum(1 for f in prepared_findings if f.get("severity") not in ("critical", "error")) - max_rows),
        "rule_table": sorted(
            ((rule, sev, n, _sev_class(sev)) for (rule, sev), n in _count_rules(prepared_findings).items()),
            key=lambda r: (SEV_RANK.get(r[1], 9), -r[2], r[0] or ""),
        ),
        "busy_sessions": busy,
        "sessions_left_out": len(sessions) - len(full) - len(busy) - len(quiet),
        "inputs": doc.get("inputs", []),
        "skipped": doc.get("skipped", []),
        "anomalies": doc.get("anomalies", []),
        "full_sessions": full,
        "quiet_sessions": quiet,
        "collapse": COLLAPSE_ROWS,
        "sev_class": _sev_class,
        "verdict_class": _verdict_class,
    }


# --------------------------------------------------------------------------
# entry point


def css_hash(css: str) -> str:
    """The CSP source for an inline <style> element whose text is ``css``."""
    return "sha256-" + base64.b64encode(hashlib.sha256(css.encode("utf-8")).digest()).decode("ascii")


def _count_rules(findings: list[dict]) -> dict:
    out: dict = {}
    for f in findings:
        key = (f.get("rule"), f.get("severity"))
        out[key] = out.get(key, 0) + 1
    return out


def render(doc: dict, max_full: int = MAX_FULL_SESSIONS, max_rows: int = MAX_ROWS) -> str:
    """Render the findings document as one self-contained HTML page.

    Past ``max_full`` sessions with findings, and ``max_rows`` rows of any list, the page
    says how many more are in the JSON instead of showing them."""
    template = _environment().get_template(TEMPLATE)
    # The stylesheet is a static block of the template: render it alone first,
    # hash it, and hand the hash to the page's CSP.
    css = "".join(template.blocks["css"](template.new_context({})))
    context = _context(doc, max_full, max_rows)
    context["csp_style"] = css_hash(css)
    html = template.render(context)
    if f"<style>{css}</style>" not in html:  # the hash must cover exactly what we emit
        raise RuntimeError("report template: the <style> element does not match its CSP hash")
    return html
