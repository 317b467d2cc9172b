"""The report's view model: the findings document turned into what the page shows (grouped, ranked,
capped, worded), all with dicts so the template never searches lists."""
from __future__ import annotations

from collections import Counter, defaultdict

from analyzer import catalog
from analyzer.catalog import VERDICT
from analyzer.document import calls_hit, facts
from analyzer.document.ci import later_attempts

from .common import (
    COLLAPSE_ROWS, CONN_ROWS, DECISIVE, EVIDENCE_SHOWN, MINOR_ROWS, DIVERGED, IDS_SHOWN, MAX_FULL_SESSIONS, MAX_ROWS,
    NO_EFFECT, SEVERITIES, SEV_RANK, SUMMARY_ROWS, TICKS_PER_BAR, VERDICTS,
    V_RANK, _INT, _anchor, _plural, _ref, _sev_class,
    _sev_token, _verdict_class, _verdict_token, natural_key, reconnect_anchor, session_anchor, session_token,
)
from .timeline import _overview, _timeline

CALL_ROWS = 50  # calls-hit rows at the top of the report (the findings JSON has them all)
from .trend import trend_view


# --------------------------------------------------------------------------
# helpers


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
    """The first IDS_SHOWN ids by number (``natural_key``: the document lists them as they came, and 1, 10, 100, 11
    reads as four unrelated numbers), as ranges, and how many more the JSON has."""
    shown = sorted((str(i) for i in ids), key=natural_key)[:IDS_SHOWN]
    return {"count": count, "shown": _ranges(shown), "more": max(count - len(shown), 0)}


def _handled_words(value, verdict, rule_id=None) -> str:
    if verdict == "continuous":
        return "nothing to handle (stream was continuous)"
    if rule_id in catalog.CAPTURE_BLIND:
        return "not judged: the capture lacks what the client received"
    if value is None:
        return "capture ends first"
    if value is True:
        return "client re-initialized"
    return "client kept using the session"


def _status(doc: dict) -> str:
    """The headline's colour: critical or a divergence = bad; errors or unverifiable = warn.  With a baseline, the
    new findings alone set it (as they alone set the exit code): none new is green, known critical ones or not;
    unreadable input is a warning whatever the baseline."""
    summary = doc.get("summary", {})
    verdicts = summary.get("verdicts", {})
    by_sev = summary.get("findings_by_severity", {})
    base = summary.get("baseline")
    if base is not None and not _nothing_read(doc):
        new = base.get("new_by_severity") or {}
        if new.get("critical"):
            return "s-critical"
        return "s-warning" if new.get("error") or new.get("warning") or summary.get("inputs_unreadable") else "s-ok"
    if by_sev.get("critical") or any(verdicts.get(v) for v in DIVERGED):
        return "s-critical"
    if _nothing_read(doc):
        return "s-warning"
    if by_sev.get("error") or by_sev.get("warning") or verdicts.get("unverifiable") or summary.get("inputs_unreadable"):
        return "s-warning"
    return "s-ok"


def _nothing_read(doc: dict) -> bool:
    """No input was readable: the run analyzed nothing (the command exits 2), which is not "no divergence"."""
    summary = doc.get("summary", {})
    return summary.get("inputs", 0) - summary.get("inputs_unreadable", 0) <= 0


def _top_findings(major: list[dict]) -> list[dict]:
    """The summary's "critical findings first": the terminal's list, in its order (calls_hit.headline)."""
    return calls_hit.headline(major, SUMMARY_ROWS)


def _headline(doc: dict) -> str:
    summary = doc.get("summary", {})
    if _nothing_read(doc):
        return (f"nothing was analyzed: no input was readable ({_plural(summary.get('inputs', 0), 'input')}, "
                f"{summary.get('inputs_unreadable', 0)} unreadable, {_plural(facts.skipped(doc), 'file')} skipped)")
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
    run = ", ".join(parts) + f" ({_plural(total, 'reconnect')} judged)"
    base = summary.get("baseline")
    # with a baseline what is new leads, in the words of the terminal and JUnit; the run's own counts follow
    return f"{facts.baseline_headline(base)} against the baseline; this run: {run}" if base is not None else run


# --------------------------------------------------------------------------
# what the client did after a reconnect


def _reaction(b: dict, by_xid: dict) -> dict | None:
    """``{"kind": reuse|reinit|open|unlocated, "x": exchange or None}`` from the document's own answer
    (``handled_correctly`` and ``reaction_exchange``, which signals/boundaries.reaction decided); None for continuous.
    The page draws a reaction only where the document names it: it never works one out itself."""
    if b.get("verdict") == "continuous":
        return None
    handled = b.get("handled_correctly")
    if handled is None:
        return {"kind": "open", "x": None}
    x = by_xid.get(b.get("reaction_exchange"))
    if x is None:
        return {"kind": "unlocated", "x": None}
    return {"kind": "reuse" if handled is False else "reinit", "x": x}


def _reaction_words(r: dict | None, s_anchor: dict, x_anchor: dict) -> tuple[str, str | None]:
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
    key = x.get("session")  # the new session by its JSON key, as everywhere on the page
    return (
        f"A new session{f' ({key})' if key else ''} started with {where}, and the old one was not used again.",
        s_anchor.get(x.get("session")),
    )


# --------------------------------------------------------------------------
# the summary's worst reconnects


def harm_order(b: dict) -> tuple:
    """The sort key of the summary's worst reconnects, most harmful first (the samples' first ten used to be
    404s that lost nothing, ranked by severity alone):

    0. a wrong result delivered (``wrong_result``): a call completed with another call's answer;
    1. events lost or delivered twice (``lost_count`` + ``duplicated_count``), the most first;
    2. the other critical, then error verdicts (the client kept using a dead or replayed session…);
    3. the rest: warnings (unverifiable, a reset the client handled);
    4. a ``session_invalid`` the client handled (``handled_correctly`` true: it re-initialized, as the spec
       asks after a 404): known and harmless, last.

    Then severity, the verdict's place in the catalog and the reconnect's place in the document (``_n``).
    Continuous reconnects are never listed: the caller leaves them out."""
    harmed = (b.get("lost_count") or len(b.get("lost_event_ids") or [])) + (
        b.get("duplicated_count") or len(b.get("duplicated_event_ids") or []))
    if b.get("wrong_result"):
        tier = 0
    elif harmed > 0:
        tier = 1
    elif b.get("verdict") == "session_invalid" and b.get("handled_correctly") is True:
        tier = 4
    elif b.get("severity") in ("critical", "error"):
        tier = 2
    else:
        tier = 3
    return (tier, -harmed, SEV_RANK.get(b.get("severity"), len(SEVERITIES)), V_RANK.get(b.get("verdict"), 99), b.get("_n", 0))


# --------------------------------------------------------------------------
# context


def _merged_sessions(sessions: list[dict]) -> list[dict]:
    """One entry per session name: the per-capture records of one Mcp-Session-Id (a client HAR, a proxy log, a
    server pcap; two balancer nodes' logs), which share its name (analyzer/document/names.py), summed, with
    every capture in ``sources``; and so the traffic without a session (``S0``) of every capture."""
    merged: dict = {}
    for s in sessions:
        key = s.get("session")
        g = merged.get(key)
        if g is None:
            merged[key] = {**s, "sources": list(s.get("sources") or []), "verdicts": dict(s.get("verdicts") or {})}
            continue
        g["sources"] = sorted(set(g["sources"]) | set(s.get("sources") or []))
        for k in ("exchanges", "streams", "events", "boundaries", "initialize_results"):
            if isinstance(s.get(k), int):
                g[k] = (g.get(k) or 0) + s[k]
        for v, n in (s.get("verdicts") or {}).items():
            g["verdicts"][v] = g["verdicts"].get(v, 0) + n
        firsts = [x for x in (g.get("first_seen"), s.get("first_seen")) if x]
        lasts = [x for x in (g.get("last_seen"), s.get("last_seen")) if x]
        g["first_seen"], g["last_seen"] = min(firsts, default=None), max(lasts, default=None)
    return list(merged.values())


def _context(doc: dict, max_full: int = MAX_FULL_SESSIONS, max_rows: int = MAX_ROWS) -> dict:
    """The template's context: one builder per part of the page (the findings and reconnects prepared, the
    sessions' sections and rows, their links and timelines, then the summary's, the findings' and the inputs'
    parts), each returning its part."""
    sessions = _merged_sessions(list(doc.get("sessions", [])))
    exchanges = doc.get("exchanges", [])
    boundaries = doc.get("boundaries", [])
    findings = doc.get("findings", [])
    # a sortable column's key for a session: its place in the document (history order: a name's hash says nothing)
    place = {s.get("session"): n for n, s in enumerate(sessions)}

    def session_sort(key) -> str:
        return str(place[key]) if key in place else ""

    x_by_session, by_ref, by_xid = _exchange_index(exchanges)
    pf = _prepared_findings(findings, boundaries)
    b_by_session = _prepared_boundaries(boundaries, findings, pf)
    _add_orphan_sessions(sessions, b_by_session, pf["by_session"], x_by_session)
    # Every session is called by its name, as the terminal and the JSON call it; its element's id is the name
    # (``report.html#<name>`` scrolls there) and so is its filter token (``session_token``). The page never
    # numbers sessions of its own.
    s_tokens: dict[str, str] = {s.get("session"): session_token(s.get("session")) for s in sessions}  # name -> data-s
    sec = _session_sections(sessions, b_by_session, pf["by_session"], x_by_session, s_tokens, session_sort, max_full, max_rows)
    full, s_anchor = sec["full_sessions"], sec["s_anchor"]
    card_anchor = _finding_links(pf["prepared"], full, sec["compact_cards"], s_anchor, s_tokens, session_sort, pf["b_pos"])
    _session_timelines(full, sec["compact_cards"], by_ref, by_xid, s_anchor, max_rows)
    summary = doc.get("summary", {})
    return {
        "doc": doc,
        "tool": doc.get("tool", {}),
        "headline": _headline(doc),
        "status": _status(doc),
        "summary": summary,
        **_verdict_badges(summary),
        **_calls_context(doc, card_anchor, s_anchor),
        **_where_context(summary, boundaries, b_by_session, card_anchor, s_anchor, s_tokens, session_sort),
        "overview": _overview(exchanges, boundaries),
        "trend": trend_view(doc.get("trend")),  # (a store's document only)
        **_inputs_context(doc),
        **_findings_context(findings, pf, max_rows),
        "busy_sessions": sec["busy_sessions"],
        "compact_cards": sec["compact_cards"],
        "compact_more": sec["compact_more"],
        "compact_verdicts": [(v, _verdict_class(v), VERDICT[v].effect, VERDICT[v].next_step)
                             for v in VERDICTS if any(b.get("verdict") == v for b in sec["compact_cards"])],
        "evidence_shown": EVIDENCE_SHOWN,
        "sessions_left_out": len(sessions) - len(full) - len(sec["busy_sessions"]) - len(sec["quiet_sessions"]),
        "full_sessions": full,
        "quiet_sessions": sec["quiet_sessions"],
        # the session filter: one option per section or row with findings, in the document's order
        "session_options": [(e["tokens"], str(e["key"]), e["s"].get("session_id"))
                            for e in sorted(full + sec["busy_sessions"], key=lambda e: place.get(e["key"], len(place)))],
        "where_critical": any(f.get("severity") == "critical" for f in findings),
        "diverged_tokens": " ".join(DIVERGED),
        "verdicts": VERDICTS,
        "collapse": COLLAPSE_ROWS,
        "ticks_per_bar": TICKS_PER_BAR,
        "sev_class": _sev_class,
        "sev_rank": lambda s: SEV_RANK.get(s, len(SEVERITIES)),
        "verdict_class": _verdict_class,
    }


def _exchange_index(exchanges: list[dict]) -> tuple[dict, dict, dict]:
    """The exchanges by session, by their record (source, location) and by id."""
    x_by_session: dict[str, list] = defaultdict(list)
    by_ref: dict[tuple, dict] = {}
    for x in exchanges:
        x_by_session[x.get("session")].append(x)
        by_ref.setdefault((x.get("source"), x.get("location")), x)
    by_xid = {x.get("exchange_id"): x for x in exchanges}
    return x_by_session, by_ref, by_xid


def _prepared_findings(findings: list[dict], boundaries: list[dict]) -> dict:
    """Each finding copied with what the page shows of it (anchor, severity's class and token, its
    reconnect's verdict, next step, known), sorted by severity, then its reconnect's place, then the
    document's order; with the copies by reconnect, by session, by the request left unanswered, by the
    document's finding (``of``), and each reconnect's place (``b_pos``)."""
    b_verdict = {b.get("boundary_id"): _verdict_token(b.get("verdict")) for b in boundaries}
    f_by_boundary: dict[str, list] = defaultdict(list)
    f_by_session: dict[str, list] = defaultdict(list)
    unanswered_by_request: dict[str, list] = defaultdict(list)
    prepared_findings = []
    prepared_of: dict[int, dict] = {}  # the document's finding -> its prepared copy
    for n, f in enumerate(findings, start=1):
        pf = prepared_of[id(f)] = dict(f)
        pf["_anchor"] = _anchor("finding", f.get("id"), n)
        pf["_sev_cls"] = _sev_class(f.get("severity"))
        pf["_sev"] = _sev_token(f.get("severity"))
        pf["_rank"] = SEV_RANK.get(f.get("severity"), len(SEVERITIES))
        pf["_v"] = b_verdict.get(f.get("boundary"), "") if f.get("boundary") is not None else ""
        pf["_next"] = catalog.next_step(str(f.get("rule")), f.get("boundary") is not None)
        pf["_known"] = f.get("baseline") == "known"  # in the baseline: muted, and marked "known", wherever it is listed
        prepared_findings.append(pf)
        if f.get("boundary") is not None:
            f_by_boundary[f["boundary"]].append(pf)
        if f.get("session") is not None:
            f_by_session[f["session"]].append(pf)
        # A request left without response, by the exchange that sent it: the reconnects whose
        # resumed stream still owed it (the document's owed_requests) show it as evidence.
        if f.get("rule") == "request_unanswered" and f.get("exchange") is not None:
            unanswered_by_request[f["exchange"]].append(pf)
    # Severity, then the reconnect's place in the document (history order: a name says nothing of it),
    # then session-level findings in document order.
    b_pos = {b.get("boundary_id"): n for n, b in enumerate(boundaries)}
    order = {id(f): n for n, f in enumerate(prepared_findings)}
    prepared_findings.sort(
        key=lambda f: (
            SEV_RANK.get(f.get("severity"), len(SEVERITIES)),
            b_pos.get(f.get("boundary"), len(b_pos)),
            order[id(f)],
        )
    )
    return {"prepared": prepared_findings, "of": prepared_of, "by_boundary": f_by_boundary, "by_session": f_by_session,
            "unanswered": unanswered_by_request, "b_pos": b_pos}


def _prepared_boundaries(boundaries: list[dict], findings: list[dict], pf: dict) -> dict[str, list]:
    """Each reconnect copied with what its card and rows show, by session."""
    b_by_session: dict[str, list] = defaultdict(list)
    b_anchors: set[str] = set()
    # a retried reconnect's later attempts carry no finding of their own: the first attempt's is theirs (new or known)
    retry_of = {bid: pf["of"][id(f)] for bid, (_k, _n, f) in later_attempts(boundaries, findings).items()}
    for n, b in enumerate(boundaries, start=1):
        pb = _prepared_boundary(b, n, pf, retry_of)
        if pb["_anchor"] in b_anchors:  # two boundaries with one id: the second by its index
            pb["_anchor"] = f"boundary-n{n}"
        b_anchors.add(pb["_anchor"])
        b_by_session[b.get("session")].append(pb)
    return b_by_session


def _prepared_boundary(b: dict, n: int, pf: dict, retry_of: dict) -> dict:
    """One reconnect's copy: anchor, verdict and severity tokens, handling, its findings and the worst of
    their severities, new or known, effects, next step, lost and duplicated ids, evidence words."""
    pb = dict(b)
    pb["_n"] = n
    pb["_anchor"] = reconnect_anchor(b.get("boundary_id"), n)
    pb["_cls"] = _verdict_class(b.get("verdict"))
    pb["_v"] = _verdict_token(b.get("verdict"))
    pb["_sev_cls"] = _sev_class(b.get("severity"))
    pb["_sev"] = _sev_token(b.get("severity"))
    pb["_handled"] = _handled_words(b.get("handled_correctly"), b.get("verdict"), b.get("rule_id"))
    pb["_handled_cls"] = (
        "ok" if b.get("verdict") == "continuous" else {True: "ok", False: "bad", None: "unknown"}.get(b.get("handled_correctly"), "unknown")
    )
    pb["_findings"] = pf["by_boundary"].get(b.get("boundary_id"), [])
    # the reconnect's severity where it is listed alone (Where?): the worst of its verdict's and its findings' -- a
    # wrong result handed over at a replay_reset is critical, whatever the verdict's own severity
    worst = min((x for x in [b.get("severity"), *(f.get("severity") for f in pb["_findings"])] if x is not None),
                key=lambda x: SEV_RANK.get(x, len(SEVERITIES)), default=None)
    pb["_worst"], pb["_worst_cls"] = worst, _sev_class(worst)
    about = pb["_findings"] or ([retry_of[b["boundary_id"]]] if b.get("boundary_id") in retry_of else [])
    pb["_new"] = any(not f["_known"] for f in about)  # with a baseline: a new finding is about this reconnect
    pb["_known"] = bool(about) and not pb["_new"]
    effects = []
    for f in pb["_findings"]:
        if f.get("effect") and f["effect"] not in effects:
            effects.append(f["effect"])
    if not effects and b.get("verdict") == "continuous":
        effects.append(NO_EFFECT)
    pb["_effects"] = effects
    verdict = VERDICT.get(str(b.get("verdict")))
    pb["_next"] = verdict.next_step if verdict is not None and verdict.name != "continuous" else ""
    pb["_lost"] = _shorten(b.get("lost_event_ids") or [], b.get("lost_count", len(b.get("lost_event_ids") or [])))
    pb["_dup"] = _shorten(
        b.get("duplicated_event_ids") or [], b.get("duplicated_count", len(b.get("duplicated_event_ids") or []))
    )
    pb["_dup_ids"] = {str(i) for i in b.get("duplicated_event_ids") or []}
    pb["_decisive"] = DECISIVE.get(b.get("verdict"), set())
    pb["_evidence_words"] = catalog.EVIDENCE.get(str(b.get("evidence")), "")
    pb["_unanswered"] = [f for r in b.get("owed_requests") or [] for f in pf["unanswered"].get(r, [])]
    return pb


def _add_orphan_sessions(sessions: list[dict], b_by_session: dict, f_by_session: dict, x_by_session: dict) -> None:
    """Boundaries or findings naming a session the sessions list lacks still get a section."""
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


def _session_sections(sessions: list[dict], b_by_session: dict, f_by_session: dict, x_by_session: dict, s_tokens: dict,
                      session_sort, max_full: int, max_rows: int) -> dict:
    """The sessions' part of the page: the worst ``max_full`` in full sections, the others one row each
    (``busy`` with findings, ``quiet`` without), compact cards for the critical reconnects of sessions not
    shown in full; and each shown session's anchor (``s_anchor``)."""
    s_anchor: dict[str, str] = {}
    full, quiet, busy = [], [], []
    # the worst sessions get full sections: by their worst finding, then how many, then position
    def badness(s: dict) -> tuple:
        fs = f_by_session.get(s.get("session"), [])
        worst = min((SEV_RANK.get(f.get("severity"), len(SEVERITIES)) for f in fs), default=len(SEVERITIES))
        return (worst, -len(fs), -len(b_by_session.get(s.get("session"), [])))

    compact: list[dict] = []
    compact_more = 0
    ranked = sorted((s for s in sessions if b_by_session.get(s.get("session")) or f_by_session.get(s.get("session"))), key=badness)
    shown_full = {id(s) for s in ranked[:max_full]}
    anchors: set[str] = set()
    for s in sessions:
        sid = s.get("session")
        anchor = session_anchor(sid)
        if anchor in anchors:  # (one entry per name: never; a hash of two malformed names alike, ids stay unique)
            anchor = f"{anchor}-{len(anchors)}"
        anchors.add(anchor)
        bs = b_by_session.get(sid, [])
        fs = f_by_session.get(sid, [])
        entry, sevs = _session_entry(s, anchor, bs, fs, s_tokens[sid], session_sort(sid))
        if id(s) not in shown_full:
            # One row each: the sessions with findings in their list, the others (no reconnect, or continuous ones
            # only) in the list of sessions without findings.
            rows = busy if fs else quiet
            listed = len(rows) < max_rows
            if listed:
                entry["worst"] = sevs[0] if sevs and sevs[0] in SEVERITIES else None
                rows.append(entry)
                s_anchor.setdefault(sid, anchor)
            # Every critical reconnect is reachable with its evidence: those of sessions not shown in full get
            # a compact card (reason, effect, what to do, the client, the ids and the records that prove it).
            for b in bs:
                if b.get("severity") == "critical":
                    if len(compact) < max_rows:
                        b["_session_anchor"] = anchor if listed else None
                        compact.append(b)
                    else:
                        compact_more += 1
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
    return {"full_sessions": full, "quiet_sessions": quiet, "busy_sessions": busy, "compact_cards": compact,
            "compact_more": compact_more, "s_anchor": s_anchor}


def _session_entry(s: dict, anchor: str, bs: list[dict], fs: list[dict], tokens: str, sort: str) -> tuple[dict, list[str]]:
    """What a session's section or row shows of it: its reconnects and findings, their verdicts' and
    severities' filter tokens, known, and its reconnects by verdict; and its severities, worst first."""
    sevs = sorted({f["_sev"] for f in fs} | {b["_sev"] for b in bs if b.get("severity") is not None}, key=lambda t: SEV_RANK.get(t, 9))
    counts = Counter(b["_v"] for b in bs)
    return {
        "s": s, "key": s.get("session"), "anchor": anchor, "tokens": tokens, "sort": sort,
        "boundaries": bs, "findings": fs, "_known": bool(fs) and all(f["_known"] for f in fs),
        "_v": " ".join(sorted(counts, key=lambda v: V_RANK.get(v, 99))),
        "_sev": " ".join(sevs),
        # its reconnects by verdict, as the JSON's verdicts: "gap 2, continuous 1"
        "vcounts": [(v, counts[v], _verdict_class(v)) for v in sorted(counts, key=lambda v: V_RANK.get(v, 99))],
    }, sevs


def _finding_links(prepared_findings: list[dict], full: list[dict], compact: list[dict], s_anchor: dict, s_tokens: dict,
                   session_sort, b_pos: dict) -> dict:
    """Cards exist for sessions shown in full and for the compact cards' critical reconnects: links to the
    others go to their row. Each finding gets its session's and reconnect's links; returns the cards' anchors
    by reconnect."""
    card_anchor: dict[str, str] = {}
    for b in [b for e in full for b in e["boundaries"]] + compact:
        card_anchor.setdefault(b.get("boundary_id"), b["_anchor"])
        b["_session_tokens"] = s_tokens.get(b.get("session"), "")
    for f in prepared_findings:
        f["_session_anchor"] = s_anchor.get(f.get("session"))
        f["_session_tokens"] = s_tokens.get(f.get("session"), "") if f.get("session") is not None else ""
        f["_session_sort"] = session_sort(f.get("session"))
        f["_boundary_anchor"] = card_anchor.get(f.get("boundary")) if f.get("boundary") is not None else None
        f["_boundary_n"] = b_pos.get(f.get("boundary"), "") if f.get("boundary") is not None else ""
    return card_anchor


def _session_timelines(full: list[dict], compact: list[dict], by_ref: dict, by_xid: dict, s_anchor: dict, max_rows: int) -> None:
    """A full session's connection rows (and so link targets: its first conn_rows exchanges), each card's
    client reaction, and its timeline."""
    conn_rows = min(max_rows, CONN_ROWS)
    x_anchor: dict[int, str] = {}
    used: set[str] = set()
    for e in full:
        for x in e["exchanges"][:conn_rows]:
            a = _anchor("conn", x.get("exchange_id"), len(x_anchor) + 1)
            if a in used:  # two exchanges with one id: the second by its index
                a = f"conn-n{len(x_anchor) + 1}"
            used.add(a)
            x_anchor[id(x)] = a
    for b in [b for e in full for b in e["boundaries"]] + compact:
        b["_reaction"] = _reaction(b, by_xid)
        b["_reaction_words"], b["_reaction_anchor"] = _reaction_words(b["_reaction"], s_anchor, x_anchor)
    for e in full:
        e["timeline"] = _timeline(e["exchanges"], e["boundaries"], by_ref, x_anchor)
        e["rows"] = [(x, x_anchor[id(x)]) for x in e["exchanges"][:conn_rows]]
        e["rows_more"] = max(len(e["exchanges"]) - conn_rows, 0)


def _verdict_badges(summary: dict) -> dict:
    """The summary's counts: reconnects by verdict (grouped and one by one) and findings by severity."""
    verdict_counts = summary.get("verdicts", {})
    by_sev = summary.get("findings_by_severity", {})
    return {
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
    }


def _calls_context(doc: dict, card_anchor: dict, s_anchor: dict) -> dict:
    """Summary: the calls hit, one story each, in the document's order (the terminal's and the JSON's: calls_hit.py)."""
    all_calls = doc.get("calls_hit") or []
    calls = [c | {"link": card_anchor.get(c.get("reconnect")) or s_anchor.get(c.get("session")),
                  "session_link": s_anchor.get(c.get("session"))} for c in all_calls[:CALL_ROWS]]
    return {"calls_hit": calls, "calls_more": len(all_calls) - len(calls), "calls_first": SUMMARY_ROWS}


def _where_context(summary: dict, boundaries: list[dict], b_by_session: dict, card_anchor: dict, s_anchor: dict,
                   s_tokens: dict, session_sort) -> dict:
    """Summary: where it diverged (the worst reconnects, most harmful first; new ones first against a baseline)
    and how the client handled the reconnects."""
    with_baseline = "baseline" in summary
    worst_b = sorted((b for bs in b_by_session.values() for b in bs if b.get("verdict") != "continuous"),
                     key=lambda b: (with_baseline and not b["_new"], harm_order(b)))
    where = [
        {"b": b, "link": card_anchor.get(b.get("boundary_id")) or s_anchor.get(b.get("session")),
         "tokens": s_tokens.get(b.get("session"), ""), "sort": session_sort(b.get("session")),
         "session_link": s_anchor.get(b.get("session"))}
        for b in worst_b[:SUMMARY_ROWS]
    ]
    not_continuous = [b for b in boundaries if b.get("verdict") != "continuous"]
    handling = {
        "bad": sum(1 for b in not_continuous if b.get("handled_correctly") is False),
        "ok": sum(1 for b in not_continuous if b.get("handled_correctly") is True),
        "unknown": sum(1 for b in not_continuous if b.get("handled_correctly") is None and b.get("rule_id") not in catalog.CAPTURE_BLIND),
        "blind": sum(1 for b in not_continuous if b.get("rule_id") in catalog.CAPTURE_BLIND),
        "lost": sum(b.get("lost_count") or len(b.get("lost_event_ids") or []) for b in boundaries),
        "dup": sum(b.get("duplicated_count") or len(b.get("duplicated_event_ids") or []) for b in boundaries),
    }
    return {"where": where, "where_more": max(len(worst_b) - SUMMARY_ROWS, 0), "handling": handling,
            "where_sessions": len({b.get("session") for b in worst_b})}


def _inputs_context(doc: dict) -> dict:
    """What the inputs cost: formats, counts as the terminal says them, the unreadable ones, the anomalies by
    code; and the inputs, skipped files and anomalies themselves."""
    anomalies = doc.get("anomalies", [])
    codes = Counter((a.get("code"), a.get("severity")) for a in anomalies)
    inputs = doc.get("inputs", [])
    return {
        "formats": sorted(Counter(str(i.get("format")) for i in inputs).items()),
        "input_counts": facts.input_counts(doc),  # records, rejected, unreadable, skipped: as the terminal says them
        "unreadable": [i for i in inputs if i.get("error")][:SUMMARY_ROWS],
        "anomaly_codes": sorted(
            ((code, sev, n, _sev_class(sev)) for (code, sev), n in codes.items()),
            key=lambda r: (SEV_RANK.get(r[1], 9), -r[2], str(r[0])),
        )[:SUMMARY_ROWS],
        "inputs": inputs,
        "skipped": doc.get("skipped", []),
        "anomalies": anomalies,
    }


def _findings_context(findings: list[dict], pf: dict, max_rows: int) -> dict:
    """The findings: the summary's top ones (new before known, in the document's order: worst first, wrong
    results first among the critical ones), the major and minor tables (capped; the rows on the page are
    ``_shown``, links to the others would dangle), and the table of rules with effect and next step once each."""
    prepared_findings, prepared_of = pf["prepared"], pf["of"]
    major = [f for f in prepared_findings if f.get("severity") in ("critical", "error")]
    in_doc = [prepared_of[id(f)] for f in findings if f.get("severity") in ("critical", "error")]
    top = _top_findings([f for f in in_doc if not f["_known"]] + [f for f in in_doc if f["_known"]])
    first_of: dict[tuple, dict] = {}
    for f in prepared_findings:
        first_of.setdefault((f.get("rule"), f.get("severity"), f.get("boundary") is not None), f)
    minor = [f for f in prepared_findings if f.get("severity") not in ("critical", "error")]
    minor_rows = min(max_rows, MINOR_ROWS)
    for f in major[:max_rows] + minor[:minor_rows]:  # rows on the page: links to the others would dangle
        f["_shown"] = True
    return {
        "top_findings": top,
        "top_more": len(major) - len(top),
        "major_findings": major[:max_rows],
        "minor_findings": minor[:minor_rows],
        "findings_left_out": max(0, len(major) - max_rows) + max(0, len(minor) - minor_rows),
        # effect and next step once per rule, not on each of up to 2,000 rows (they were a third of the page)
        "rule_table": sorted(
            ((rule, sev, n, _sev_class(sev), first_of[(rule, sev, b)].get("effect"), first_of[(rule, sev, b)].get("_next"))
             for (rule, sev, b), n in _count_rules(prepared_findings).items()),
            key=lambda r: (SEV_RANK.get(r[1], 9), -r[2], r[0] or ""),
        ),
    }


def _count_rules(findings: list[dict]) -> dict:
    out: dict = {}
    for f in findings:
        # a boundary's finding is named by its verdict, and cross_stream_replay is also a history rule:
        # the two are rows of their own, each with its effect and next step
        key = (f.get("rule"), f.get("severity"), f.get("boundary") is not None)
        out[key] = out.get(key, 0) + 1
    return out
