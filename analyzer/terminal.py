"""What the user's terminal shows: the reading meter, the phase lines and the summary of a run.

Log content is hostile: every line here goes through :func:`safe` (no terminal control character of a
file name or a message reaches the terminal).  Nothing here decides anything: :mod:`analyzer.run`
calls it with what it found.
"""
from __future__ import annotations

import re

import os
import shutil
import sys
import time
from typing import Callable

from analyzer.document import calls_hit
from analyzer.document.facts import baseline_headline, inputs_line, plural
from analyzer.ingest.reading import Meter


def phases(echo: Callable[[str], None]) -> Callable[[str], None]:
    """Progress on a terminal: each phase on its own line, with the time since the run began (the reading has
    its own status line, :class:`TerminalMeter`)."""
    t0 = time.monotonic()
    return lambda msg: echo(safe(f"[{time.monotonic() - t0:6.1f} s] {msg}"))


class TerminalMeter(Meter):
    """One status line on a terminal, redrawn in place while inputs are read: which input, how far
    into it, the rate and the time left; then one line for the whole read.  Off a terminal: nothing."""

    EVERY = 0.2  # seconds between redraws
    SHOWN_FROM = 1 << 20  # bytes: smaller inputs show no percentage

    def __init__(self, stream=None) -> None:
        self.stream = stream or sys.stderr
        self.t0 = time.monotonic()
        self.bytes_done = 0  # of the inputs finished
        self.inputs = 0
        self.records = 0  # of the inputs finished
        self.current = ("", 0, 0, 0)  # path, size, n, total
        self.file_t0 = self.t0
        self.last = 0.0
        self.drawn = 0  # characters of the line on screen

    def begin(self, n: int, total: int, path: str, size: int) -> None:
        if self.inputs:
            self.bytes_done += self.current[1]
        self.inputs = n
        self.current = (path, size, n, total)
        self.file_t0 = time.monotonic()
        self.last = 0.0
        self.at(0)

    def at(self, position: int) -> None:
        now = time.monotonic()
        if now - self.last < self.EVERY and position:
            return
        self.last = now
        path, size, n, total = self.current
        rate = position / max(now - self.file_t0, 1e-3) / 1e6
        parts = [f"reading [{n}/{total}]" + (f", {self.records:,} records so far" if self.records else "")]
        # how far into this input: only for one large enough to take a while (no "0% of 0.0 MB" for small files)
        if size >= self.SHOWN_FROM and position:
            left = (size - position) / 1e6 / rate if rate > 0 else None
            parts.append(f"{min(position * 100 // size, 100)}% of {size / 1e6:.1f} MB, {rate:.1f} MB/s"
                         + (f", ETA {left:.0f} s" if left is not None else ""))
        elif not size and position:
            parts.append(f"{position / 1e6:.1f} MB, {rate:.1f} MB/s")
        head = "  ".join(parts)
        width = shutil.get_terminal_size((100, 20)).columns - 1
        room = max(width - len(head) - 2, 10)
        name = safe(path)
        name = name if len(name) <= room else "…" + name[-(room - 1):]
        self._draw((name + "  " + head)[:width])

    def _draw(self, line: str, end: str = "") -> None:
        """``line`` over the previous one: spaces, not a terminal escape, blank what it does not cover."""
        self.stream.write("\r" + line + " " * max(self.drawn - len(line), 0) + end)
        self.stream.flush()
        self.drawn = 0 if end else len(line)

    def done(self, records: int) -> None:
        self.records += records

    def end(self, inputs: int, skipped: int, stored: int | None = None) -> None:
        """One line for the whole read, with the summary's counts (the inputs, the files skipped); a store's ingest
        says its inputs are the new ones, beside those it already held (the analysis then counts what it reads)."""
        path, size, _n, _total = self.current
        total_bytes = self.bytes_done + size
        secs = max(time.monotonic() - self.t0, 1e-3)
        what = plural(inputs, "input") if stored is None else f"{plural(inputs, 'new input')} into the store ({stored} already in it)"
        self._draw(f"read {what}, {skipped} skipped, {self.records:,} records, {total_bytes / 1e6:.1f} MB in {secs:.1f} s "
                   f"({total_bytes / 1e6 / secs:.1f} MB/s)", "\n")


def input_problems(doc: dict) -> tuple[list[str], list[str]]:
    """What stderr says of the document's inputs (the rows its summary counts, :mod:`analyzer.document.facts`):
    ``error: PATH: why`` for each one nothing could be read from (with the first rejected record's reason when
    it held records), and ``warning: PATH: ...`` for each one read with 0 records."""
    first: dict[str, dict] = {}
    for a in doc.get("anomalies") or ():
        if a.get("severity") == "error":
            first.setdefault(a.get("source"), a)
    errors, empty = [], []
    for row in doc.get("inputs") or ():
        if row.get("error"):
            a = first.get(row["path"]) if row.get("records") else None
            why = f"; {a.get('location')}: [{a.get('code')}] {a.get('message')}" if a is not None else ""
            errors.append(safe(f"error: {row['path']}: {row['error']}{why}"))
        elif not row.get("records"):
            empty.append(safe(f"warning: {row['path']}: it holds no records (read, with 0 records: nothing in it was lost)"))
    return errors, empty


def session_name(rec: dict) -> str:
    """A session as the JSON (``session``, ``session_id``) and the HTML name it: ``Sk3vq7m2a 3c7c1b9a6589…``."""
    sid = rec.get("session_id")
    short = "no Mcp-Session-Id" if not sid else sid if len(sid) <= 12 else sid[:12] + "…"
    return f"session {rec.get('session') or '?'} {short}" if sid else f"session {rec.get('session') or '?'}, {short}"


SHOWN_FINDINGS = 10  # finding lines in the terminal summary; the rest are counted and pointed to
SHOWN_CALLS = 5  # calls-hit lines in the terminal summary (the JSON and the report have them all)


def width() -> int | None:
    """Finding lines are cut to this many characters: $COLUMNS, else the terminal's width when stderr is one;
    off a terminal (cron mail, CI logs) lines are whole."""
    cols = os.environ.get("COLUMNS", "")
    if cols.isdigit() and int(cols) >= 40:
        return int(cols)
    return shutil.get_terminal_size((100, 20)).columns if sys.stderr.isatty() else None


def _fit(line: str, width: int | None) -> str:
    return line if width is None or len(line) <= width else line[: width - 1] + "…"


def _span(lo: str, hi: str) -> str:
    """``lo`` to ``hi`` (the document's RFC 3339 times) as one short range: the day once when it is one day."""
    a, b = lo[:19].replace("T", " "), hi[:19].replace("T", " ")
    return f"{a} to {b[11:] if a[:10] == b[:10] else b} UTC"


def summary_text(doc: dict, outputs: tuple[str, ...] = (), width: int | None = None) -> str:
    """The terminal summary; ``outputs``: the files written (``-``: standard output), which it points to;
    ``width``: finding lines are cut to it (None: whole)."""
    s = doc["summary"]
    base = s.get("baseline")
    named = [o if o != "-" else "standard output" for o in outputs]
    pointer = ("in " + " and ".join(named)) if named else "with --json FILE or --html FILE"
    lines = [
        f"inputs: {inputs_line(doc)}",
        f"sessions: {s['sessions']}  exchanges: {s['exchanges']}  events: {s['events']}  reconnects: {s['boundaries']}",
    ]
    if s["boundaries"]:
        lines.append("reconnect verdicts: " + ", ".join(f"{v} {n}" for v, n in s["verdicts"].items() if n))
    hit = doc.get("calls_hit") or []
    if hit:  # one story per call first: the same list, in the same order, as the JSON's calls_hit and the report's "Calls hit"
        counts: dict[str, int] = {}
        for c in hit:
            counts[c["outcome"]] = counts.get(c["outcome"], 0) + 1
        lines.append(f"calls hit: {len(hit)} (" + ", ".join(f"{o} {n}" for o, n in counts.items()) + ")")
        for c in hit[:SHOWN_CALLS]:
            at = c.get("reconnect") or f"session {c['session']}"  # (a reconnect's name starts with its session's)
            lines.append(_fit(safe(f"  {c['call']} at {at}: {c['said']}; {c['detail']}"), width))
        if len(hit) > SHOWN_CALLS:
            lines.append(f"  … {len(hit) - SHOWN_CALLS} more {pointer}")
    every = ", ".join(f"{n} {k}" for k, n in s["findings_by_severity"].items())
    shown = doc["findings"]
    if base is None:
        lines.append("findings: " + every)
    else:
        # the baseline leads: what is new is what to act on (and all that sets the exit code); the known ones are
        # counted, not listed, so the worst new finding is the first line below and the one "next:" points at
        split = ", ".join(f"{n} {k}" for k, n in base["new_by_severity"].items() if n)
        lines.append(f"findings: {baseline_headline(base)} against the baseline {base['source']}" + (f"; new: {split}" if split else "")
                     + "; only the new count for --fail-on")
        lines.append(f"  all findings of this run: {every}")
        shown = [f for f in shown if f.get("baseline") == "new"]
    first = calls_hit.headline(shown, SHOWN_FINDINGS)  # (the report's "Critical findings first": the same list and order)
    for f in first:
        where = f["evidence"][0]
        seen = f" (seen in {len(f['seen_in'])} captures)" if f.get("seen_in") else ""
        lines.append(_fit(safe(f"  [{f['severity']}] {f['rule']}, {session_name(f)}, at {where['source']} {where['location']}{seen}"), width))
        lines.append(_fit(safe(f"      {f['message']}"), width))
    if len(shown) > len(first):
        lines.append(f"  … {len(shown) - len(first)} more{' new' if base is not None else ''} {pointer}")
    if base is not None and base["known"]:
        lines.append(f"  {plural(base['known'], 'known finding')} (in the baseline) not listed here: marked known {pointer}")
    if s["anomalies"]:
        by = s.get("anomalies_by_severity") or {}
        split = ", ".join(f"{n} {k}" for k, n in by.items())
        lines.append(f"input anomalies: {s['anomalies']}" + (f" ({split})" if split else "") + f" (listed {pointer})")
        if by.get("error"):
            lines.append("  error anomalies mean lost or unreadable input: they fail --fail-on error and warning")
    firsts = [x["first_seen"] for x in doc.get("sessions", ()) if x.get("first_seen")]
    lasts = [x["last_seen"] for x in doc.get("sessions", ()) if x.get("last_seen")]
    if firsts and lasts:  # the incident's window, as the report's "When?" gives it
        times = sorted(f["time"] for f in doc["findings"] if f.get("time"))
        asked = s.get("window")  # --since/--until: the sessions kept, whole, may reach past them
        lines.append(f"incident window: {_span(min(firsts), max(lasts))}" + (f"; findings {_span(times[0], times[-1])}" if times else "")
                     + (f" (--since {asked['since'] or '-'} --until {asked['until'] or '-'} kept the sessions open then, whole)" if asked else ""))
    if shown:  # one next step: the worst finding's, where to read about it
        f = shown[0]
        html = next((o for o in outputs if o != "-" and o.endswith((".html", ".htm"))), None)
        # (the report's section of the session is the element whose id is its name: the link scrolls there)
        where = (f"open {html}#{f['session']}" if f["session"] else f"open {html} at {f['id']}") if html else f"see {f['id']} {pointer}"
        lines.append(_fit(safe(f"next: {where} ({f['rule']}); {f.get('next_step') or ''}"), width))
    elif base is not None and base["known"]:
        lines.append("next: nothing new against the baseline; the known findings stay accepted until they are fixed")
    return "\n".join(safe(line) for line in lines)


def safe(text: str) -> str:
    """Log content is hostile: no terminal control characters reach the user's terminal, and no CI runner reads a
    workflow command in it (:func:`inert`)."""
    return inert("".join(ch if ch.isprintable() or ch == " " else f"\\x{ord(ch):02x}" for ch in text))


# GitHub's runner reads workflow commands from standard output AND standard error: "::name ...::" at the start of a
# line (after white space) and "##[name]" anywhere in it.  A method, a tool name, a session id or a file name in a
# capture could stop the job's annotations (::stop-commands::), mask values or forge errors.  Every line this tool
# prints (not its own annotations: analyzer.document.ci writes those) shows them escaped, as \x3a and \x23.
_COMMAND = re.compile(r"^([ \t]*):(?=:)|#(?=#\[)", re.M)


def inert(text: str) -> str:
    """``text`` with every workflow command sequence a CI runner would act on shown escaped (``\\x3a:`` for a
    line's leading ``::``, ``#\\x23[`` for ``##[``); the rest unchanged."""
    return _COMMAND.sub(lambda m: f"{m.group(1)}\\x3a" if m.group(1) is not None else "\\x23", text)
