"""A large findings document for the report's budget tests: one real document replicated, every key renumbered
or renamed (sessions, incidents, exchanges, boundaries, findings and the references between them), so the copies
are distinct sessions with distinct Mcp-Session-Ids, named as the analyzer names them (analyzer/document/names.py).
The synthetic samples x 60 are 2,100 sessions, as the archive run of issue [5/6] (2,097 sessions)."""
from __future__ import annotations

import copy
import re

from analyzer.document import names

STEP = 100_000  # key numbers of copy r start at r * STEP


def _re(ref, prefix: str, r: int):
    if ref is None:
        return None
    m = re.fullmatch(prefix + r"(\d+)", ref)
    return f"{prefix}{int(m.group(1)) + r * STEP}" if m else ref


def scaled(doc: dict, copies: int) -> dict:
    out = copy.deepcopy(doc)
    for key in ("sessions", "exchanges", "boundaries", "findings"):
        out[key] = []
    sid_of = {s["session"]: s["session_id"] for s in doc["sessions"]}
    for r in range(copies):
        d = copy.deepcopy(doc)
        # copy r's Mcp-Session-Ids are "<id>-r", and its names theirs (the traffic without one stays S0)
        named = names.session_names(f"{sid}-{r}" if sid else "" for sid in sid_of.values())
        name = {old: named[f"{sid}-{r}" if sid else ""] for old, sid in sid_of.items()}
        bname = {b["boundary_id"]: f"{name[b['session']]}.r{names.digest(b['boundary_id'] + f'-{r}')[:names.RECONNECT_CHARS]}"
                 for b in d["boundaries"]}

        def sname(old):
            return None if old is None else name.get(old, old)

        for s in d["sessions"]:
            s["session"], s["incident"] = sname(s["session"]), sname(s["incident"])
            s["session_id"] = f"{s['session_id']}-{r}" if s["session_id"] else ""
        for x in d["exchanges"]:
            x["session"], x["exchange_id"], x["stream"] = sname(x["session"]), _re(x["exchange_id"], "x", r), _re(x["stream"], "s", r)
            x["session_id"] = f"{x['session_id']}-{r}" if x["session_id"] else ""
        for b in d["boundaries"]:
            b["session"], b["boundary_id"], b["stream"] = sname(b["session"]), bname[b["boundary_id"]], _re(b["stream"], "s", r)
            for k in ("request_exchange", "resumes_exchange", "reaction_exchange"):
                b[k] = _re(b.get(k), "x", r)
            b["owed_requests"] = [_re(o, "x", r) for o in b.get("owed_requests") or []]
            b["session_id"] = f"{b['session_id']}-{r}" if b["session_id"] else ""
        for f in d["findings"]:
            f["session"], f["id"] = sname(f["session"]), _re(f["id"], "f", r)
            f["boundary"], f["exchange"] = bname.get(f.get("boundary"), f.get("boundary")), _re(f.get("exchange"), "x", r)
            f["session_id"] = f"{f['session_id']}-{r}" if f["session_id"] else ""
        for key in ("sessions", "exchanges", "boundaries", "findings"):
            out[key] += d[key]
    s = out["summary"]
    for key in ("sessions", "exchanges", "boundaries"):
        s[key] = len(out[key])
    for key in ("events", "messages"):
        s[key] = s.get(key, 0) * copies
    s["verdicts"] = {v: n * copies for v, n in s.get("verdicts", {}).items()}
    s["findings_by_severity"] = {k: n * copies for k, n in s.get("findings_by_severity", {}).items()}
    return out
