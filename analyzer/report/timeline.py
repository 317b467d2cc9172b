"""The session timelines of the report: SVG geometry from a session's exchanges and boundaries
(connections as bars, events as ticks, reconnects and the client's reaction marked), in CSS pixels."""
from __future__ import annotations

import math
from datetime import datetime, timezone


from analyzer.document.names import short_label

from .common import (
    TICKS_PER_BAR, TICKS_PER_TIMELINE, TIMELINE_ROWS, _key, _plural, _ref,
    _ts, _verdict_class,
)


# Timeline geometry (SVG user units = CSS px at 100%). The SVGs are as wide as the page's content
# (body max-width 78rem less its padding: 1200 px) and CSS scales them to the page's width below it.
SVG_W = 1200
LABEL_W = 190
PLOT_X0 = LABEL_W + 10
PLOT_W = SVG_W - PLOT_X0 - 20
TOP = 30  # band above the rows for reconnect labels
ROW_H = 20
BAR_H = 10
TICK = 3  # ticks stick out of the bar by this much
LANE_H = 20  # the "client" lane: what the client did after each reconnect (one row of it)
REACT_SLOTS = 4  # rows of the lane, so that neighbouring reactions do not cover one another
REACT_GAP = 46  # px a reaction and its label need before the next one in the same row
CHAR_W = 6.7  # px of one character of the SVGs' 11 px monospace labels

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
    Event ticks stand at the time each event passed the capture point (the document's
    ``event_offsets_ms``, sampled) on a time axis; where the capture keeps no time per
    event (HAR) or the axis is by position, they are spread evenly over their connection,
    in order (the legend says so).

    Each part of the drawing has its builder below: the rows (``_timeline_rows``), the axis
    (``_timeline_axis``), the bars and ticks (``_timeline_bars``), per reconnect its mark, lost and
    duplicated shading and the client's reaction, the reaction lane's rows (``_reaction_slots``),
    the marks' labels (``_mark_labels``) and the axis' labels (``_axis_context``).
    """
    rows, hidden = _timeline_rows(exchanges, boundaries, by_ref)
    position = {id(x): n for n, x in enumerate(exchanges)}
    reactions = [b["_reaction"] for b in boundaries if b.get("_reaction")]
    axis = _timeline_axis(rows, boundaries, reactions, position)
    timed, zoomed, sx = axis["timed"], axis["zoomed"], axis["sx"]
    bars, ticks, cut_ticks, row_of = _timeline_bars(rows, axis, x_anchor)
    lane = any(r for r in reactions)
    lane_y = TOP + max(len(rows), 1) * ROW_H + LANE_H / 2
    axis_y = TOP + max(len(rows), 1) * ROW_H + (LANE_H if lane else 0) + 6
    height = axis_y + 20

    marks, lost, dups, reacts = [], [], [], []
    for b in boundaries:
        req = by_ref.get(_key(b.get("request")))
        row = row_of.get(id(req)) if req is not None else None
        mark = _boundary_mark(b, req, row, bars, row_of, timed, sx, axis_y)
        marks.append(mark)
        x = mark["_x"]
        shade = _lost_shade(b, x, row, bars, row_of, by_ref, len(rows))
        if shade is not None:
            lost.append(shade)
        dup = _dup_shade(b, x, row, bars)
        if dup is not None:
            dups.append(dup)
        react = _reaction_mark(b, timed, sx, position)
        if react is not None:
            reacts.append(react)
    for m in marks:
        del m["_x"]
    extra = _reaction_slots(reacts)
    axis_y += extra
    height += extra
    for m in marks:
        m["y2"] = axis_y
    _place_reactions(reacts, lane_y)
    _mark_labels(marks)
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
        **_axis_context(axis),
    }


def _timeline_rows(exchanges: list[dict], boundaries: list[dict], by_ref: dict) -> tuple[list[dict], int]:
    """The connections drawn (SSE ones and the reconnects' requests and resumed streams, TIMELINE_ROWS at
    most) and how many more are not."""
    wanted = {id(by_ref[k]) for b in boundaries for k in (_key(b.get("request")), _key(b.get("resumes"))) if k in by_ref}
    rows = [
        x
        for x in exchanges
        if x.get("events") or x.get("last_event_id") is not None or id(x) in wanted
        or str(x.get("content_type") or "").lower().startswith("text/event-stream")
    ]
    hidden = max(len(rows) - TIMELINE_ROWS, 0)
    return rows[:TIMELINE_ROWS], hidden


def _timeline_axis(rows: list[dict], boundaries: list[dict], reactions: list[dict], position: dict) -> dict:
    """The horizontal axis: by time when every row has a parseable start (zoomed to the reconnects when they
    are a small part of the span), else by position; each row's span on it and ``sx``, a value's x in px."""
    starts = [_ts(x.get("started")) for x in rows]
    timed = bool(rows) and all(s is not None for s in starts)
    spans = []
    zoom = full = None
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
        zoom = _zoom(spans, [t for t in extra if t is not None], lo, hi)
        if zoom is not None:
            full = (lo, hi)
            lo, hi = zoom
    else:
        for x in rows:
            p = position[id(x)]
            spans.append((float(p), float(p) + 0.8))
        lo = min((s for s, _ in spans), default=0.0)
        hi = max((e for _, e in spans), default=1.0)
    width = (hi - lo) or 1.0

    def sx(v: float) -> float:
        return min(max(PLOT_X0 + (v - lo) / width * PLOT_W, PLOT_X0), PLOT_X0 + PLOT_W)

    return {"timed": timed, "zoomed": timed and zoom is not None, "spans": spans, "lo": lo, "hi": hi, "full": full, "sx": sx}


def _timeline_bars(rows: list[dict], axis: dict, x_anchor: dict) -> tuple[list[dict], list[str], list[str], dict]:
    """One bar per row with its events' ticks (TICKS_PER_BAR each, TICKS_PER_TIMELINE in all), the cut-off
    events' ticks apart; and each row's index by exchange."""
    timed, zoomed, sx, lo, hi = axis["timed"], axis["zoomed"], axis["sx"], axis["lo"], axis["hi"]
    row_of = {}
    bars = []
    ticks, cut_ticks = [], []
    budget = TICKS_PER_TIMELINE
    for n, (x, (s, e)) in enumerate(zip(rows, axis["spans"])):
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
        # zoomed: a connection that runs past an edge of the axis gets an arrow there
        cut_l = zoomed and s < lo
        cut_r = zoomed and (e is None or e > hi) and x.get("end_reason") not in ("open", "capture_end") and (e or s) > hi
        ids = ""
        if x.get("first_id") is not None or x.get("last_id") is not None:
            ids = f", ids {x.get('first_id')}…{x.get('last_id')}"
        # ``events`` counts every event of the connection, the cut-off ones (``cut_off_events``) included
        total, n_cut = x.get("events") or 0, x.get("cut_off_events") or 0
        n_ev = total - n_cut
        k = min(total, TICKS_PER_BAR, budget)
        budget -= k
        tick, cut = _bar_ticks(x, k, total, n_cut, s, x0, w, y, timed, sx)
        if tick:
            ticks.append(tick)
        if cut:
            cut_ticks.append(cut)
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
                "cut": "".join(
                    ([f"M{PLOT_X0 - 2:.1f} {y + BAR_H / 2:.1f}l6-5v10z"] if cut_l else [])
                    + ([f"M{PLOT_X0 + PLOT_W + 2:.1f} {y + BAR_H / 2:.1f}l-6-5v10z"] if cut_r else [])
                ),
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
    return bars, ticks, cut_ticks, row_of


def _bar_ticks(x: dict, k: int, total: int, n_cut: int, s: float, x0: float, w: float, y: float, timed: bool, sx) -> tuple[str, str]:
    """A bar's k ticks as two SVG paths, its events' and its cut-off events'."""
    timed_pts = _timed_ticks(x, k) if timed and k else None
    if timed_pts:
        # each tick where its event passed the capture point (the last ones: the cut-off events)
        path = {False: "", True: ""}
        for off, cut in timed_pts:
            path[cut] += f"M{sx(s + off / 1000):.1f} {y - TICK:.1f}v{BAR_H + 2 * TICK}"
        return path[False], path[True]
    if not k:
        return "", ""
    # k ticks spread over the bar in event order; the last ones stand for the cut-off events
    k_cut = max(round(n_cut * k / total), 1) if n_cut else 0
    step = w / k
    first = f"M{x0 + step / 2:.1f} {y - TICK:.1f}v{BAR_H + 2 * TICK}"
    rel = f"m{step:.1f}-{BAR_H + 2 * TICK}v{BAR_H + 2 * TICK}"
    tick = first + rel * (k - k_cut - 1) if k - k_cut else ""
    cx = x0 + step / 2 + step * (k - k_cut)
    cut = f"M{cx:.1f} {y - TICK:.1f}v{BAR_H + 2 * TICK}" + rel * (k_cut - 1) if k_cut else ""
    return tick, cut


def _boundary_mark(b: dict, req: dict | None, row: int | None, bars: list[dict], row_of: dict, timed: bool, sx,
                   axis_y: float) -> dict:
    """A reconnect's mark: at its time, else its request's bar, else at the end, dashed (``_x``: its x in px,
    for the shading beside it)."""
    exact = True
    if timed and _ts(b.get("started")) is not None:
        x = sx(_ts(b["started"]))
    elif req is not None and id(req) in row_of:
        x = bars[row_of[id(req)]]["x0"]
    elif timed and req is not None and _ts(req.get("started")) is not None:
        x = sx(_ts(req["started"]))
    else:
        x, exact = PLOT_X0 + PLOT_W, False  # nowhere to put it: at the end, dashed
    bid = str(b.get("boundary_id", ""))
    return {
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
        "_x": x,
    }


def _lost_shade(b: dict, x: float, row: int | None, bars: list[dict], row_of: dict, by_ref: dict, n_rows: int) -> dict | None:
    """Lost events: emitted while the client was disconnected, so shaded between the end of the resumed
    connection and the reconnect, over both rows."""
    n_lost = b["_lost"]["count"]
    if not n_lost:
        return None
    bid = str(b.get("boundary_id", ""))
    res = by_ref.get(_key(b.get("resumes")))
    span_rows = [r for r in (row_of.get(id(res)) if res is not None else None, row) if r is not None]
    x_start = x - 14
    if res is not None and id(res) in row_of:
        rb = bars[row_of[id(res)]]
        x_start = min(rb["x0"] + rb["w_"], x - 8)
    x_start = max(x_start, PLOT_X0)  # never left of the axis' start (a reconnect at the very start)
    x_end = max(x, x_start + 3)
    r0, r1 = (min(span_rows), max(span_rows)) if span_rows else (0, max(n_rows - 1, 0))
    label = f"{n_lost} lost"
    return {
        "x": f"{x_start:.1f}",
        "w": f"{x_end - x_start:.1f}",
        "y": f"{TOP + r0 * ROW_H + 1:.1f}",
        "h": f"{(r1 - r0 + 1) * ROW_H - 2:.1f}",
        "cls": _verdict_class(b.get("verdict")),
        "label": label if (x_end - x_start) >= 7 * len(label) else None,
        "lx": f"{(x_start + x_end) / 2:.1f}",
        "ly": f"{TOP + r0 * ROW_H + ROW_H / 2 + 4:.1f}",
        "title": f"{bid}: {_plural(n_lost, 'event')} lost — ids {' '.join(b['_lost']['shown'])}"
        + (f" … {b['_lost']['more']} more" if b["_lost"]["more"] else ""),
    }


def _dup_shade(b: dict, x: float, row: int | None, bars: list[dict]) -> dict | None:
    """Duplicated events: delivered again on the reconnect, so shaded on its bar over the ticks that stand
    for them (from the first duplicate the evidence shows)."""
    n_dup = b["_dup"]["count"]
    if not n_dup:
        return None
    bid = str(b.get("boundary_id", ""))
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
        return {"x": f"{dx0:.1f}", "w": f"{dw:.1f}", "y": f"{y:.1f}", "h": BAR_H + 2 * TICK + 2, "title": title}
    y = TOP + (row if row is not None else 0) * ROW_H + 1
    return {"x": f"{x:.1f}", "w": "8.0", "y": f"{y:.1f}", "h": ROW_H - 2, "title": title}


def _reaction_mark(b: dict, timed: bool, sx, position: dict) -> dict | None:
    """What the client did after the reconnect, for the lane (its x in ``rx``; its row comes later)."""
    r = b.get("_reaction")
    if not r:
        return None
    bid = str(b.get("boundary_id", ""))
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
    return {
        "shape": shape,
        "rx": rx,
        "bid": bid,
        "title": f"{bid}: client {what}{when}",
        "anchor": b["_anchor"],
    }


def _reaction_slots(reacts: list[dict]) -> float:
    """Reactions of neighbouring reconnects would sit on one another: each takes the first of REACT_SLOTS
    rows of the lane where it clears the one before (``slot``), and names its reconnect, so which belongs to
    which is never a guess. Returns the px the lane's further rows add."""
    slots_end: list[float] = []
    for r in sorted(reacts, key=lambda r: r["rx"]):
        slot = next((k for k, end in enumerate(slots_end) if r["rx"] - end >= REACT_GAP), None)
        if slot is None:
            slot = len(slots_end) if len(slots_end) < REACT_SLOTS else min(range(len(slots_end)), key=lambda k: slots_end[k])
            if slot == len(slots_end):
                slots_end.append(0.0)
        slots_end[slot] = r["rx"]
        r["slot"] = slot
    return max(len(slots_end) - 1, 0) * LANE_H


def _place_reactions(reacts: list[dict], lane_y: float) -> None:
    """Each reaction's shape and label at its row of the lane, the label left of the mark where the right
    has no room."""
    for r in reacts:
        ry = lane_y + r.pop("slot") * LANE_H
        rx = r.pop("rx")
        label = short_label(r.pop("bid"))
        right = rx + 8 + 7 * len(label) <= SVG_W  # else the name goes left of the mark
        r.update(x=f"{rx:.1f}", y=f"{ry:.1f}", d=_shape(r["shape"], rx, ry), label=label,
                 lx=f"{rx + 8 if right else rx - 8:.1f}", ly=f"{ry + 4:.1f}", lanchor="start" if right else "end")


def _mark_labels(marks: list[dict]) -> None:
    """Marks closer than a label's width share one label ("r5xj2qd +4": the reconnect's name without its
    session's, whose timeline this is); neighbouring labels alternate between two lines. Every mark keeps
    its own line and link."""
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
            m["label"] = (short_label(m["boundary_id"]) + (f" +{len(group) - 1}" if len(group) > 1 else "")) if k == 0 else None
            m["y1"] = ly + 3 if k == 0 else TOP - 2
            m["clustered"] = len(group) > 1


def _axis_context(axis: dict) -> dict:
    """The axis' ticks and end labels, with dates when it spans more than one (UTC) day, times alone
    otherwise, and the note of a zoomed axis."""
    timed, zoomed, sx, lo, hi, full = axis["timed"], axis["zoomed"], axis["sx"], axis["lo"], axis["hi"], axis["full"]
    dated = timed and _spans_days(lo, hi)
    full_dated = zoomed and _spans_days(*full)
    lo_label, hi_label = _axis_label(lo, timed, dated), _axis_label(hi, timed, dated)
    span_label = _span(hi - lo) if timed else ""
    return {
        "axis_ticks": _axis_ticks(lo, hi, sx, dated, (lo_label, f"{hi_label} (+{span_label})")) if timed else [],
        "lo_label": lo_label,
        "hi_label": hi_label,
        "span_label": span_label,
        "zoom_note": (f"Zoomed to the reconnects: the session's connections span {_axis_label(full[0], True, full_dated)} to "
                      f"{_axis_label(full[1], True, full_dated)} ({_span(full[1] - full[0])}); arrows mark connections that run past an edge.")
        if zoomed else "",
    }


ZOOM_SHARE = 0.2  # the reconnects' part of a session's span below which the axis zooms to it


def _zoom(spans: list[tuple], marks: list[float], lo: float, hi: float) -> tuple[float, float] | None:
    """A narrower time axis when one long connection would squeeze everything else into a sliver:
    the range of the reconnects, their reactions, every connection's start and the end of every
    connection shorter than half the span, with a margin, if it is under ZOOM_SHARE of the span.
    None: the whole span is drawn."""
    span = hi - lo
    if span <= 0 or not marks:
        return None
    pts = list(marks)
    for s, e in spans:
        pts.append(s)  # every connection starts inside the axis; only a long one may end past it
        if e is not None and e - s < span / 2:
            pts.append(e)
    zlo, zhi = min(pts), max(pts)
    if zhi - zlo >= ZOOM_SHARE * span:
        return None
    margin = max((zhi - zlo) * 0.08, 0.002)
    return max(lo, zlo - margin), min(hi, zhi + margin)


def _timed_ticks(x: dict, k: int) -> list[tuple[int, bool]]:
    """At most ``k`` (offset in ms, cut off?) pairs from the exchange's per-event times, spread
    evenly over them; empty when the document has no time per event for it."""
    pts = [(o, False) for o in x.get("event_offsets_ms") or []] + [(o, True) for o in x.get("cut_off_offsets_ms") or []]
    if len(pts) > k:
        pts = [pts[round(j * (len(pts) - 1) / max(k - 1, 1))] for j in range(k)]
    return pts


def _shape(kind: str, x: float, y: float) -> str:
    """SVG path of a reaction marker: diamond = re-initialized, cross = reused, ring = unknown."""
    if kind == "reinit":
        return f"M{x:.1f} {y - 6:.1f}l6 6-6 6-6-6z"
    if kind == "reuse":
        return f"M{x - 5:.1f} {y - 5:.1f}l10 10m0-10l-10 10"
    return f"M{x - 5:.1f} {y:.1f}a5 5 0 1 0 10 0a5 5 0 1 0-10 0"


# tick steps of a time axis, in seconds: the first that gives at most AXIS_TICKS ticks is used
NICE_STEPS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800,
              3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800)
AXIS_TICKS = 8
END_LABELS = (130, 210)  # px kept clear of ticks beside the start and the end label (their text, and half a tick label)


def _spans_days(lo: float, hi: float) -> bool:
    """Do ``lo`` and ``hi`` fall on different UTC days (then times alone would be ambiguous: 00:00 twice)?"""
    return datetime.fromtimestamp(lo, timezone.utc).date() != datetime.fromtimestamp(hi, timezone.utc).date()


def _span(secs: float) -> str:
    """An axis' span: to the millisecond under a minute, in larger units above (``21 d 8 h``)."""
    return f"{secs:.3f} s" if secs < 60 else _duration(secs)


def _axis_ticks(lo: float, hi: float, sx, dated: bool | None = None, ends: tuple[str, str] | None = None) -> list[dict]:
    """Time ticks between the axis' two end labels: round times of day (UTC), as many as fit; with the date
    (``11-14 06:00``, or the date alone for steps of days) when the axis spans more than one day (``dated``:
    by default when ``lo`` and ``hi`` fall on different days). ``ends``: the end labels' text, to keep ticks
    clear of them (at least END_LABELS)."""
    span = hi - lo
    if span <= 0:
        return []
    if dated is None:
        dated = _spans_days(lo, hi)
    step = next((s for s in NICE_STEPS if span / s <= AXIS_TICKS), NICE_STEPS[-1])
    fmt = "%H:%M" if step >= 60 else "%H:%M:%S" if step >= 1 else None
    if step >= 86400:
        fmt, dated = "", True
    sample = (5 if fmt == "%H:%M" else 8 if fmt else 0 if fmt == "" else 11) + (6 if dated else 0)
    clear = END_LABELS
    if ends is not None:  # each end label's width, and half a tick label beside it
        clear = tuple(max(c, len(t) * CHAR_W + sample * CHAR_W / 2 + 6) for c, t in zip(END_LABELS, ends))
    out = []
    first = math.ceil(lo / step) * step
    for k in range(AXIS_TICKS + 2):  # bounded: at most AXIS_TICKS steps fit in the span
        v = first + k * step
        if v > hi:
            break
        x = sx(v)
        if x < PLOT_X0 + clear[0] or x > PLOT_X0 + PLOT_W - clear[1]:
            continue
        when = datetime.fromtimestamp(v, timezone.utc)
        label = when.strftime(fmt) if fmt is not None else when.strftime("%H:%M:%S.%f")[: 9 + max(len(f"{step:g}") - 2, 1)]
        if dated:
            label = (when.strftime("%m-%d") + " " + label).strip()
        out.append({"x": f"{x:.1f}", "label": label})
    return out


def _axis_label(v: float, timed: bool, dated: bool = False) -> str:
    """An axis' end: ``09:00:01.250Z``, with the date (``2026-11-13 09:00:01.250Z``) when the axis spans days."""
    if not timed:
        return f"exchange #{int(v) + 1}"
    return datetime.fromtimestamp(v, timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f" if dated else "%H:%M:%S.%f")[:-3] + "Z"


# --------------------------------------------------------------------------
# overview across sessions

OVERVIEW_BINS = 48
OV_BAND = 46  # px of each band (reconnects, events)


def _duration(secs: float) -> str:
    secs = max(secs, 0.0)
    if secs < 60:
        return f"{secs:.3f} s".replace(".000 s", " s")
    if secs < 3600:
        return f"{int(secs // 60)} min {int(secs % 60)} s"
    if secs < 86400:
        return f"{int(secs // 3600)} h {int(secs % 3600 // 60)} min"
    return f"{int(secs // 86400)} d {int(secs % 86400 // 3600)} h"


def _overview(exchanges: list[dict], boundaries: list[dict]) -> dict | None:
    """The incident's window (first request to last end over every capture) and what happened in it:
    reconnects per time bin by kind (diverged, unverifiable, continuous) and the events lost and
    delivered twice, as stacked bars over one time axis.  None when no exchange has a time."""
    times = [v for x in exchanges for v in (_ts(x.get("started")), _ts(x.get("ended"))) if v is not None]
    if not times:
        return None
    lo, hi = min(times), max(times)
    width = (hi - lo) or 1.0
    bins = [dict(div=0, unv=0, ok=0, lost=0, dup=0) for _ in range(OVERVIEW_BINS)]
    untimed = 0
    for b in boundaries:
        t = _ts(b.get("started"))
        if t is None:
            untimed += 1
            continue
        i = min(max(int((t - lo) / width * OVERVIEW_BINS), 0), OVERVIEW_BINS - 1)
        v = b.get("verdict")
        bins[i]["ok" if v == "continuous" else "unv" if v == "unverifiable" else "div"] += 1
        bins[i]["lost"] += b.get("lost_count") or 0
        bins[i]["dup"] += b.get("duplicated_count") or 0
    top_r = max((c["div"] + c["unv"] + c["ok"] for c in bins), default=0) or 1
    top_e = max((c["lost"] + c["dup"] for c in bins), default=0) or 1
    bw = PLOT_W / OVERVIEW_BINS
    y_r, y_e = 8 + OV_BAND, 8 + 2 * OV_BAND + 14  # the bottoms of the two bands
    dated = _spans_days(lo, hi)
    when_fmt = "%Y-%m-%d %H:%M:%S" if dated else "%H:%M:%S"
    rects = []
    for i, c in enumerate(bins):
        x = PLOT_X0 + i * bw
        t0 = datetime.fromtimestamp(lo + i * width / OVERVIEW_BINS, timezone.utc).strftime(when_fmt)
        t1 = datetime.fromtimestamp(lo + (i + 1) * width / OVERVIEW_BINS, timezone.utc).strftime(when_fmt)
        for band, keys, top, bottom in (("r", ("div", "unv", "ok"), top_r, y_r), ("e", ("lost", "dup"), top_e, y_e)):
            y = bottom
            for k in keys:
                if not c[k]:
                    continue
                h = max(c[k] / top * OV_BAND, 1.5)
                y -= h
                what = {"div": "reconnects that diverged", "unv": "reconnects not verifiable", "ok": "continuous reconnects",
                        "lost": "events lost", "dup": "events delivered twice"}[k]
                rects.append({"x": f"{x + 0.5:.1f}", "y": f"{y:.1f}", "w": f"{max(bw - 1, 1):.1f}", "h": f"{h:.1f}",
                              "cls": f"ov-{k}", "n": c[k], "title": f"{t0}–{t1} UTC: {c[k]} {what}"})
    span = hi - lo
    lo_label, hi_label = _axis_label(lo, True, dated), _axis_label(hi, True, dated)
    return {
        "width": SVG_W,
        "height": y_e + 24,
        "plot_x0": PLOT_X0,
        "plot_x1": PLOT_X0 + PLOT_W,
        "axis_y": y_e + 2,
        "y_r": y_r,
        "rects": rects,
        "axis_ticks": _axis_ticks(lo, hi, lambda v: PLOT_X0 + (v - lo) / width * PLOT_W, dated, (lo_label, hi_label)),
        "lo_label": lo_label,
        "hi_label": hi_label,
        "bin": _span(width / OVERVIEW_BINS) if span > 0 else "",
        "top_r": top_r,
        "top_e": top_e,
        "untimed": untimed,
        "window": (datetime.fromtimestamp(lo, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z → "
                   + datetime.fromtimestamp(hi, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + f"Z ({_duration(span)})"),
    }
