"""A header sent twice is read as the MCP peers read it (analyzer/decode/http1.py SINGLE_VALUED): the first
Content-Type, Last-Event-ID, Mcp-Session-Id, MCP-Protocol-Version and X-MCP-Replay-Epoch; others joined with ", ".

Before, every repeat was joined: "text/event-stream, text/event-stream" was "not an event stream" and the gap
behind it vanished (exit 1 became 0), and "5, 5" was an unknown Last-Event-ID (no_cursor instead of the gap),
while httpx, the python and TypeScript SDK clients read the events and the python server (Starlette) the first id.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from analyzer import pipeline
from analyzer.cli import main
from analyzer.decode import http1

ROOT = Path(__file__).resolve().parent.parent
SYN = ROOT / "sample_logs" / "synthetic"


def verdicts(path: Path) -> list[str]:
    return [b["verdict"] for b in pipeline.run([str(path)]).document["boundaries"]]


def _repeat(value, form: str):
    return [value, value] if form == "list" else value


@pytest.mark.parametrize("form", ["list", "two names"])
def test_jsonl_repeated_content_type_and_last_event_id_keep_the_gap(tmp_path, form):
    out = []
    for line in (SYN / "gap.jsonl").read_text().splitlines():
        r = json.loads(line)
        h = r.get("headers") or {}
        if r["kind"] == "response" and str(h.get("content-type", "")).startswith("text/event-stream"):
            if form == "list":
                h["content-type"] = [h["content-type"], h["content-type"]]
            else:
                h["Content-Type"] = h["content-type"]
        if r["kind"] == "request" and "last-event-id" in h:
            if form == "list":
                h["last-event-id"] = [h["last-event-id"], h["last-event-id"]]
            else:
                h["Last-Event-ID"] = h["last-event-id"]
        out.append(json.dumps(r))
    p = tmp_path / "repeated.jsonl"
    p.write_text("\n".join(out) + "\n")
    assert verdicts(p) == verdicts(SYN / "gap.jsonl") == ["gap"]
    assert CliRunner().invoke(main, ["analyze", str(p), "-q"]).exit_code == 1


def test_har_repeated_headers_keep_the_gap(tmp_path):
    har = json.loads((SYN / "gap.har").read_text())
    for e in har["log"]["entries"]:
        for side in ("request", "response"):
            extra = [dict(h) for h in e[side]["headers"] if h["name"].lower() in ("content-type", "last-event-id")]
            e[side]["headers"] += extra
        mime = e["response"].get("content", {}).get("mimeType", "")
        if mime.startswith("text/event-stream"):
            e["response"]["content"]["mimeType"] = f"{mime}, {mime}"  # as a browser keeps a repeated Content-Type
    p = tmp_path / "repeated.har"
    p.write_text(json.dumps(har))
    assert verdicts(p) == verdicts(SYN / "gap.har") == ["gap"]


def test_http1_keeps_the_first_single_valued_header_and_joins_the_others():
    p = http1.MessageParser("request")
    heads = [r for r in p.feed(b"GET /mcp HTTP/1.1\r\nLast-Event-ID: 5\r\nLast-Event-ID: 7\r\nAccept: text/event-stream\r\n"
                               b"Accept: application/json\r\nMcp-Session-Id: a\r\nmcp-session-id: b\r\nCookie: x=1\r\nCookie: y=2\r\n\r\n",
                               0, 1) if type(r) is http1.Head]
    assert heads[0].headers == {"last-event-id": "5", "accept": "text/event-stream, application/json", "mcp-session-id": "a",
                                "cookie": "x=1; y=2"}
