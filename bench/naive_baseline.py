"""The baseline a user would write: one pass over the proxy JSONL, the reference's four cases at each resume.

    python bench/naive_baseline.py bench/out/traffic-125k.jsonl [--out verdicts.json]

Plain Python, stdlib ``json``, one ``json.loads`` per line, a few dicts.  It follows
shared/reference/sse-resumption-divergence.md literally:

* per session it keeps the *last processed* event id (the last complete event any connection of the
  session delivered; a ``truncated`` event was never processed) and the replay epoch of the session's
  last event-stream response;
* at every request carrying ``Last-Event-ID`` (a *reconnect*): case 1 on its response (non-2xx, or
  another ``Mcp-Session-Id`` → ``session_invalid``), the epoch check (``X-MCP-Replay-Epoch`` differs →
  ``epoch_change``), then cases 2-4 on its first event: ``id > last+1`` → ``gap``, ``id <= last`` →
  ``replay_reset``, ``id == last+1`` → ``continuous``;
* integer ids only: a non-integer id on either side, or no event before the connection closes, is
  ``unverifiable``.

What it cannot do by construction (and the analyzer does): judge a reconnect without
``Last-Event-ID``, keep validating after the first event, see a session that was resurrected, tell
events of another stream, or use opaque ids.  It is kept honest: no deliberate slowness, the usual
idioms (dict lookups, ``str.isdigit``), records streamed, memory bounded by open connections.
"""
from __future__ import annotations

import argparse
import json
import time


def _int(v) -> int | None:
    return int(v) if isinstance(v, str) and v.isdigit() else None


def analyze(path: str) -> list[dict]:
    conn_session: dict[str, str | None] = {}  # open connection -> session id
    pending: dict[str, dict] = {}  # connection of a reconnect -> its boundary, until its first event
    last_id: dict[str, str] = {}  # session -> last processed event id
    epoch: dict[str, str | None] = {}  # session -> X-MCP-Replay-Epoch of its last event stream
    out: list[dict] = []
    loads = json.loads
    with open(path, "rb") as f:
        for lineno, line in enumerate(f, 1):
            try:
                rec = loads(line)
            except ValueError:
                continue
            kind = rec.get("kind")
            conn = rec.get("conn")
            if kind == "sse":
                eid = rec.get("id")
                if not eid or rec.get("truncated"):
                    continue
                sid = conn_session.get(conn)
                b = pending.pop(conn, None)
                if b is not None:
                    last, first = _int(b["last_processed"]), _int(eid)
                    b["first_event_id"] = eid
                    if last is None or first is None:
                        b["verdict"] = "unverifiable"
                    elif first > last + 1:
                        b["verdict"] = "gap"
                    elif first <= last:
                        b["verdict"] = "replay_reset"
                    else:
                        b["verdict"] = "continuous"
                if sid:
                    last_id[sid] = eid
            elif kind == "request":
                h = rec.get("headers") or {}
                sid = h.get("mcp-session-id")
                conn_session[conn] = sid
                lei = h.get("last-event-id")
                if lei is not None and sid:
                    b = {"session_id": sid, "last_event_id": lei, "line": lineno,
                         "last_processed": last_id.get(sid, lei), "verdict": None}
                    out.append(b)
                    pending[conn] = b
            elif kind == "response":
                h = rec.get("headers") or {}
                status = rec.get("status") or 0
                sid = conn_session.get(conn)
                if sid is None:  # the initialize response issues the session id
                    sid = conn_session[conn] = h.get("mcp-session-id")
                ctype = (h.get("content-type") or "").split(";")[0].strip()
                new_epoch = h.get("x-mcp-replay-epoch")
                b = pending.get(conn)
                if b is not None:
                    resp_sid = h.get("mcp-session-id")
                    if not 200 <= status < 300 or (resp_sid is not None and resp_sid != b["session_id"]):
                        b["verdict"] = "session_invalid"
                        del pending[conn]
                    elif new_epoch != epoch.get(sid):
                        b["verdict"] = "epoch_change"
                        del pending[conn]
                if sid and ctype == "text/event-stream" and 200 <= status < 300:
                    epoch[sid] = new_epoch
            elif kind == "close":
                b = pending.pop(conn, None)
                if b is not None:
                    b["verdict"] = "unverifiable"  # no event: nothing shows the stream resumed
                conn_session.pop(conn, None)
    for b in pending.values():
        b["verdict"] = "unverifiable"
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--out", help="write the verdicts as JSON here")
    a = ap.parse_args()
    t = time.perf_counter()
    res = analyze(a.path)
    took = time.perf_counter() - t
    counts: dict[str, int] = {}
    for b in res:
        counts[b["verdict"]] = counts.get(b["verdict"], 0) + 1
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"seconds": took, "verdicts": counts, "boundaries": res}, f)
    print(json.dumps({"seconds": took, "boundaries": len(res), "verdicts": counts}))


if __name__ == "__main__":
    main()
