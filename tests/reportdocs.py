"""Findings documents for the report tests (tests/test_report.py, tests/test_browser.py).

Real documents come from the pipeline over sample_logs/; hostile ones are
made two ways: ``poison`` injects markup into every log-derived string of a
real document, and ``hostile_capture`` writes a proxy JSONL capture whose
session ids, Last-Event-IDs, event data and URLs are hostile, so the markup
travels through the whole pipeline as an attacker would send it.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_logs"
SYNTHETIC = SAMPLES / "synthetic"
CAPTURES = sorted(p for p in SYNTHETIC.glob("*") if p.suffix in (".jsonl", ".har"))

PAYLOADS = [
    "<script>alert(1)</script>",
    "</script><script>alert(2)</script>",
    '"><img src=x onerror=alert(3)>',
    "</style><style>*{}</style>",
    "javascript:alert(4)",
    "line\u2028sep\u2029para",
    "</title></svg><svg onload=alert(5)>",
    "'><a href=https://evil.example/>x</a>",
    "<!--",
]
HOSTILE = "".join(PAYLOADS)


def poison(doc: dict) -> dict:
    """A copy of ``doc`` with ``HOSTILE`` in every string the page shows."""
    d = copy.deepcopy(doc)
    old_ids = {s["session_id"] for s in d["sessions"]}

    def sid(v):
        return HOSTILE + v if v in old_ids else v

    for s in d["sessions"]:
        s["session_id"] = sid(s["session_id"])
        s["protocol_version"] = HOSTILE
        s["sources"] = [HOSTILE + p for p in s["sources"]]
    for x in d["exchanges"]:
        x["session_id"] = sid(x["session_id"])
        x["url"] = "javascript:alert(1)//" + HOSTILE
        x["content_type"] = HOSTILE
        x["last_event_id"] = HOSTILE
        x["first_id"] = HOSTILE
        x["source"] = HOSTILE + x["source"]
    for b in d["boundaries"]:
        b["session_id"] = sid(b["session_id"])
        b["reason"] = HOSTILE
        b["last_event_id"] = HOSTILE
        b["lost_event_ids"] = [HOSTILE] * 3
        b["lost_count"] = 3
        b["http"]["request_session_id"] = HOSTILE
        b["http"]["replay_epoch_after"] = HOSTILE
        for ev in b["events_before"] + b["events_after"] + b["cut_off_before"]:
            ev["data"] = HOSTILE
            ev["id"] = HOSTILE
            ev["event"] = HOSTILE
        b["request"] = {"source": HOSTILE, "location": HOSTILE}
    for f in d["findings"]:
        f["session_id"] = sid(f["session_id"]) if f["session_id"] is not None else None
        f["message"] = HOSTILE
        f["effect"] = HOSTILE
        f["rule"] = HOSTILE
        f["evidence"] = [{"source": HOSTILE, "location": HOSTILE}]
    for a in d["anomalies"]:
        a["message"] = HOSTILE
        a["code"] = HOSTILE
    d["anomalies"].append({"source": HOSTILE, "location": HOSTILE, "code": HOSTILE, "severity": HOSTILE, "message": HOSTILE})
    for i in d["inputs"]:
        i["path"] = HOSTILE + i["path"]
        i["notes"] = [HOSTILE]
        i["error"] = HOSTILE
    d["skipped"] = [HOSTILE]
    d["tool"]["version"] = HOSTILE
    d["generated_at"] = HOSTILE
    return d


# Session ids with quotes and markup, as a hostile server would mint them.
HOSTILE_SIDS = ['sess"onmouseover="alert(6)', "sess'><svg onload=alert(7)>"]


def hostile_capture(path: Path) -> Path:
    """A proxy JSONL capture with a gap whose every log-derived string is hostile.

    Session 1: ids 1..3, reset, resume with Last-Event-ID 3 answered with ids 6..7
    (4 and 5 lost), then the old session is used again. Session 2: the same under a
    second hostile id, answered 404 (session_invalid)."""
    lines: list[dict] = []
    n = 0

    def ts(sec: float) -> str:
        return f"2026-11-13T09:00:{int(sec):02d}.{int((sec % 1) * 1e6):06d}Z"

    def exchange(method, headers, body=None, status=200, resp_headers=None, events=(), json_body=None, close="eof"):
        nonlocal n
        n += 1
        conn = f"c{n}"
        lines.append({"kind": "request", "ts": ts(n), "conn": conn, "method": method,
                      "url": "http://127.0.0.1:9/mcp?q=</script><script>alert(8)</script>", "headers": headers, "body": body})
        lines.append({"kind": "response", "ts": ts(n + 0.01), "conn": conn, "status": status, "headers": resp_headers or {}})
        for i, (eid, data) in enumerate(events):
            lines.append({"kind": "sse", "ts": ts(n + 0.1 + i / 100), "conn": conn, "id": eid, "event": None, "data": data, "retry": None})
        if json_body is not None:
            lines.append({"kind": "body", "ts": ts(n + 0.02), "conn": conn, "data": json_body})
        lines.append({"kind": "close", "ts": ts(n + 0.5), "conn": conn, "reason": close})

    def data(i: int) -> str:
        return json.dumps({"jsonrpc": "2.0", "method": "notifications/message",
                           "params": {"n": i, "text": PAYLOADS[i % len(PAYLOADS)] + "<img src=x onerror=alert(9)>"}})

    for k, sid in enumerate(HOSTILE_SIDS):
        init = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "<b>t</b>", "version": "0"}}}
        exchange("POST", {"content-type": "application/json"}, body=json.dumps(init),
                 resp_headers={"content-type": "application/json", "mcp-session-id": sid},
                 json_body=json.dumps({"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": "2025-06-18", "capabilities": {},
                                                                            "serverInfo": {"name": "s", "version": "0"}}}))
        sse = {"accept": "text/event-stream", "mcp-session-id": sid}
        exchange("GET", sse, resp_headers={"content-type": "text/event-stream"}, events=[(str(i), data(i)) for i in (1, 2, 3)], close="reset")
        if k == 0:
            exchange("GET", sse | {"last-event-id": "3"}, resp_headers={"content-type": "text/event-stream"},
                     events=[(str(i), data(i)) for i in (6, 7)], close="reset")
        else:
            exchange("GET", sse | {"last-event-id": "3"}, status=404, resp_headers={"content-type": "text/plain"},
                     json_body="</script><script>alert(10)</script>")
        call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "<img src=x onerror=alert(11)>"}}
        exchange("POST", {"content-type": "application/json", "mcp-session-id": sid}, body=json.dumps(call),
                 resp_headers={"content-type": "application/json"}, json_body=json.dumps({"jsonrpc": "2.0", "id": 1, "result": {}}))
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    return path
