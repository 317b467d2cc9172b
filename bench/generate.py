"""Deterministic generator of large synthetic MCP Streamable HTTP traffic, with faults at known places.

    python bench/generate.py --events 1000000                 # bench/out/traffic-1000k.{jsonl,har} + truth-1000k.json
    python bench/generate.py --events 125000 --formats jsonl,har,pcap --seed 7

Same arguments, same bytes: every choice comes from ``random.Random(f"{seed}/...")`` and every time
is a counter from a fixed start, never the clock.  ``--events N`` is the number of SSE events (the
last session is completed, so the file holds slightly more); 1M events give ~300 MB of JSONL.

Traffic model (modelled on the real python-SDK recordings in ``sample_logs/``: compact JSON,
httpx/uvicorn headers, ``event: message``):

* ``--concurrency`` clients ("slots", default 64) run side by side; their records are merged in time
  order, as one proxy in front of a busy server would log them.  A client runs one session after
  another; after a session it cannot use any more it initializes the next one at once.
* a session: ``initialize`` (JSON result with ``Mcp-Session-Id``), ``notifications/initialized``
  (202), a standalone ``GET`` SSE stream that breaks (connection reset, sometimes in the middle of
  an event: a ``truncated`` record) and is resumed 1-5 times, a few ``tools/call`` POSTs with JSON
  results while the stream runs, ``DELETE`` at the end.
* id schemes: integer per stream (78%), uuid4 (12%, python-sdk example store), go-sdk
  ``<stream>_<n>`` (10%; those sessions also have one ``tools/call`` answered on its own SSE stream).
  30% of the integer sessions' servers send ``X-MCP-Replay-Epoch``.
* each reconnect is one scenario, chosen per scheme, whose verdict (see README "What it finds") is
  written to the truth file:

  ==================  =====================================================================
  continuous          ``Last-Event-ID: L``, events ``L+1…`` (the cut-off event re-sent whole)
  continuous          GET reopened without ``Last-Event-ID``, the server's ids go on (ts-sdk #2499)
  gap                 ``Last-Event-ID: L``, events ``L+1+g…`` (g = 1-20 lost)
  replay_reset        a replica without the buffer starts again from 1 (new payloads)
  continuous          stale claim ``Last-Event-ID: L-s``, the events after it replayed (the verdict follows the
                      client's claim: the capture point saw them leave, but by the claim they never arrived;
                      they are listed as duplicated ids, with a ``stale_last_event_id`` warning)
  continuous          uuid ids: the same, the old connection shows which event followed the claim
  replay_reset        GET reopened without ``Last-Event-ID``, a new process numbers from 1
  epoch_change        ``X-MCP-Replay-Epoch`` differs, ids look continuous
  session_invalid     404 "Session not found" / 400 / 200 with another ``Mcp-Session-Id``
  session_resurrected 200, ids go on, then ``tools/list`` is answered -32602 "not initialized"
  cross_stream_replay go ids: the GET resume replays the tool call's POST stream
  unverifiable        uuid ids, nothing proves which event followed the cursor
  unverifiable        200 ``text/event-stream`` but no event before the stream ends
  ==================  =====================================================================

Truth (``truth-<size>.json``): per reconnect the session id, its ordinal among the session's
reconnects, the ``Last-Event-ID`` sent (null for a reopen without it), the expected verdict (and
``verdict_har`` where a HAR must differ: an empty event stream reads there as a body that was not
recorded, so a reopen without ``Last-Event-ID`` after it is unverifiable), the scenario, and ``handled``: whether *this client* initialized a new session before it used the old
one again (null: it never did either) — what ``handled_correctly`` means.
"""
from __future__ import annotations

import argparse
import base64
import hashlib
import heapq
import importlib.util
import json
import random
import struct
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"
GENERATOR_VERSION = 1
DEFAULT_SEED = 20261113
URL = "http://127.0.0.1:8000/mcp"
PV = "2025-06-18"
T0 = datetime(2026, 11, 13, 9, 0, 0, tzinfo=timezone.utc)
MS = 1000  # times are integer microseconds from T0

CLIENT_HEADERS = {"host": "127.0.0.1:8000", "accept-encoding": "gzip, deflate", "connection": "keep-alive",
                  "user-agent": "python-httpx/0.28.1"}
LOREM = ("the quick brown fox jumps over the lazy dog while the indexer walks the repository tree and "
         "reports each file it has parsed, with the number of symbols found and the time it took; ") * 4

# --shared-payloads: message notifications carry nothing session-specific, so sessions often send the
# same (id, payload) — as servers do with heartbeats, list_changed or identical log lines.  The analyzer's
# cross-session check joins on (id, digest); this variant shows what that costs (bench/SCALE.md).
CONFIG = {"shared_payloads": False}

SCHEME_WEIGHTS = {"int": 78, "uuid": 12, "go": 10}
# scenario -> (verdict, weight) per scheme; terminal scenarios end the session (the client re-initializes)
SCENARIOS = {
    "int": {
        "continuous": 55, "gap": 10, "reset_from_1": 5, "stale_replay": 4, "epoch_change": 7,
        "invalid_404": 3, "invalid_400": 1, "invalid_other_sid": 1, "resurrected": 4, "empty": 3,
        "reopen_continue": 4, "reopen_restart": 3,
    },
    "uuid": {"uuid_continue": 80, "uuid_stale_replay": 12, "invalid_404": 5, "empty": 3},
    "go": {"continuous": 60, "gap": 14, "cross_stream": 16, "invalid_404": 6, "empty": 4},
}
VERDICT = {
    "continuous": "continuous", "reopen_continue": "continuous", "gap": "gap",
    "reset_from_1": "replay_reset", "stale_replay": "continuous", "uuid_stale_replay": "continuous",
    "reopen_restart": "replay_reset", "epoch_change": "epoch_change", "invalid_404": "session_invalid",
    "invalid_400": "session_invalid", "invalid_other_sid": "session_invalid", "resurrected": "session_resurrected",
    "cross_stream": "cross_stream_replay", "uuid_continue": "unverifiable", "empty": "unverifiable",
}
TERMINAL = {"invalid_404", "invalid_400", "invalid_other_sid", "resurrected", "cross_stream"}
# before these a broken connection may end in the middle of an event: the reconnect re-sends it, or
# its verdict comes before any history check
CUT_OK = {"continuous", "gap", "reset_from_1", "stale_replay", "epoch_change", "invalid_404", "invalid_400",
          "invalid_other_sid", "resurrected", "reopen_continue", "reopen_restart"}


# --------------------------------------------------------------------------------------------- plan


@dataclass
class Conn:
    """One GET connection of the session's standalone stream (compact: event ranges, no strings)."""

    scenario: str | None  # None: the first GET
    lei: int | None  # Last-Event-ID as a sequence number (None: header absent)
    runs: list  # [(stream tag "A"/"B", first seq, count, generation)]
    cut: bool = False  # the connection ends inside event L+1
    epoch: str | None = None
    status: int = 200
    last: bool = False  # the session's last GET (ends with DELETE, eof)

    @property
    def n_events(self) -> int:
        return sum(r[2] for r in self.runs) + (1 if self.cut else 0)


@dataclass
class Plan:
    idx: int
    sid: str
    scheme: str
    epoch: bool
    auth: bool
    conns: list[Conn]
    post_sse: int  # go: events on the tool call's own SSE stream (the last one is the result)
    tool_calls: int
    terminal: bool
    prefixes: tuple[str, str]

    @property
    def n_events(self) -> int:
        return sum(c.n_events for c in self.conns) + self.post_sse


def _pick(r: random.Random, weights: dict) -> str:
    keys = list(weights)
    return r.choices(keys, [weights[k] for k in keys])[0]


def _b32(r: random.Random, n: int = 26) -> str:
    alphabet = "ABCDEFGHJKMNPQRSTVWXYZ0123456789"
    return "".join(alphabet[r.randrange(32)] for _ in range(n))


def plan_session(seed: int, idx: int) -> Plan:
    r = random.Random(f"{seed}/plan/{idx}")
    scheme = _pick(r, SCHEME_WEIGHTS)
    epoch = scheme == "int" and r.random() < 0.3
    sid = f"{r.getrandbits(96):024x}{idx:08x}"
    n_reconnects = r.choices([1, 2, 3, 4, 5], [25, 30, 25, 12, 8])[0]
    first = 0 if scheme == "go" else 1
    gen, ep = 0, 0
    k = r.randint(20, 90)
    conns = [Conn(None, None, [("A", first, k, gen)], epoch=f"ep{ep}" if epoch else None)]
    last = first + k - 1  # the client's last processed id
    nxt = last + 1  # the server's next id on this stream
    weights = dict(SCENARIOS[scheme])
    if not epoch:
        weights.pop("epoch_change", None)
    terminal = False
    post_sse = r.randint(3, 10) if scheme == "go" else 0
    for _ in range(n_reconnects):
        sc = _pick(r, weights)
        prev = conns[-1]
        if scheme == "int" and prev.runs and sc in CUT_OK and r.random() < 0.3:
            prev.cut = True  # event `last+1` was on the wire when the connection broke
        k = r.randint(10, 80)
        ep_now = f"ep{ep}" if epoch else None
        if sc in ("continuous", "uuid_continue", "reopen_continue"):
            c = Conn(sc, None if sc.startswith("reopen") else last, [("A", last + 1, k, gen)], epoch=ep_now)
            last = last + k
        elif sc == "gap":
            g = r.randint(1, 20)
            c = Conn(sc, last, [("A", last + 1 + g, k, gen)], epoch=ep_now)
            last = last + g + k
        elif sc == "reset_from_1":
            gen += 1
            k = r.randint(5, 60)
            c = Conn(sc, last, [("A", 1, k, gen)], epoch=ep_now)
            last = k
        elif sc == "reopen_restart":
            gen += 1
            k = r.randint(5, 60)
            c = Conn(sc, None, [("A", 1, k, gen)], epoch=ep_now)
            last = k
        elif sc in ("stale_replay", "uuid_stale_replay"):
            s = min(r.randint(1, 4), last - first)
            c = Conn(sc, last - s, [("A", last - s + 1, s + k, gen)], epoch=ep_now)
            last = last + k
        elif sc == "epoch_change":
            ep += 1
            gen += 1
            c = Conn(sc, last, [("A", last + 1, k, gen)], epoch=f"ep{ep}")
            last = last + k
        elif sc in ("invalid_404", "invalid_400"):
            c = Conn(sc, last, [], status=404 if sc == "invalid_404" else 400)
        elif sc == "invalid_other_sid":
            gen += 1
            c = Conn(sc, last, [("A", 1, r.randint(2, 6), gen)], epoch=ep_now)
        elif sc == "resurrected":
            gen += 1
            c = Conn(sc, last, [("A", last + 1, r.randint(3, 12), gen)], epoch=ep_now)
        elif sc == "cross_stream":
            c = Conn(sc, last, [("B", 0, post_sse, 0)], epoch=ep_now)
        elif sc == "empty":
            c = Conn(sc, last, [], epoch=ep_now)
        else:  # pragma: no cover
            raise AssertionError(sc)
        conns.append(c)
        nxt = max(nxt, last + 1)
        if sc in TERMINAL:
            terminal = True
            break
    if not terminal:
        conns[-1].last = True
    return Plan(idx, sid, scheme, epoch, r.random() < 0.5, conns, post_sse, r.randint(1, 4), terminal,
                (_b32(r), _b32(r)))


def plan_all(seed: int, events: int) -> list[Plan]:
    plans, total = [], 0
    while total < events:
        p = plan_session(seed, len(plans))
        plans.append(p)
        total += p.n_events
    return plans


# -------------------------------------------------------------------------------------- materialize


@dataclass
class Ex:
    conn: str
    start: int
    method: str
    headers: dict
    body: str | None = None
    status: int | None = 200
    resp_headers: dict = field(default_factory=dict)
    resp_at: int = 0
    events: list = field(default_factory=list)  # (id, data, ts, cut)
    json_body: str | None = None
    end: int = 0
    end_reason: str = "eof"  # eof | reset
    end_by: str = "server"
    boundary: dict | None = None  # truth row when this request is a reconnect


def ts_str(us: int) -> str:
    return (T0 + timedelta(microseconds=us)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def http_date(us: int) -> str:
    return format_datetime(T0 + timedelta(microseconds=us), usegmt=True)


class Session:
    """A plan turned into exchanges with times, starting at ``t0``."""

    def __init__(self, p: Plan, t0: int, seed: int) -> None:
        self.p = p
        self.r = random.Random(f"{seed}/times/{p.idx}")
        self.t0 = t0
        self.exchanges: list[Ex] = []
        self.n = 0
        self._build()

    # ids and payloads -----------------------------------------------------------------------
    def event_id(self, tag: str, seq: int, gen: int) -> str:
        p = self.p
        if p.scheme == "int":
            return str(seq)
        if p.scheme == "go":
            return f"{p.prefixes[0 if tag == 'A' else 1]}_{seq}"
        h = hashlib.md5(f"{p.sid}/{tag}/{gen}/{seq}".encode()).hexdigest()
        return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:32]}"

    def payload(self, tag: str, seq: int, gen: int) -> str:
        p = self.p
        n = (seq * 2654435761 + p.idx * 40503 + gen * 977) & 0xFFFFFFFF
        if tag == "B":  # progress of the tool call on its own stream
            return json.dumps({"jsonrpc": "2.0", "method": "notifications/progress",
                               "params": {"progressToken": f"tc-{p.idx}", "progress": seq, "total": p.post_sse - 1,
                                          "message": LOREM[: 30 + n % 60]}}, separators=(",", ":"))
        if n % 3 == 0:
            return json.dumps({"jsonrpc": "2.0", "method": "notifications/progress",
                               "params": {"progressToken": f"j{gen}-{p.sid[:6]}", "progress": seq,
                                          "message": LOREM[n % 40: n % 40 + 5 + n % 30]}}, separators=(",", ":"))
        # the logger names the session: two sessions never send the same (id, payload) by chance
        # (--shared-payloads drops it, see CONFIG)
        logger = f"w{gen}" if CONFIG["shared_payloads"] else f"w{gen}-{p.sid[:6]}"
        return json.dumps({"jsonrpc": "2.0", "method": "notifications/message",
                           "params": {"level": "info", "logger": logger,
                                      "data": f"event {seq}: " + LOREM[n % 50: n % 50 + 5 + n % 40]}},
                          separators=(",", ":"))

    # exchanges --------------------------------------------------------------------------------
    def _conn(self) -> str:
        self.n += 1
        return f"{self.p.idx}.{self.n}"

    def _req_headers(self, accept: str, with_sid: bool = True, extra: dict | None = None) -> dict:
        h = dict(CLIENT_HEADERS)
        h["accept"] = accept
        if accept != "text/event-stream":
            h["content-type"] = "application/json"
        if with_sid:
            h["mcp-session-id"] = self.p.sid
            h["mcp-protocol-version"] = PV
        if self.p.auth:
            h["authorization"] = f"Bearer sk-bench-{self.p.sid[:12]}"
        if extra:
            h.update(extra)
        return h

    def _resp_headers(self, at: int, ctype: str, sid: str | None, extra: dict | None = None) -> dict:
        h = {"date": http_date(at), "server": "uvicorn"}
        if ctype == "text/event-stream":
            h.update({"cache-control": "no-cache, no-transform", "connection": "keep-alive", "content-type": ctype})
        else:
            h["content-type"] = ctype
        if sid:
            h["mcp-session-id"] = sid
        if ctype == "text/event-stream":
            h.update({"x-accel-buffering": "no", "transfer-encoding": "chunked"})
        if extra:
            h.update(extra)
        return h

    def _json_call(self, at: int, body: dict, result: dict, *, with_sid: bool = True, sid_resp: str | None = None,
                   status: int = 200) -> Ex:
        rt = self.r.randint(3, 250) * MS
        ex = Ex(self._conn(), at, "POST", self._req_headers("application/json, text/event-stream", with_sid),
                body=json.dumps(body, separators=(",", ":")), status=status,
                resp_headers=self._resp_headers(at + rt, "application/json", sid_resp), resp_at=at + rt,
                json_body=json.dumps(result, separators=(",", ":")) if result is not None else None,
                end=at + rt + 200)
        if result is None:
            ex.resp_headers["content-length"] = "0"
        return ex

    def _build(self) -> None:
        p, r = self.p, self.r
        t = self.t0
        X = self.exchanges
        init = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                "params": {"protocolVersion": PV, "capabilities": {}, "clientInfo": {"name": "bench-client", "version": "1.0"}}}
        res = {"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": PV, "capabilities": {"tools": {"listChanged": False}},
                                                       "serverInfo": {"name": "bench-server", "version": "1.0"}}}
        X.append(self._json_call(t, init, res, with_sid=False, sid_resp=p.sid))
        t = X[-1].end + r.randint(1, 20) * MS
        X.append(self._json_call(t, {"jsonrpc": "2.0", "method": "notifications/initialized"}, None, status=202, sid_resp=p.sid))
        t = X[-1].end + r.randint(1, 30) * MS
        dt = r.randint(15, 120) * MS  # time between events
        rid = 0
        boundaries = []
        get_spans = []
        for ci, c in enumerate(p.conns):
            extra = {}
            if c.lei is not None:
                extra["last-event-id"] = self._id(ci, "A", c.lei, 0)
            ex = Ex(self._conn(), t, "GET", self._req_headers("text/event-stream", extra=extra))
            ex.resp_at = t + r.randint(2, 15) * MS
            if c.status != 200:
                ex.status = c.status
                ex.resp_headers = self._resp_headers(ex.resp_at, "application/json", None)
                if c.status == 404:
                    ex.json_body = json.dumps({"jsonrpc": "2.0", "id": "server-error",
                                               "error": {"code": -32600, "message": "Session not found"}}, separators=(",", ":"))
                else:
                    ex.json_body = json.dumps({"jsonrpc": "2.0", "id": "server-error",
                                               "error": {"code": -32600, "message": "Bad Request: Invalid event ID format"}}, separators=(",", ":"))
                ex.end = ex.resp_at + 300
            else:
                sid_resp = p.sid
                if c.scenario == "invalid_other_sid":
                    sid_resp = hashlib.md5(f"{p.sid}/other".encode()).hexdigest()
                ex.resp_headers = self._resp_headers(ex.resp_at, "text/event-stream", sid_resp,
                                                     {"x-mcp-replay-epoch": c.epoch} if c.epoch else None)
                at = ex.resp_at
                for tag, a, k, gen in c.runs:
                    for seq in range(a, a + k):
                        at += r.randint(dt // 2, dt * 3 // 2)
                        ex.events.append((self._id(ci, tag, seq, gen), self._payload(tag, seq, gen), at, False))
                if c.cut:
                    nxt = p.conns[ci + 1]
                    seq = self._last_seq(ci) + 1
                    gen = c.runs[-1][3]
                    data = self._payload("A", seq, gen)
                    at += r.randint(dt // 2, dt * 3 // 2)
                    ex.events.append((self._id(ci, "A", seq, gen), data[: len(data) // 2], at, True))
                    assert nxt.scenario in CUT_OK
                ex.end = at + r.randint(1, 40) * MS
                if c.last or (ci == len(p.conns) - 1):
                    ex.end_reason, ex.end_by = "eof", ("server" if c.last else "client")
                else:
                    ex.end_reason, ex.end_by = "reset", r.choice(["server", "client"])
            if c.scenario is not None:
                ex.boundary = {"session_id": p.sid, "k": len(boundaries), "last_event_id": ex.headers.get("last-event-id"),
                               "verdict": VERDICT[c.scenario], "scenario": c.scenario, "scheme": p.scheme, "at": t}
                if c.lei is None and ci and p.conns[ci - 1].scenario == "empty":
                    # a HAR cannot tell an empty event stream from one whose body was not recorded
                    # (README, Inputs): the stream this reopen resumes has an unknown end there
                    ex.boundary["verdict_har"] = "unverifiable"
                boundaries.append(ex.boundary)
            X.append(ex)
            get_spans.append((ex.start, ex.events[-1][2] if ex.events else ex.resp_at))
            if c.scenario == "resurrected":
                at = ex.events[1][2] + 1 * MS if len(ex.events) > 1 else ex.resp_at + 5 * MS
                rid += 1
                X.append(self._json_call(at, {"jsonrpc": "2.0", "id": rid, "method": "tools/list"},
                                         {"jsonrpc": "2.0", "id": rid, "error": {"code": -32602, "message": "Received request before initialization was complete"}}))
            t = ex.end + r.randint(100, 2000) * MS
            if ci == 0 and p.post_sse:  # go: a tool call answered on its own stream, before the first reconnect
                self._post_sse(ex, rid := rid + 1)
        session_end = max(e.end for e in X)
        # tool calls with JSON results while the GET stream runs
        for _ in range(p.tool_calls):
            lo, hi = get_spans[r.randrange(len(get_spans))]
            at = r.randint(lo + 1 * MS, max(lo + 2 * MS, hi))
            if p.terminal and at > boundaries[-1]["at"]:
                continue  # after the terminal reconnect the client leaves the session
            rid += 1
            X.append(self._json_call(at, {"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                                          "params": {"name": "search", "arguments": {"q": f"item {rid}", "limit": 10}}},
                                     {"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": LOREM[: 40 + rid * 13 % 200]}], "isError": False}}))
        if not p.terminal:  # DELETE, then the server ends the GET stream
            last_get = X[[i for i, e in enumerate(X) if e.method == "GET"][-1]]
            at = last_get.events[-1][2] + 5 * MS if last_get.events else last_get.resp_at + 5 * MS
            d = self._json_call(at, {}, None)
            d.method, d.body = "DELETE", None
            d.headers.pop("content-type", None)
            d.status, d.resp_headers = 200, self._resp_headers(d.resp_at, "application/json", None, {"content-length": "0"})
            last_get.end = max(last_get.end, d.end + 2 * MS)
            X.append(d)
            session_end = max(session_end, last_get.end, d.end)
        self.end = max(session_end, max(e.end for e in X))
        self.boundaries = boundaries
        # every request time distinct inside the session (the analyzer orders by request start)
        seen = set()
        for e in sorted(X, key=lambda e: e.start):
            while e.start in seen:
                e.start += 1
            seen.add(e.start)

    def _id(self, ci: int, tag: str, seq: int, gen: int) -> str:
        if self.p.scheme == "uuid":
            gen = 0  # one buffer: a replayed event keeps its id
        return self.event_id(tag, seq, gen)

    def _payload(self, tag: str, seq: int, gen: int) -> str:
        return self.payload(tag, seq, gen)

    def _last_seq(self, ci: int) -> int:
        tag, a, k, gen = self.p.conns[ci].runs[-1]
        return a + k - 1

    def _post_sse(self, get0: Ex, rid: int) -> None:
        p, r = self.p, self.r
        at = get0.start + (get0.end - get0.start) // 3
        ex = Ex(self._conn(), at, "POST", self._req_headers("application/json, text/event-stream"),
                body=json.dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                                 "params": {"name": "index_repo", "arguments": {"path": f"/srv/repo-{p.idx}"}}}, separators=(",", ":")))
        ex.resp_at = at + r.randint(2, 10) * MS
        ex.resp_headers = self._resp_headers(ex.resp_at, "text/event-stream", p.sid)
        t = ex.resp_at
        for seq in range(p.post_sse):
            t += r.randint(5, 40) * MS
            if seq == p.post_sse - 1:
                data = json.dumps({"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": "indexed"}], "isError": False}},
                                  separators=(",", ":"))
                self.b_result = data
            else:
                data = self.payload("B", seq, 0)
            ex.events.append((self.event_id("B", seq, 0), data, t, False))
        ex.end = t + 2 * MS
        self.exchanges.append(ex)


def _fix_cross_stream(s: Session) -> None:
    """The cross-stream replay re-sends the POST stream's events exactly (same ids, same payloads)."""
    post = [e for e in s.exchanges if e.method == "POST" and e.events]
    for e in s.exchanges:
        if e.boundary and e.boundary["scenario"] == "cross_stream" and post:
            src = post[0].events
            e.events = [(eid, data, e.events[i][2] if i < len(e.events) else e.resp_at + (i + 1) * 7 * MS, False)
                        for i, (eid, data, _t, _c) in enumerate(src)]
            e.end = max(e.end, e.events[-1][2] + 5 * MS)


def make_session(p: Plan, t0: int, seed: int) -> Session:
    s = Session(p, t0, seed)
    _fix_cross_stream(s)
    s.end = max(e.end for e in s.exchanges)
    return s


def handled_truth(s: Session, next_init: int | None) -> None:
    """``handled`` as README defines it, for this client: a new initialize before the old session is used again."""
    for b in s.boundaries:
        if b["verdict"] == "continuous":
            b["handled"] = True
            continue
        uses = [e.start for e in s.exchanges if e.method != "DELETE" and e.headers.get("mcp-session-id") and e.start > b["at"]]
        use = min(uses) if uses else None
        if next_init is not None and (use is None or next_init < use):
            b["handled"] = True
        elif use is not None:
            b["handled"] = False
        else:
            b["handled"] = None


def slots(plans: list[Plan], seed: int, concurrency: int):
    """Per client: its sessions one after another, with times.  Yields (slot, Session) lazily."""
    per = [plans[i::concurrency] for i in range(concurrency)]

    def run(slot: int):
        r = random.Random(f"{seed}/slot/{slot}")
        t = slot * 137 * MS + r.randint(0, 500) * MS
        prev = None
        for p in per[slot]:
            s = make_session(p, t, seed)
            s.slot = slot
            if prev is not None:
                handled_truth(prev, s.t0)
                yield prev
            prev = s
            t = s.end + r.randint(50, 1500) * MS
        if prev is not None:
            handled_truth(prev, None)
            yield prev

    return [run(i) for i in range(concurrency)]


# ------------------------------------------------------------------------------------------ writers


def _dumps(obj) -> str:
    return json.dumps(obj, separators=(",", ":"))


def client_host(slot: int) -> str:
    """Each client (slot) has its own address, as the recorder's ``client_addr`` shows."""
    return f"10.1.{slot >> 8}.{slot & 255}"


def client_port(conn: str) -> int:
    idx, n = conn.split(".")
    return 32768 + (int(idx) * 61 + int(n)) % 28000


def jsonl_records(s: Session):
    """(ts, order, line) for every record of the session, in time order."""
    out = []
    o = 0
    host = client_host(s.slot)
    for e in s.exchanges:
        c = e.conn
        q = json.dumps(c)
        out.append((e.start, o, f'{{"kind":"request","ts":"{ts_str(e.start)}","conn":{q},"method":"{e.method}","url":"{URL}",'
                                f'"headers":{_dumps(e.headers)},"body":{json.dumps(e.body)},'
                                f'"client_addr":"{host}:{client_port(e.conn)}"}}', e.boundary))
        o += 1
        if e.status is not None:
            out.append((e.resp_at, o, f'{{"kind":"response","ts":"{ts_str(e.resp_at)}","conn":{q},"status":{e.status},'
                                      f'"headers":{_dumps(e.resp_headers)}}}', None))
            o += 1
        if e.json_body is not None:
            out.append((e.resp_at + 1, o, f'{{"kind":"body","ts":"{ts_str(e.resp_at + 1)}","conn":{q},"data":{json.dumps(e.json_body)}}}', None))
            o += 1
        for eid, data, at, cut in e.events:
            tail = ',"truncated":true}' if cut else "}"
            out.append((at, o, f'{{"kind":"sse","ts":"{ts_str(at)}","conn":{q},"id":{json.dumps(eid)},"event":"message",'
                               f'"data":{json.dumps(data)},"retry":null{tail}', None))
            o += 1
        out.append((e.end, o, f'{{"kind":"close","ts":"{ts_str(e.end)}","conn":{q},"reason":"{e.end_reason}","by":"{e.end_by}"}}', None))
        o += 1
    out.sort(key=lambda x: (x[0], x[1]))
    return out


def sse_text(events) -> str:
    parts = []
    for eid, data, _at, cut in events:
        block = f"event: message\nid: {eid}\ndata: {data}\n"
        parts.append(block if cut else block + "\n")
    return "".join(parts)


def har_entry(e: Ex, n: int) -> tuple[int, str]:
    """(completion time, entry JSON)."""
    duration_ms = (e.end - e.start) / 1000
    ctype = e.resp_headers.get("content-type", "x-unknown")
    content: dict = {"size": 0, "mimeType": ctype}
    if e.events:
        text = sse_text(e.events)
        raw = text.encode()
        if n % 10 == 7:  # mitmproxy writes base64 for some bodies
            content.update(size=len(raw), text=base64.b64encode(raw).decode(), encoding="base64")
        else:
            content.update(size=len(raw), text=text)
    elif e.json_body is not None:
        content.update(size=len(e.json_body), text=e.json_body)
    entry = {
        "startedDateTime": ts_str(e.start),
        "time": round(duration_ms, 3),
        "request": {
            "method": e.method, "url": URL, "httpVersion": "HTTP/1.1", "cookies": [], "queryString": [],
            "headers": [{"name": k, "value": v} for k, v in e.headers.items()],
            "headersSize": -1, "bodySize": len(e.body or ""),
            **({"postData": {"mimeType": "application/json", "text": e.body}} if e.body else {}),
        },
        "response": {
            "status": e.status or 0, "statusText": "", "httpVersion": "HTTP/1.1", "cookies": [],
            "headers": [{"name": k, "value": v} for k, v in e.resp_headers.items()],
            "content": content, "redirectURL": "", "headersSize": -1, "bodySize": content["size"],
        },
        "cache": {},
        "timings": {"send": 0, "wait": round((e.resp_at - e.start) / 1000, 3), "receive": round((e.end - e.resp_at) / 1000, 3)},
        "connection": e.conn,
    }
    if e.end_reason == "reset":
        entry["_error"] = "net::ERR_CONNECTION_RESET"
    return e.end, _dumps(entry)


def write_jsonl(plans, seed, concurrency, path: Path, truth: list) -> dict:
    def records(gen):
        for s in gen:
            for rec in jsonl_records(s):
                yield rec
            truth.extend(s.boundaries)

    n_lines = n_bytes = 0
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        buf = []
        for ts, _o, line, b in heapq.merge(*(records(g) for g in slots(plans, seed, concurrency)), key=lambda x: (x[0], x[1])):
            n_lines += 1
            if b is not None:
                b["jsonl_line"] = n_lines
            buf.append(line)
            if len(buf) >= 4096:
                chunk = "\n".join(buf) + "\n"
                n_bytes += len(chunk.encode())
                f.write(chunk)
                buf = []
        if buf:
            chunk = "\n".join(buf) + "\n"
            n_bytes += len(chunk.encode())
            f.write(chunk)
    return {"lines": n_lines, "bytes": path.stat().st_size}


def write_har(plans, seed, concurrency, path: Path, truth_by_key: dict) -> dict:
    def entries(gen):
        for s in gen:
            done = []
            for e in s.exchanges:
                end, text = har_entry(e, len(done) + s.p.idx)
                done.append((end, e.start, text, e.boundary))
            done.sort(key=lambda x: (x[0], x[1]))
            yield from done

    n = 0
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write('{"log":{"version":"1.2","creator":{"name":"bench/generate.py","version":"%d"},"pages":[],"entries":[\n' % GENERATOR_VERSION)
        for _end, _start, text, b in heapq.merge(*(entries(g) for g in slots(plans, seed, concurrency)), key=lambda x: (x[0], x[1])):
            if n:
                f.write(",\n")
            f.write(text)
            n += 1
            if b is not None and (b["session_id"], b["k"]) in truth_by_key:
                truth_by_key[(b["session_id"], b["k"])]["har_entry"] = n
        f.write("\n]}}\n")
    return {"entries": n, "bytes": path.stat().st_size}


# ----------------------------------------------------------------------------------------------- pcap


def _pcapgen():
    spec = importlib.util.spec_from_file_location("pcapgen", HERE.parent / "tests" / "pcapgen.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("pcapgen", mod)
    spec.loader.exec_module(mod)
    return mod


REASONS = {200: "OK", 202: "Accepted", 400: "Bad Request", 404: "Not Found"}


def write_pcap(plans, seed, concurrency, path: Path) -> dict:
    """The same exchanges on the wire: one TCP connection per exchange (tests/pcapgen.py builds the packets),
    HTTP/1.1, SSE chunked with one event per segment, FIN or RST as the JSONL's close says."""
    pg = _pcapgen()
    hdr = struct.Struct("<IIII")
    t0_ns = int(T0.timestamp()) * 10**9

    def http_head(lines: dict) -> str:
        return "".join(f"{k}: {v}\r\n" for k, v in lines.items())

    def packets(gen):
        for s in gen:
            pk = []
            for e in s.exchanges:
                o = int(e.conn.split(".")[0]) * 64 + int(e.conn.split(".")[1])
                # a client's own address; ports never repeat inside one client's capture span
                c = pg.Conversation(client_host(s.slot), client_port(e.conn), "10.255.0.1", 8000, o * 7919, o * 104729)
                body = (e.body or "").encode()
                req = f"{e.method} /mcp HTTP/1.1\r\n" + http_head({k: v for k, v in e.headers.items()})
                if body:
                    req += f"content-length: {len(body)}\r\n"
                req = req.encode() + b"\r\n" + body
                seq = 0
                for sg in c.handshake():
                    pk.append((e.start + seq, seq, sg)); seq += 1
                for sg in c.c(req, 65483):
                    pk.append((e.start + 50 + seq, seq, sg)); seq += 1
                if e.status is None:
                    continue
                rh = {k: v for k, v in e.resp_headers.items() if k not in ("content-length", "transfer-encoding")}
                if e.events or e.resp_headers.get("content-type") == "text/event-stream":
                    head = f"HTTP/1.1 {e.status} {REASONS[e.status]}\r\n" + http_head(rh) + "transfer-encoding: chunked\r\n\r\n"
                    for sg in c.s(head.encode()):
                        pk.append((e.resp_at, seq, sg)); seq += 1
                    for eid, data, at, cut in e.events:
                        block = f"event: message\r\nid: {eid}\r\ndata: {data}\r\n" + ("" if cut else "\r\n")
                        raw = block.encode()
                        chunk = b"%x\r\n" % len(raw) + raw + b"\r\n"
                        if cut:
                            chunk = chunk[: len(chunk) // 2]
                        for sg in c.s(chunk, 65483):
                            pk.append((at, seq, sg)); seq += 1
                        pk.append((at + 20, seq, c.ack(True))); seq += 1
                    if e.end_reason == "eof":
                        for sg in c.s(b"0\r\n\r\n"):
                            pk.append((e.end - 10, seq, sg)); seq += 1
                else:
                    jb = (e.json_body or "").encode()
                    head = f"HTTP/1.1 {e.status} {REASONS[e.status]}\r\n" + http_head(rh) + f"content-length: {len(jb)}\r\n\r\n"
                    for sg in c.s(head.encode() + jb, 65483):
                        pk.append((e.resp_at, seq, sg)); seq += 1
                if e.end_reason == "reset":
                    pk.append((e.end, seq, c.rst(e.end_by == "client"))); seq += 1
                else:
                    pk.append((e.end, seq, c.fin(False))); seq += 1
                    pk.append((e.end + 30, seq, c.fin(True))); seq += 1
            pk.sort(key=lambda x: (x[0], x[1]))
            yield from pk

    stats = {"packets": 0}
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, pg.LINK_ETHERNET))
        for us, _o, sg in heapq.merge(*(packets(g) for g in slots(plans, seed, concurrency)), key=lambda x: (x[0], x[1])):
            fr = pg.frame(sg)
            sec, usec = divmod(t0_ns // 1000 + us, 10**6)
            f.write(hdr.pack(sec, usec, len(fr), len(fr)))
            f.write(fr)
            stats["packets"] += 1
    stats["bytes"] = path.stat().st_size
    return stats


# ------------------------------------------------------------------------------------------------ main


def size_label(events: int) -> str:
    return f"{events // 1000}k" if events % 1000 == 0 else str(events)


def generate(events: int, seed: int = DEFAULT_SEED, concurrency: int = 64, formats=("jsonl", "har"), out: Path = OUT,
             force: bool = False, log=print, shared_payloads: bool = False) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    CONFIG["shared_payloads"] = shared_payloads
    label = size_label(events) + ("-shared" if shared_payloads else "")
    truth_path = out / f"truth-{label}.json"
    paths = {fmt: out / f"traffic-{label}.{ 'pcap' if fmt == 'pcap' else fmt}" for fmt in formats}
    key = {"version": GENERATOR_VERSION, "events": events, "seed": seed, "concurrency": concurrency, "shared_payloads": shared_payloads,
           "source_sha256": hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]}
    if not force and truth_path.exists():
        old = json.loads(truth_path.read_text())
        if old.get("params") == key and all(p.exists() and str(p.name) in old.get("files", {}) for p in paths.values()):
            log(f"up to date: {truth_path}")
            return old
    t = time.perf_counter()
    plans = plan_all(seed, events)
    truth: list = []
    files = {}
    jsonl_path = out / f"traffic-{label}.jsonl"
    stats = write_jsonl(plans, seed, concurrency, jsonl_path, truth)  # the truth comes with the JSONL pass
    files[jsonl_path.name] = stats
    log(f"wrote {jsonl_path} ({stats['bytes'] / 1e6:.1f} MB, {stats['lines']} lines) in {time.perf_counter() - t:.1f}s")
    by_key = {(b["session_id"], b["k"]): b for b in truth}
    if "har" in formats:
        t1 = time.perf_counter()
        stats = write_har(plans, seed, concurrency, paths["har"], by_key)
        files[paths["har"].name] = stats
        log(f"wrote {paths['har']} ({stats['bytes'] / 1e6:.1f} MB, {stats['entries']} entries) in {time.perf_counter() - t1:.1f}s")
    if "pcap" in formats:
        t1 = time.perf_counter()
        stats = write_pcap(plans, seed, concurrency, paths["pcap"])
        files[paths["pcap"].name] = stats
        log(f"wrote {paths['pcap']} ({stats['bytes'] / 1e6:.1f} MB, {stats['packets']} packets) in {time.perf_counter() - t1:.1f}s")
    for b in truth:
        b.pop("at", None)
    truth.sort(key=lambda b: b["jsonl_line"])
    counts: dict = {}
    for b in truth:
        counts[b["verdict"]] = counts.get(b["verdict"], 0) + 1
    scen: dict = {}
    for b in truth:
        scen[b["scenario"]] = scen.get(b["scenario"], 0) + 1
    doc = {
        "params": key,
        "files": files,
        "sessions": len(plans),
        "events": sum(p.n_events for p in plans),
        "schemes": {s: sum(1 for p in plans if p.scheme == s) for s in SCHEME_WEIGHTS},
        "boundaries": len(truth),
        "verdicts": dict(sorted(counts.items())),
        "scenarios": dict(sorted(scen.items())),
        "truth": truth,
    }
    truth_path.write_text(json.dumps(doc, indent=0) + "\n")
    log(f"wrote {truth_path}: {len(plans)} sessions, {doc['events']} events, {len(truth)} reconnects {doc['verdicts']}"
        f" ({time.perf_counter() - t:.1f}s)")
    return doc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000, help="SSE events to generate (the last session is completed)")
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument("--concurrency", type=int, default=64, help="clients running side by side")
    ap.add_argument("--formats", default="jsonl,har", help="comma list of jsonl,har,pcap (jsonl is always written)")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--force", action="store_true", help="rewrite even when the files for these arguments exist")
    ap.add_argument("--shared-payloads", action="store_true",
                    help="notifications without anything session-specific (files named <size>-shared)")
    a = ap.parse_args()
    fmts = tuple(f for f in a.formats.split(",") if f)
    generate(a.events, a.seed, a.concurrency, fmts, a.out, a.force, shared_payloads=a.shared_payloads)


if __name__ == "__main__":
    main()
