"""The names of sessions and reconnects: derived from what they name, so every run gives the same ones.

A name is what a reader keeps (a CI test's history, a ticket, ``report.html#<name>``): it must be the same
in every run over the same traffic, whatever window, subset of the captures, input order or engine, and
the same in the terminal, the JSON, the HTML anchors, JUnit and the GitHub annotations.  So it is never a
position (the old ``S107`` / ``b3``: the same session was ``S107`` in one run and ``S2`` in a windowed
one), a file name or a row number; it is a hash of the thing's identity on the wire:

* a **session**: ``S`` + the first :data:`SESSION_CHARS` base32 characters of the sha256 of its
  ``Mcp-Session-Id`` (``Sk3vq7m2a``; 40 bits: among 100,000 sessions two share a name with a chance of
  about 1 in 200, and then :func:`shortest` makes both longer).  The per-capture records of one
  Mcp-Session-Id (a HAR, a proxy log and a pcap of one incident; the logs of two balancer nodes; the two
  halves of a rotated log) are that one session, and share its name: a name that told them apart would
  change with the captures given (a run over the pcap alone would call its session by another name), and
  a reconnect or finding reported from one capture would be named after it.  They stay apart in the
  document by their ``sources``.
* the traffic **without a session** (no Mcp-Session-Id: stateless requests, a 2026-07-28 server) is
  :data:`NO_SESSION`, ``S0``, in every capture: it has no identity that a window (which keeps such
  exchanges one by one) or another capture would not change.  (Not a base32 character: no hash is it.)
* a **reconnect**: its session's name, ``.r`` and :data:`RECONNECT_CHARS` base32 characters of the sha256
  of what the request is (:func:`reconnect_identity`): the Mcp-Session-Id, the method, the cursor it sent
  (``Last-Event-ID``, which names the stream it resumes: the one that delivered that event) and the
  request body, and which such request of the session it is in its capture (0 for the first GET with
  ``Last-Event-ID: 5``, 1 for the second: the python client resends the same cursor, and each send is a
  reconnect of its own).  That order is the same in every capture of the session, which is why no time is
  in it: each capture stamps the request with its own clock, and the reconnect is reported from whichever
  capture is nearest the client.  Without a session, the request's start time takes the place of the
  order (a window keeps such requests one by one, so their order in the capture is not stable; nothing
  else tells two captures' sessionless requests apart either).  ``Sk3vq7m2a.r5xj2qd``.

Two different identities with one short name are both made longer (:func:`shortest`: as long as it takes
to tell them apart, the same whatever order they come in).  Two reconnects with the *same* identity (a
capture missing one of the requests it counts, a sessionless request sent twice in one microsecond) are
told apart by their request's start time, then, as a last resort, by where the request is
(:func:`reconnect_names`).

What stays a position: ``x<n>`` (exchanges), ``s<n>`` (streams) and ``f<n>`` (findings) are places in
this document's history and ordering, links inside one document; a finding's identity across runs is its
``fingerprint``, and the JUnit case of a finding is named by it.
"""
from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence

from analyzer import compiled

SESSION_CHARS = 8  # 40 bits
RECONNECT_CHARS = 6  # 30 bits, among the reconnects of one session
NO_SESSION = "S0"
SEP = "\x1f"

# a name as this module makes it (the report puts only such names into attributes)
SESSION_NAME = re.compile(r"S(?:0|[a-z2-7]{1,52})")
RECONNECT_NAME = re.compile(SESSION_NAME.pattern + r"\.r[a-z2-7]{1,52}")


# base32 (RFC 4648, lower case) ten bits at a time: the 256 bits of a sha256 and four zero bits are 26 pairs of
# characters, what ``base64.b32encode`` gives without its padding (its pure-Python loop took 0.15 s of the 31,000
# names' digests at 1M events; this a third less)
_B32 = "abcdefghijklmnopqrstuvwxyz234567"
_PAIRS = [_B32[i >> 5] + _B32[i & 31] for i in range(1024)]
_SHIFTS = range(250, -1, -10)
HEAD_CHARS = 12  # the characters :func:`head` gives: 60 bits, the first 8 bytes of the sha256


def digest(text: str) -> str:
    """The sha256 of ``text`` as 52 lower-case base32 characters (``a``-``z``, ``2``-``7``)."""
    n = int.from_bytes(hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest(), "big") << 4
    return "".join([_PAIRS[(n >> s) & 1023] for s in _SHIFTS])


def head(text: str) -> str:
    """The first :data:`HEAD_CHARS` characters of :func:`digest` (``digest(text)[:HEAD_CHARS]``), made from the
    first 8 bytes of the sha256 alone."""
    n = int.from_bytes(hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()[:8], "big") >> 4
    return "".join([_PAIRS[(n >> s) & 1023] for s in (50, 40, 30, 20, 10, 0)])


DIGEST_CHARS = 52  # the characters :func:`digest` gives: the 256 bits of a sha256 and four zero bits


def digests(texts: Sequence[str], chars: int = DIGEST_CHARS) -> list[str]:
    """:func:`digest` of each text (``chars`` :data:`DIGEST_CHARS`) or :func:`head` of each (:data:`HEAD_CHARS`), all
    at once: by the compiled core where it is built (analyzer/native ``name_digests``: 31,000 reconnects' identities
    at 1M events, 0.11 s of Python here), the same characters (tests/test_native.py compares them)."""
    if chars not in (DIGEST_CHARS, HEAD_CHARS):
        raise ValueError(f"a name's digest has {DIGEST_CHARS} or {HEAD_CHARS} characters, not {chars}")
    if compiled.ENABLED:
        return compiled.core.name_digests([t.encode("utf-8", "surrogatepass") for t in texts], chars)
    return list(map(digest if chars == DIGEST_CHARS else head, texts))


def shortest(digests: Iterable[str], width: int) -> dict[str, str]:
    """Each distinct digest's name part: its first ``width`` characters, or, where two distinct digests share
    them, the first L characters of every digest of that group, L the least that tells them all apart.
    Depends on the set of digests only, never on their order."""
    by_head: dict[str, set[str]] = defaultdict(set)
    for d in digests:
        by_head[d[:width]].add(d)
    out: dict[str, str] = {}
    for head, group in by_head.items():
        if len(group) == 1:  # (alone under its head: the head; most are)
            out[next(iter(group))] = head
            continue
        n = width
        while len({d[:n] for d in group}) < len(group):
            n += 1
        for d in group:
            out[d] = d[:n]
    return out


def session_names(session_ids: Iterable[str | None], width: int | None = None) -> dict[str, str]:
    """Every Mcp-Session-Id's name (``''`` or None: :data:`NO_SESSION`), keyed by the id (None as ``''``)."""
    width = SESSION_CHARS if width is None else width
    ids = {sid or "" for sid in session_ids}
    # (their heads, when no two share one: what shortest reads of them, as in reconnect_names)
    named = [sid for sid in ids if sid]
    got = dict(zip(named, digests(named, HEAD_CHARS))) if width <= HEAD_CHARS else {}
    if len(set(got.values())) < len(got) or width > HEAD_CHARS:
        got = dict(zip(named, digests(named)))
    part = shortest(got.values(), width)
    return {sid: ("S" + part[got[sid]] if sid else NO_SESSION) for sid in ids}


def reconnect_identity(session_id: str | None, method: str | None, cursor: str | None, body: str | None, order: int | None,
                       started: str | None) -> str:
    """What a reconnect request is, as text to hash (see the module's docstring): with a session, its order
    among the session's requests with the same method, cursor and body in its capture; without one, its
    start time."""
    sid = session_id or ""
    tail = str(order) if sid else (started or "")
    return SEP.join((sid, method or "", "\x00" if cursor is None else cursor, body or "", tail))


def reconnect_names(sessions: Sequence[str], identities: Sequence[str], started: Sequence[str | None],
                    where: Sequence[str], width: int | None = None) -> list[str]:
    """The name of each reconnect: ``<its session's name>.r<part>``; ``identities`` from
    :func:`reconnect_identity`, ``started`` its request's start time, ``where`` its request's source and
    location (the last resort for twins: two reconnects of one session with one identity and one time)."""
    width = RECONNECT_CHARS if width is None else width
    keys = list(zip(sessions, identities))
    twins = _duplicated(keys)
    if twins:  # the same identity twice: told apart by the request's time, then by where it is
        keys = [(s, i + SEP + (t or "")) if (s, i) in twins else (s, i) for (s, i), t in zip(keys, started)]
        twins = _duplicated(keys)
        if twins:
            keys = [(s, i + SEP + w) if (s, i) in twins else (s, i) for (s, i), w in zip(keys, where)]
    made = _digests(keys, width)
    # shortest(the session's digests, width) of each session, for all sessions at once: by (session, head)
    by_head: dict[tuple[str, str], set[str]] = defaultdict(set)
    for s, d in zip(sessions, made):
        by_head[(s, d[:width])].add(d)
    parts: dict[tuple[str, str], str] = {}
    for (s, h), group in by_head.items():
        for d, part in (((next(iter(group)), h),) if len(group) == 1 else shortest(group, width).items()):
            parts[(s, d)] = part
    return [f"{s}.r{parts[(s, d)]}" for s, d in zip(sessions, made)]


def _digests(keys: list[tuple[str, str]], width: int) -> list[str]:
    """The digest of each (session, identity)'s identity, as far as :func:`shortest` reads it among its session's:
    the :func:`head` alone (a name is rarely longer than ``width`` characters) unless two different identities of
    one session share a head (then 60 bits tell them apart no more, and that session's are whole digests).
    ``shortest`` of the heads is then ``shortest`` of the digests, each cut where the digests' is."""
    if width > HEAD_CHARS:
        return digests([i for _, i in keys])
    heads = digests([i for _, i in keys], HEAD_CHARS)
    seen: dict[tuple[str, str], str] = {}
    clash: set[str] = set()
    for (s, i), h in zip(keys, heads):
        if seen.setdefault((s, h), i) != i:
            clash.add(s)
    if not clash:
        return heads
    return [digest(i) if s in clash else h for (s, i), h in zip(keys, heads)]


def _duplicated(keys: list[tuple[str, str]]) -> set[tuple[str, str]]:
    seen: set = set()
    twice: set = set()
    for k in keys:
        (twice if k in seen else seen).add(k)
    return twice


def short_label(name: str) -> str:
    """A reconnect's name without its session's (``r5xj2qd``): the label of its mark on the session's own timeline."""
    return name.rsplit(".", 1)[-1] if RECONNECT_NAME.fullmatch(name or "") else (name or "")[:8]
