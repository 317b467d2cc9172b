"""What the report's parts share: its fixed tables (verdicts, severities, limits) and the escaping
filters every value from the document goes through (see the package docstring)."""
from __future__ import annotations

import hashlib
import re
from datetime import datetime, timezone

from markupsafe import Markup, escape

from analyzer.catalog import DIVERGED as _DIVERGED, SEVERITIES as _SEVERITIES, VERDICT, VERDICT_ORDER
from analyzer.document.facts import plural
from analyzer.document.names import RECONNECT_NAME, SESSION_NAME


TEMPLATE = "report.html.j2"


VERDICTS = VERDICT_ORDER


V_RANK = {v: i for i, v in enumerate(VERDICTS)}


# Verdicts that prove the stream diverged; unverifiable is counted apart (the catalog's list).
DIVERGED = list(_DIVERGED)


SEVERITIES = list(_SEVERITIES)


SEV_RANK = {s: i for i, s in enumerate(SEVERITIES)}


COLLAPSE_ROWS = 20  # tables longer than this go inside a closed <details>


# A capture of 100k sessions must still give a page of a few MB: the worst sessions in full, the
# rest as one row each up to a cap, and everything in the JSON.
MAX_FULL_SESSIONS = 60


MAX_ROWS = 1000
MINOR_ROWS = 200  # warning and info findings listed (critical and error: MAX_ROWS); the JSON has all
EVIDENCE_SHOWN = 4  # evidence records listed per finding row (the JSON has all)
CONN_ROWS = 200  # connections listed per session shown in full (every one is in the JSON)


SUMMARY_ROWS = 10  # worst reconnects and findings repeated in the summary


IDS_SHOWN = 20  # lost/duplicated ids listed before "… N more"


DATA_HEAD = 120  # event data shown: its head and its tail (a JSON-RPC id or error often ends it)


DATA_TAIL = 40


# The rows of a card's HTTP table that decided its verdict (marked "decisive").
DECISIVE = {name: set(v.decisive) for name, v in VERDICT.items()}


NO_EFFECT = VERDICT["continuous"].effect


_ANCHOR_OK = re.compile(r"^[bfx][0-9]{1,12}$")


_INT = re.compile(r"^(0|[1-9][0-9]{0,17})$")




_DIGITS = re.compile(r"([0-9]+)")


# Invisible or deceptive characters made visible: C0/C1 controls (tab and
# newline kept), DEL, zero-width and bidi controls, line/paragraph separators
# (U+2028/2029 also break naive JavaScript embedding), BOM.
_INVISIBLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")


_plural = plural  # one word for one count on every output (analyzer/document/facts.py)


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


def session_token(key) -> str:
    """A session's name as the page's filter token (``data-s``): the name itself (``Sk3vq7m2a``), so a search
    for it finds the JSON's session; a name not of the form analyzer/document/names.py makes is never put in
    an attribute: it becomes ``h`` and 12 hex of its hash (stable, and no position of the page's own)."""
    if isinstance(key, str) and SESSION_NAME.fullmatch(key):
        return key
    return "h" + hashlib.sha256(repr(key).encode("utf-8")).hexdigest()[:12]


def session_anchor(key) -> str:
    """The id of a session's element (its section, or its row): its name, so ``report.html#<name>`` scrolls
    there; ``session-h…`` (:func:`session_token`) for a name not of the form names.py makes."""
    token = session_token(key)
    return token if token == key else f"session-{token}"


def reconnect_anchor(ident, fallback) -> str:
    """The id of a reconnect's card: its name (``report.html#Sk3vq7m2a.r5xj2qd``), else as :func:`_anchor`."""
    if isinstance(ident, str) and RECONNECT_NAME.fullmatch(ident):
        return ident
    return _anchor("boundary", ident, fallback)


def natural_key(ident) -> tuple:
    """Ids in the order a reader expects: the all-digit ones by number (1, 2, 10, 11, 100: not 1, 10, 100, 11),
    then the others by their text with each run of digits as a number (a_9 before a_10), as the page's
    sortable columns compare them (Intl.Collator numeric)."""
    s = str(ident)
    if s.isdigit():
        return (0, int(s), s)
    return (1, tuple((0, int(p), p) if p.isdigit() else (1, 0, p) for p in _DIGITS.split(s) if p), s)


def _key(ref) -> tuple | None:
    if not ref:
        return None
    return (ref.get("source"), ref.get("location"))


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


_WBR = Markup("_<wbr>")


def _name(value) -> Markup:
    """A snake_case name (a rule, an anomaly code) that may wrap after an underscore but never inside a word:
    each piece escaped by ``_text``, a fixed ``<wbr>`` after each underscore (CSS ``code.name`` forbids other breaks)."""
    if value is None:
        return Markup("")
    return _WBR.join(_text(p) for p in str(value).split("_"))


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


TIMELINE_ROWS = 300  # connections drawn per session timeline


TICKS_PER_BAR = 40  # event ticks drawn per connection; more events are sampled evenly


TICKS_PER_TIMELINE = 400  # and per session, so 200 timelines stay under ~1 MB of path data
