"""Content-Encoding (analyzer/decode/content_coding.py) and its use by every ingester and the mitmproxy addon.

nginx with ``gzip on`` compresses event streams; every format may carry gzip, deflate, br, zstd or a
stack of them.  The decoder is sans-IO: whole, byte by byte and cut at every offset give the same
answers, bad data is a state (an anomaly row), never an exception.
"""
from __future__ import annotations

import base64
import functools
import gzip
import http.client
import http.server
import importlib.util
import io
import json
import socket
import subprocess
import sys
import threading
import time
import types
import zlib
from pathlib import Path

import brotli
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pcapgen as g
from analyzer.decode import content_coding
from analyzer.ingest import inputs
from analyzer import limits
from analyzer.anomalies import CATALOG
from analyzer.decode.content_coding import Decoder, decode_all, looks_encoded
from analyzer.decode.sse import parse_all
from conftest import SID
from needs import unavailable

ROOT = Path(__file__).resolve().parent.parent


def note(i: int) -> str:
    return json.dumps({"jsonrpc": "2.0", "method": "notifications/message", "params": {"n": i}})


def sse_event(i: int) -> bytes:
    return f"id: {i}\ndata: {note(i)}\n\n".encode()


BODY = b"".join(sse_event(i) for i in range(1, 41))


def gzip_stream(pieces: list[bytes], end: bool = True) -> list[bytes]:
    """nginx-like gzip of an event stream: one sync flush per write, so each event decodes when its bytes arrive."""
    c = zlib.compressobj(6, zlib.DEFLATED, 31)
    out = [c.compress(p) + c.flush(zlib.Z_SYNC_FLUSH) for p in pieces]
    if end:
        out.append(c.flush())
    return out


def raw_deflate(data: bytes) -> bytes:
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush()


ENCODERS = {
    "gzip": gzip.compress,
    "x-gzip": gzip.compress,
    "deflate": zlib.compress,  # zlib-wrapped, as RFC 9110 means it
    "deflate-raw": raw_deflate,  # raw, as some servers send it: browsers accept both
    "br": brotli.compress,
    "zstd": lambda d: zstandard.ZstdCompressor().compress(d),
    "zstd-streamed": lambda d: zstandard.ZstdCompressor(write_content_size=False).compress(d),  # no content size
}
HEADER = {"deflate-raw": "deflate", "zstd-streamed": "zstd"}


def encoded(name: str, data: bytes = BODY) -> tuple[str, bytes]:
    return HEADER.get(name, name), ENCODERS[name](data)


def feed_in(dec: Decoder, data: bytes, size: int) -> bytes:
    out = [dec.feed(data[i : i + size]) for i in range(0, len(data), size)]
    return b"".join(out) + dec.close()


# ------------------------------------------------------------------------------------------ the decoder


@pytest.mark.parametrize("name", list(ENCODERS))
def test_every_codec_round_trips_whole_and_byte_by_byte(name):
    header, data = encoded(name)
    out, dec = decode_all(header, data)
    assert out == BODY and dec.state == "complete" and dec.anomaly() is None
    dec = Decoder(header)
    assert feed_in(dec, data, 1) == BODY and dec.state == "complete"
    assert (dec.fed, dec.produced) == (len(data), len(BODY))


@pytest.mark.parametrize("header", ["gzip, br", "br, gzip", "deflate, zstd", "gzip,zstd, br", "identity, gzip, identity"])
def test_stacked_codings_are_undone_in_reverse_order(header):
    data = BODY
    for name in [h.strip() for h in header.split(",") if h.strip() != "identity"]:
        data = ENCODERS[name](data)
    out, dec = decode_all(header, data)
    assert out == BODY and dec.state == "complete"
    assert feed_in(Decoder(header), data, 3) == BODY


@pytest.mark.parametrize("header", [None, "", "identity", " Identity "])
def test_no_coding_passes_bytes_through(header):
    dec = Decoder(header)
    assert not dec.active
    assert dec.feed(b"abc") == b"abc" and dec.close() == b"" and dec.state == "complete"


def test_concatenated_gzip_members_and_zstd_frames_are_read_one_after_the_other():
    a, b = BODY[:1000], BODY[1000:]
    assert decode_all("gzip", gzip.compress(a) + gzip.compress(b))[0] == BODY
    z = zstandard.ZstdCompressor()
    out, dec = decode_all("zstd", z.compress(a) + z.compress(b))
    assert out == BODY and dec.state == "complete"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(list(ENCODERS)), cuts=st.lists(st.integers(0, 5000), max_size=12))
def test_splitting_the_input_never_changes_the_output(name, cuts):
    header, data = encoded(name)
    dec = Decoder(header)
    points = sorted({0, len(data), *[c % (len(data) + 1) for c in cuts]})
    out = b"".join(dec.feed(data[a:b]) for a, b in zip(points, points[1:])) + dec.close()
    assert out == BODY and dec.state == "complete"


@pytest.mark.parametrize("name", ["gzip", "deflate", "deflate-raw", "br", "zstd-streamed"])
def test_a_stream_cut_at_every_offset_decodes_to_a_prefix_and_never_raises(name):
    header = HEADER.get(name, name)
    if name == "zstd-streamed":  # a streaming zstd encoder flushes per write, like gzip_stream
        c = zstandard.ZstdCompressor().compressobj()
        data = b"".join(c.compress(sse_event(i)) + c.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK) for i in range(1, 41)) + c.flush()
    elif name == "gzip":
        data = b"".join(gzip_stream([sse_event(i) for i in range(1, 41)]))
    else:
        data = ENCODERS[name](BODY)
    full_ids = [e.id for e in parse_all(BODY)]
    assert decode_all(header, b"")[1].state == "complete"  # no body at all (HEAD, 204): nothing was cut
    for cut in range(1, len(data) + 1):
        out, dec = decode_all(header, data[:cut])
        assert BODY.startswith(out), cut
        if cut == len(data):
            assert out == BODY and dec.state == "complete"
            continue
        assert dec.state == "truncated", (cut, dec.state)
        assert dec.anomaly()[0] == "body_encoding_truncated"
        got = [e.id for e in parse_all(out) if e.fate == "dispatched"]
        assert got == full_ids[: len(got)]  # the events before the cut are real, in order
    # gzip flushed per event: a cut right after an event's flush has every event before it
    pieces = gzip_stream([sse_event(i) for i in range(1, 41)])
    head = b"".join(pieces[:10])
    assert [e.id for e in parse_all(decode_all("gzip", head)[0])] == [str(i) for i in range(1, 11)]


@pytest.mark.parametrize("name", list(ENCODERS))
def test_corrupt_data_is_an_anomaly_not_an_exception(name):
    header, data = encoded(name)
    for bad in (b"\x00" * 40, b"id: 1\ndata: plain text\n\n", data[:20] + bytes(b ^ 0x5A for b in data[20:60]) + data[60:], data + b"junk"):
        dec = Decoder(header)
        dec.feed(bad)
        dec.close()
        assert dec.state in ("invalid", "truncated", "complete")  # a flipped byte deflate cannot see may decode to something
        if dec.state != "complete":
            code, detail = dec.anomaly()
            assert code in CATALOG and CATALOG[code].severity in ("error", "warning")
    dec = Decoder(header)
    dec.feed(data + b"junk")
    dec.close()
    assert dec.state == "invalid"
    # brotli answers a call that meets damage with nothing: it costs that call's output (a slice of at most 1 KiB)
    assert (dec.produced == len(BODY) and "after the end" in dec.detail) or name == "br"


def test_the_failure_offset_is_exact_when_fed_byte_by_byte_and_what_precedes_it_is_kept():
    data = b"".join(gzip_stream([sse_event(i) for i in range(1, 41)], end=False))
    bad = data + b"\xff" * 8  # an invalid block type right after the last flush point
    out, dec = decode_all("gzip", bad)
    assert out == BODY and dec.state == "invalid" and dec.error_at == len(data)
    dec = Decoder("gzip")
    assert feed_in(dec, bad, 1) == BODY and dec.error_at == len(data)


@settings(max_examples=150, deadline=None)
@given(header=st.sampled_from(["gzip", "deflate", "br", "zstd", "gzip, br", "zstd, deflate"]), data=st.binary(max_size=300),
       size=st.integers(1, 64))
def test_any_bytes_decode_or_yield_a_state_never_an_exception(header, data, size):
    dec = Decoder(header)
    feed_in(dec, data, size)
    assert dec.state in ("complete", "truncated", "invalid", "over_limit")


@pytest.mark.parametrize("header", ["compress", "foo, gzip", "gzip, x-custom"])
def test_an_unknown_coding_is_unsupported_and_nothing_is_decoded(header):
    dec = Decoder(header)
    assert dec.active and dec.state == "unsupported" and dec.undecodable
    assert dec.feed(gzip.compress(BODY)) == b"" and dec.close() == b""
    code, detail = dec.anomaly()
    assert code == "body_encoding_unsupported" and CATALOG[code].severity == "error"


def test_a_header_value_that_is_no_coding_name_is_not_quoted_back():
    secret = "Bearer sk-live-0123456789abcdefghijklmnopqrstuvwxyz"
    dec = Decoder(secret)
    assert dec.state == "unsupported" and "sk-live" not in dec.detail and "Bearer" not in dec.detail


BOMB_BYTES = 32 << 20  # 32 MiB of blanks: over 30 times the cap below, from 32 KiB of gzip or 54 bytes of brotli


@functools.cache
def bomb(name: str) -> bytes:
    """Each coding's bomb, built once (brotli's best quality takes a while even on blanks)."""
    return ENCODERS[name](b" " * BOMB_BYTES)


class _Counted:
    """A decompressor of zlib, brotli or zstandard whose every call's output is counted into ``work``."""

    def __init__(self, inner, work: list[int]) -> None:
        self._inner, self._work = inner, work

    def __getattr__(self, name):
        attr = getattr(self._inner, name)
        if name in ("decompress", "flush", "process"):
            def counted(*args, **kw):
                got = attr(*args, **kw)
                self._work[0] += len(got)
                return got
            return counted
        if name == "copy":
            return lambda: _Counted(attr(), self._work)
        return attr


def count_decompression(monkeypatch) -> list[int]:
    """Every byte the compression libraries produce for content_coding, counted where they produce it: the work
    done, whatever the decoder then keeps or drops."""
    work = [0]
    monkeypatch.setattr(content_coding, "zlib", types.SimpleNamespace(
        decompressobj=lambda *a: _Counted(zlib.decompressobj(*a), work), error=zlib.error, MAX_WBITS=zlib.MAX_WBITS))
    monkeypatch.setattr(content_coding, "brotli", types.SimpleNamespace(
        Decompressor=lambda: _Counted(brotli.Decompressor(), work), error=brotli.error))
    monkeypatch.setattr(content_coding, "zstandard", types.SimpleNamespace(
        ZstdDecompressor=lambda **kw: types.SimpleNamespace(decompressobj=lambda: _Counted(zstandard.ZstdDecompressor(**kw).decompressobj(), work)),
        ZstdError=zstandard.ZstdError))
    return work


@pytest.mark.parametrize("name", ["gzip", "deflate", "br", "zstd"])
def test_a_decompression_bomb_stops_at_the_ratio_without_doing_the_work(name, monkeypatch):
    data = bomb(name)
    floor = 1 << 20
    cap = max(10 * len(data), floor)
    assert BOMB_BYTES > 6 * (cap + (4 << 20))  # the whole bomb is far beyond what the decoder may produce
    work = count_decompression(monkeypatch)
    dec = Decoder(name, ratio=10, floor=floor)
    out = feed_in(dec, data, 1 << 16)
    assert dec.state == "over_limit" and dec.anomaly()[0] == "body_decoded_over_limit"
    assert "--max-gunzip-ratio" in dec.detail
    # stopped near the cap (brotli's output_buffer_limit may overshoot by part of its window), not after the whole bomb
    assert len(out) == dec.produced <= cap + (4 << 20)
    # the work, counted where it is done (not timed): the libraries produced what came out and no more, so nothing
    # past the cap was decoded only to be dropped
    assert 0 < work[0] == len(out), (work[0], len(out))


def test_the_default_limits_leave_real_streams_alone():
    big = b"".join(sse_event(i) for i in range(20000))  # ~1.5 MB, compresses about 20x
    out, dec = decode_all("gzip", gzip.compress(big))
    assert out == big and dec.state == "complete"


def test_looks_encoded_tells_encoded_bodies_from_bodies_a_producer_already_decoded():
    for name in ENCODERS:
        header, data = encoded(name)
        assert looks_encoded(header, data), name
        assert not looks_encoded(header, BODY), name
    assert looks_encoded("gzip", gzip.compress(BODY)[:30])  # cut off: still gzip
    assert not looks_encoded("compress", BODY) and not looks_encoded(None, gzip.compress(BODY))


# ------------------------------------------------------------------------------------------ pcap


SSE_HEAD_GZIP = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache, no-transform\r\n"
                 b"Content-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n")
SSE_HEAD_PLAIN = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n"


def chunk(b: bytes) -> bytes:
    return b"%x\r\n" % len(b) + b + b"\r\n"


def get_request() -> bytes:
    return (f"GET /mcp HTTP/1.1\r\nHost: 10.0.0.2:8000\r\nAccept: text/event-stream\r\nAccept-Encoding: gzip\r\n"
            f"Mcp-Session-Id: {SID}\r\n\r\n").encode()


def pcap_stream(bodies: list[bytes], head: bytes, end: str = "rst", sizes=None) -> bytes:
    conv = g.Conversation()
    segs = conv.handshake() + conv.c(get_request()) + conv.s(head)
    for b in bodies:
        segs += conv.s(chunk(b), sizes)
    if end == "done":
        segs += conv.s(b"0\r\n\r\n")
        segs += [conv.fin(False), conv.fin(True)]
    else:
        segs.append(conv.rst(False))
    return g.pcap(g.records(segs))


def read(tmp_path, data: bytes, name: str):
    p = tmp_path / name
    p.write_bytes(data)
    return inputs.read_one(str(p))


def pcap_events(got) -> list[tuple]:
    return [(e["id"], e["fate"], e["location"], e["ts"], e["data"]) for e in got.events.to_pylist()]


def codes(got) -> list[tuple[str, str]]:
    return [(a["code"], a["location"]) for a in got.anomalies.to_pylist()]


def test_pcap_chunked_gzip_sse_gives_the_same_events_packets_and_times_as_uncompressed(tmp_path):
    events = [sse_event(i) for i in range(1, 9)]
    plain = read(tmp_path, pcap_stream(events, SSE_HEAD_PLAIN), "plain.pcap")
    pieces = gzip_stream(events, end=False)  # the stream is reset before gzip's trailer: as a disconnect cuts it
    packed = read(tmp_path, pcap_stream(pieces, SSE_HEAD_GZIP), "gzip.pcap")
    assert pcap_events(packed) == pcap_events(plain) and len(pcap_events(plain)) == 8
    assert codes(plain) == []
    # the cut shows as the stream's reset and one row naming the truncated coding
    assert [c for c, _ in codes(packed)] == ["body_encoding_truncated"]
    assert packed.exchanges.to_pylist()[0]["end_reason"] == "reset"


def test_pcap_gzip_split_across_segments_takes_the_packet_that_completed_each_event(tmp_path):
    events = [sse_event(i) for i in range(1, 5)]
    pieces = gzip_stream(events)
    trailer = pieces.pop()
    pieces[-1] += trailer
    got = read(tmp_path, pcap_stream(pieces, SSE_HEAD_GZIP, end="done", sizes=[12]), "split.pcap")
    # packets: 1-3 handshake, 4 GET, 5 head; each event's chunk is two segments: the second completes it
    assert [(e["id"], e["location"]) for e in got.events.to_pylist()] == [("1", "packet 7"), ("2", "packet 9"), ("3", "packet 11"), ("4", "packet 13")]
    assert codes(got) == [] and got.exchanges.to_pylist()[0]["end_reason"] == "complete"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(coding=st.sampled_from(["gzip", "deflate", "br", "zstd"]), size=st.integers(1, 97), end=st.sampled_from(["done", "rst"]))
def test_pcap_any_segmenting_of_a_coded_stream_gives_the_same_events(tmp_path, coding, size, end):
    data = {"gzip": gzip.compress, "deflate": zlib.compress, "br": brotli.compress,
            "zstd": lambda d: zstandard.ZstdCompressor().compress(d)}[coding](BODY)
    head = SSE_HEAD_GZIP.replace(b"gzip", coding.encode())
    whole = read(tmp_path, pcap_stream([data], head, end=end), "whole.pcap")
    split = read(tmp_path, pcap_stream([data], head, end=end, sizes=size), "split.pcap")
    strip = lambda got: [(e["id"], e["fate"], e["data"]) for e in got.events.to_pylist()]  # noqa: E731
    assert strip(split) == strip(whole) and len(strip(whole)) == 40
    assert [c for c, _ in codes(split)] == [c for c, _ in codes(whole)] == []


def test_pcap_gzip_cut_inside_an_event_keeps_the_events_before_it(tmp_path):
    events = [sse_event(i) for i in range(1, 6)]
    pieces = gzip_stream(events, end=False)
    pieces[-1] = pieces[-1][: len(pieces[-1]) // 2]  # the last event's bytes are cut mid-way
    got = read(tmp_path, pcap_stream(pieces, SSE_HEAD_GZIP), "cut.pcap")
    ev = got.events.to_pylist()
    assert [e["id"] for e in ev if e["fate"] == "dispatched"] == ["1", "2", "3", "4"]
    assert {c for c, _ in codes(got)} <= {"body_encoding_truncated", "sse_unterminated_event"}
    assert "body_encoding_truncated" in {c for c, _ in codes(got)}


def test_pcap_unsupported_coding_is_not_parsed_and_the_body_counts_as_not_recorded(tmp_path):
    head = SSE_HEAD_GZIP.replace(b"Content-Encoding: gzip", b"Content-Encoding: compress")
    got = read(tmp_path, pcap_stream([b"\x1f\x9d\x90" + bytes(range(60))], head), "lzw.pcap")
    assert got.events.num_rows == 0
    assert codes(got) == [("body_encoding_unsupported", "packet 5")]
    assert got.exchanges.to_pylist()[0]["body_recorded"] is False


def test_pcap_compressed_json_request_and_response_bodies_are_read_as_json_rpc(tmp_path):
    req = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "x"}}).encode()
    resp = json.dumps({"jsonrpc": "2.0", "id": 7, "result": {"ok": True}}).encode()
    zreq, zresp = gzip.compress(req), brotli.compress(resp)
    conv = g.Conversation()
    segs = conv.handshake()
    segs += conv.c(f"POST /mcp HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\n"
                   f"Mcp-Session-Id: {SID}\r\nContent-Length: {len(zreq)}\r\n\r\n".encode() + zreq)
    segs += conv.s(f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: br\r\nContent-Length: {len(zresp)}\r\n\r\n".encode() + zresp)
    segs += [conv.fin(True), conv.fin(False)]
    got = read(tmp_path, g.pcap(g.records(segs)), "json.pcap")
    assert codes(got) == []
    x = got.exchanges.to_pylist()[0]
    assert x["request_body"] == req.decode()
    kinds = sorted((m["origin"], m["kind"], m["rpc_id"]) for m in got.messages.to_pylist())
    assert kinds == [("request_body", "request", "7"), ("response_body", "response", "7")]


# ------------------------------------------------------------------------------------------ HAR


def har(entries: list[dict]) -> bytes:
    return json.dumps({"log": {"version": "1.2", "creator": {"name": "mitmproxy", "version": "11"}, "entries": entries}}).encode()


def har_entry(content: dict, coding: str | None = "gzip") -> dict:
    headers = [{"name": "content-type", "value": "text/event-stream"}]
    if coding:
        headers.append({"name": "content-encoding", "value": coding})
    return {
        "startedDateTime": "2026-11-13T09:00:00.000Z",
        "time": 10,
        "request": {"method": "GET", "url": "http://127.0.0.1:8000/mcp", "headers": [{"name": "mcp-session-id", "value": SID}]},
        "response": {"status": 200, "headers": headers, "content": content},
    }


def test_har_with_mitmproxys_raw_base64_cut_off_gzip_gives_the_decoded_events(tmp_path):
    events = [sse_event(i) for i in range(1, 7)]
    pieces = gzip_stream(events, end=False)
    cut = b"".join(pieces[:-1]) + pieces[-1][: len(pieces[-1]) // 2]  # cut inside the sixth event
    text = base64.b64encode(cut).decode()
    assert text.startswith("H4sI")
    got = read(tmp_path, har([har_entry({"mimeType": "text/event-stream", "encoding": "base64", "text": text, "size": len(cut)})]), "m.har")
    ev = got.events.to_pylist()
    assert [e["id"] for e in ev if e["fate"] == "dispatched"] == ["1", "2", "3", "4", "5"]
    assert ev[0]["data"] == note(1)
    found = [c for c, _ in codes(got)]
    assert "body_encoding_truncated" in found
    # nothing SSE-level is read from the encoded bytes: no invalid UTF-8, no unknown fields
    assert not {"sse_invalid_utf8", "sse_unknown_field", "jsonrpc_invalid"} & set(found)
    assert got.exchanges.to_pylist()[0]["body_recorded"] is True


def test_har_bodies_already_decoded_by_the_producer_stay_as_they_are(tmp_path):
    got = read(tmp_path, har([har_entry({"mimeType": "text/event-stream", "text": BODY.decode(), "size": len(BODY)}, "gzip, br")]), "d.har")
    assert got.events.num_rows == 40 and codes(got) == []


@pytest.mark.parametrize("name", ["br", "deflate", "zstd", "gzip"])
def test_har_with_an_encoded_base64_body_of_each_coding(tmp_path, name):
    header, data = encoded(name)
    entry = har_entry({"mimeType": "text/event-stream", "encoding": "base64", "text": base64.b64encode(data).decode()}, header)
    got = read(tmp_path, har([entry]), "e.har")
    assert got.events.num_rows == 40 and codes(got) == []


def test_har_gzip_magic_but_corrupt_from_the_start_is_not_recorded_not_a_stream_of_garbage(tmp_path):
    bad = b"\x1f\x8b\x08\x00" + b"\xff" * 40
    entry = har_entry({"mimeType": "text/event-stream", "encoding": "base64", "text": base64.b64encode(bad).decode()})
    got = read(tmp_path, har([entry]), "bad.har")
    assert got.events.num_rows == 0
    assert [c for c, _ in codes(got)] == ["body_encoding_invalid"]
    assert got.exchanges.to_pylist()[0]["body_recorded"] is False


# ------------------------------------------------------------------------------------------ proxy JSONL


def jsonl(records: list[dict]) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in records)


def exchange(resp_headers: dict, body: dict | None = None, close: dict | None = None) -> list[dict]:
    ts = "2026-11-13T09:00:0%dZ"
    out = [
        {"kind": "request", "ts": ts % 1, "conn": "c1", "method": "GET", "url": "http://h/mcp", "headers": {"mcp-session-id": SID}},
        {"kind": "response", "ts": ts % 2, "conn": "c1", "status": 200, "headers": resp_headers},
    ]
    if body is not None:
        out.append({"kind": "body", "ts": ts % 3, "conn": "c1", **body})
    out.append({"kind": "close", "ts": ts % 4, "conn": "c1", "reason": "eof", "by": "server", **(close or {})})
    return out


def test_jsonl_base64_gzip_json_body_is_decoded(tmp_path):
    resp = json.dumps({"jsonrpc": "2.0", "id": 1, "result": {}})
    recs = exchange({"content-type": "application/json", "content-encoding": "gzip"},
                    {"data": base64.b64encode(gzip.compress(resp.encode())).decode(), "base64": True})
    got = read(tmp_path, jsonl(recs), "b.jsonl")
    assert codes(got) == []
    assert [(m["origin"], m["rpc_id"]) for m in got.messages.to_pylist()] == [("response_body", "1")]


def test_jsonl_base64_event_stream_body_cut_off_gives_its_events_with_the_record_time(tmp_path):
    cut = b"".join(gzip_stream([sse_event(i) for i in range(1, 4)], end=False))
    recs = exchange({"content-type": "text/event-stream", "content-encoding": "gzip"},
                    {"data": base64.b64encode(cut).decode(), "base64": True}, close={"reason": "reset"})
    got = read(tmp_path, jsonl(recs), "s.jsonl")
    ev = got.events.to_pylist()
    n = len(sse_event(1))
    assert [(e["id"], e["location"]) for e in ev] == [("1", "line 3 byte 0"), ("2", f"line 3 byte {n}"), ("3", f"line 3 byte {2 * n}")]
    assert ev[0]["ts"].isoformat().startswith("2026-11-13T09:00:03")
    assert codes(got) == [("body_encoding_truncated", "line 3")]


def test_jsonl_bad_base64_and_unsupported_coding_are_rows(tmp_path):
    recs = exchange({"content-type": "text/event-stream", "content-encoding": "compress"},
                    {"data": base64.b64encode(b"\x1f\x9d\x90abc").decode(), "base64": True})
    recs += [dict(r, conn="c2") for r in exchange({"content-type": "application/json"}, {"data": "%%% not base64", "base64": True})]
    got = read(tmp_path, jsonl(recs), "u.jsonl")
    assert codes(got) == [("body_encoding_unsupported", "line 3"), ("jsonl_bad_record", "line 7")]
    assert [x["body_recorded"] for x in got.exchanges.to_pylist()] == [False, True]


def test_jsonl_close_record_decoding_becomes_the_anomaly(tmp_path):
    recs = exchange({"content-type": "text/event-stream", "content-encoding": "gzip"},
                    close={"decoding": "truncated", "decoding_detail": "the gzip stream ended unfinished"})
    got = read(tmp_path, jsonl(recs), "c.jsonl")
    assert codes(got) == [("body_encoding_truncated", "line 3")]


def test_jsonl_sse_records_the_old_addon_parsed_from_gzip_bytes_are_not_read_as_events(tmp_path):
    garbage = gzip.compress(BODY)[:40].decode("utf-8", "replace")
    recs = exchange({"content-type": "text/event-stream", "content-encoding": "gzip"})
    recs[2:2] = [{"kind": "sse", "ts": "2026-11-13T09:00:03Z", "conn": "c1", "id": None, "event": None, "data": None, "retry": None,
                  "anomalies": [f"unknown_field:{garbage}"], "truncated": True}]
    recs.insert(3, dict(recs[2], anomalies=[], data="more noise", truncated=False))
    got = read(tmp_path, jsonl(recs), "old.jsonl")
    assert got.events.num_rows == 0 and codes(got) == [("jsonl_sse_not_decoded", "line 3"), ("jsonl_sse_not_decoded", "line 4")]
    assert got.rejected == 2
    assert got.exchanges.to_pylist()[0]["body_recorded"] is False
    # a recorder that decoded (the current addon says so; another may not) keeps its events
    clean = exchange({"content-type": "text/event-stream", "content-encoding": "gzip"})
    clean[2:2] = [{"kind": "sse", "ts": "2026-11-13T09:00:03Z", "conn": "c1", "id": "1", "data": note(1)}]
    got = read(tmp_path, jsonl(clean), "new.jsonl")
    assert got.events.num_rows == 1 and codes(got) == []


# ------------------------------------------------------------------------------------------ mitmproxy addon


@pytest.fixture
def addon(monkeypatch):
    """analyzer/mitm_addon.py loaded without mitmproxy: a stub module stands in for its two imports."""
    stub = types.ModuleType("mitmproxy")
    stub.ctx = types.SimpleNamespace(options=types.SimpleNamespace(mcp_jsonl=None))
    stub.http = types.ModuleType("mitmproxy.http")
    monkeypatch.setitem(sys.modules, "mitmproxy", stub)
    monkeypatch.setitem(sys.modules, "mitmproxy.http", stub.http)
    spec = importlib.util.spec_from_file_location("_test_mitm_addon", ROOT / "analyzer" / "mitm_addon.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "_test_mitm_addon", module)
    spec.loader.exec_module(module)
    return module


class FakeHeaders(dict):
    def items(self, multi: bool = False):  # mitmproxy's Headers.items(multi=True)
        return list(super().items())


def fake_flow(resp_headers: dict):
    ns = types.SimpleNamespace
    request = ns(method="GET", url="http://h/mcp", headers=FakeHeaders({"mcp-session-id": SID}), content=None, raw_content=None,
                 timestamp_start=1.0)
    response = ns(status_code=200, headers=FakeHeaders(resp_headers), timestamp_start=1.5, timestamp_end=3.0, stream=None)
    return ns(id="f1", request=request, response=response, client_conn=ns(id="c", peername=("127.0.0.1", 5000)), error=None)


@pytest.mark.parametrize("name", ["gzip", "br", "zstd", "deflate"])
def test_addon_decodes_a_content_encoded_stream_before_its_sse_parsing(addon, tmp_path, name):
    header, data = encoded(name)
    rec = addon.McpJsonlRecorder()
    rec._out = io.StringIO()
    flow = fake_flow({"content-type": "text/event-stream", "content-encoding": header})
    rec.request(flow)
    rec.responseheaders(flow)
    for i in range(0, len(data), 7):  # chunks as mitmproxy streams them: still encoded, passed on unchanged
        assert flow.response.stream(data[i : i + 7]) == data[i : i + 7]
    flow.response.stream(b"")
    rec.response(flow)
    records = [json.loads(line) for line in rec._out.getvalue().splitlines()]
    assert records[1]["kind"] == "response" and records[1]["decoded"] == header
    sse = [r for r in records if r["kind"] == "sse"]
    assert [r["id"] for r in sse] == [str(i) for i in range(1, 41)] and sse[0]["data"] == note(1)
    assert records[-1]["kind"] == "close" and "decoding" not in records[-1]
    path = tmp_path / "addon.jsonl"
    path.write_text(rec._out.getvalue())
    got = inputs.read_one(str(path))
    assert got.rejected == 0 and codes(got) == [] and got.events.num_rows == 40


def test_addon_stream_cut_mid_way_records_the_events_before_it_and_the_truncation(addon, tmp_path):
    pieces = gzip_stream([sse_event(i) for i in range(1, 5)], end=False)
    stream = addon.EventStream("gzip")
    got = []
    for p in pieces[:-1]:
        got += stream.feed(p)
    got += stream.feed(pieces[-1][: len(pieces[-1]) // 2])
    got += stream.close()
    assert [r["id"] for r in got] == ["1", "2", "3", "4"] and got[-1].get("truncated") is True
    assert [r.get("truncated") for r in got[:-1]] == [None] * 3
    assert stream.decoding["decoding"] == "truncated"


def test_addon_unsupported_coding_writes_the_raw_body_for_the_analyzer_to_report(addon, tmp_path):
    stream = addon.EventStream("compress")
    assert stream.decoded is None
    assert stream.feed(b"\x1f\x9d\x90raw") == []
    out = stream.close()
    assert out == [{"kind": "body", "data": base64.b64encode(b"\x1f\x9d\x90raw").decode(), "base64": True}]


def test_content_coding_loads_by_path_outside_the_package(monkeypatch):
    """As the addon loads it in mitmproxy's virtualenv (no analyzer package there)."""
    spec = importlib.util.spec_from_file_location("_cc_by_path", ROOT / "analyzer" / "decode" / "content_coding.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "_cc_by_path", module)
    spec.loader.exec_module(module)
    assert module.decode_all("gzip", gzip.compress(BODY))[0] == BODY
    assert module.limits is not content_coding.limits and module.limits.BODY_FLOOR == limits.BODY_FLOOR


# ------------------------------------------------------------------------------------------ through a real mitmdump


class GzipSSEHandler(http.server.BaseHTTPRequestHandler):
    """nginx-like: a chunked, gzip-encoded event stream, one sync flush per event, cut before gzip's end."""

    protocol_version = "HTTP/1.1"
    timeout = 10.0

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        self.send_response_only(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-encoding", "gzip")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for piece in gzip_stream([sse_event(i) for i in range(1, 5)], end=False):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.flush()
            time.sleep(0.05)
        self.close_connection = True
        self.connection.shutdown(socket.SHUT_RDWR)  # the server goes away mid-stream


def test_mitmdump_records_a_gzip_event_stream_decoded_and_cut(tmp_path):
    import test_mitm_addon as m  # its mitmdump helpers

    exe = m.find_mitmdump()
    if exe is None:
        unavailable("mitmdump not found (see tests/test_mitm_addon.py)")
    server = http.server.ThreadingHTTPServer((m.HOST, 0), GzipSSEHandler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    out, log = tmp_path / "out.jsonl", tmp_path / "mitmdump.log"
    port = m.free_port()
    cmd = [exe, "-s", str(m.ADDON), "--mode", f"reverse:http://{m.HOST}:{server.server_address[1]}", "--listen-host", m.HOST,
           "--listen-port", str(port), "--set", f"mcp_jsonl={out}", "--set", "connection_strategy=lazy"]
    try:
        with log.open("wb") as logf:
            proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            m.wait_listening(port, proc, log)
            conn = http.client.HTTPConnection(m.HOST, port, timeout=10)
            conn.request("GET", "/mcp", headers={"accept": "text/event-stream", "accept-encoding": "gzip", "mcp-session-id": SID})
            resp = conn.getresponse()
            assert resp.status == 200 and resp.getheader("content-encoding") == "gzip"  # passed on still encoded
            try:
                resp.read()
            except (http.client.IncompleteRead, OSError):
                pass
            conn.close()
            records = m.wait_for_closes(out, 1)
        finally:
            m.stop(proc)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
    kinds = [r["kind"] for r in records]
    assert kinds == ["request", "response", "sse", "sse", "sse", "sse", "close"], (kinds, log.read_text(errors="replace"))
    assert records[1]["decoded"] == "gzip"
    assert [r["id"] for r in records if r["kind"] == "sse"] == ["1", "2", "3", "4"]
    assert records[-1]["decoding"] == "truncated"
    got = inputs.read_one(str(out))
    assert got.rejected == 0 and got.events.num_rows == 4
    assert [c for c, _ in codes(got)] == ["body_encoding_truncated"]
