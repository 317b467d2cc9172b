"""HTTP/2 inside decrypted TLS (analyzer/decode/h2.py): streams become the same exchanges and events as HTTP/1.1.

Frames are built with hyperframe and header blocks with hpack's Encoder (the writer side of the libraries the
decoder reads with), sealed into a synthetic TLS 1.3 connection (tests/tlsgen.py) whose ALPN is h2.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hpack import Encoder
from hyperframe.frame import ContinuationFrame, DataFrame, GoAwayFrame, HeadersFrame, RstStreamFrame, SettingsFrame

import joins
import pcapgen as g
import tlsgen
from analyzer.decode import h2, tls
from analyzer.ingest.reading import Reading
from analyzer.ingest import pcap as ingest_pcap
from conftest import SID


def note(i: int) -> str:
    return json.dumps({"jsonrpc": "2.0", "method": "notifications/message", "params": {"n": i}})


class H2:
    """Both sides' encoders; ``frames`` appends serialized frames to the TLS session as application data."""

    def __init__(self, sess: tlsgen.Session, table: int | None = None) -> None:
        """``table``: the server allows the client's encoder a dynamic table this large (SETTINGS_HEADER_TABLE_SIZE)."""
        self.sess = sess
        self.enc = {True: Encoder(), False: Encoder()}
        sess.send(True, h2.PREFACE + SettingsFrame(0, settings={SettingsFrame.HEADER_TABLE_SIZE: 8192}).serialize())
        sess.send(False, SettingsFrame(0, settings={SettingsFrame.HEADER_TABLE_SIZE: table} if table else {}).serialize())
        if table:
            self.enc[True].header_table_size = table

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


def write(tmp_path, sess: tlsgen.Session, cut_last: int = 0, name: str = "h2"):
    """The session as a pcap (``name``.pcap) and its key log (``name``.keylog)."""
    conv = g.Conversation(sport=443)
    segs = conv.handshake()
    for n, (from_client, rec) in enumerate(sess.records):
        if cut_last and n == len(sess.records) - 1:
            rec = rec[:-cut_last]
        segs += conv.c(rec) if from_client else conv.s(rec)
    if not cut_last:
        segs += [conv.fin(False), conv.fin(True)]
    p = tmp_path / f"{name}.pcap"
    p.write_bytes(g.pcap(g.records(segs)))
    (tmp_path / f"{name}.keylog").write_text(sess.keylog)
    return p


def ingest(tmp_path, sess: tlsgen.Session, cut_last: int = 0):
    p = write(tmp_path, sess, cut_last)
    keys = tls.KeyLog()
    keys.add_text(sess.keylog.encode())
    with open(p, "rb") as fh:
        return ingest_pcap.read(str(p), fh, Reading(keys=keys))


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


# ------------------------------------------------------------------------------------------ header compression bomb
# A header inserted once in the HPACK dynamic table is one byte per reference after that: a header block of 60
# references to a 4 KB header is 240 KB of headers.  What is kept of a block is bounded (h2.MAX_HEADER_LIST, as
# SETTINGS_MAX_HEADER_LIST_SIZE counts it) and so is a connection's total (h2.MAX_CONNECTION_HEADERS, h2.HEADER_RATIO);
# past a bound only the headers the analysis reads are kept, and the HPACK table still follows every field.

BIG = "A" * 4000  # name + value + 32 = 4037: fits the default 4096-byte table on its own


def mcp_calls(tmp_path, streams: int, refs: int, name: str):
    """``streams`` MCP calls on one h2 connection (POST + JSON-RPC body, 200 + JSON result); each request's header
    block holds ``refs`` x-big headers of 4 KB (references to one dynamic-table entry), or one small one when 0."""
    sess = tlsgen.Session(alpn="h2")
    c = H2(sess, table=1 << 16)  # room for the big header and the others
    extra = [("x-big", BIG)] * refs if refs else [("x-big", "a")]
    for i in range(streams):
        s = 2 * i + 1
        fields = [(":method", "POST"), (":scheme", "https"), (":authority", "mcp.example"), (":path", "/mcp"),
                  ("content-type", "application/json"), ("mcp-session-id", SID)] + extra
        body = json.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "t"}}).encode()
        c.sess.send(True, HeadersFrame(s, c.enc[True].encode(fields), flags=["END_HEADERS"]).serialize()
                    + DataFrame(s, body, flags=["END_STREAM"]).serialize())
        resp = c.enc[False].encode([(":status", "200"), ("content-type", "application/json"), ("mcp-session-id", SID)])
        c.sess.send(False, HeadersFrame(s, resp, flags=["END_HEADERS"]).serialize()
                    + DataFrame(s, json.dumps({"jsonrpc": "2.0", "id": i, "result": {}}).encode(), flags=["END_STREAM"]).serialize())
    return write(tmp_path, sess, name=name)


_PEAK = """
import resource, sys
from analyzer.decode import tls
from analyzer.ingest import pcap
from analyzer.ingest.reading import Reading
keys = tls.KeyLog()
keys.add_text(open(sys.argv[2], "rb").read())
with open(sys.argv[1], "rb") as fh:
    got = pcap.read(sys.argv[1], fh, Reading(keys=keys))
print(got.exchanges.num_rows, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def peak_rss_kb(path) -> tuple[int, int]:
    """(exchanges, peak RSS in KiB) of ingesting ``path`` in a fresh interpreter: one process per capture, so
    neither run's peak hides in the other's."""
    res = subprocess.run([sys.executable, "-c", _PEAK, str(path), str(path.with_suffix(".keylog"))],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    n, rss = res.stdout.split()
    return int(n), int(rss)


def test_header_compression_bomb_peaks_like_the_same_calls_with_small_headers(tmp_path):
    """600 calls whose request headers reference one 4 KB header 60 times each (a 250 KB pcap): the code before the
    bound peaked at 790 MiB against 137 MiB for the same calls with one small header (6.8 GB for 4,000 calls)."""
    n = 600
    bomb = mcp_calls(tmp_path, n, 60, "bomb")
    control = mcp_calls(tmp_path, n, 0, "control")
    (got_b, rss_b), (got_c, rss_c) = peak_rss_kb(bomb), peak_rss_kb(control)
    assert got_b == got_c == n
    assert rss_b <= 3 * rss_c, f"bomb peaked at {rss_b >> 10} MiB, the same calls with small headers at {rss_c >> 10} MiB"


def test_a_header_block_over_the_limit_is_an_anomaly_at_its_packet_and_the_exchanges_are_read(tmp_path):
    sess = tlsgen.Session(alpn="h2")
    c = H2(sess, table=1 << 16)
    # stream 1: 60 references (242 KB); stream 3: 100 (404 KB, past the bound hpack itself would raise at);
    # stream 5: one reference, within every bound; the table must still be in step for it
    for s, refs in ((1, 60), (3, 100), (5, 1)):
        c.headers(True, s, get(s, last=str(s)) + [("x-big", BIG)] * refs, end=True)
        c.headers(False, s, SSE_200)
        c.data(False, s, f"id: {s}\ndata: {note(s)}\n\n".encode(), end=True)
    got = ingest(tmp_path, sess)
    rows = got.exchanges.to_pylist()
    assert [(x["method"], x["url"], x["status"], x["req_session_id"], x["resp_session_id"], x["last_event_id"], x["end_reason"])
            for x in rows] == [("GET", "https://mcp.example/mcp", 200, SID, SID, str(s), "complete") for s in (1, 3, 5)]
    assert [e["id"] for e in got.events.to_pylist() if e["fate"] == "dispatched"] == ["1", "3", "5"]
    anomalies = got.anomalies.to_pylist()
    assert [(a["code"], a["severity"], a["location"]) for a in anomalies] == [
        ("h2_header_list_too_large", "warning", rows[0]["location"]), ("h2_header_list_too_large", "warning", rows[1]["location"])]
    for a, s, refs in zip(anomalies, (1, 3), (60, 100)):
        size = 32 * 6 + sum(map(len, (":method", "GET", ":scheme", "https", ":authority", "mcp.example", ":path", "/mcp",
                                      "accept", "text/event-stream", "mcp-session-id", SID))) + 32 + len("last-event-id") + 1 + refs * 4037
        assert f"stream {s}: a header list of {size:,} bytes, over the limit of 65,536 per header block" in a["message"]
    # of the blocks over the limit, the headers the analysis reads; of the one within it, all
    headers = [json.loads(x["req_headers"]) for x in rows]
    assert [sorted(h) for h in headers] == [["host", "last-event-id", "mcp-session-id"]] * 2 + [
        ["accept", "host", "last-event-id", "mcp-session-id", "x-big"]]
    assert headers[2]["x-big"] == BIG


def test_a_connection_past_its_header_budget_keeps_what_the_analysis_reads():
    """Blocks just under the limit per block (15 references: 61 KB) on a connection of nothing but headers: the
    first few are kept whole, until the connection's decoded headers would pass 256 KiB + 100 times its bytes; from
    there on only the headers the analysis reads, in one anomaly for the connection."""
    conn = h2.Connection(0)
    enc = Encoder()
    enc.header_table_size = 1 << 16
    wire = h2.PREFACE + SettingsFrame(0).serialize()
    conn.feed(1, SettingsFrame(0, settings={SettingsFrame.HEADER_TABLE_SIZE: 1 << 16}).serialize(), None, 0)
    for s in range(1, 40, 2):
        wire += HeadersFrame(s, enc.encode(get(s) + [("x-big", BIG)] * 15), flags=["END_HEADERS", "END_STREAM"]).serialize()
    out = conn.feed(0, wire, None, 7)
    heads = [r.head for r in out if isinstance(r, h2.StreamHead)]
    problems = [r for r in out if isinstance(r, h2.Problem)]
    assert len(heads) == 20 and all((h.method, h.target, h.headers["host"], h.headers["mcp-session-id"]) == ("GET", "/mcp", "mcp.example", SID)
                                    for h in heads)
    whole = [h for h in heads if "x-big" in h.headers]
    assert 1 <= len(whole) < 20 and heads[: len(whole)] == whole  # kept whole up to the budget, then never again
    assert all(h.headers["x-big"] == ", ".join([BIG] * 15) and h.headers["accept"] == "text/event-stream" for h in whole)
    assert all(sorted(h.headers) == ["host", "mcp-session-id"] for h in heads[len(whole):])
    assert [(p.code, p.pkt) for p in problems] == [("h2_header_list_too_large", 7)]
    assert f"stream {2 * len(whole) + 1}: a header list of" in problems[0].detail and "from here on only the headers the analysis reads" in problems[0].detail
    assert conn.headers_capped and conn.header_bytes <= h2.CONNECTION_HEADERS_FLOOR + h2.HEADER_RATIO * conn.wire


def test_a_big_header_the_analysis_reads_is_kept_once_and_shared():
    """A 4 KB Mcp-Session-Id referenced 60 times per block: each head keeps its first value, and every head holds
    the same string (decoded once), not a copy per reference or per stream."""
    conn = h2.Connection(0)
    enc = Encoder()
    enc.header_table_size = 1 << 16
    conn.feed(1, SettingsFrame(0, settings={SettingsFrame.HEADER_TABLE_SIZE: 1 << 16}).serialize(), None, 0)
    sid = "s" * 4000
    wire = h2.PREFACE + b"".join(
        HeadersFrame(s, enc.encode([(":method", "GET"), (":scheme", "https"), (":authority", "mcp.example"), (":path", "/mcp")]
                                   + [("mcp-session-id", sid)] * 60), flags=["END_HEADERS", "END_STREAM"]).serialize()
        for s in (1, 3, 5))
    out = conn.feed(0, wire, None, 1)
    heads = [r.head for r in out if isinstance(r, h2.StreamHead)]
    assert [h.headers for h in heads] == [{"mcp-session-id": sid, "host": "mcp.example"}] * 3
    assert heads[0].headers["mcp-session-id"] is heads[1].headers["mcp-session-id"] is heads[2].headers["mcp-session-id"]
    assert [p.code for p in out if isinstance(p, h2.Problem)] == ["h2_header_list_too_large"] * 3


def _server_flight(sess: tlsgen.Session) -> int:
    """Index in ``sess.records`` of the server's first encrypted record (TLS 1.3: EncryptedExtensions with the ALPN)."""
    return next(n for n, (from_client, rec) in enumerate(sess.records) if not from_client and rec[0] == 23)


@pytest.mark.parametrize("how", ["damaged", "late"])
def test_h2_before_the_alpn_is_known_is_framed_by_the_preface(tmp_path, how):
    """Round three, item 7: the client's HTTP/2 records decrypt before the ALPN does -- the record carrying it has a
    damaged byte (the server's direction stops there), or the capture holds the server's flight after the client's
    records.  Before: AttributeError in pcap_http._plain (exit 3).  Now the client's connection preface says HTTP/2."""
    sess = tlsgen.Session(alpn="h2")
    i = _server_flight(sess)
    c = H2(sess)
    c.headers(True, 1, get(1), end=True)
    c.headers(False, 1, SSE_200)
    c.data(False, 1, f"id: 1\ndata: {note(1)}\n\n".encode(), end=True)
    if how == "damaged":
        rec = bytearray(sess.records[i][1])
        rec[20] ^= 0x40
        sess.records[i] = (False, bytes(rec))
    else:
        sess.records.insert(i + 2, sess.records.pop(i))  # after the client's Finished and its preface (with SETTINGS)
    got = ingest(tmp_path, sess)
    rows = got.exchanges.to_pylist()
    assert [(x["method"], x["url"], x["req_session_id"]) for x in rows] == [("GET", "https://mcp.example/mcp", SID)]
    if how == "damaged":
        assert rows[0]["status"] is None and got.events.num_rows == 0
        assert [a["code"] for a in got.anomalies.to_pylist()] == ["tls_decrypt_failed"]
    else:
        assert (rows[0]["status"], rows[0]["end_reason"]) == (200, "complete")
        assert [e["id"] for e in got.events.to_pylist()] == ["1"] and got.anomalies.num_rows == 0


# ---------------------------------------------------------------------------- many streams of one session
# Issue [2/5] item 5: memory linear in a session's streams.  One h2 connection carries a session's GET streams; its
# server numbers each stream's events from 1 (a counter per stream), and the client resumes every time from "1",
# which every stream before delivered; every other stream skips 2 (a gap, where the streams before had 2).  Where
# a step joined each reconnect with every earlier (or later) delivery of an id -- the id its Last-Event-ID names,
# the ids it delivered again, the ids it missed -- the rows grew with the square of the streams: 2,500 streams
# resumed from "2" (1.1 MB, bench/many_streams.py --h2 restart) peaked at 3.1 GB, 5,000 passed 8 GB.


def streams_resumed_from_one_id(tmp_path, n: int, ambiguous: bool = False):
    """``ambiguous``: each stream's id 1 carries its own payload, so the cursor 1 names many events."""
    sess = tlsgen.Session(alpn="h2")
    c = H2(sess)
    for i in range(n):
        s = 2 * i + 1
        c.headers(True, s, get(s, last="1" if i else None), end=True)
        c.headers(False, s, SSE_200)
        c.data(False, s, b"".join(f"id: {k}\ndata: {note(1000 + i if ambiguous and k == 1 else k)}\n\n".encode()
                                  for k in (1, 3 if i % 2 else 2)), end=True)
    return write(tmp_path, sess, name=f"resumed-{n}{'-amb' if ambiguous else ''}")


def largest_join(path, monkeypatch) -> tuple[int, dict]:
    keys = tls.KeyLog()
    keys.add_text(path.with_suffix(".keylog").read_bytes())
    return joins.largest_join(path, monkeypatch, Reading(keys=keys))


def test_a_sessions_streams_resumed_from_one_id_cost_joins_linear_in_the_streams(tmp_path, monkeypatch):
    """300 and 600 streams, each resumed from the id every stream before it delivered: doubling the streams at
    most doubles the largest join (now 600 -> 1,200 rows; the code before: 134,550 -> 539,100, each reconnect
    joined with every delivery of its ids on the stream, and each step alone (streams.py, boundaries.py,
    views.py) made 89,700 -> 359,400 or more)."""
    (small, _), (large, doc) = (largest_join(streams_resumed_from_one_id(tmp_path, n), monkeypatch) for n in (300, 600))
    assert doc["summary"]["boundaries"] == 599
    assert large <= 2.2 * small, f"largest join: {small} rows for 300 streams, {large} for 600"


def calls_numbered_alike(tmp_path, n: int):
    """``n`` tools/call requests of one session, every one id 1 (a client that numbers each call from 1), each on
    its own POST stream that breaks after a priming event, and resumed by a GET that brings its response."""
    sess = tlsgen.Session(alpn="h2")
    c = H2(sess)
    post = [(":method", "POST"), (":scheme", "https"), (":authority", "mcp.example"), (":path", "/mcp"),
            ("content-type", "application/json"), ("accept", "application/json, text/event-stream"), ("mcp-session-id", SID)]
    call = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "t"}}).encode()
    result = json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"content": []}})
    for i in range(n):
        s = 4 * i + 1
        c.headers(True, s, post)
        c.data(True, s, call, end=True)
        c.headers(False, s, SSE_200)
        c.data(False, s, f"id: p{i}\ndata: \n\n".encode())
        c.rst(True, s)
        c.headers(True, s + 2, get(s + 2, last=f"p{i}"), end=True)
        c.headers(False, s + 2, SSE_200)
        c.data(False, s + 2, f"id: r{i}\ndata: {result}\n\n".encode(), end=True)
    return write(tmp_path, sess, name=f"calls-{n}")


def test_calls_numbered_alike_cost_joins_linear_in_the_streams(tmp_path, monkeypatch):
    """300 and 600 such calls: the largest join at most doubles (now 600 -> 1,200 rows; the code before:
    90,000 -> 360,000, every response paired with every request of its id, every request with every reconnect of
    its session).  The verdicts are as before: each reconnect's response has requests of its id on other streams,
    so each is cross_stream_replay."""
    (small, _), (large, doc) = (largest_join(calls_numbered_alike(tmp_path, n), monkeypatch) for n in (300, 600))
    assert doc["summary"]["boundaries"] == 600 and doc["summary"]["verdicts"]["cross_stream_replay"] == 600
    assert large <= 2.2 * small, f"largest join: {small} rows for 300 streams, {large} for 600"


def test_a_cursor_naming_many_events_costs_joins_linear_in_the_streams(tmp_path, monkeypatch):
    """The same, with each stream's id 1 carrying its own payload: the cursor 1 names up to 600 events, and the
    look-up of what it names (boundaries.ambiguous_cursor) stays linear (its first version joined each reconnect
    with every delivery of the cursor: 89,700 -> 359,400 rows)."""
    (small, _), (large, doc) = (largest_join(streams_resumed_from_one_id(tmp_path, n, ambiguous=True), monkeypatch) for n in (300, 600))
    assert doc["summary"]["boundaries"] == 599
    assert large <= 2.2 * small, f"largest join: {small} rows for 300 streams, {large} for 600"
