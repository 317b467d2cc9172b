"""Writes the synthetic sample logs: one scenario per verdict, each as proxy JSONL and as HAR.

    python sample_logs/make_synthetic.py        # rewrites sample_logs/synthetic/*

Deterministic (fixed clock, fixed ids).  Each scenario is a list of exchanges
written by two independent writers, so the JSONL and HAR of one scenario
describe the same traffic and must give the same verdicts.
"""
from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

OUT = Path(__file__).parent / "synthetic"
URL = "http://127.0.0.1:8765/mcp"
T0 = datetime(2026, 11, 13, 9, 0, 0, tzinfo=timezone.utc)
PV = "2025-06-18"


@dataclass
class Ex:
    method: str
    headers: dict
    body: str | None = None
    status: int | None = 200
    resp_headers: dict = field(default_factory=dict)
    events: list = field(default_factory=list)  # (id | None, data) or (id, data, "cut")
    json_body: str | None = None
    end: str = "eof"  # eof | reset | aborted
    at: float = 0.0  # seconds after T0


def ts(sec: float) -> str:
    return (T0 + timedelta(seconds=sec)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def sse_headers(sid: str | None = None, **extra) -> dict:
    h = {"content-type": "text/event-stream", "cache-control": "no-cache"}
    if sid:
        h["mcp-session-id"] = sid
    h.update(extra)
    return h


def init(sid: str, at: float, rid: int = 0) -> list[Ex]:
    return [
        Ex("POST", {"content-type": "application/json", "accept": "application/json, text/event-stream"},
           body=json.dumps({"jsonrpc": "2.0", "id": rid, "method": "initialize",
                            "params": {"protocolVersion": PV, "capabilities": {}, "clientInfo": {"name": "demo", "version": "1"}}}),
           resp_headers={"content-type": "application/json", "mcp-session-id": sid},
           json_body=json.dumps({"jsonrpc": "2.0", "id": rid, "result": {"protocolVersion": PV, "capabilities": {}, "serverInfo": {"name": "demo", "version": "1"}}}),
           at=at),
        Ex("POST", {"content-type": "application/json", "mcp-session-id": sid, "mcp-protocol-version": PV},
           body=json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}), status=202,
           resp_headers={}, at=at + 0.05),
    ]


def note(n: int) -> str:
    return json.dumps({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": f"tick {n}"}})


def get(sid: str, at: float, last: str | None = None, events=(), end="reset", status=200, resp=None, auth=True) -> Ex:
    h = {"accept": "text/event-stream", "mcp-session-id": sid, "mcp-protocol-version": PV}
    if auth:
        h["authorization"] = "Bearer sk-live-SECRET-do-not-leak"
    if last is not None:
        h["last-event-id"] = last
    return Ex("GET", h, status=status, resp_headers=resp if resp is not None else sse_headers(), events=list(events), end=end, at=at)


def tool_call(sid: str, rid: int, at: float) -> Ex:
    return Ex("POST", {"content-type": "application/json", "mcp-session-id": sid, "mcp-protocol-version": PV},
              body=json.dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": {"name": "echo", "arguments": {"x": rid}}}),
              resp_headers={"content-type": "application/json"},
              json_body=json.dumps({"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": "ok"}]}}), at=at)


S1, S2 = "a1b2c3d4e5f60718293a4b5c6d7e8f90", "0f1e2d3c4b5a69788796a5b4c3d2e1f0"


def scenarios() -> dict[str, list[Ex]]:
    global S1, S2
    out = {}
    for name, build in _SCENARIOS.items():
        # every scenario has its own session ids, so analyzing the whole folder never mixes two scenarios
        S1, S2 = hashlib.md5(f"{name}/1".encode()).hexdigest(), hashlib.md5(f"{name}/2".encode()).hexdigest()
        out[name] = build()
    return out


def _all() -> dict[str, list[Ex]]:
    ints = lambda a, b: [(str(i), note(i)) for i in range(a, b + 1)]  # noqa: E731
    sc: dict = {}
    sc["continuous"] = lambda: init(S1, 0) + [
        get(S1, 1, events=ints(1, 5)),
        get(S1, 3, last="5", events=ints(6, 8), end="eof"),
        tool_call(S1, 1, 4),
    ]
    # reference signature 1 seen by one client: ids jump after the resume (events 6-8 lost);
    # the client goes on using the session -> not handled -> critical
    sc["gap"] = lambda: init(S1, 0) + [
        get(S1, 1, events=ints(1, 5)),
        get(S1, 3, last="5", events=ints(9, 11), end="eof"),
        tool_call(S1, 1, 4),
    ]
    # reference signature 3: another replica treats the unknown Last-Event-ID as "start fresh" and
    # emits from 1; the client notices and re-initializes -> handled -> warning
    sc["replay_reset"] = lambda: init(S1, 0) + [
        get(S1, 1, events=ints(1039, 1041)),
        get(S1, 3, last="1041", events=ints(1, 3), end="eof"),
    ] + init(S2, 4, rid=10) + [tool_call(S2, 11, 5)]
    # the server advertises a new replay epoch with continuous-looking ids
    sc["epoch_change"] = lambda: init(S1, 0) + [
        get(S1, 1, events=ints(1, 4), resp=sse_headers(**{"x-mcp-replay-epoch": "e-7f3a"})),
        get(S1, 3, last="4", events=ints(5, 6), end="eof", resp=sse_headers(**{"x-mcp-replay-epoch": "e-91c2"})),
        tool_call(S1, 1, 4),
    ]
    # the session was evicted: 404 on the resume; the client starts a new session (handled)
    sc["session_invalid"] = lambda: init(S1, 0) + [
        get(S1, 1, events=ints(1, 3)),
        Ex("GET", {"accept": "text/event-stream", "mcp-session-id": S1, "last-event-id": "3", "mcp-protocol-version": PV},
           status=404, resp_headers={"content-type": "application/json"},
           json_body=json.dumps({"jsonrpc": "2.0", "id": "server-error", "error": {"code": -32600, "message": "Session not found"}}), at=3),
    ] + init(S2, 4, rid=10) + [get(S2, 5, events=ints(1, 2), end="eof")]
    # uuid ids (python-sdk example event store): nothing in one capture proves continuity
    u = [f"6f1c2a7e-0b4d-4c8e-9a51-{i:012x}" for i in range(1, 7)]
    sc["unverifiable"] = lambda: init(S1, 0) + [
        get(S1, 1, events=[(u[i], note(i)) for i in range(0, 3)]),
        get(S1, 3, last=u[2], events=[(u[i], note(i)) for i in range(3, 6)], end="eof"),
        tool_call(S1, 1, 4),
    ]
    # opaque ids replayed: the resume delivers again ids the stream already delivered (stale cursor too)
    sc["opaque_replay"] = lambda: init(S1, 0) + [
        get(S1, 1, events=[(u[i], note(i)) for i in range(0, 4)]),
        get(S1, 3, last=u[1], events=[(u[i], note(i)) for i in range(2, 6)], end="eof"),
        tool_call(S1, 1, 4),
    ]
    # history checks inside one connection: an id going back, the same id with two payloads, and an
    # event cut off by the disconnect; the resume itself is continuous and re-sends the boundary event unchanged
    sc["history"] = lambda: init(S1, 0) + [
        get(S1, 1, events=[("1", note(1)), ("2", note(2)), ("3", note(3)), ("2", note(99)), ("3", note(3)), ("4", note(4), "cut")]),
        get(S1, 3, last="3", events=[("3", note(3)), ("4", note(4)), ("5", note(5))], end="eof"),
        tool_call(S1, 1, 4),
    ]
    # --- issue [3/6]: the SDKs' id schemes, JSON-RPC semantics, protocol eras ---------------------
    def post_sse(sid, rid, events, end="eof", method="tools/call", pv=PV, at=2.0, extra=None):
        h = {"content-type": "application/json", "accept": "application/json, text/event-stream", "mcp-session-id": sid, "mcp-protocol-version": pv}
        return Ex("POST", h, body=json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": extra or {"name": "slow_count"}}),
                  resp_headers=sse_headers(), events=events, end=end, at=at)

    def result(rid):
        return json.dumps({"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": "done"}]}})

    # python-sdk test store: one counter for the whole session; the GET stream's jump from 5 to 8
    # is filled by the POST stream's 6 and 7 -> continuous
    sc["shared_counter"] = lambda: init(S1, 0) + [
        get(S1, 1, events=[(str(i), note(i)) for i in (1, 3, 5)]),
        post_sse(S1, 1, [(str(i), note(i)) for i in (2, 4, 6)] + [("7", result(1))], at=1.5),
        get(S1, 3, last="5", events=[(str(i), note(i)) for i in (8, 9)], end="eof"),
    ]
    # go-sdk ids <streamID>_<index>: index 4 and 5 of the stream never came
    go = "KQ7ZP3XW2M5RNBT6YDHC4AJGEV"
    sc["go_ids_gap"] = lambda: init(S1, 0) + [
        get(S1, 1, events=[(f"{go}_{i}", note(i)) for i in range(0, 4)]),
        get(S1, 3, last=f"{go}_3", events=[(f"{go}_{i}", note(i)) for i in (6, 7)], end="eof"),
        tool_call(S1, 1, 4),
    ]
    # csharp-sdk ids b64(session):b64(stream):seq, resumed correctly
    cs = "YTFiMmMzZDQ=:X0dFVF9zdHJlYW0="
    sc["csharp_ids_continuous"] = lambda: init(S1, 0) + [
        get(S1, 1, events=[(f"{cs}:{i}", note(i)) for i in range(1, 4)]),
        get(S1, 3, last=f"{cs}:3", events=[(f"{cs}:{i}", note(i)) for i in range(4, 6)], end="eof"),
    ]
    # reference signature 2: the restarted server accepts the stale session id, then shows it knows nothing
    sc["session_resurrected"] = lambda: init(S1, 0) + [
        get(S1, 1, events=ints(1, 3)),
        get(S1, 3, last="3", events=ints(4, 5), end="eof"),
        Ex("POST", {"content-type": "application/json", "mcp-session-id": S1, "mcp-protocol-version": PV},
           body=json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}), resp_headers={"content-type": "application/json"},
           json_body=json.dumps({"jsonrpc": "2.0", "id": 2, "error": {"code": -32602, "message": "Received request before initialization was complete"}}), at=4),
    ]
    # the server replays stream A's response on resumed stream B (spec: MUST NOT); clients rewrite the id, the wire shows it
    sc["cross_stream_response"] = lambda: init(S1, 0) + [
        post_sse(S1, 5, [("a-1", note(1))], end="reset", at=1.0),
        post_sse(S1, 6, [("b-1", note(1))], end="reset", at=1.2, extra={"name": "other"}),
        get(S1, 3, last="b-1", events=[("b-2", result(5))], end="eof"),
    ]
    # 2025-11-25 polling: priming event with retry, server closes, the client polls and gets a new priming event
    sc["polling_2025_11_25"] = lambda: [
        Ex("POST", {"content-type": "application/json"}, body=json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}}),
           resp_headers={"content-type": "application/json", "mcp-session-id": S1},
           json_body=json.dumps({"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": "2025-11-25"}}), at=0),
        get(S1, 1, events=[("p-1", "", 2000)], end="eof"),
        get(S1, 3, last="p-1", events=[("p-2", "", 2000)], end="eof"),
    ]
    # 2026-07-28: no sessions; the tool call's stream broke, the client re-issued it (as it must), both ran
    stateless = lambda rid, end, answered: Ex(  # noqa: E731
        "POST", {"content-type": "application/json", "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": "charge_card"},
        body=json.dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": {"name": "charge_card", "arguments": {"cents": 500},
                        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}}),
        resp_headers=sse_headers(), events=[(None, result(rid))] if answered else [], end=end, at=1 + rid)
    sc["stateless_reissue"] = lambda: [stateless(1, "reset", True), stateless(2, "eof", True)]

    # 2025-11-25 session: tools/call id 2 reports progress twice, then its stream resets without the
    # response; the client does not resume (it gives up) and sends the same call again as id 3 with a new
    # progressToken, which runs to the end -> reissued_after_break (the first attempt had started)
    def invoice(rid, at, events, end):
        body = {"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                "params": {"name": "create_invoice", "arguments": {"customer": "c-42", "cents": 1999}, "_meta": {"progressToken": f"tok-{rid}"}}}
        h = {"content-type": "application/json", "accept": "application/json, text/event-stream", "mcp-session-id": S1, "mcp-protocol-version": "2025-11-25"}
        return Ex("POST", h, body=json.dumps(body), resp_headers=sse_headers(), events=events, end=end, at=at)

    def progress(rid, n):
        return json.dumps({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": f"tok-{rid}", "progress": n, "total": 3}})

    sc["reissued_after_break"] = lambda: [
        Ex("POST", {"content-type": "application/json"}, body=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}}),
           resp_headers={"content-type": "application/json", "mcp-session-id": S1},
           json_body=json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"protocolVersion": "2025-11-25"}}), at=0),
        invoice(2, 1, [("1", ""), ("2", progress(2, 1)), ("3", progress(2, 2))], "reset"),
        invoice(3, 3, [("4", ""), ("5", progress(3, 1)), ("6", progress(3, 2)), ("7", result(3))], "eof"),
    ]
    return sc


_SCENARIOS = _all()


def sse_text(events) -> str:
    out = []
    for ev in events:
        eid, data = ev[0], ev[1]
        retry = ev[2] if len(ev) > 2 and isinstance(ev[2], int) else None
        block = (f"id: {eid}\n" if eid is not None else "") + (f"retry: {retry}\n" if retry else "") + "".join(f"data: {line}\n" for line in data.split("\n"))
        out.append(block if len(ev) > 2 and ev[2] == "cut" else block + "\n")
    return "".join(out)


def write_jsonl(name: str, exs: list[Ex], out: Path = OUT) -> None:
    lines = []
    for n, ex in enumerate(exs):
        conn = f"c{n + 1}"
        t = ex.at
        lines.append({"kind": "request", "ts": ts(t), "conn": conn, "method": ex.method, "url": URL, "headers": ex.headers, "body": ex.body})
        if ex.status is not None:
            lines.append({"kind": "response", "ts": ts(t + 0.01), "conn": conn, "status": ex.status, "headers": ex.resp_headers})
        for i, ev in enumerate(ex.events):
            rec = {"kind": "sse", "ts": ts(t + 0.1 + 0.1 * i), "conn": conn, "id": ev[0], "event": None, "data": ev[1], "retry": None}
            if len(ev) > 2 and ev[2] == "cut":
                rec["truncated"] = True
            elif len(ev) > 2:
                rec["retry"] = ev[2]
            lines.append(rec)
        if ex.json_body is not None:
            lines.append({"kind": "body", "ts": ts(t + 0.02), "conn": conn, "data": ex.json_body})
        end_t = t + 0.1 + 0.1 * len(ex.events) + 0.05
        reason = {"eof": "eof", "reset": "reset", "aborted": "error"}[ex.end]
        lines.append({"kind": "close", "ts": ts(end_t), "conn": conn, "reason": reason, "by": "server" if ex.end != "aborted" else "client"})
    (out / f"{name}.jsonl").write_text("".join(json.dumps(rec) + "\n" for rec in lines))


def write_har(name: str, exs: list[Ex], out: Path = OUT) -> None:
    entries = []
    for n, ex in enumerate(exs):
        duration = (0.1 + 0.1 * len(ex.events) + 0.05) * 1000
        content: dict = {"size": 0, "mimeType": ex.resp_headers.get("content-type", "x-unknown")}
        if ex.events:
            text = sse_text(ex.events)
            # exercise the base64 variant (mitmproxy writes it for non-UTF-8 bodies) on every other entry
            if n % 2:
                content.update(text=base64.b64encode(text.encode()).decode(), encoding="base64", size=len(text.encode()))
            else:
                content.update(text=text, size=len(text.encode()))
        elif ex.json_body is not None:
            content.update(text=ex.json_body, size=len(ex.json_body))
        entry = {
            "startedDateTime": ts(ex.at),
            "time": duration,
            "request": {
                "method": ex.method, "url": URL, "httpVersion": "HTTP/1.1", "cookies": [], "queryString": [],
                "headers": [{"name": k.title(), "value": v} for k, v in ex.headers.items()],
                "headersSize": -1, "bodySize": len(ex.body or ""),
                **({"postData": {"mimeType": "application/json", "text": ex.body}} if ex.body else {}),
            },
            "response": {
                "status": ex.status or 0, "statusText": "", "httpVersion": "HTTP/1.1", "cookies": [],
                "headers": [{"name": k.title(), "value": v} for k, v in ex.resp_headers.items()],
                "content": content, "redirectURL": "", "headersSize": -1, "bodySize": content["size"],
            },
            "cache": {},
            "timings": {"send": 0, "wait": 10, "receive": duration - 10},
            "connection": str(n + 1),
        }
        if ex.end == "reset":
            entry["_error"] = "net::ERR_CONNECTION_RESET"
        entries.append(entry)
    # browsers write entries when they complete: long streams come last
    entries.sort(key=lambda e: (datetime.fromisoformat(e["startedDateTime"]) + timedelta(milliseconds=e["time"])))
    har = {"log": {"version": "1.2", "creator": {"name": "make_synthetic.py", "version": "1"}, "pages": [], "entries": entries}}
    (out / f"{name}.har").write_text(json.dumps(har, indent=1) + "\n")


def three_captures() -> None:
    """One incident, three captures (reference signature 1, "gap with continuous ids").

    Replica A streams progress ids up to 1050 on the session's GET; the load-balancer
    node lb-1 had forwarded only up to 1041 when the client's connection died.  During
    a rolling restart the browser's resume (Last-Event-ID 1041) goes through another
    node, lb-2, to replica B, whose persisted counter goes on at 1042 with *new* events
    and an empty replay buffer.  The client sees 1041 -> 1042: continuous.

    - client.har      the browser; DevTools recorded only after the GET stream was
                      open: the resume, then two tools/call POSTs (id 1 through lb-1,
                      id 2 through lb-2)
    - lb-proxy.jsonl  node lb-1: initialize, the old GET (…1041, reset) and tools/call id 1
                      (not the resume: that went through lb-2)
    - server-a.jsonl  replica A's own log: initialize and the old GET (…1050); its clock
                      runs 0.7 s behind the balancer's

    No capture alone and no pair proves the loss; only the chain does: the client's
    tools/call id 1 ties the client to lb-1, lb-1's old GET ties it to replica A, and
    replica A's events 1042-1050 never reached the client, their ids reused by B.
    """
    global S1
    S1 = hashlib.md5(b"three_captures/1").hexdigest()
    folder = OUT / "three_captures"
    folder.mkdir(exist_ok=True)
    old = lambda n: json.dumps({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": "job-7", "progress": n, "from": "replica-a"}})  # noqa: E731
    new = lambda n: json.dumps({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": "job-9", "progress": n, "from": "replica-b"}})  # noqa: E731
    resume = get(S1, 3, last="1041", events=[(str(i), new(i)) for i in range(1042, 1047)], end="eof")
    call_lb1, call_lb2 = tool_call(S1, 1, 4), tool_call(S1, 2, 5)
    write_har("client", [resume, call_lb1, call_lb2], folder)
    write_jsonl("lb-proxy", init(S1, 0) + [get(S1, 1, events=[(str(i), old(i)) for i in range(1036, 1042)]), call_lb1], folder)
    skew = -0.7  # replica A's clock: captures are matched by what an exchange is, never by time
    a_side = init(S1, 0) + [get(S1, 1, events=[(str(i), old(i)) for i in range(1036, 1051)])]
    write_jsonl("server-a", [replace(ex, at=ex.at + skew) for ex in a_side], folder)


def main() -> None:
    OUT.mkdir(exist_ok=True)
    for name, exs in scenarios().items():
        write_jsonl(name, exs)
        write_har(name, exs)
        print(f"wrote {OUT / name}.jsonl and .har ({len(exs)} exchanges)")
    three_captures()
    print(f"wrote {OUT / 'three_captures'}/client.har, lb-proxy.jsonl, server-a.jsonl")


if __name__ == "__main__":
    main()
