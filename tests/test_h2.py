"""HTTP/2 inside decrypted TLS (analyzer/decode/h2.py): streams become the same exchanges and events as HTTP/1.1.

Frames are built with hyperframe and header blocks with hpack's Encoder (the writer side of the libraries the
decoder reads with), sealed into a synthetic TLS 1.3 connection (tests/tlsgen.py) whose ALPN is h2.
"""
from __future__ import annotations

import json

import pytest
from hpack import Encoder
from hyperframe.frame import ContinuationFrame, DataFrame, GoAwayFrame, HeadersFrame, RstStreamFrame, SettingsFrame

import pcapgen as g
import tlsgen
from analyzer.decode import h2, tls
from analyzer.ingest import pcap as ingest_pcap
from conftest import SID


def note(i: int) -> str:
    return json.dumps({"jsonrpc": "2.0", "method": "notifications/message", "params": {"n": i}})


class H2:
    """Both sides' encoders; ``frames`` appends serialized frames to the TLS session as application data."""

    def __init__(self, sess: tlsgen.Session) -> None:
        self.sess = sess
        self.enc = {True: Encoder(), False: Encoder()}
        sess.send(True, h2.PREFACE + SettingsFrame(0, settings={SettingsFrame.HEADER_TABLE_SIZE: 8192}).serialize())
        sess.send(False, SettingsFrame(0).serialize())

    def headers(self, from_client: bool, stream: int, fields: list[tuple[str, str]], end: bool = False, split: int = 0) -> None:
        block = self.enc[from_client].encode(fields)
        if split:  # HEADERS + CONTINUATION
            first = HeadersFrame(stream, block[:split], flags=["END_STREAM"] if end else [])
            self.sess.send(from_client, first.serialize() + ContinuationFrame(stream, block[split:], flags=["END_HEADERS"]).serialize())
            return
        flags = ["END_HEADERS"] + (["END_STREAM"] if end else [])
        self.sess.send(from_client, HeadersFrame(stream, block, flags=flags).serialize())

    def data(self, from_client: bool, stream: int, data: bytes, end: bool = False, pad: int = 0) -> None:
        f = DataFrame(stream, data, flags=(["END_STREAM"] if end else []) + (["PADDED"] if pad else []))
        if pad:
            f.pad_length = pad
        self.sess.send(from_client, f.serialize())

    def rst(self, from_client: bool, stream: int, code: int = 8) -> None:
        self.sess.send(from_client, RstStreamFrame(stream, error_code=code).serialize())


def get(stream: int, last: str | None = None) -> list[tuple[str, str]]:
    fields = [(":method", "GET"), (":scheme", "https"), (":authority", "mcp.example"), (":path", "/mcp"),
              ("accept", "text/event-stream"), ("mcp-session-id", SID)]
    return fields + ([("last-event-id", last)] if last else [])


SSE_200 = [(":status", "200"), ("content-type", "text/event-stream"), ("mcp-session-id", SID)]


def ingest(tmp_path, sess: tlsgen.Session, cut_last: int = 0):
    conv = g.Conversation(sport=443)
    segs = conv.handshake()
    for n, (from_client, rec) in enumerate(sess.records):
        if cut_last and n == len(sess.records) - 1:
            rec = rec[:-cut_last]
        segs += conv.c(rec) if from_client else conv.s(rec)
    if not cut_last:
        segs += [conv.fin(False), conv.fin(True)]
    p = tmp_path / "h2.pcap"
    p.write_bytes(g.pcap(g.records(segs)))
    keys = tls.KeyLog()
    keys.add_text(sess.keylog.encode())
    with tls.using_keys(keys), open(p, "rb") as fh:
        return ingest_pcap.read(str(p), fh)


def test_streams_are_exchanges_reset_and_end_as_http1(tmp_path):
    sess = tlsgen.Session(alpn="h2")
    c = H2(sess)
    c.headers(True, 1, get(1), end=True)
    c.headers(False, 1, SSE_200)
    c.data(False, 1, f"id: 1\ndata: {note(1)}\n\n".encode())
    c.headers(True, 3, get(3, last="1"), end=True, split=10)  # a second stream while the first is open; CONTINUATION
    c.data(False, 1, f"id: 2\ndata: {note(2)}\n\n".encode(), pad=7)
    c.rst(True, 1)  # the client cancels stream 1
    c.headers(False, 3, SSE_200)
    c.data(False, 3, f"id: 3\ndata: {note(3)}\n\n".encode(), end=True)
    c.headers(True, 5, get(5), end=True)  # stream 5: open when the connection ends
    c.headers(False, 5, SSE_200)
    c.sess.send(False, GoAwayFrame(0, last_stream_id=5).serialize())
    got = ingest(tmp_path, sess)
    rows = got.exchanges.to_pylist()
    assert [(x["conn"].rsplit("#", 1)[1], x["method"], x["url"], x["status"], x["end_reason"], x["end_by"]) for x in rows] == [
        ("1", "GET", "https://mcp.example/mcp", 200, "reset", "client"),
        ("2", "GET", "https://mcp.example/mcp", 200, "complete", None),
        ("3", "GET", "https://mcp.example/mcp", 200, "eof", "server"),
    ]
    assert [x["last_event_id"] for x in rows] == [None, "1", None]
    assert [(e["id"], e["fate"]) for e in got.events.to_pylist()] == [("1", "dispatched"), ("2", "dispatched"), ("3", "dispatched")]
    assert got.anomalies.num_rows == 0
    assert "TLS 1.3 TLS_AES_128_GCM_SHA256 h2" in " ".join(got.notes)


def test_connection_cut_inside_a_frame_is_an_anomaly_and_what_came_before_is_kept(tmp_path):
    sess = tlsgen.Session(alpn="h2")
    c = H2(sess)
    c.headers(True, 1, get(1), end=True)
    c.headers(False, 1, SSE_200)
    c.data(False, 1, f"id: 1\ndata: {note(1)}\n\n".encode())
    c.data(False, 1, f"id: 2\ndata: {note(2)}\n\n".encode())
    got = ingest(tmp_path, sess, cut_last=4)
    assert [e["id"] for e in got.events.to_pylist() if e["fate"] == "dispatched"] == ["1"]
    assert [a["code"] for a in got.anomalies.to_pylist()] == ["tls_record_cut"]
    assert got.exchanges.to_pylist()[0]["end_reason"] == "capture_end"


@pytest.mark.parametrize("bad", [b"\x00\x00\x05\x01\x05\x00\x00\x00\x01\xff\xff\xff\xff\xff", b"GET / HTTP/1.1\r\n\r\n"])
def test_garbage_is_an_h2_anomaly_never_an_exception(tmp_path, bad):
    sess = tlsgen.Session(alpn="h2")
    c = H2(sess)
    c.headers(True, 1, get(1), end=True)
    sess.send(False, bad)  # a HEADERS block HPACK cannot decode, or HTTP/1.1 where frames belong
    got = ingest(tmp_path, sess)
    assert [a["code"] for a in got.anomalies.to_pylist()] == ["h2_protocol_error"]
    assert got.anomalies.to_pylist()[0]["location"].startswith("packet ")
    assert [x["method"] for x in got.exchanges.to_pylist()] == ["GET"]  # the request before it is kept


def test_hpack_table_across_streams_and_chunking(tmp_path):
    """Later header blocks index the dynamic table the earlier ones filled: decoded per direction, in order."""
    conn = h2.Connection(0)
    enc_c, enc_s = Encoder(), Encoder()
    wire_c = h2.PREFACE + b"".join(HeadersFrame(s, enc_c.encode(get(s)), flags=["END_HEADERS", "END_STREAM"]).serialize() for s in (1, 3, 5))
    wire_s = b"".join(HeadersFrame(s, enc_s.encode(SSE_200), flags=["END_HEADERS"]).serialize() for s in (1, 3, 5))
    heads = []
    for i in range(len(wire_c)):  # byte by byte
        heads += [r for r in conn.feed(0, wire_c[i : i + 1], None, i) if isinstance(r, h2.StreamHead)]
    heads += [r for r in conn.feed(1, wire_s, None, 0) if isinstance(r, h2.StreamHead)]
    assert [(h.stream, h.head.method, h.head.target, h.head.headers["host"]) for h in heads[:3]] == [(s, "GET", "/mcp", "mcp.example") for s in (1, 3, 5)]
    assert [(h.stream, h.head.status, h.head.method, h.head.headers["mcp-session-id"]) for h in heads[3:]] == [(s, 200, "GET", SID) for s in (1, 3, 5)]
