"""The HTML incident report: one self-contained page from the findings document.

Everything the page shows comes from log content an attacker may control
(session ids, URLs, event data, file names), so:

* the jinja2 environment autoescapes every expression; nothing from the
  document is ever marked safe. The only Markup built here is in ``_text``,
  which escapes each piece itself and adds fixed ``<span>`` markers for
  invisible characters (bidi overrides, U+2028, controls) so they show;
* ``id``/``href``/``data-*`` values are never taken from the document: sessions
  are anchored by their index, boundaries, findings and exchanges by their ids
  only when those match the schema's ``b<n>``/``f<n>``/``x<n>`` pattern, and
  class names and filter tokens come from fixed tables;
* no JSON, no remote resource. A Content-Security-Policy allows exactly one
  inline ``<style>`` and one inline ``<script>``, each by the sha256 that
  ``render`` computes over the exact text it emits, and Trusted Types in
  enforcing mode with no policy, so the script cannot turn a string into
  markup even by mistake. The script is static text (it carries no data):
  filters, search, sortable tables, deep links into closed ``<details>`` and
  print expansion, reading only ``dataset`` and ``textContent``. Without it the
  page is complete: the filter bar is ``hidden`` until the script shows it.
  No ``style=`` attributes: the SVG uses presentation attributes (``x=``,
  ``fill=``), which CSP allows.

The page is a pure function of the document (no clock, stable order), and all
grouping is done here with dicts so the template never searches lists: a
capture with 100k sessions renders in one pass.
"""
from __future__ import annotations

import base64
import bisect
import hashlib
import re
import sys
from collections import Counter, defaultdict
from datetime import datetime, timezone
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup, escape

from .catalog import SEVERITIES as _SEVERITIES, VERDICT, VERDICT_ORDER

TEMPLATE = "report.html.j2"

VERDICTS = VERDICT_ORDER
V_RANK = {v: i for i, v in enumerate(VERDICTS)}
# Verdicts that prove the stream diverged; unverifiable is counted apart.
DIVERGED = [v for v in VERDICTS if v not in ("unverifiable", "continuous")]
SEVERITIES = list(_SEVERITIES)
SEV_RANK = {s: i for i, s in enumerate(SEVERITIES)}

COLLAPSE_ROWS = 20  # tables longer than this go inside a closed <details>
# A capture of 100k sessions must still give a page of a few MB: the worst sessions in full, the
# rest as one row each up to a cap, and everything in the JSON.
MAX_FULL_SESSIONS = 200
MAX_ROWS = 1000
SUMMARY_ROWS = 10  # worst reconnects and findings repeated in the summary
IDS_SHOWN = 20  # lost/duplicated ids listed before "… N more"
DATA_HEAD = 120  # event data shown: its head and its tail (a JSON-RPC id or error often ends it)
DATA_TAIL = 40
TIMELINE_ROWS = 300  # connections drawn per session timeline
TICKS_PER_BAR = 40  # event ticks drawn per connection; more events are sampled evenly
TICKS_PER_TIMELINE = 400  # and per session, so 200 timelines stay under ~1 MB of path data

# Timeline geometry (SVG user units = CSS px at 100%).
SVG_W = 960
LABEL_W = 190
PLOT_X0 = LABEL_W + 10
PLOT_W = SVG_W - PLOT_X0 - 20
TOP = 30  # band above the rows for reconnect labels
ROW_H = 20
BAR_H = 10
TICK = 3  # ticks stick out of the bar by this much
LANE_H = 20  # the "client" lane: what the client did after each reconnect

# The rows of a card's HTTP table that decided its verdict (marked "decisive").
DECISIVE = {name: set(v.decisive) for name, v in VERDICT.items()}
NO_EFFECT = VERDICT["continuous"].effect

_ANCHOR_OK = re.compile(r"^[bfx][0-9]{1,12}$")
_INT = re.compile(r"^(0|[1-9][0-9]{0,17})$")
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
    env.filters["clip"] = _clip
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
    """For SVG <title>s and <option>s (text only): invisible characters as ``[U+XXXX]``; escaped later."""
    if value is None:
        return ""
    return _INVISIBLE.sub(lambda m: "[U+%04X]" % ord(m.group()), str(value))


def _ref(ref) -> str:
    if not ref:
        return ""
    return f"{ref.get('source', '')}:{ref.get('location', '')}"


def _truncate(value, n: int = 160) -> str:
    s = "" if value is None else str(value)
    return s if len(s) <= n else s[:n] + "…"


def _clip(value) -> Markup:
    """Event data: the head and the tail, with how much was left out between them.

    The tail matters: a JSON-RPC message's ``id``, ``error`` or closing of a
    result is often at the end. Markers are fixed markup, the pieces escaped."""
    s = "" if value is None else str(value)
    if len(s) <= DATA_HEAD + DATA_TAIL + 20:
        return _text(s)
    left = len(s) - DATA_HEAD - DATA_TAIL
    return Markup("").join(
        [_text(s[:DATA_HEAD]), Markup('<span class="elided"> … %d chars … </span>') % left, _text(s[-DATA_TAIL:])]
    )


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


def _verdict_token(verdict) -> str:
    return verdict if verdict in VERDICTS else "unknown"


def _verdict_class(verdict) -> str:
    return f"v-{_verdict_token(verdict)}"


def _sev_token(sev) -> str:
    return sev if sev in SEVERITIES else "none"


def _sev_class(sev) -> str:
    return f"s-{_sev_token(sev)}"


def _anchor(kind: str, ident, fallback) -> str:
    """``boundary-b3`` / ``finding-f7`` / ``conn-x12`` when the id is well-formed, else by index."""
    if isinstance(ident, str) and _ANCHOR_OK.match(ident):
        return f"{kind}-{ident}"
    return f"{kind}-n{fallback}"


def _ranges(ids: list[str]) -> list[str]:
    """``6 7 8 10`` → ``6–8 10`` when every id is a plain decimal integer; otherwise as given."""
    if not ids or not all(_INT.match(i) for i in ids):
        return ids
    out: list[str] = []
    start = prev = int(ids[0])
    for i in [int(i) for i in ids[1:]] + [None]:
        if i is not None and i == prev + 1:
            prev = i
            continue
        out.append(str(start) if start == prev else f"{start}–{prev}")
        if i is not None:
            start = prev = i
    return out


def _shorten(ids: list, count: int) -> dict:
    shown = [str(i) for i in ids[:IDS_SHOWN]]
    return {"count": count, "shown": _ranges(shown), "more": max(count - len(shown), 0)}


def _handled_words(value, verdict) -> str:
    if verdict == "continuous":
        return "nothing to handle (stream was continuous)"
    if value is None:
        return "capture ends first"
    if value is True:
        return "client re-initialized"
    return "client kept using the session"


def _status(doc: dict) -> str:
    """The headline's colour: critical or a divergence = bad; errors or unverifiable = warn."""
    summary = doc.get("summary", {})
    verdicts = summary.get("verdicts", {})
    by_sev = summary.get("findings_by_severity", {})
    if by_sev.get("critical") or any(verdicts.get(v) for v in DIVERGED):
        return "s-critical"
    if by_sev.get("error") or by_sev.get("warning") or verdicts.get("unverifiable") or summary.get("inputs_unreadable"):
        return "s-warning"
    return "s-ok"


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


def _key(ref) -> tuple | None:
    if not ref:
        return None
    return (ref.get("source"), ref.get("location"))


# --------------------------------------------------------------------------
# what the client did after a reconnect


class _Positions:
    """Capture order of the exchanges, to locate the client's reaction to a reconnect.

    The document says *whether* the client handled a divergence
    (``handled_correctly``) but not *where*; the exchange list holds what
    decided it (verdicts.py's rule): the old session's next use (anything but
    DELETE after the reconnect), or a new session's first request from the
    same capture. A reaction is drawn only where it agrees with
    ``handled_correctly``; the page never contradicts the verdict."""

    def __init__(self, exchanges: list[dict]) -> None:
        ids = [x.get("exchange_id") for x in exchanges]
        by_id = all(isinstance(i, str) and re.match(r"^x[0-9]{1,12}$", i) for i in ids)
        # exchange ids are "x<capture position + 1>"; fall back to list order if they are not
        self.pos = {id(x): (int(x["exchange_id"][1:]) if by_id else n) for n, x in enumerate(exchanges)}
        self.by_xid = {x.get("exchange_id"): x for x in exchanges}
        self.session: dict = defaultdict(list)
        for x in sorted(exchanges, key=lambda x: self.pos[id(x)]):
            self.session[x.get("session")].append(x)
        self.session_pos = {s: [self.pos[id(x)] for x in xs] for s, xs in self.session.items()}
        firsts: dict = defaultdict(list)
        for s, xs in self.session.items():
            if xs[0].get("method") == "POST":
                firsts[xs[0].get("source")].append(xs[0])
        self.new = {src: sorted(xs, key=lambda x: self.pos[id(x)]) for src, xs in firsts.items()}
        self.new_pos = {src: [self.pos[id(x)] for x in xs] for src, xs in self.new.items()}

    def reaction(self, b: dict, by_ref: dict) -> dict | None:
        """``{"kind": reuse|reinit|open|unlocated, "x": exchange or None}``; None for continuous."""
        if b.get("verdict") == "continuous":
            return None
        handled = b.get("handled_correctly")
        if handled is None:
            return {"kind": "open", "x": None}
        req = self.by_xid.get(b.get("request_exchange")) or by_ref.get(_key(b.get("request")))
        if req is None:
            return {"kind": "unlocated", "x": None}
        p = self.pos[id(req)]
        if handled is False:
            sid = b.get("session")
            xs, ps = self.session.get(sid, []), self.session_pos.get(sid, [])
            for x in xs[bisect.bisect_right(ps, p):]:
                if x.get("method") != "DELETE":
                    return {"kind": "reuse", "x": x}
        else:
            src = req.get("source")
            xs, ps = self.new.get(src, []), self.new_pos.get(src, [])
            for x in xs[bisect.bisect_right(ps, p):]:
                if x.get("session") != b.get("session"):
                    return {"kind": "reinit", "x": x}
        return {"kind": "unlocated", "x": None}


def _reaction_words(r: dict | None, s_anchor: dict, s_number: dict, x_anchor: dict) -> tuple[str, str | None]:
    """The card's sentence about the client's reaction, and where it links."""
    if r is None:
        return "", None
    x = r["x"]
    if r["kind"] == "open":
        return "The capture ends before the client re-initialized or used the session again.", None
    if r["kind"] == "unlocated":
        return "", None
    where = f"{x.get('method') or '?'} {x.get('exchange_id', '')} at {x.get('started') or 'unknown time'} ({_ref(x)})"
    if r["kind"] == "reuse":
        return f"It sent {where} on the old session without re-initializing.", x_anchor.get(id(x))
    n = s_number.get(x.get("session"))
    return (
        f"A new session{f' ({n})' if n else ''} started with {where}, and the old one was not used again.",
        s_anchor.get(x.get("session")),
    )


# --------------------------------------------------------------------------
# timeline


def _timeline(exchanges: list[dict], boundaries: list[dict], by_ref: dict, x_anchor: dict) -> dict:
    """Geometry for one session's SVG.

    One bar per SSE connection with its events as ticks, one mark per
    boundary in its verdict's colour, the lost events shaded in the disconnect
    between the resumed connection and the reconnect, the duplicated ones on
    the reconnect's bar, and a lane with the client's reaction (re-initialized,
    kept using the session, or the capture ends first).

    Time axis when every drawn connection has a parseable start, else position
    axis (order in the merged history), so bars are never placed by guesswork.
    Events carry no time of their own in the document: their ticks are spread
    evenly over their connection, in order (the legend says so).
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
    reactions = [b["_reaction"] for b in boundaries if b.get("_reaction")]

    spans = []
    if timed:
        for x, s in zip(rows, starts):
            e = _ts(x.get("ended"))
            spans.append((s, e if e is not None and e >= s else None))
        lo = min(s for s, _ in spans)
        hi = max(max(e if e is not None else s for s, e in spans), lo)
        extra = [_ts(b.get("started")) for b in boundaries] + [_ts(r["x"].get("started")) for r in reactions if r["x"]]
        for t in extra:
            if t is not None:
                lo, hi = min(lo, t), max(hi, t)
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
    ticks, cut_ticks = [], []
    budget = TICKS_PER_TIMELINE
    for n, (x, (s, e)) in enumerate(zip(rows, spans)):
        row_of[id(x)] = n
        x0 = sx(s)
        if e is not None:
            x1 = sx(e)
        elif x.get("end_reason") in ("open", "capture_end"):
            x1 = PLOT_X0 + PLOT_W  # still open when the capture ended: runs off the right edge
        else:
            x1 = x0
        w = max(x1 - x0, 3.0)
        y = TOP + n * ROW_H + (ROW_H - BAR_H) / 2
        ids = ""
        if x.get("first_id") is not None or x.get("last_id") is not None:
            ids = f", ids {x.get('first_id')}…{x.get('last_id')}"
        n_ev, n_cut = x.get("events") or 0, x.get("cut_off_events") or 0
        total = n_ev + n_cut
        k = min(total, TICKS_PER_BAR, budget)
        if k:
            budget -= k
            # k ticks spread over the bar in event order; the last ones stand for the cut-off events
            k_cut = max(round(n_cut * k / total), 1) if n_cut else 0
            step = w / k
            first = f"M{x0 + step / 2:.1f} {y - TICK:.1f}v{BAR_H + 2 * TICK}"
            rel = f"m{step:.1f}-{BAR_H + 2 * TICK}v{BAR_H + 2 * TICK}"
            if k - k_cut:
                ticks.append(first + rel * (k - k_cut - 1))
            if k_cut:
                cx = x0 + step / 2 + step * (k - k_cut)
                cut_ticks.append(f"M{cx:.1f} {y - TICK:.1f}v{BAR_H + 2 * TICK}" + rel * (k_cut - 1))
        bars.append(
            {
                "x": f"{x0:.1f}",
                "y": f"{y:.1f}",
                "x0": x0,
                "w_": w,
                "w": f"{w:.1f}",
                "h": BAR_H,
                "ty": f"{y + BAR_H - 1:.1f}",
                "total": total,
                "label": f"{x.get('exchange_id', '')} {x.get('method') or '?'} {x.get('status') if x.get('status') is not None else '—'}",
                "open": e is None and x.get("end_reason") in ("open", "capture_end"),
                "recorded": bool(x.get("body_recorded", True)),
                "cls": "bar-ok" if (x.get("status") or 0) // 100 == 2 else "bar-bad",
                "anchor": x_anchor.get(id(x)),
                "title": (
                    f"{x.get('exchange_id', '')} {x.get('method') or '?'} {x.get('status')} "
                    f"{x.get('content_type') or ''}: {_plural(n_ev, 'event')}"
                    f"{f' (+{n_cut} cut off)' if n_cut else ''}{ids}"
                    f"{f'; {k} of them drawn' if k < total else ''}; "
                    f"ended: {x.get('end_reason')}; {x.get('started') or ''} → {x.get('ended') or 'open'}"
                    f"{'' if x.get('body_recorded', True) else '; body not recorded (unknown, not empty)'}"
                ),
            }
        )
    lane = any(r for r in reactions)
    lane_y = TOP + max(len(rows), 1) * ROW_H + LANE_H / 2
    axis_y = TOP + max(len(rows), 1) * ROW_H + (LANE_H if lane else 0) + 6
    height = axis_y + 20

    marks, lost, dups, reacts = [], [], [], []
    for b in boundaries:
        req = by_ref.get(_key(b.get("request")))
        exact = True
        if timed and _ts(b.get("started")) is not None:
            x = sx(_ts(b["started"]))
        elif req is not None and id(req) in row_of:
            x = bars[row_of[id(req)]]["x0"]
        elif timed and req is not None and _ts(req.get("started")) is not None:
            x = sx(_ts(req["started"]))
        else:
            x, exact = PLOT_X0 + PLOT_W, False  # nowhere to put it: at the end, dashed
        row = row_of.get(id(req)) if req is not None else None
        bid = str(b.get("boundary_id", ""))
        marks.append(
            {
                "x": f"{x:.1f}",
                "y2": axis_y,
                "cy": f"{TOP + row * ROW_H + ROW_H / 2:.1f}" if row is not None else None,
                "exact": exact,
                "verdict": b.get("verdict"),
                "boundary_id": bid,
                "anchor": b["_anchor"],
                "cls": _verdict_class(b.get("verdict")),
                "title": (
                    f"{bid}: {b.get('verdict')} — {b.get('reason', '')}"
                    f" (Last-Event-ID {b.get('last_event_id')!s}, first id after {b.get('first_event_id_after')!s})"
                    + ("" if exact else "; time and request unknown, drawn at the end")
                ),
            }
        )
        # Lost events: emitted while the client was disconnected, so shaded between the end of
        # the resumed connection and the reconnect, over both rows.
        n_lost = b["_lost"]["count"]
        if n_lost:
            res = by_ref.get(_key(b.get("resumes")))
            span_rows = [r for r in (row_of.get(id(res)) if res is not None else None, row) if r is not None]
            x_start = x - 14
            if res is not None and id(res) in row_of:
                rb = bars[row_of[id(res)]]
                x_start = min(rb["x0"] + rb["w_"], x - 8)
            r0, r1 = (min(span_rows), max(span_rows)) if span_rows else (0, max(len(rows) - 1, 0))
            label = f"{n_lost} lost"
            lost.append(
                {
                    "x": f"{x_start:.1f}",
                    "w": f"{x - x_start:.1f}",
                    "y": f"{TOP + r0 * ROW_H + 1:.1f}",
                    "h": f"{(r1 - r0 + 1) * ROW_H - 2:.1f}",
                    "cls": _verdict_class(b.get("verdict")),
                    "label": label if (x - x_start) >= 7 * len(label) else None,
                    "lx": f"{(x_start + x) / 2:.1f}",
                    "ly": f"{TOP + r0 * ROW_H + ROW_H / 2 + 4:.1f}",
                    "title": f"{bid}: {_plural(n_lost, 'event')} lost — ids {' '.join(b['_lost']['shown'])}"
                    + (f" … {b['_lost']['more']} more" if b["_lost"]["more"] else ""),
                }
            )
        # Duplicated events: delivered again on the reconnect, so shaded on its bar over the
        # ticks that stand for them (from the first duplicate the evidence shows).
        n_dup = b["_dup"]["count"]
        if n_dup:
            title = f"{bid}: {_plural(n_dup, 'event')} delivered twice — ids {' '.join(b['_dup']['shown'])}" + (
                f" … {b['_dup']['more']} more" if b["_dup"]["more"] else ""
            )
            if row is not None and bars[row]["total"]:
                bar = bars[row]
                dup_ids = set(str(i) for i in (b.get("duplicated_event_ids") or []))
                after = [str(ev.get("id")) for ev in b.get("events_after") or []]
                start = next((i for i, e in enumerate(after) if e in dup_ids), 0)
                start = min(start, bar["total"] - 1)
                end = min(start + n_dup, bar["total"])
                dx0 = bar["x0"] + bar["w_"] * start / bar["total"]
                dw = max(bar["w_"] * (end - start) / bar["total"], 3.0)
                y = TOP + row * ROW_H + (ROW_H - BAR_H) / 2 - TICK - 1
                dups.append({"x": f"{dx0:.1f}", "w": f"{dw:.1f}", "y": f"{y:.1f}", "h": BAR_H + 2 * TICK + 2, "title": title})
            else:
                y = TOP + (row if row is not None else 0) * ROW_H + 1
                dups.append({"x": f"{x:.1f}", "w": "8.0", "y": f"{y:.1f}", "h": ROW_H - 2, "title": title})
        r = b.get("_reaction")
        if r:
            kind = r["kind"]
            rx = None
            if r["x"] is not None:
                if timed:
                    t = _ts(r["x"].get("started"))
                    rx = sx(t) if t is not None else None
                elif id(r["x"]) in position:
                    rx = sx(float(position[id(r["x"])]))
            shape = {"reuse": "reuse", "reinit": "reinit"}.get(kind, "open")
            if rx is None:
                rx = PLOT_X0 + PLOT_W
            what = {
                "reuse": "kept using the session without re-initializing",
                "reinit": "re-initialized (a new session started)",
                "open": "the capture ends before the client re-initialized or used the session again",
                "unlocated": "reaction not found in the exchanges",
            }[kind]
            when = f" at {r['x'].get('started') or '?'} ({r['x'].get('exchange_id', '')} {_ref(r['x'])})" if r["x"] else ""
            reacts.append(
                {
                    "shape": shape,
                    "x": f"{rx:.1f}",
                    "y": f"{lane_y:.1f}",
                    "d": _shape(shape, rx, lane_y),
                    "title": f"{bid}: client {what}{when}",
                    "anchor": b["_anchor"],
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
    for bar in bars:
        del bar["x0"], bar["w_"]
    return {
        "timed": timed,
        "width": SVG_W,
        "height": height,
        "plot_x0": PLOT_X0,
        "plot_x1": PLOT_X0 + PLOT_W,
        "axis_y": axis_y,
        "lane": lane,
        "lane_y": f"{lane_y + 4:.1f}",
        "bars": bars,
        "ticks": "".join(ticks),
        "cut_ticks": "".join(cut_ticks),
        "marks": marks,
        "lost": lost,
        "dups": dups,
        "reacts": reacts,
        "hidden": hidden,
        "lo_label": _axis_label(lo, timed),
        "hi_label": _axis_label(hi, timed),
        "span_label": f"{hi - lo:.3f} s" if timed else "",
    }


def _shape(kind: str, x: float, y: float) -> str:
    """SVG path of a reaction marker: diamond = re-initialized, cross = reused, ring = unknown."""
    if kind == "reinit":
        return f"M{x:.1f} {y - 6:.1f}l6 6-6 6-6-6z"
    if kind == "reuse":
        return f"M{x - 5:.1f} {y - 5:.1f}l10 10m0-10l-10 10"
    return f"M{x - 5:.1f} {y:.1f}a5 5 0 1 0 10 0a5 5 0 1 0-10 0"


def _axis_label(v: float, timed: bool) -> str:
    if not timed:
        return f"exchange #{int(v) + 1}"
    return datetime.fromtimestamp(v, timezone.utc).strftime("%H:%M:%S.%f")[:-3] + "Z"


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

    b_verdict = {b.get("boundary_id"): _verdict_token(b.get("verdict")) for b in boundaries}
    f_by_boundary: dict[str, list] = defaultdict(list)
    f_by_session: dict[str, list] = defaultdict(list)
    unanswered_by_stream: dict[tuple, list] = defaultdict(list)
    prepared_findings = []
    for n, f in enumerate(findings, start=1):
        pf = dict(f)
        pf["_anchor"] = _anchor("finding", f.get("id"), n)
        pf["_sev_cls"] = _sev_class(f.get("severity"))
        pf["_sev"] = _sev_token(f.get("severity"))
        pf["_rank"] = SEV_RANK.get(f.get("severity"), len(SEVERITIES))
        pf["_v"] = b_verdict.get(f.get("boundary"), "") if f.get("boundary") is not None else ""
        prepared_findings.append(pf)
        if f.get("boundary") is not None:
            f_by_boundary[f["boundary"]].append(pf)
        if f.get("session") is not None:
            f_by_session[f["session"]].append(pf)
        # A request left without response is tied to the stream its request opened; the
        # reconnects resuming that stream show it as evidence.
        if f.get("rule") == "request_unanswered" and f.get("evidence"):
            x = by_ref.get(_key(f["evidence"][0]))
            if x is not None:
                unanswered_by_stream[(x.get("session"), x.get("stream"))].append(pf)
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
    b_anchors: set[str] = set()
    for n, b in enumerate(boundaries, start=1):
        pb = dict(b)
        pb["_n"] = n
        pb["_anchor"] = _anchor("boundary", b.get("boundary_id"), n)
        if pb["_anchor"] in b_anchors:  # two boundaries with one id: the second by its index
            pb["_anchor"] = f"boundary-n{n}"
        b_anchors.add(pb["_anchor"])
        pb["_cls"] = _verdict_class(b.get("verdict"))
        pb["_v"] = _verdict_token(b.get("verdict"))
        pb["_sev_cls"] = _sev_class(b.get("severity"))
        pb["_sev"] = _sev_token(b.get("severity"))
        pb["_handled"] = _handled_words(b.get("handled_correctly"), b.get("verdict"))
        pb["_handled_cls"] = (
            "ok" if b.get("verdict") == "continuous" else {True: "ok", False: "bad", None: "unknown"}.get(b.get("handled_correctly"), "unknown")
        )
        pb["_findings"] = f_by_boundary.get(b.get("boundary_id"), [])
        effects = []
        for f in pb["_findings"]:
            if f.get("effect") and f["effect"] not in effects:
                effects.append(f["effect"])
        if not effects and b.get("verdict") == "continuous":
            effects.append(NO_EFFECT)
        pb["_effects"] = effects
        pb["_lost"] = _shorten(b.get("lost_event_ids") or [], b.get("lost_count", len(b.get("lost_event_ids") or [])))
        pb["_dup"] = _shorten(
            b.get("duplicated_event_ids") or [], b.get("duplicated_count", len(b.get("duplicated_event_ids") or []))
        )
        pb["_dup_ids"] = {str(i) for i in b.get("duplicated_event_ids") or []}
        pb["_decisive"] = DECISIVE.get(b.get("verdict"), set())
        pb["_unanswered"] = unanswered_by_stream.get((b.get("session"), b.get("stream")), [])
        b_by_session[b.get("session")].append(pb)

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
    s_number: dict[str, int] = {}
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
        s_number.setdefault(sid, n)
        anchor = f"session-{n}"
        bs = b_by_session.get(sid, [])
        fs = f_by_session.get(sid, [])
        sevs = sorted({f["_sev"] for f in fs} | {b["_sev"] for b in bs if b.get("severity") is not None}, key=lambda t: SEV_RANK.get(t, 9))
        entry = {
            "s": s, "anchor": anchor, "n": n, "boundaries": bs, "findings": fs,
            "_v": " ".join(sorted({b["_v"] for b in bs}, key=lambda v: V_RANK.get(v, 99))),
            "_sev": " ".join(sevs),
        }
        if not bs and not fs:
            if len(quiet) < max_rows:
                quiet.append(entry)
                s_anchor.setdefault(sid, anchor)
            continue
        if id(s) not in shown_full:
            if len(busy) < max_rows:
                entry["worst"] = sevs[0] if sevs and sevs[0] in SEVERITIES else None
                busy.append(entry)
                s_anchor.setdefault(sid, anchor)
            continue
        s_anchor.setdefault(sid, anchor)
        xs = x_by_session.get(sid, [])
        shown = {b.get("boundary_id") for b in bs}
        entry.update(
            {
                "exchanges": xs,
                "verdicts": [(v, s.get("verdicts", {}).get(v, 0), _verdict_class(v)) for v in VERDICTS if s.get("verdicts", {}).get(v)],
                "unanswered": [f for f in fs if f.get("rule") == "request_unanswered"
                               and not any(f in b["_unanswered"] for b in bs if b.get("boundary_id") in shown)],
            }
        )
        full.append(entry)

    # Cards exist only for sessions shown in full: links to the others go to their row.
    card_anchor: dict[str, str] = {}
    for e in full:
        for b in e["boundaries"]:
            card_anchor.setdefault(b.get("boundary_id"), b["_anchor"])
    for f in prepared_findings:
        f["_session_anchor"] = s_anchor.get(f.get("session"))
        f["_session_n"] = s_number.get(f.get("session"), "")
        f["_boundary_anchor"] = card_anchor.get(f.get("boundary")) if f.get("boundary") is not None else None
        f["_boundary_n"] = b_pos.get(f.get("boundary"), "") if f.get("boundary") is not None else ""

    # Connection rows (and so link targets) exist for the first max_rows exchanges of a full session.
    x_anchor: dict[int, str] = {}
    used: set[str] = set()
    for e in full:
        for x in e["exchanges"][:max_rows]:
            a = _anchor("conn", x.get("exchange_id"), len(x_anchor) + 1)
            if a in used:  # two exchanges with one id: the second by its index
                a = f"conn-n{len(x_anchor) + 1}"
            used.add(a)
            x_anchor[id(x)] = a
    positions = _Positions(exchanges)
    for e in full:
        for b in e["boundaries"]:
            b["_reaction"] = positions.reaction(b, by_ref)
            b["_reaction_words"], b["_reaction_anchor"] = _reaction_words(b["_reaction"], s_anchor, s_number, x_anchor)
        e["timeline"] = _timeline(e["exchanges"], e["boundaries"], by_ref, x_anchor)
        e["rows"] = [(x, x_anchor[id(x)]) for x in e["exchanges"][:max_rows]]
        e["rows_more"] = max(len(e["exchanges"]) - max_rows, 0)

    summary = doc.get("summary", {})
    verdict_counts = summary.get("verdicts", {})
    by_sev = summary.get("findings_by_severity", {})
    major = [f for f in prepared_findings if f.get("severity") in ("critical", "error")]
    minor = [f for f in prepared_findings if f.get("severity") not in ("critical", "error")]

    # Summary: where it diverged (the worst reconnects) and what the inputs cost.
    worst_b = sorted(
        (b for bs in b_by_session.values() for b in bs if b.get("verdict") != "continuous"),
        key=lambda b: (SEV_RANK.get(b.get("severity"), len(SEVERITIES)), V_RANK.get(b.get("verdict"), 99), b["_n"]),
    )
    where = [
        {"b": b, "link": card_anchor.get(b.get("boundary_id")) or s_anchor.get(b.get("session")),
         "session_n": s_number.get(b.get("session")), "session_link": s_anchor.get(b.get("session"))}
        for b in worst_b[:SUMMARY_ROWS]
    ]
    not_continuous = [b for b in boundaries if b.get("verdict") != "continuous"]
    handling = {
        "bad": sum(1 for b in not_continuous if b.get("handled_correctly") is False),
        "ok": sum(1 for b in not_continuous if b.get("handled_correctly") is True),
        "unknown": sum(1 for b in not_continuous if b.get("handled_correctly") is None),
        "lost": sum(b.get("lost_count") or len(b.get("lost_event_ids") or []) for b in boundaries),
        "dup": sum(b.get("duplicated_count") or len(b.get("duplicated_event_ids") or []) for b in boundaries),
    }
    anomalies = doc.get("anomalies", [])
    codes = Counter((a.get("code"), a.get("severity")) for a in anomalies)
    inputs = doc.get("inputs", [])
    return {
        "doc": doc,
        "tool": doc.get("tool", {}),
        "headline": _headline(doc),
        "status": _status(doc),
        "summary": summary,
        "verdict_groups": [
            ("Diverged", sum(verdict_counts.get(v, 0) for v in DIVERGED),
             [(v, verdict_counts.get(v, 0), _verdict_class(v)) for v in DIVERGED]),
            ("Could not be verified", verdict_counts.get("unverifiable", 0),
             [("unverifiable", verdict_counts.get("unverifiable", 0), _verdict_class("unverifiable"))]),
            ("Continuous", verdict_counts.get("continuous", 0),
             [("continuous", verdict_counts.get("continuous", 0), _verdict_class("continuous"))]),
        ],
        "verdict_badges": [(v, verdict_counts.get(v, 0), _verdict_class(v)) for v in VERDICTS],
        "severity_badges": [(s, by_sev.get(s, 0), _sev_class(s)) for s in SEVERITIES],
        "top_findings": major[:SUMMARY_ROWS],
        "top_more": max(len(major) - SUMMARY_ROWS, 0),
        "where": where,
        "where_more": max(len(worst_b) - SUMMARY_ROWS, 0),
        "handling": handling,
        "where_sessions": len({b.get("session") for b in worst_b}),
        "formats": sorted(Counter(str(i.get("format")) for i in inputs).items()),
        "unreadable": [i for i in inputs if i.get("error")][:SUMMARY_ROWS],
        "anomaly_codes": sorted(
            ((code, sev, n, _sev_class(sev)) for (code, sev), n in codes.items()),
            key=lambda r: (SEV_RANK.get(r[1], 9), -r[2], str(r[0])),
        )[:SUMMARY_ROWS],
        "major_findings": major[:max_rows],
        "minor_findings": minor[:max_rows],
        "findings_left_out": max(0, len(major) - max_rows) + max(0, len(minor) - max_rows),
        "rule_table": sorted(
            ((rule, sev, n, _sev_class(sev)) for (rule, sev), n in _count_rules(prepared_findings).items()),
            key=lambda r: (SEV_RANK.get(r[1], 9), -r[2], r[0] or ""),
        ),
        "busy_sessions": busy,
        "sessions_left_out": len(sessions) - len(full) - len(busy) - len(quiet),
        "inputs": inputs,
        "skipped": doc.get("skipped", []),
        "anomalies": anomalies,
        "full_sessions": full,
        "quiet_sessions": quiet,
        "session_options": sorted(((e["n"], e["s"].get("session_id")) for e in full + busy), key=lambda o: o[0]),
        "diverged_tokens": " ".join(DIVERGED),
        "verdicts": VERDICTS,
        "collapse": COLLAPSE_ROWS,
        "ticks_per_bar": TICKS_PER_BAR,
        "sev_class": _sev_class,
        "sev_rank": lambda s: SEV_RANK.get(s, len(SEVERITIES)),
        "verdict_class": _verdict_class,
    }


# --------------------------------------------------------------------------
# entry point


def csp_hash(text: str) -> str:
    """The CSP source for an inline <style> or <script> element whose text is ``text``."""
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")


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
    # The stylesheet and the script are static blocks of the template: render
    # them alone first, hash them, and hand the hashes to the page's CSP.
    css = "".join(template.blocks["css"](template.new_context({})))
    js = "".join(template.blocks["js"](template.new_context({})))
    context = _context(doc, max_full, max_rows)
    context["csp_style"] = csp_hash(css)
    context["csp_script"] = csp_hash(js)
    html = template.render(context)
    # the hashes must cover exactly what we emit
    if f"<style>{css}</style>" not in html or html.count("<style>") != 1:
        raise RuntimeError("report template: the <style> element does not match its CSP hash")
    if f"<script>{js}</script>" not in html or html.count("<script>") != 1:
        raise RuntimeError("report template: the <script> element does not match its CSP hash")
    return html
