"""What a TLS capture could not decrypt (issue [2/5] item 4): a reconnect whose resumed stream may lie in a
connection no key decrypted is ``unverifiable`` (not ``continuous`` from its own ids), and a request or a
response whose other half may lie there is a warning that says so, not an error."""
from __future__ import annotations

import json
from pathlib import Path

import pcapgen as g
import tlsgen
from analyzer import pipeline
from analyzer.decode import tls
from analyzer.ingest.reading import Reading
from conftest import SID


def progress(v):
    return json.dumps({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 4, "progress": v}})


def result(rid):
    return json.dumps({"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": "done"}]}})


def post(sess, rid, events):
    body = json.dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": {"name": "slow", "_meta": {"progressToken": 4}}})
    sess.send(True, (f"POST /mcp HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
                     f"Mcp-Session-Id: {SID}\r\nContent-Length: {len(body)}\r\n\r\n{body}").encode())
    _sse(sess, events)


def get(sess, last, events):
    sess.send(True, f"GET /mcp HTTP/1.1\r\nHost: h\r\nAccept: text/event-stream\r\nMcp-Session-Id: {SID}\r\nLast-Event-ID: {last}\r\n\r\n".encode())
    _sse(sess, events)


def _sse(sess, events):
    sess.send(False, f"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nMcp-Session-Id: {SID}\r\n\r\n".encode())
    for eid, data in events:
        sess.send(False, f"id: {eid}\ndata: {data}\n\n".encode())


def conn(sess, cport):
    """The connection's packets: handshake, the TLS records, then the server resets it (a broken stream)."""
    c = g.Conversation(cport=cport, sport=443)
    segs = c.handshake()
    for from_client, rec in sess.records:
        segs += c.c(rec) if from_client else c.s(rec)
    return segs + [c.rst(False)]


def analyze(tmp_path: Path, conns, keyed) -> dict:
    p = tmp_path / "t.pcap"
    segs = [s for c in conns for s in c]
    p.write_bytes(g.pcap(g.records(segs)))
    keys = tls.KeyLog()
    for s in keyed:
        keys.add_text(s.keylog.encode())
    return pipeline.run([str(p)], Reading(keys=keys)).document


def chain():
    """tools/call id 4 on A (events 1, 2), resumed on B (3, 4), resumed again on C (5, then the result)."""
    a, b, c = tlsgen.Session(seed=11), tlsgen.Session(seed=12), tlsgen.Session(seed=13)
    post(a, 4, [("1", ""), ("2", progress(1))])
    get(b, "2", [("3", progress(2)), ("4", progress(3))])
    get(c, "4", [("5", progress(4)), ("6", result(4))])
    return a, b, c


def test_every_key_gives_two_continuous_reconnects(tmp_path):
    a, b, c = chain()
    doc = analyze(tmp_path, [conn(a, 51000), conn(b, 51001), conn(c, 51002)], keyed=[a, b, c])
    assert [(x["verdict"], x["evidence"]) for x in doc["boundaries"]] == [("continuous", "ids"), ("continuous", "ids")]


def test_a_reconnect_whose_stream_lies_in_an_undecrypted_connection_is_unverifiable(tmp_path):
    a, b, c = chain()
    doc = analyze(tmp_path, [conn(a, 51000), conn(b, 51001), conn(c, 51002)], keyed=[a, c])
    (bd,) = doc["boundaries"]  # B is not seen: C's Last-Event-ID 4 names an event of it
    assert (bd["last_event_id"], bd["verdict"], bd["rule_id"], bd["evidence"]) == ("4", "unverifiable", "resumed_undecrypted", "none")
    assert "1 TLS connection(s)" in bd["reason"] and "could not be decrypted" in bd["reason"]
    assert [a["code"] for a in doc["anomalies"]] == ["tls_no_key"]


def test_the_missing_half_of_a_pair_in_an_undecrypted_connection_is_a_warning(tmp_path):
    # A's request is unseen: C's result answers a request the decrypted traffic does not hold (a tools/list
    # before it shows the session's requests are recorded)
    a, b, c = chain()
    d = tlsgen.Session(seed=14)
    post(d, 1, [("0", result(1))])
    doc = analyze(tmp_path, [conn(d, 50999), conn(a, 51000), conn(b, 51001), conn(c, 51002)], keyed=[d, b, c])
    (f,) = [f for f in doc["findings"] if f["rule"] == "response_without_request"]
    assert f["severity"] == "warning" and "its request may lie in one of the 1 TLS connection(s)" in f["message"]
    # C is unseen: A's request was answered there, for all the decrypted traffic shows
    a, b, c = chain()
    doc = analyze(tmp_path, [conn(a, 51000), conn(b, 51001), conn(c, 51002)], keyed=[a, b])
    (f,) = [f for f in doc["findings"] if f["rule"] == "request_unanswered"]
    assert f["severity"] == "warning" and "its response may lie in one of the 1 TLS connection(s)" in f["message"]
    assert f["message"].startswith("tools/call slow (id 4) never got a response")


def test_without_undecrypted_connections_they_stay_errors(tmp_path):
    a, b, _c = chain()
    doc = analyze(tmp_path, [conn(a, 51000), conn(b, 51001)], keyed=[a, b])  # the capture ends before C
    (f,) = [f for f in doc["findings"] if f["rule"] == "request_unanswered"]
    assert f["severity"] == "error" and "TLS" not in f["message"]
