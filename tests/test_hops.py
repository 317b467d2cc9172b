"""Captures taken on a proxy host (every exchange on two hops), resurrection retry loops and
other sessions' events with colliding integer ids: issue [1/6] items 1, 2, 5 and 6."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import polars as pl
import pytest

import pcapgen as g
from conftest import SID as CSID, SID2
from analyzer import pipeline
from analyzer.signals import views

SID = "5e55a1e0000000000000000000000001"


def _sse(ids) -> bytes:
    body = b"".join(f"id: {i}\r\ndata: {json.dumps({'jsonrpc': '2.0', 'method': 'notifications/message', 'params': {'n': i}})}\r\n\r\n".encode() for i in ids)
    return b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nmcp-session-id: " + SID.encode() + b"\r\n\r\n" + body


def _get(host: str, last: str | None = None) -> bytes:
    extra = f"last-event-id: {last}\r\n" if last else ""
    return f"GET /mcp HTTP/1.1\r\nhost: {host}\r\naccept: text/event-stream\r\nmcp-session-id: {SID}\r\n{extra}\r\n".encode()


def _init(host: str) -> tuple[bytes, bytes]:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}}).encode()
    req = f"POST /mcp HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n".encode() + body
    res_body = json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"protocolVersion": "2025-11-25"}}).encode()
    res = (f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nmcp-session-id: {SID}\r\ncontent-length: {len(res_body)}\r\n\r\n").encode() + res_body
    return req, res


def _two_hop_capture(tmp_path, upstream_old: list[int], client_old: list[int], last: str, resumed: list[int]):
    """tcpdump -i any on a proxy host: client -> proxy:8080 and proxy -> server:8000, each exchange on both hops.

    The old GET delivered ``upstream_old`` on the upstream hop but only ``client_old`` on the client hop."""
    segs = []
    hops = {}
    for name, cport, sport in (("client", 40001, 8080), ("upstream", 50001, 8000)):
        hops[name] = [g.Conversation("127.0.0.1", cport + k, "127.0.0.1", sport) for k in range(3)]
    host = {"client": "127.0.0.1:8080", "upstream": "127.0.0.1:8000"}
    req, res = _init("x")
    for name in ("client", "upstream"):  # the proxy forwards each request after it got it, and each response back
        c = hops[name][0]
        segs += c.handshake() + c.c(req.replace(b"host: x", b"host: " + host[name].encode()))
    for name in ("upstream", "client"):
        segs += hops[name][0].s(res)
    for name in ("client", "upstream"):
        c = hops[name][1]
        segs += c.handshake() + c.c(_get(host[name]))
    segs += hops["upstream"][1].s(_sse(upstream_old)) + hops["client"][1].s(_sse(client_old))
    segs += [hops["client"][1].rst(True), hops["upstream"][1].rst(True)]
    for name in ("client", "upstream"):
        c = hops[name][2]
        segs += c.handshake() + c.c(_get(host[name], last))
    for name in ("upstream", "client"):
        segs += hops[name][2].s(_sse(resumed))
    path = tmp_path / "proxy-host.pcap"
    path.write_bytes(g.pcap(g.records(segs, link=g.LINK_SLL2), linktype=g.LINK_SLL2))
    return pipeline.run([str(path)]).document


def test_two_hops_of_a_healthy_resume_are_one_continuous_reconnect(tmp_path):
    doc = _two_hop_capture(tmp_path, [1, 2, 3], [1, 2, 3], "3", [4, 5])
    assert [(b["verdict"], b["request"]["location"]) for b in doc["boundaries"]] == [("continuous", doc["boundaries"][0]["request"]["location"])]
    b = doc["boundaries"][0]
    assert len(b["views"]) == 2  # the client hop, judged, and the upstream hop as its other view
    assert doc["findings"] == []


def test_events_lost_between_hops_are_a_gap_shown_by_the_upstream_hop(tmp_path):
    """The proxy received 4 and 5 from the server but never got them to the client; the server resumes at 6."""
    doc = _two_hop_capture(tmp_path, [1, 2, 3, 4, 5], [1, 2, 3], "3", [6, 7])
    (b,) = doc["boundaries"]
    assert b["verdict"] == "gap" and b["lost_event_ids"] == ["4", "5"]
    assert "8000" in b["reason"]  # named by the hop that saw them
    assert [f["rule"] for f in doc["findings"]] == ["gap"]


def test_hops_split_only_when_an_exchange_appears_on_two_endpoints_at_once():
    t = [datetime(2026, 12, 1, tzinfo=timezone.utc) + timedelta(milliseconds=ms) for ms in (0, 5, 100, 105, 0, 0, 0, 60_000)]
    x = pl.DataFrame({
        "source": ["a.pcap"] * 4 + ["b.pcap"] * 2 + ["c.pcap"] * 2,
        "conn": ["1.1.1.1:1->9.9.9.9:80#1", "2.2.2.2:3->8.8.8.8:8000#1", "1.1.1.1:2->9.9.9.9:80#1", "1.1.1.1:4->9.9.9.9:80#1",
                 "1.1.1.1:1->9.9.9.9:80#1", "1.1.1.1:2->7.7.7.7:80#1",
                 "1.1.1.1:1->9.9.9.9:80#1", "1.1.1.1:2->[::1]:80#1"],
        "session_id": ["s", "s", "s", "t", "u", "v", "w", "w"],
        "method": ["POST", "POST", "GET", "GET", "GET", "GET", "GET", "GET"],
        "last_event_id": [None] * 8,
        "request_body": ["{}", "{}", None, None, None, None, None, None],
        "started": t,
    })
    got = views.hops(x)["view"].to_list()
    assert got == ["a.pcap (hop to 9.9.9.9:80)", "a.pcap (hop to 8.8.8.8:8000)", "a.pcap (hop to 9.9.9.9:80)", "a.pcap (hop to 9.9.9.9:80)",
                   "b.pcap", "b.pcap",  # two endpoints, but no exchange on both
                   "c.pcap", "c.pcap"]  # the same GET on two addresses a minute apart: a client, not a proxy


def _forgotten_session_answer(cap) -> None:
    """The new process's answer to the client's next request under the old id (python-sdk: -32602)."""
    cap.exchange(
        "POST", {"content-type": "application/json", "mcp-session-id": CSID},
        body=json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/list"}),
        resp_headers={"content-type": "application/json"},
        json_body=json.dumps({"jsonrpc": "2.0", "id": 7, "error": {"code": -32602, "message": "Invalid request parameters"}}),
    )


def test_resurrection_retry_loop_is_one_verdict_and_one_finding(capture, analyze):
    """A restarted server re-creates the session uninitialized: every resume is an empty 200, the
    client polls with the same Last-Event-ID, and only its next request shows the forgotten session."""
    cap = capture.initialize().stream(ids=range(1, 4))
    for _ in range(3):
        cap.stream(last="3", ids=[], close="eof")
    _forgotten_session_answer(cap)
    doc = analyze(cap)
    assert [b["verdict"] for b in doc["boundaries"]] == ["session_resurrected"] * 3
    (f,) = [f for f in doc["findings"] if f["rule"] == "session_resurrected"]
    assert f["attempts"] == 3 and f["boundary"] == doc["boundaries"][0]["boundary_id"]
    assert "3 times with the same Last-Event-ID" in f["message"]
    assert len(f["attempts_span"]) == 2 and f["attempts_span"][0] < f["attempts_span"][1]


def test_a_delivery_between_reconnect_and_proof_keeps_the_old_process_alive(capture, analyze):
    cap = capture.initialize().stream(ids=range(1, 4)).stream(last="3", ids=[4, 5], close="eof")
    cap.stream(last="5", ids=[], close="eof")
    _forgotten_session_answer(cap)
    doc = analyze(cap)
    assert [b["verdict"] for b in doc["boundaries"]] == ["continuous", "session_resurrected"]


def test_integer_ids_of_another_session_replayed_are_cross_stream_replay(capture, analyze):
    def mine(tag):
        return lambda i: json.dumps({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": i, "message": f"step {i} [{tag}]"}})

    cap = capture.initialize().initialize(sid=SID2, rid=9)
    cap.stream(ids=range(1, 4), data=mine("one"))
    cap.stream(ids=range(4, 7), data=mine("one"), last="3")
    cap.stream(sid=SID2, ids=range(1, 4), data=mine("two"))
    cap.stream(sid=SID2, last="3", ids=range(4, 7), data=mine("one"))  # a store keyed without the session
    doc = analyze(cap)
    verdicts = [b["verdict"] for b in doc["boundaries"]]
    assert verdicts == ["continuous", "cross_stream_replay"]
    (f,) = [f for f in doc["findings"] if f["rule"] == "cross_session_replay"]
    assert f["session_id"] == SID2 and "3 event(s)" in f["message"]


# ---------------------------------------------------------------------------- real proxy-host captures
# sample_logs/real-nginx-*.pcap: tcpdump -i any on a host running nginx (gzip on) in front of the SDK
# server (sample_logs/README.md, "proxy host"). Every exchange is on two hops; the client hop is gzip.

REAL = Path(__file__).resolve().parent.parent / "sample_logs"


def _real(name: str) -> dict:
    return pipeline.run([str(REAL / name)]).document


@pytest.mark.parametrize("name, verdicts", [
    ("real-nginx-python-resume.pcap", ["continuous", "continuous"]),
    ("real-nginx-python-resume-mitm.pcap", ["continuous", "continuous"]),  # three hops: A->B, B->nginx, nginx->server
])
def test_proxy_host_capture_judges_each_reconnect_once(name, verdicts):
    doc = _real(name)
    assert [b["verdict"] for b in doc["boundaries"]] == verdicts
    n_hops = 3 if "mitm" in name else 2
    assert all(len(b["views"]) == n_hops for b in doc["boundaries"])
    # nothing but the per-stream counter warning of the python test store, once, not once per hop
    assert [f["rule"] for f in doc["findings"]] == ["id_reused_across_streams"]


def test_keep_alive_and_pooled_connections_are_all_framed_and_paired():
    """The typescript client pools connections (its resumes reuse the idle one that carried initialize),
    nginx pools upstream: every request on every hop gets its response, none is left over."""
    doc = _real("real-nginx-ts-resume.pcap")
    assert not [a for a in doc["anomalies"] if a["code"].startswith(("http_", "tcp_"))], doc["anomalies"]
    per_hop: dict[str, list] = {}
    for x in doc["exchanges"]:
        per_hop.setdefault(x["conn"].split("->")[1].split("#")[0], []).append((x["method"], x["status"]))
    assert len(per_hop) == 2
    client_hop, upstream_hop = per_hop.values()
    assert client_hop == upstream_hop and len(client_hop) == 7
    assert all(status is not None for _, status in client_hop)
    # several exchanges on one client connection (keep-alive)
    conns = [x["conn"].split("#")[0] for x in doc["exchanges"]]
    assert max(conns.count(c) for c in set(conns)) >= 3


def test_mitm_triple_agrees_across_formats():
    """One run through mitmdump A (JSONL) -> mitmdump B (HAR) -> nginx (gzip) -> server, the pcap holding all three hops."""
    docs = {fmt: _real(f"real-nginx-python-resume-mitm.{fmt}") for fmt in ("jsonl", "har", "pcap")}

    def key(d):
        return [(b["last_event_id"], b["verdict"], b["first_event_id_after"], b["lost_event_ids"], b["duplicated_event_ids"], b["handled_correctly"])
                for b in d["boundaries"]]
    assert key(docs["jsonl"]) == key(docs["har"]) == key(docs["pcap"]) == [
        ("3", "continuous", "4", [], [], True), ("6", "continuous", "7", [], [], True)]
    assert {f["rule"] for d in docs.values() for f in d["findings"]} == {"id_reused_across_streams"}
    # the stream the client cut inside the gzip stream decodes as far as it goes, in every format
    for d in docs.values():
        assert "body_encoding_truncated" in {a["code"] for a in d["anomalies"]}
