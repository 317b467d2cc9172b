"""The report's "Trend" section: the document's ``trend`` (per UTC day and host: reconnects judged, diverged, events
lost; :mod:`analyzer.document.trend`) as a table and one SVG chart per host over the same days.

Drawn like the "When?" overview (:func:`analyzer.report.timeline._overview`): a top band of reconnects per day
(diverged stacked under the rest) and a bottom band of the events lost, over one axis of days.  Days are read
back from the rows and checked (a day that is not ``YYYY-MM-DD`` is listed in the table only); hosts are
text from captures and only ever reach the page through the template's escaping.
"""
from __future__ import annotations

from datetime import date, timedelta

from .common import MAX_ROWS
from .timeline import PLOT_W, PLOT_X0, SVG_W

MAX_DAYS = 366  # days drawn, the newest (the table lists every row)
MAX_CHARTS = 8  # hosts drawn, the most reconnects first (the table lists every host)
BAND = 44  # px of each band
DAY_LABELS = 12  # at most this many day labels under a chart
BAR_W = 36  # px of a day's bar at most (a week drawn over the page's width would be slabs), centred on its day


def _count(value) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _day(value) -> date | None:
    if not isinstance(value, str) or len(value) != 10:
        return None
    try:
        return date.fromisoformat(value)
    except ValueError:
        return None


def trend_view(rows) -> dict | None:
    """What the Trend section shows; None when the document has no trend (not a store's) or an empty one."""
    rows = [r for r in rows or () if isinstance(r, dict)]
    if not rows:
        return None
    clean = [{"day": r.get("day"), "_day": _day(r.get("day")), "host": str(r.get("host") or ""),
              "judged": _count(r.get("judged")), "diverged": _count(r.get("diverged")), "events_lost": _count(r.get("events_lost"))}
             for r in rows]
    dated = sorted({r["_day"] for r in clean if r["_day"] is not None})
    days: list[date] = []
    if dated:
        first, last = dated[0], dated[-1]
        first = max(first, last - timedelta(days=MAX_DAYS - 1))
        days = [first + timedelta(days=i) for i in range((last - first).days + 1)]
    totals: dict[str, dict] = {}
    for r in clean:
        t = totals.setdefault(r["host"], {"host": r["host"], "judged": 0, "diverged": 0, "events_lost": 0, "days": {}})
        for k in ("judged", "diverged", "events_lost"):
            t[k] += r[k]
        if r["_day"] is not None:
            d = t["days"].setdefault(r["_day"], [0, 0, 0])
            d[0] += r["judged"]
            d[1] += r["diverged"]
            d[2] += r["events_lost"]
    ranked = sorted(totals.values(), key=lambda t: (-t["judged"], t["host"]))
    charts = [_chart(t, days) for t in ranked[:MAX_CHARTS]] if days else []
    table = sorted(clean, key=lambda r: (r["_day"] is None, r["_day"] or date.min, r["host"]))
    return {
        "charts": charts,
        "hosts": len(totals),
        "hosts_left_out": max(len(totals) - MAX_CHARTS, 0) if days else 0,
        "first": days[0].isoformat() if days else None,
        "last": days[-1].isoformat() if days else None,
        "days": len(days),
        "days_left_out": sum(1 for d in dated if d < days[0]) if days else 0,  # days with rows before the ones drawn
        "rows": table[:MAX_ROWS],
        "rows_left_out": max(len(table) - MAX_ROWS, 0),
        "undated": sum(r["judged"] for r in clean if r["_day"] is None),
    }


def _chart(t: dict, days: list[date]) -> dict:
    """One host's SVG: per day, its reconnects (diverged at the bottom of the bar) and its events lost."""
    max_r = max((v[0] for v in t["days"].values()), default=0)
    max_e = max((v[2] for v in t["days"].values()), default=0)
    top_r, top_e = max_r or 1, max_e or 1  # (the scale: a band of zeros is drawn empty)
    slot = PLOT_W / len(days)
    bw = max(min(slot - 1, BAR_W), 1)
    y_r, y_e = 8 + BAND, 8 + 2 * BAND + 14  # the bottoms of the two bands
    rects = []
    for i, day in enumerate(days):
        judged, diverged, lost = t["days"].get(day, (0, 0, 0))
        x = PLOT_X0 + (i + 0.5) * slot - bw / 2
        y = y_r
        for n, cls, what in ((diverged, "ov-div", "diverged"), (judged - diverged, "tr-rest", "did not diverge")):
            if n <= 0:
                continue
            h = max(n / top_r * BAND, 1.5)
            y -= h
            rects.append(_rect(x, y, bw, h, cls, n, f"{day.isoformat()}: {n} of {judged} reconnects {what}"))
        if lost:
            h = max(lost / top_e * BAND, 1.5)
            rects.append(_rect(x, y_e - h, bw, h, "ov-lost", lost, f"{day.isoformat()}: {lost} events lost"))
    step = -(-len(days) // DAY_LABELS)  # a label every step days, at most DAY_LABELS of them
    ticks = [{"x": f"{PLOT_X0 + (i + 0.5) * slot:.1f}", "label": days[i].isoformat()[5:] if i else days[i].isoformat()}
             for i in range(0, len(days), step)]
    return {
        "host": t["host"],
        "judged": t["judged"],
        "diverged": t["diverged"],
        "events_lost": t["events_lost"],
        "width": SVG_W,
        "height": y_e + 24,
        "plot_x0": PLOT_X0,
        "plot_x1": PLOT_X0 + PLOT_W,
        "y_r": y_r,
        "axis_y": y_e + 2,
        "max_r": max_r,
        "max_e": max_e,
        "rects": rects,
        "ticks": ticks,
    }


def _rect(x: float, y: float, w: float, h: float, cls: str, n: int, title: str) -> dict:
    return {"x": f"{x:.1f}", "y": f"{y:.1f}", "w": f"{w:.1f}", "h": f"{h:.1f}", "cls": cls, "n": n, "title": title}
