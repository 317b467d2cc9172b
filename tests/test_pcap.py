"""pcap / pcapng ingestion: every capture is built in the test with tests/pcapgen.py (no hand-edited bytes)."""
from __future__ import annotations

import json
import random
import struct
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pcapgen as g
from analyzer.decode import capture, http1, tcp
from analyzer.ingest import pcap as ingest_pcap, inputs
from analyzer import pipeline
from analyzer.anomalies import CATALOG
from analyzer.errors import InputError
from analyzer.ingest.reading import Reading
from conftest import SID

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def at(ns: int) -> datetime:
    return EPOCH + timedelta(microseconds=ns // 1000)


def note(i: int) -> str:
    return json.dumps({"jsonrpc": "2.0", "method": "notifications/message", "params": {"n": i}})


def sse_event(i: int, data: str | None = None) -> bytes:
    return f"id: {i}\ndata: {data if data is not None else note(i)}\n\n".encode()


def chunk(b: bytes) -> bytes:
    return b"%x\r\n" % len(b) + b + b"\r\n"


def get_request(sid: str = SID, last: str | None = None, extra: str = "") -> bytes:
    h = f"GET /mcp HTTP/1.1\r\nHost: 10.0.0.2:8000\r\nAccept: text/event-stream\r\nMcp-Session-Id: {sid}\r\n"
    if last is not None:
        h += f"Last-Event-ID: {last}\r\n"
    return (h + extra + "\r\n").encode()


SSE_HEAD_CHUNKED = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n"
SSE_HEAD_CLOSE = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"


def post(body: str, sid: str | None = SID) -> bytes:
    raw = body.encode()
    h = "POST /mcp HTTP/1.1\r\nHost: 10.0.0.2:8000\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
    if sid:
        h += f"Mcp-Session-Id: {sid}\r\n"
    return (h + f"Content-Length: {len(raw)}\r\n\r\n").encode() + raw


def json_response(body: str, sid: str | None = None) -> bytes:
    raw = body.encode()
    h = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
    if sid:
        h += f"Mcp-Session-Id: {sid}\r\n"
    return (h + f"Content-Length: {len(raw)}\r\n\r\n").encode() + raw


def sse_stream(conv: g.Conversation, ids, chunked: bool = True, last: str | None = None, end: str | None = "rst_server") -> list[g.Seg]:
    """Handshake, a GET, an SSE response with one event per segment, then how it ends."""
    segs = conv.handshake() + conv.c(get_request(last=last)) + conv.s(SSE_HEAD_CHUNKED if chunked else SSE_HEAD_CLOSE)
    for i in ids:
        segs += conv.s(chunk(sse_event(i)) if chunked else sse_event(i))
    if end == "rst_server":
        segs.append(conv.rst(False))
    elif end == "rst_client":
        segs.append(conv.rst(True))
    elif end == "fin_client":
        segs += [conv.fin(True), conv.fin(False)]
    elif end == "fin_server":
        segs += [conv.fin(False), conv.fin(True)]
    return segs


def ingest(tmp_path, data: bytes, name: str = "c.pcap", **kw):
    p = tmp_path / name
    p.write_bytes(data)
    if kw:
        with open(p, "rb") as fh:
            return ingest_pcap.read(str(p), fh, Reading(**kw))
    return inputs.read_one(str(p))


def events(got) -> list[tuple]:
    return [(e["id"], e["fate"], e["location"]) for e in got.events.to_pylist()]


def ids(got) -> list:
    return [e["id"] for e in got.events.to_pylist() if e["fate"] == "dispatched"]


def codes(got) -> list[tuple[str, str]]:
    return [(a["code"], a["location"]) for a in got.anomalies.to_pylist()]


def exchanges(got) -> list[dict]:
    return got.exchanges.to_pylist()


# ------------------------------------------------------------------------------------------ containers


@pytest.mark.parametrize("byteorder", ["<", ">"])
@pytest.mark.parametrize("nanos", [False, True])
def test_classic_pcap_byte_orders_and_resolutions_give_exact_event_times(tmp_path, byteorder, nanos):
    segs = sse_stream(g.Conversation(), range(1, 4))
    step = 1_234_567_891  # not a whole number of microseconds: ns files keep more, both round to the same µs
    recs = g.records(segs, step_ns=step)
    got = ingest(tmp_path, g.pcap(recs, byteorder=byteorder, nanos=nanos))
    assert got.format == "pcap" and got.records == len(segs) and got.rejected == 0
    # packets: 1-3 handshake, 4 GET, 5 response head, 6-8 events, 9 RST
    assert events(got) == [("1", "dispatched", "packet 6"), ("2", "dispatched", "packet 7"), ("3", "dispatched", "packet 8")]
    assert [e["ts"] for e in got.events.to_pylist()] == [at(g.T0_NS + k * step) for k in (5, 6, 7)]
    x = exchanges(got)[0]
    assert (x["location"], x["started"], x["ended"]) == ("packet 4", at(g.T0_NS + 3 * step), at(g.T0_NS + 8 * step))
    assert (x["conn"], x["end_reason"], x["end_by"]) == ("10.0.0.1:51234->10.0.0.2:8000#1", "reset", "server")


@pytest.mark.parametrize("byteorder", ["<", ">"])
def test_pcapng_two_interfaces_of_different_link_types(tmp_path, byteorder):
    a = sse_stream(g.Conversation(), range(1, 3))
    b = sse_stream(g.Conversation(client="fd00::1", server="fd00::2", cport=40000, sport=9000), range(11, 13))
    recs = []
    for i in range(max(len(a), len(b))):  # interleaved: a on Ethernet (µs), b on SLL2 (ns)
        if i < len(a):
            recs.append(g.Rec(g.frame(a[i], g.LINK_ETHERNET), g.T0_NS + i * 10_000_000 + 1_001, 0))
        if i < len(b):
            recs.append(g.Rec(g.frame(b[i], g.LINK_SLL2), g.T0_NS + i * 10_000_000 + 5_000_123, 1))
    extra = {3: g.custom_block(0x0BAD, b"vendor data", byteorder), 5: g.custom_block(4, b"\x00\x00\x00\x00", byteorder)}  # custom, NRB: skipped
    data = g.pcapng(recs, [(g.LINK_ETHERNET, None), (g.LINK_SLL2, 9)], byteorder, extra)
    got = ingest(tmp_path, data, "c.pcapng")
    assert got.rejected == 0 and codes(got) == []
    assert got.records == len(recs)
    xs = exchanges(got)
    assert [x["conn"] for x in xs] == ["10.0.0.1:51234->10.0.0.2:8000#1", "[fd00::1]:40000->[fd00::2]:9000#1"]
    ev = got.events.to_pylist()
    assert [(e["xid"], e["id"]) for e in ev] == [(0, "1"), (0, "2"), (1, "11"), (1, "12")]
    # a's first event is its 6th segment (index 5), the 11th record; the µs interface kept 1 µs of the 1001 ns
    assert (ev[0]["location"], ev[0]["ts"]) == ("packet 11", at(g.T0_NS + 5 * 10_000_000 + 1_000))
    assert (ev[2]["location"], ev[2]["ts"]) == ("packet 12", at(g.T0_NS + 5 * 10_000_000 + 5_000_123))


def test_pcapng_simple_and_obsolete_packet_blocks_and_power_of_two_resolution(tmp_path):
    segs = sse_stream(g.Conversation(), range(1, 3))
    recs = g.records(segs)
    blocks = [g.shb(), g.idb(g.LINK_ETHERNET, 0x80 | 20)]  # 2^-20 s units
    for i, r in enumerate(recs):
        blocks.append(g.opb(r, 0x80 | 20) if i % 2 else g.epb(r, 0x80 | 20))
    blocks.append(g.spb(g.Rec(g.frame(g.Seg("10.9.9.9", "10.9.9.8", 1, 2, 0, 0, g.ACK)), 0)))
    got = ingest(tmp_path, b"".join(blocks), "c.pcapng")
    assert ids(got) == ["1", "2"] and got.records == len(recs) + 1 and got.rejected == 0
    t = got.events.to_pylist()[0]["ts"]
    assert abs(t - at(g.T0_NS + 5_000_000)) <= timedelta(microseconds=1)  # 2^-20 s is ~0.95 µs


# ------------------------------------------------------------------------------------------ link layers and IP

LINKS = [
    pytest.param(g.LINK_ETHERNET, {}, id="ethernet"),
    pytest.param(g.LINK_ETHERNET, {"vlans": (42,)}, id="ethernet-vlan"),
    pytest.param(g.LINK_ETHERNET, {"vlans": (100, 42)}, id="ethernet-qinq"),
    pytest.param(g.LINK_SLL, {}, id="sll"),
    pytest.param(g.LINK_SLL2, {}, id="sll2"),
    pytest.param(g.LINK_RAW, {}, id="raw"),
    pytest.param(g.LINK_NULL, {"byteorder": "<"}, id="null-le"),
    pytest.param(g.LINK_NULL, {"byteorder": ">"}, id="null-be"),
]


@pytest.mark.parametrize("link, kw", LINKS)
@pytest.mark.parametrize("v6", [False, True], ids=["ipv4", "ipv6"])
def test_each_link_type_over_ipv4_and_ipv6(tmp_path, link, kw, v6):
    conv = g.Conversation(client="2001:db8::1", server="2001:db8::2") if v6 else g.Conversation()
    segs = sse_stream(conv, range(1, 4))
    got = ingest(tmp_path, g.pcap(g.records(segs, link, **kw), linktype=link))
    assert ids(got) == ["1", "2", "3"] and codes(got) == [] and got.rejected == 0
    name = "[2001:db8::1]:51234->[2001:db8::2]:8000#1" if v6 else "10.0.0.1:51234->10.0.0.2:8000#1"
    assert exchanges(got)[0]["conn"] == name


def test_ip_and_tcp_options_and_ethernet_trailer_bytes(tmp_path):
    segs = sse_stream(g.Conversation(), range(1, 3))
    recs = []
    for i, s in enumerate(segs):
        ip = g.ipv4(s.src, s.dst, 6, g.tcp(s, options=b"\x02\x04\x05\xb4\x08\x0a" + b"\x00" * 8), options=b"\x01\x01\x01\x00")
        recs.append(g.Rec(g.ethernet(ip) + b"\xde\xad\xbe\xef", g.T0_NS + i))  # 4 bytes after the IP packet (an FCS)
    got = ingest(tmp_path, g.pcap(recs))
    assert ids(got) == ["1", "2"] and codes(got) == []


def test_ipv6_extension_headers_are_skipped(tmp_path):
    conv = g.Conversation(client="2001:db8::1", server="2001:db8::2")
    segs = sse_stream(conv, range(1, 3))
    recs = []
    for i, s in enumerate(segs):
        ip = g.ipv6(s.src, s.dst, 6, g.tcp(s), ext=[(0, b"\x01\x04\x00\x00\x00\x00"), (60, b"\x01\x04\x00\x00\x00\x00")])
        recs.append(g.Rec(g.frame(ip, g.LINK_RAW), g.T0_NS + i))
    got = ingest(tmp_path, g.pcap(recs, linktype=g.LINK_RAW))
    assert ids(got) == ["1", "2"]


def test_non_tcp_is_ignored_and_counted_fragments_are_anomalies(tmp_path):
    segs = sse_stream(g.Conversation(), range(1, 3))
    recs = g.records(segs)
    udp = g.ethernet(g.ipv4("10.0.0.1", "10.0.0.53", 17, b"\x00" * 16))
    arp = b"\xff" * 6 + b"\x02" * 6 + b"\x08\x06" + b"\x00" * 28
    frag = g.ethernet(g.ipv4("10.0.0.1", "10.0.0.2", 6, b"\x00" * 40, more_fragments=True))
    recs[2:2] = [g.Rec(udp, g.T0_NS), g.Rec(arp, g.T0_NS), g.Rec(frag, g.T0_NS)]
    got = ingest(tmp_path, g.pcap(recs))
    assert ids(got) == ["1", "2"]
    assert codes(got) == [("ip_fragment", "packet 5")]
    assert any("1 non-TCP IP packet(s) and 1 non-IP frame(s)" in n for n in got.notes)


def test_per_packet_anomalies_keep_100_rows_then_one_summary(tmp_path):
    frag = g.ethernet(g.ipv4("10.0.0.1", "10.0.0.2", 6, b"\x00" * 40, frag_offset=8))
    got = ingest(tmp_path, g.pcap([g.Rec(frag, g.T0_NS + i) for i in range(150)]))
    rows = codes(got)
    assert len(rows) == 101 and rows[0] == ("ip_fragment", "packet 1") and rows[99] == ("ip_fragment", "packet 100")
    assert rows[100] == ("ip_fragment", "file") and "50 more packet(s)" in got.anomalies.to_pylist()[100]["message"]


def test_unsupported_link_type_is_one_row_and_rejects_its_packets(tmp_path):
    recs = [g.Rec(b"\x00" * 40, g.T0_NS + i) for i in range(3)]
    got = ingest(tmp_path, g.pcap(recs, linktype=147))
    assert codes(got) == [("pcap_unsupported_linktype", "packet 1")] and got.rejected == 3 and got.records == 3


def test_malformed_ip_header_is_rejected(tmp_path):
    segs = sse_stream(g.Conversation(), range(1, 2))
    recs = g.records(segs)
    recs.insert(3, g.Rec(g.ethernet(b"\x42" + b"\x00" * 19), g.T0_NS))  # IHL 2: a header shorter than its fixed part
    got = ingest(tmp_path, g.pcap(recs))
    assert codes(got) == [("packet_malformed", "packet 4")] and got.rejected == 1 and ids(got) == ["1"]


# ------------------------------------------------------------------------------------------ reassembly


def _server_segments(conv: g.Conversation, n: int = 6):
    head = conv.handshake() + conv.c(get_request()) + conv.s(SSE_HEAD_CLOSE)
    body = [conv.s(sse_event(i))[0] for i in range(1, n + 1)]
    return head, body, [conv.fin(False), conv.fin(True)]


def test_out_of_order_segments_are_delivered_in_order(tmp_path):
    head, body, tail = _server_segments(g.Conversation())
    order = [0, 2, 1, 4, 3, 5]
    got = ingest(tmp_path, g.pcap(g.records(head + [body[i] for i in order] + tail)))
    assert ids(got) == ["1", "2", "3", "4", "5", "6"] and codes(got) == []
    # each event is dated by the packet that carried its terminating blank line, even when that packet
    # was captured before the hole in front of it filled (event 3: packet 7, event 2: packet 8)
    assert [e["location"] for e in got.events.to_pylist()] == ["packet 6", "packet 8", "packet 7", "packet 10", "packet 9", "packet 11"]
    assert exchanges(got)[0]["end_reason"] == "eof"


def test_identical_retransmission_is_dropped(tmp_path):
    head, body, tail = _server_segments(g.Conversation())
    got = ingest(tmp_path, g.pcap(g.records(head + body[:3] + [body[1], body[2]] + body[3:] + tail)))
    assert ids(got) == ["1", "2", "3", "4", "5", "6"] and codes(got) == []


def test_overlapping_retransmission_with_other_bytes_keeps_the_first(tmp_path):
    head, body, tail = _server_segments(g.Conversation())
    forged = g.Seg(**{**body[1].__dict__, "payload": body[1].payload.replace(b'"n": 2', b'"n": 9')})
    half = g.Seg(**{**body[2].__dict__, "payload": body[2].payload[:10]})  # a shorter, identical copy: fine
    got = ingest(tmp_path, g.pcap(g.records(head + body[:3] + [forged, half] + body[3:] + tail)))
    assert ids(got) == ["1", "2", "3", "4", "5", "6"]
    assert json.loads(got.events.to_pylist()[1]["data"])["params"]["n"] == 2
    assert codes(got) == [("tcp_overlap_conflict", "packet 9")]
    assert "packet 7's copy, which was kept" in got.anomalies.to_pylist()[0]["message"]


def test_conflicting_copies_both_held_out_of_order_keep_the_first_captured(tmp_path):
    head, body, tail = _server_segments(g.Conversation())
    forged = g.Seg(**{**body[2].__dict__, "payload": body[2].payload.replace(b'"n": 3', b'"n": 7')})
    got = ingest(tmp_path, g.pcap(g.records(head + [body[0], body[2], forged, body[1]] + body[3:] + tail)))
    assert ids(got) == ["1", "2", "3", "4", "5", "6"]
    assert json.loads(got.events.to_pylist()[2]["data"])["params"]["n"] == 3
    assert codes(got) == [("tcp_overlap_conflict", "packet 8")]


def test_sequence_numbers_wrap(tmp_path):
    conv = g.Conversation(isn_s=0xFFFFFF00)
    got = ingest(tmp_path, g.pcap(g.records(sse_stream(conv, range(1, 8)))))
    assert ids(got) == [str(i) for i in range(1, 8)] and codes(got) == []


def test_missing_segment_in_sse_body_cuts_the_event_and_resyncs(tmp_path):
    conv = g.Conversation()
    segs = conv.handshake() + conv.c(get_request()) + conv.s(SSE_HEAD_CLOSE)
    body = b"".join(sse_event(i) for i in range(1, 7))
    e3 = body.index(b"id: 3")
    e4 = body.index(b"id: 4")
    # segments: [events 1-2 + start of 3] [rest of 3 + start of 4: LOST] [rest of 4, 5, 6]
    cut1, cut2 = e3 + 20, e4 + 12
    pieces = conv.s(body, [cut1, cut2 - cut1])
    segs += [pieces[0], pieces[2], conv.fin(False), conv.fin(True)]
    got = ingest(tmp_path, g.pcap(g.records(segs)))
    ev = got.events.to_pylist()
    assert [(e["id"], e["fate"]) for e in ev] == [("1", "dispatched"), ("2", "dispatched"), ("3", "cut_off"), ("5", "dispatched"), ("6", "dispatched")]
    assert ev[2]["data"] == note(3)[: 20 - len("id: 3\ndata: ")]
    assert ev[2]["location"] == "packet 6" and ev[3]["location"] == "packet 7"
    assert codes(got) == [("tcp_seq_gap", "packet 7"), ("sse_unterminated_event", "packet 6")]
    msg = got.anomalies.to_pylist()[0]["message"]
    assert f"{cut2 - cut1} bytes missing in 10.0.0.2:8000->10.0.0.1:51234 between packet 6 and packet 7" in msg
    assert "SSE body of 10.0.0.1:51234->10.0.0.2:8000#1" in msg
    assert got.rejected == 0 and exchanges(got)[0]["end_reason"] == "eof"


def test_a_gap_anywhere_in_an_sse_body_keeps_every_event_before_it_and_after_the_next_blank_line(tmp_path):
    import re

    body = b"".join(sse_event(i) for i in range(1, 7))
    ends = [m.end() for m in re.finditer(rb"\n\n", body)]  # where each event's block ends
    for a in range(1, len(body) - 40, 7):
        b = a + 30
        conv = g.Conversation()
        segs = conv.handshake() + conv.c(get_request()) + conv.s(SSE_HEAD_CLOSE)
        pieces = conv.s(body, [a, b - a])
        segs += [pieces[0], pieces[2], conv.fin(False)]
        got = ingest(tmp_path, g.pcap(g.records(segs)), f"gap{a}.pcap")
        restart = b + re.search(rb"\n\n", body[b:]).end()
        want_before = [str(i + 1) for i, e in enumerate(ends) if e <= a]
        want_after = [str(i + 1) for i, e in enumerate(ends) if (ends[i - 1] if i else 0) >= restart]
        assert ids(got) == want_before + want_after, a
        assert [c for c, _ in codes(got)][:1] == ["tcp_seq_gap"]


def test_gap_declared_when_the_receiver_acknowledges_beyond_it(tmp_path):
    conv = g.Conversation()
    head, body, _ = _server_segments(conv, 4)
    ack = conv.ack(True)  # the client acknowledged everything, including the segment the capture lost
    got = ingest(tmp_path, g.pcap(g.records(head + [body[0], body[2], ack, body[3]])))
    assert [c for c, _ in codes(got)] == ["tcp_seq_gap"]
    assert exchanges(got)[0]["end_reason"] == "capture_end"


def test_gap_in_a_content_length_body_keeps_the_framing(tmp_path):
    conv = g.Conversation()
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"pad": "y" * 300}})
    segs = conv.handshake() + conv.c(post(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "x"})))
    resp = conv.s(json_response(body), 100)
    segs += resp[:1] + resp[2:]  # the second 100 bytes are lost
    segs += conv.c(post(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "y"}))) + conv.s(json_response(json.dumps({"jsonrpc": "2.0", "id": 2, "result": {}})))
    got = ingest(tmp_path, g.pcap(g.records(segs)))
    assert [(x["status"], x["end_reason"]) for x in exchanges(got)] == [(200, "complete"), (200, "complete")]
    assert codes(got) == [("tcp_seq_gap", "packet 6")] and "inside the response body of" in got.anomalies.to_pylist()[0]["message"]
    # the gapped body yields no messages; the next exchange on the connection is parsed
    assert sorted((m["direction"], m["rpc_id"]) for m in got.messages.to_pylist()) == [
        ("client_to_server", "1"), ("client_to_server", "2"), ("server_to_client", "2")
    ]


def test_gap_across_a_chunk_size_line_stops_that_direction(tmp_path):
    conv = g.Conversation()
    segs = conv.handshake() + conv.c(get_request()) + conv.s(SSE_HEAD_CHUNKED)
    body = [conv.s(chunk(sse_event(i)))[0] for i in range(1, 5)]
    segs += [body[0], body[2], body[3], conv.rst(False)]
    got = ingest(tmp_path, g.pcap(g.records(segs)))
    assert ids(got) == ["1"]
    assert codes(got) == [("tcp_seq_gap", "packet 7")]
    assert "this direction is not parsed further" in got.anomalies.to_pylist()[0]["message"]
    assert exchanges(got)[0]["end_reason"] == "reset"


def test_flow_open_before_the_capture_started(tmp_path):
    conv = g.Conversation()
    tail_of_old_response = chunk(sse_event(7)) + b"0\r\n\r\n"  # the end of a chunked SSE response begun earlier
    init = json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "x"}})
    result = json.dumps({"jsonrpc": "2.0", "id": 3, "result": {}})
    segs = conv.s(tail_of_old_response[5:]) + conv.c(post(init)) + conv.s(json_response(result)) + [conv.fin(True), conv.fin(False)]
    got = ingest(tmp_path, g.pcap(g.records(segs)))
    assert codes(got) == [("http_midstream", "packet 1")]
    assert f"{len(tail_of_old_response) - 5} bytes" in got.anomalies.to_pylist()[0]["message"]
    x = exchanges(got)
    assert [(e["method"], e["status"], e["end_reason"], e["location"]) for e in x] == [("POST", 200, "complete", "packet 2")]
    assert x[0]["conn"] == "10.0.0.1:51234->10.0.0.2:8000#1"  # no SYN: the lower port is the server
    assert sorted((m["direction"], m["kind"]) for m in got.messages.to_pylist()) == [("client_to_server", "request"), ("server_to_client", "response")]


def test_response_whose_request_was_before_the_capture(tmp_path):
    conv = g.Conversation()
    segs = conv.s(SSE_HEAD_CHUNKED) + conv.s(chunk(sse_event(1))) + conv.c(get_request()) + conv.s(chunk(sse_event(2)))
    got = ingest(tmp_path, g.pcap(g.records(segs)))
    assert ("http_response_without_request", "packet 1") in codes(got)
    assert got.events.num_rows == 0
    x = exchanges(got)
    assert [(e["method"], e["status"], e["end_reason"]) for e in x] == [("GET", None, "capture_end")]


def test_snaplen_truncation_is_a_gap(tmp_path):
    conv = g.Conversation()
    segs = conv.handshake() + conv.c(get_request()) + conv.s(SSE_HEAD_CLOSE) + conv.s(sse_event(1)) + conv.s(sse_event(2) + sse_event(3))
    segs += conv.s(sse_event(4)) + conv.s(sse_event(5))
    recs = g.records(segs)
    full = recs[6].data
    recs[6] = g.Rec(full[:80], recs[6].ts_ns, wire_len=len(full))
    got = ingest(tmp_path, g.pcap(recs, snaplen=80))
    # after the gap, parsing resyncs at the next blank line: event 4 (whose start cannot be told apart
    # from the middle of a line) is skipped, event 5 is parsed
    assert [(e["id"], e["fate"]) for e in got.events.to_pylist()] == [("1", "dispatched"), ("2", "cut_off"), ("5", "dispatched")]
    assert [c for c, _ in codes(got)] == ["pcap_snaplen_truncated", "tcp_seq_gap", "sse_unterminated_event"]
    assert codes(got)[0] == ("pcap_snaplen_truncated", "packet 7") and got.rejected == 0


def test_capture_ending_mid_stream(tmp_path):
    conv = g.Conversation()
    segs = sse_stream(conv, range(1, 3), chunked=False, end=None) + conv.s(b"id: 3\ndata: {\"half")
    recs = g.records(segs)
    got = ingest(tmp_path, g.pcap(recs))
    assert [(e["id"], e["fate"]) for e in got.events.to_pylist()] == [("1", "dispatched"), ("2", "dispatched"), ("3", "cut_off")]
    x = exchanges(got)[0]
    assert (x["end_reason"], x["end_by"], x["ended"]) == ("capture_end", None, at(recs[-1].ts_ns))
    assert ("sse_unterminated_event", "packet 8") in codes(got)


@pytest.mark.parametrize(
    "end, reason, by",
    [("rst_server", "reset", "server"), ("rst_client", "reset", "client"), ("fin_client", "eof", "client"), ("fin_server", "eof", "server")],
)
def test_rst_and_fin(tmp_path, end, reason, by):
    got = ingest(tmp_path, g.pcap(g.records(sse_stream(g.Conversation(), range(1, 3), chunked=False, end=end))))
    x = exchanges(got)[0]
    assert (x["end_reason"], x["end_by"]) == (reason, by) and ids(got) == ["1", "2"]


def test_port_reuse_after_close_is_a_new_connection(tmp_path):
    a = g.Conversation()
    b = g.Conversation(isn_c=900_000, isn_s=7_000_000)
    got = ingest(tmp_path, g.pcap(g.records(sse_stream(a, [1], end="fin_client") + sse_stream(b, [2]))))
    assert [x["conn"] for x in exchanges(got)] == ["10.0.0.1:51234->10.0.0.2:8000#1", "10.0.0.1:51234->10.0.0.2:8000~2#1"]
    assert ids(got) == ["1", "2"]


# ------------------------------------------------------------------------------------------ HTTP/1.1


def test_keep_alive_with_three_requests_one_pipelined(tmp_path):
    conv = g.Conversation()
    reqs = [post(json.dumps({"jsonrpc": "2.0", "id": n, "method": "ping"})) for n in range(3)]
    resps = [json_response(json.dumps({"jsonrpc": "2.0", "id": n, "result": {}})) for n in range(3)]
    segs = conv.handshake() + conv.c(reqs[0]) + conv.s(resps[0]) + conv.c(reqs[1] + reqs[2]) + conv.s(resps[1]) + conv.s(resps[2], 9)
    segs += [conv.fin(True), conv.fin(False)]
    got = ingest(tmp_path, g.pcap(g.records(segs)))
    x = exchanges(got)
    assert [(e["conn"].rsplit("#")[1], e["location"], e["status"], e["end_reason"]) for e in x] == [
        ("1", "packet 4", 200, "complete"), ("2", "packet 6", 200, "complete"), ("3", "packet 6", 200, "complete")
    ]
    assert x[2]["ended"] == at(g.records(segs)[-3].ts_ns)  # the last piece of the third response
    assert got.messages.num_rows == 6 and codes(got) == []


def test_chunked_sse_with_chunks_and_size_lines_split_across_segments(tmp_path):
    body = b"".join(chunk(sse_event(i)) for i in range(1, 6)) + b"0\r\n\r\n"
    whole = g.Conversation()
    ref = ingest(tmp_path, g.pcap(g.records(whole.handshake() + whole.c(get_request()) + whole.s(SSE_HEAD_CHUNKED + body))), "ref.pcap")
    for size in (1, 3, 7, 64):
        conv = g.Conversation()
        segs = conv.handshake() + conv.c(get_request()) + conv.s(SSE_HEAD_CHUNKED + body, size)
        got = ingest(tmp_path, g.pcap(g.records(segs)), f"s{size}.pcap")
        assert [(e["id"], e["data"], e["fate"]) for e in got.events.to_pylist()] == [(e["id"], e["data"], e["fate"]) for e in ref.events.to_pylist()]
        assert exchanges(got)[0]["end_reason"] == "complete" and codes(got) == []
    assert ids(ref) == ["1", "2", "3", "4", "5"]


def test_chunk_extensions_and_trailers(tmp_path):
    conv = g.Conversation()
    ev = sse_event(1)
    body = b"%x;name=value\r\n" % len(ev) + ev + b"\r\n0\r\nX-Trailer: yes\r\n\r\n"
    segs = conv.handshake() + conv.c(get_request()) + conv.s(SSE_HEAD_CHUNKED + body, 5)
    got = ingest(tmp_path, g.pcap(g.records(segs)))
    assert ids(got) == ["1"] and exchanges(got)[0]["end_reason"] == "complete"


def test_content_length_json_response(tmp_path):
    conv = g.Conversation()
    init = json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-06-18"}})
    result = json.dumps({"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": "2025-06-18"}})
    segs = conv.handshake() + conv.c(post(init, sid=None)) + conv.s(json_response(result, sid=SID), 50) + [conv.fin(True), conv.fin(False)]
    got = ingest(tmp_path, g.pcap(g.records(segs)))
    x = exchanges(got)[0]
    assert (x["method"], x["status"], x["resp_session_id"], x["content_type"], x["end_reason"]) == ("POST", 200, SID, "application/json", "complete")
    assert x["request_body"] == init and x["url"] == "http://10.0.0.2:8000/mcp"
    assert [(m["kind"], m["protocol_version"]) for m in got.messages.to_pylist()] == [("request", "2025-06-18"), ("response", "2025-06-18")]


def test_head_and_204_and_304_have_no_body(tmp_path):
    conv = g.Conversation()
    segs = conv.handshake()
    segs += conv.c(b"HEAD /mcp HTTP/1.1\r\nHost: h\r\nMcp-Session-Id: s\r\n\r\n") + conv.s(b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\nContent-Type: application/json\r\n\r\n")
    segs += conv.c(b"DELETE /mcp HTTP/1.1\r\nHost: h\r\nMcp-Session-Id: s\r\n\r\n") + conv.s(b"HTTP/1.1 204 No Content\r\n\r\n")
    segs += conv.c(b"GET /x HTTP/1.1\r\nHost: h\r\n\r\n") + conv.s(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 304 Not Modified\r\n\r\n")
    segs += [conv.fin(True), conv.fin(False)]
    got = ingest(tmp_path, g.pcap(g.records(segs)))
    assert [(x["method"], x["status"], x["end_reason"]) for x in exchanges(got)] == [("HEAD", 200, "complete"), ("DELETE", 204, "complete"), ("GET", 304, "complete")]
    assert codes(got) == []


def test_tls_flow_is_named_not_skipped(tmp_path):
    tls = g.Conversation(sport=443)
    hello = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(range(32))
    segs = tls.handshake() + tls.c(hello) + tls.s(b"\x16\x03\x03\x00\x5a" + b"\x00" * 90)
    segs += sse_stream(g.Conversation(cport=51300), [1])
    got = ingest(tmp_path, g.pcap(g.records(segs)))
    assert codes(got) == [("tls_not_decrypted", "packet 4")]
    assert "10.0.0.1:51234 ↔ 10.0.0.2:443" in got.anomalies.to_pylist()[0]["message"]
    assert ids(got) == ["1"]


def test_garbage_flow_is_a_parse_error_and_other_flows_are_analyzed(tmp_path):
    bad = g.Conversation(cport=50000)
    segs = bad.handshake() + bad.c(b"\x00\x01\x02 this is not HTTP at all\r\n\r\n") + [bad.fin(True), bad.fin(False)]
    segs += sse_stream(g.Conversation(), range(1, 3))
    broken = g.Conversation(cport=50001)  # HTTP first, garbage later: the parsed request is kept
    segs += broken.handshake() + broken.c(get_request() + b"GET /mcp HTTP/1.1\r\nno colon here\r\n\r\n") + [broken.rst(True)]
    got = ingest(tmp_path, g.pcap(g.records(segs)))
    assert ids(got) == ["1", "2"]
    assert sorted(codes(got)) == [("http_parse_error", "packet 18"), ("http_parse_error", "packet 4")]
    msgs = " ".join(a["message"] for a in got.anomalies.to_pylist())
    assert "10.0.0.1:50000->10.0.0.2:8000" in msgs and "not an HTTP header line" in msgs
    assert [x["conn"] for x in exchanges(got)] == ["10.0.0.1:51234->10.0.0.2:8000#1", "10.0.0.1:50001->10.0.0.2:8000#1"]


def test_other_protocols_and_plain_http_without_mcp_are_counted_in_notes(tmp_path):
    ssh = g.Conversation(sport=22)
    web = g.Conversation(sport=80, cport=50001)
    segs = ssh.handshake() + ssh.s(b"SSH-2.0-OpenSSH_9.6\r\n") + ssh.c(b"SSH-2.0-client\r\n")
    segs += web.handshake() + web.c(b"GET / HTTP/1.1\r\nHost: example\r\n\r\n") + web.s(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi")
    got = ingest(tmp_path, g.pcap(g.records(segs)))
    assert codes(got) == [] and got.exchanges.num_rows == 0
    assert any("1 HTTP connection(s) with 1 request(s) carried no MCP traffic" in n for n in got.notes)
    assert any("1 TCP connection(s) did not speak HTTP/1.x" in n for n in got.notes)


def test_ports_select_the_flows(tmp_path):
    segs = sse_stream(g.Conversation(), [1]) + sse_stream(g.Conversation(sport=9000, cport=50001), [2])
    data = g.pcap(g.records(segs))
    got = ingest(tmp_path, data, ports=frozenset({9000}))
    assert ids(got) == ["2"] and any("1 TCP connection(s) on ports not selected" in n for n in got.notes)


# ------------------------------------------------------------------------------------------ bad files


def test_truncated_last_packet_keeps_everything_before(tmp_path):
    data = g.pcap(g.records(sse_stream(g.Conversation(), range(1, 4))))
    got = ingest(tmp_path, data[:-30])
    assert codes(got) == [("pcap_truncated_record", "packet 9")]
    assert ids(got) == ["1", "2", "3"] and got.records == 8 and got.rejected == 1
    assert exchanges(got)[0]["end_reason"] == "capture_end"


def test_impossible_record_length_stops_reading(tmp_path):
    recs = g.records(sse_stream(g.Conversation(), range(1, 3)))
    data = g.pcap(recs) + struct.pack("<IIII", 0, 0, 0x7FFFFFFF, 0x7FFFFFFF) + b"\x00" * 100
    got = ingest(tmp_path, data)
    assert codes(got) == [("pcap_bad_record", f"packet {len(recs) + 1}")] and ids(got) == ["1", "2"] and got.rejected == 1


def test_truncated_pcapng_block(tmp_path):
    data = g.pcapng(g.records(sse_stream(g.Conversation(), range(1, 4))))
    got = ingest(tmp_path, data[:-30], "c.pcapng")
    assert codes(got) == [("pcap_truncated_record", "packet 9")] and ids(got) == ["1", "2", "3"]


def test_corrupt_pcapng_block_resyncs_at_the_next_block(tmp_path):
    recs = g.records(sse_stream(g.Conversation(), range(1, 6), chunked=False))
    good = [g.epb(r) for r in recs]
    bad = bytearray(good[6])  # event 2's packet
    struct.pack_into("<I", bad, len(bad) - 4, len(bad) + 8)  # its trailer length disagrees with its head
    junk = b"\xde\xad\xbe\xef" * 3  # bytes between blocks that are no block at all
    head = g.shb() + g.idb(g.LINK_ETHERNET) + b"".join(good[:6])
    got = ingest(tmp_path, head + bytes(bad) + junk + b"".join(good[7:]), "c.pcapng")
    # Round three, item 6: the block's fields fit its head length, and what follows where the head says it ends is
    # damaged too (the junk): its trailer alone was wrong, so it is read (before: skipped, and event 2 lost with it)
    assert codes(got) == [("pcap_record_repaired", f"byte {len(head)}"), ("pcapng_corrupt_block", f"byte {len(head) + len(bad)}")]
    assert f"skipped {len(junk)} bytes to the next valid block" in got.anomalies.to_pylist()[1]["message"]
    assert got.rejected == 1 and got.records == len(recs) + 1  # every block read; the junk, one rejected record
    assert ids(got) == ["1", "2", "3", "4", "5"]


def test_corrupt_pcapng_block_without_a_next_block_stops(tmp_path):
    recs = g.records(sse_stream(g.Conversation(), range(1, 3)))
    data = g.pcapng(recs) + struct.pack("<II", 6, 7) + b"\x00" * 64
    got = ingest(tmp_path, data, "c.pcapng")
    assert [c for c, _ in codes(got)] == ["pcapng_corrupt_block"] and ids(got) == ["1", "2"]
    assert "reading stopped" in got.anomalies.to_pylist()[0]["message"]


def test_pcap_gz_is_read_transparently(tmp_path):
    data = g.pcap(g.records(sse_stream(g.Conversation(), range(1, 4))))
    p = g.write(tmp_path / "c.pcap.gz", data, gz=True)
    assert ids(inputs.read_one(str(p))) == ["1", "2", "3"]


def test_not_a_capture_with_format_pcap_is_one_input_error(tmp_path):
    p = tmp_path / "x.pcap"
    p.write_text('{"kind": "request"}\n')
    with pytest.raises(InputError, match="not a pcap or pcapng capture"):
        inputs.read_one(str(p), Reading("pcap"))


def test_pcap_header_cut_short_is_an_input_error(tmp_path):
    p = tmp_path / "x.pcap"
    p.write_bytes(g.pcap([])[:10])
    with pytest.raises(InputError, match="truncated"):
        inputs.read_one(str(p))


def test_empty_capture_is_readable_but_empty(tmp_path):
    got = ingest(tmp_path, g.pcap([]))
    assert got.records == 0 and codes(got) == [("input_empty", "file")]


def test_every_anomaly_code_is_in_the_catalog():
    import pathlib
    import re

    src = "".join(pathlib.Path(m.__file__).read_text() for m in (capture, tcp, http1, ingest_pcap))
    used = set(re.findall(r'"((?:pcap|pcapng|packet|ip|tcp|tls|http)_[a-z_]+)"', src)) - {"http_servers"}
    assert used and used <= set(CATALOG), used - set(CATALOG)


# ------------------------------------------------------------------------------------------ whole pipeline


def test_mcp_resume_scenario_is_judged_like_its_jsonl_twin(tmp_path, capture):
    init_body = json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}})
    init_result = json.dumps({"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": "2025-06-18", "capabilities": {}, "serverInfo": {"name": "s", "version": "0"}}})
    a = g.Conversation(cport=50001)
    segs = a.handshake() + a.c(post(init_body, sid=None)) + a.s(json_response(init_result, sid=SID)) + [a.fin(True), a.fin(False)]
    b = g.Conversation(cport=50002)
    segs += sse_stream(b, range(1, 6), end="rst_client")
    c = g.Conversation(cport=50003)
    segs += sse_stream(c, range(9, 11), last="5", end="fin_client")
    pcap_doc = pipeline.run([str(g.write(tmp_path / "resume.pcap", g.pcap(g.records(segs))))]).document
    capture.initialize().stream(ids=range(1, 6)).stream(last="5", ids=range(9, 11))
    jsonl_doc = pipeline.run([str(capture.write(tmp_path / "resume.jsonl"))]).document

    def key(d):
        return [(x["verdict"], x["last_event_id"], x["first_event_id_after"], x["lost_event_ids"], x["duplicated_event_ids"], x["handled_correctly"]) for x in d["boundaries"]]

    assert key(pcap_doc) == [("gap", "5", "9", ["6", "7", "8"], [], None)]
    assert key(pcap_doc) == key(jsonl_doc)
    assert pcap_doc["inputs"][0]["format"] == "pcap" and pcap_doc["inputs"][0]["rejected"] == 0
    assert pcap_doc["boundaries"][0]["request"]["location"] == "packet 22"  # 7 packets of POST, 11 of the first GET, 3 of handshake


# ------------------------------------------------------------------------------------------ properties


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tail=st.binary(max_size=600), ng=st.booleans(), prefix=st.integers(0, 3))
def test_arbitrary_bytes_after_a_valid_header_never_raise(tmp_path, tail, ng, prefix):
    recs = g.records(sse_stream(g.Conversation(), range(1, 3)))[:prefix]
    data = (g.pcapng(recs) if ng else g.pcap(recs)) + tail
    p = tmp_path / "fuzz.pcap"
    p.write_bytes(data)
    try:
        got = inputs.read_one(str(p))
    except InputError:
        return
    assert got.records >= prefix


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tail=st.binary(min_size=1, max_size=400))
def test_arbitrary_frames_never_raise(tmp_path, tail):
    recs = [g.Rec(tail, g.T0_NS), g.Rec(g.ethernet(tail), g.T0_NS), g.Rec(g.ethernet(g.ipv4("1.1.1.1", "2.2.2.2", 6, tail)), g.T0_NS)]
    got = ingest(tmp_path, g.pcap(recs) + g.pcap(recs, linktype=g.LINK_NULL)[24:])
    assert got.records == 6


def _data(i: int) -> str:
    return json.dumps({"jsonrpc": "2.0", "method": "m", "params": {"pad": "x" * (i * 7)}})


STREAM = SSE_HEAD_CHUNKED + b"".join(chunk(sse_event(i, _data(i))) for i in range(1, 9)) + b"0\r\n\r\n"


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cuts=st.lists(st.integers(1, len(STREAM) - 1), max_size=25, unique=True), seed=st.integers(0, 2**32 - 1), window=st.integers(1, 4))
def test_random_segmentation_and_reordering_gives_identical_events(tmp_path, cuts, seed, window):
    conv = g.Conversation()
    segs = conv.handshake() + conv.c(get_request())
    sizes, prev = [], 0
    for c in sorted(cuts):
        sizes.append(c - prev)
        prev = c
    data = conv.s(STREAM, sizes)
    rng = random.Random(seed)
    shuffled = []
    for i in range(0, len(data), window):  # random order within each window of segments
        part = data[i : i + window]
        rng.shuffle(part)
        shuffled += part
    got = ingest(tmp_path, g.pcap(g.records(segs + shuffled + [conv.fin(False), conv.fin(True)])))
    assert [(e["id"], e["data"], e["fate"]) for e in got.events.to_pylist()] == [(str(i), _data(i), "dispatched") for i in range(1, 9)]
    assert codes(got) == [] and exchanges(got)[0]["end_reason"] == "complete"
