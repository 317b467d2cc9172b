"""The calls a reconnect touched, one story each (issue [3/5] item 4): the document's ``calls_hit``.

A reader's first question after an incident is not "which reconnect diverged" but "which of my calls got what".  Every
call that opened a resumed stream (each boundary names it: ``call``), and every call another call's answer was handed
to, gets one outcome, the worst the reconnects gave it, with the session and the reconnect that caused it:

==========================================  ===========================================================================
``another_result``                          it completed with another call's result (signals/rpc.wrong_results)
``ran_twice``                               it was sent again after a break and the server ran it twice (rules/reissue,
                                            rules/stateless)
``another_result_or_never_completed``       a foreign answer came, and the client is not known: one or the other
``never_completed``                         its own response never came (a dropped foreign answer, a lost response)
``delivered_twice``                         events of its stream came twice (a replay, the python client's stale cursor)
``events_lost``                             it completed with its own result, but events of its stream were lost
``own_result``                              it completed with its own result, nothing lost or repeated
==========================================  ===========================================================================

The terminal, the JSON and the report show the same list in the same order (worst outcome first, then history).  It is
made from the document's own records (boundaries, findings), so every engine -- one pass, partitions, a store's merge
-- gives the same list: :class:`Hits` takes them one at a time.
"""
from __future__ import annotations

import polars as pl

from analyzer.document.records import Records

OUTCOMES = ("another_result", "ran_twice", "another_result_or_never_completed", "never_completed", "delivered_twice",
            "events_lost", "own_result")
RANK = {o: i for i, o in enumerate(OUTCOMES)}
SAID = {
    "another_result": "completed with another call's result",
    "ran_twice": "ran twice",
    "another_result_or_never_completed": "another call's result, or never completed (client not known)",
    "never_completed": "never completed",
    "delivered_twice": "got events twice",
    "events_lost": "completed with its own result; events lost",
    "own_result": "completed with its own result",
}
# the rules that say a call ran twice: their message starts with the call's name, then this (and, for a re-issue after a
# break, says both attempts were answered: otherwise the server only may have run it twice)
_RAN_TWICE = {"reissued_request_ran_twice": (" with the same arguments", ""),
              "reissued_after_break": (" was re-issued as id", "both attempts were answered")}


class Hits:
    """Collects the outcome of each call from the boundaries and findings given, in history order."""

    def __init__(self) -> None:
        self._calls: dict[tuple, dict] = {}
        self._n = 0

    def _put(self, session, session_id, call: str, outcome: str, reconnect, detail: str, started, count: int | None = None) -> None:
        """``count``: the events a delivered_twice or events_lost outcome counts (added up over every reconnect that gave
        the call the same outcome)."""
        key = (session, session_id, call)
        self._n += 1
        have = self._calls.get(key)
        rec = {"call": call, "session": session, "session_id": session_id, "outcome": outcome, "said": SAID[outcome],
               "reconnect": reconnect, "detail": detail, "time": started, "_order": self._n, "_count": count, "_also": [], "_seen": {reconnect}}
        if have is None:
            self._calls[key] = rec
        elif RANK[outcome] < RANK[have["outcome"]]:
            rec["_order"] = have["_order"]
            self._calls[key] = rec
        elif RANK[outcome] == RANK[have["outcome"]] and reconnect is not None and reconnect not in have["_seen"]:
            # the same outcome again from another reconnect: the first stays the one named, the others are counted (a
            # reconnect read twice, as one recording's JSONL and HAR in one run are, once)
            have["_seen"].add(reconnect)
            have["_also"].append(reconnect)
            if count is not None and have["_count"] is not None:
                have["_count"] += count

    def add_boundary(self, b: dict) -> None:
        call, w = b.get("call"), b.get("wrong_result")
        s, sid, rid, t = b.get("session"), b.get("session_id"), b.get("boundary_id"), b.get("started")
        if w is not None and w.get("outcome") == "another_result":
            self._put(s, sid, w["call"], "another_result", rid, f"handed the result of {w['got']}", t)
            if w["call"] == call:
                return
        if call is None:
            return
        if w is not None and w.get("outcome") == "another_result_or_never_completed":
            self._put(s, sid, call, "another_result_or_never_completed", rid, f"the answer of {w['got']} came on its stream", t)
        elif w is not None and w.get("outcome") == "never_completed":
            self._put(s, sid, call, "never_completed", rid, f"the answer of {w['got']} came on its stream and was dropped", t)
        elif b.get("duplicated_count"):
            self._put(s, sid, call, "delivered_twice", rid, f"{b['duplicated_count']} event(s) twice ({b.get('verdict')})", t,
                      b["duplicated_count"])
        elif b.get("lost_count") and b.get("call_answered"):
            self._put(s, sid, call, "events_lost", rid, f"{b['lost_count']} event(s) lost ({b.get('verdict')})", t, b["lost_count"])
        elif not b.get("call_answered"):
            lost = f"; {b['lost_count']} event(s) lost" if b.get("lost_count") else ""
            self._put(s, sid, call, "never_completed", rid, f"its response never came ({b.get('verdict')}){lost}", t)
        else:
            self._put(s, sid, call, "own_result", rid, f"{b.get('verdict')}", t)

    def add_finding(self, f: dict) -> None:
        cut, sure = _RAN_TWICE.get(f.get("rule"), (None, None))
        msg = f.get("message") or ""
        if cut is None or cut not in msg or sure not in msg:
            return
        self._put(f.get("session"), f.get("session_id"), msg[: msg.index(cut)], "ran_twice", None, f"{f['rule']} ({f.get('id')})",
                  f.get("time"))

    def rows(self) -> list[dict]:
        """Worst outcome first, then in history order.  A call that several reconnects gave the same outcome names the
        first; its detail says how many more and which (the first few), and for events twice or lost their total."""
        out = sorted(self._calls.values(), key=lambda r: (RANK[r["outcome"]], r["_order"]))
        return [{k: (_detail(r) if k == "detail" else v) for k, v in r.items() if not k.startswith("_")} for r in out]


ALSO_NAMED = 3  # the other reconnects named in a detail; the rest counted


def _detail(r: dict) -> str:
    also = r["_also"]
    if not also:
        return r["detail"]
    names = ", ".join(also[:ALSO_NAMED]) + (f" and {len(also) - ALSO_NAMED} more" if len(also) > ALSO_NAMED else "")
    total = ""
    if r["_count"] is not None:
        total = f"; {r['_count']} event(s) {'twice' if r['outcome'] == 'delivered_twice' else 'lost'} in all"
    return f"{r['detail']}; the same outcome at {len(also)} more reconnect(s): {names}{total}"


# what add_boundary reads of a boundary; one with neither a call nor a wrong result adds nothing
_READ = ("call", "wrong_result", "session", "session_id", "boundary_id", "started", "duplicated_count", "lost_count",
         "call_answered", "verdict")


_READ_FINDING = ("rule", "message", "session", "session_id", "id", "time")  # what add_finding reads of a finding


def of(doc: dict) -> list[dict]:
    """``calls_hit`` of a whole document."""
    hits = Hits()
    bs = doc.get("boundaries") or ()
    if isinstance(bs, Records):  # (its frame's few columns, for the boundaries that name a call: not a dict of each)
        bs = bs.some(_READ, pl.col("call").is_not_null() | pl.col("wrong_result").is_not_null())
    for b in bs:
        hits.add_boundary(b)
    fs = doc.get("findings") or ()
    if isinstance(fs, Records):  # (the keys add_finding reads, of the findings of its rules only: finding_rows.py)
        fs = fs.some(_READ_FINDING, pl.col("rule").is_in(list(_RAN_TWICE)))
    for f in fs:
        hits.add_finding(f)
    return hits.rows()


def headline(findings: list[dict], n: int) -> list[dict]:
    """The findings a reader sees first, the same in the terminal and the report's "Critical findings first": among the
    critical and error findings (in the order given: worst first; with a baseline, the new ones first), every critical
    rule at least once (its first finding), then the others in order, up to ``n`` in all (more only when there are more
    critical rules than that); in the order given.  With no critical or error finding, the first ``n`` of the rest."""
    major = [f for f in findings if f.get("severity") in ("critical", "error")]
    if not major:
        return list(findings[:n])
    chosen: dict[int, dict] = {}
    for f in major:
        if f.get("severity") == "critical" and not any(c.get("rule") == f.get("rule") for c in chosen.values()):
            chosen[id(f)] = f
    for f in major:
        if len(chosen) >= n:
            break
        chosen.setdefault(id(f), f)
    return [f for f in major if id(f) in chosen]
