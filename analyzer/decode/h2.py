"""Passive HTTP/2 framing of one connection, both directions (sans-IO), with hyperframe and hpack.

A TLS connection whose ALPN is ``h2`` (the python SDK's client on ``httpx2(http2=True)``, browsers, most
gateways) carries every request of a session as a *stream* of one connection.  ``feed(side, data, ts,
pkt)`` returns per-stream records that the pcap ingester maps onto the same exchanges it builds from
HTTP/1.1 (:mod:`analyzer.ingest.pcap`): :class:`StreamHead` (an :class:`analyzer.decode.http1.Head`
made from the pseudo-headers, ``:authority`` as ``host``), :class:`StreamData` (DATA payload, padding
stripped), :class:`StreamEnd` (END_STREAM), :class:`StreamReset` (RST_STREAM), :class:`GoAway`, and
:class:`Problem` (the connection is not framed further).

Why libraries here and not for HTTP/1.1: HTTP/2 framing is binary and HPACK is stateful (a dynamic table
per direction, Huffman codes, table size updates) -- exactly what python-hyper's ``hyperframe`` (frame
parsing, padding, priority fields) and ``hpack`` (the decoder) maintain and test.  What they do not do,
the observer does here: the connection preface, CONTINUATION assembly, the decoder's table limit following
the *peer's* SETTINGS_HEADER_TABLE_SIZE, and bounds on what a hostile capture can make us buffer.

HPACK lets a few bytes stand for many: a 4 KB header inserted once in the dynamic table is one byte per
reference after that, so a header block of 60 references is 240 KB of headers and a capture of a few MB
is gigabytes of them.  Every block is still decoded whole (the dynamic table must follow every field, or
the later blocks decode wrong), but what is *materialised* (made into the head's ``str`` headers) is
bounded as servers bound it with SETTINGS_MAX_HEADER_LIST_SIZE, the size counted as RFC 7540 §6.5.2
does (name + value + 32 per field): at most ``MAX_HEADER_LIST`` per header block, and per connection
at most ``MAX_CONNECTION_HEADERS`` and ``HEADER_RATIO`` times its bytes (past a floor).  Of a block over
a bound only the first value of each header the analysis reads (``READ``) is kept, and a long value the
dynamic table repeats is decoded once and shared (``Connection._text``): a header nobody reads costs
nothing per reference, one that is read costs its size once.  Where a bound cuts, a
``h2_header_list_too_large`` record says so, and the connection is read on.

An HPACK decoder that misses one header block (a capture gap) is out of step for the rest of the
connection, so a gap ends the framing of that direction (``h2_gap``): what came before is kept.
"""
from __future__ import annotations

from dataclasses import dataclass

from hpack import Decoder
from hpack.exceptions import HPACKError
from hyperframe.exceptions import HyperframeError
from hyperframe.frame import (
    ContinuationFrame,
    DataFrame,
    Frame,
    GoAwayFrame,
    HeadersFrame,
    PushPromiseFrame,
    RstStreamFrame,
    SettingsFrame,
)

from analyzer.decode.http1 import Head, add_header

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
MAX_FRAME = 1 << 24  # the largest frame HTTP/2 can express (2^24 - 1): buffering is bounded by one frame
MAX_HEADER_BLOCK = 1 << 20  # HEADERS + CONTINUATION longer than 1 MiB: not followed
# decoded headers materialised, counted as RFC 7540 §6.5.2 counts SETTINGS_MAX_HEADER_LIST_SIZE (name + value +
# 32 per field).  Per header block: 64 KiB, what h2 servers advertise or enforce (nginx 32 KiB of headers, Envoy
# 60 KiB) and hpack's own default.  Per connection: at most 16 MiB in all, and at most HEADER_RATIO times the
# connection's HTTP/2 bytes so far (both directions) past a floor, so that many cheap connections cannot add up
# what one may not: ordinary MCP traffic decodes to 2-4 times its bytes, streams of nothing but headers to ~40
# times (every field costs 32 however it is encoded), a bomb to thousands of times.
MAX_HEADER_LIST = 1 << 16
MAX_CONNECTION_HEADERS = 16 << 20
CONNECTION_HEADERS_FLOOR = 1 << 18
HEADER_RATIO = 100
# hpack's own bound raises in the middle of a block, leaving the dynamic table out of step: not used (a block
# is at most MAX_HEADER_BLOCK bytes, so its field count is bounded; what is kept of it is bounded above)
_HPACK_LIST = 1 << 62
# the header fields the analysis reads (analyzer.ingest.pcap, analyzer.tables.TableBuilder): kept past the bounds
READ = frozenset({b":method", b":path", b":status", b":authority", b"host", b"content-type", b"content-encoding",
                  b"mcp-session-id", b"last-event-id", b"mcp-protocol-version", b"x-mcp-replay-epoch"})
_READ_LONGEST = max(map(len, READ))
MEMO_MIN = 64  # values at least this long are decoded once per connection and shared (Connection._text)
MEMO_FLOOR = 1 << 20  # the memo is emptied past this plus twice both dynamic tables' sizes

_ERRORS = {0: "NO_ERROR", 1: "PROTOCOL_ERROR", 2: "INTERNAL_ERROR", 3: "FLOW_CONTROL_ERROR", 4: "SETTINGS_TIMEOUT",
           5: "STREAM_CLOSED", 6: "FRAME_SIZE_ERROR", 7: "REFUSED_STREAM", 8: "CANCEL", 9: "COMPRESSION_ERROR",
           10: "CONNECT_ERROR", 11: "ENHANCE_YOUR_CALM", 12: "INADEQUATE_SECURITY", 13: "HTTP_1_1_REQUIRED"}


def error_name(code: int) -> str:
    return _ERRORS.get(code, f"0x{code:x}")


@dataclass(frozen=True, slots=True)
class StreamHead:
    stream: int
    side: int
    head: Head  # a request (method, target) from the client, a response (status) from the server
    end: bool  # END_STREAM on the HEADERS: no body follows


@dataclass(frozen=True, slots=True)
class StreamData:
    stream: int
    side: int
    data: bytes
    ts: int | None
    pkt: int


@dataclass(frozen=True, slots=True)
class StreamEnd:
    stream: int
    side: int
    ts: int | None
    pkt: int


@dataclass(frozen=True, slots=True)
class StreamReset:
    stream: int
    side: int  # who sent the RST_STREAM
    code: int
    ts: int | None
    pkt: int


@dataclass(frozen=True, slots=True)
class GoAway:
    side: int
    last_stream: int
    code: int
    pkt: int


@dataclass(frozen=True, slots=True)
class Problem:
    # catalog code: h2_protocol_error | h2_gap (that direction is not framed further), h2_header_list_too_large
    # (headers past a bound were not kept; framing goes on)
    code: str
    side: int
    pkt: int | None
    detail: str


Out = StreamHead | StreamData | StreamEnd | StreamReset | GoAway | Problem


class _Dir:
    __slots__ = ("buf", "preface", "decoder", "block", "block_stream", "block_end", "block_pkt", "block_ts", "stopped", "headers_seen",
                 "max_frame", "last_pkt")

    def __init__(self, preface: bool) -> None:
        self.buf = bytearray()
        self.preface = preface  # the client's 24-byte preface is still expected
        self.decoder = Decoder(max_header_list_size=_HPACK_LIST)
        self.block = bytearray()  # a header block waiting for its CONTINUATION frames
        self.block_stream = 0
        self.block_end = False
        self.block_pkt = 0
        self.block_ts: int | None = None
        self.stopped = False
        self.headers_seen: set[int] = set()  # streams whose first HEADERS (the head) this side sent
        self.max_frame = 1 << 14  # SETTINGS_MAX_FRAME_SIZE this side announced: the largest frame it may receive
        self.last_pkt: int | None = None


class Connection:
    """Both directions of one HTTP/2 connection; ``client`` is the side that sent the preface (from TLS)."""

    def __init__(self, client: int) -> None:
        self.client = client
        self.dirs = (_Dir(client == 0), _Dir(client == 1))
        self.methods: dict[int, str] = {}  # stream -> the request's method (a response Head names it)
        self.frames = 0
        self.wire = 0  # HTTP/2 bytes of both directions so far
        self.header_bytes = 0  # decoded header bytes materialised so far (RFC 7540 §6.5.2 size)
        self.headers_capped = False  # the connection's bound was reached: from then on, only READ headers
        self._memo: dict[bytes, str] = {}  # long header values -> their str, shared by every head that holds them
        self._memo_bytes = 0

    def feed(self, side: int, data: bytes, ts: int | None, pkt: int) -> list[Out]:
        out: list[Out] = []
        d = self.dirs[side]
        if d.stopped:
            return out
        d.buf += data
        d.last_pkt = pkt
        if d.preface:
            if len(d.buf) < len(PREFACE):
                if not PREFACE.startswith(bytes(d.buf)):
                    self._stop(side, d, "h2_protocol_error", pkt, "the client did not start with the HTTP/2 connection preface", out)
                return out
            if not d.buf.startswith(PREFACE):
                self._stop(side, d, "h2_protocol_error", pkt, "the client did not start with the HTTP/2 connection preface", out)
                return out
            del d.buf[: len(PREFACE)]
            d.preface = False
            self.wire += len(PREFACE)
        buf = d.buf
        pos = 0
        while len(buf) - pos >= 9 and not d.stopped:  # bounded: each pass consumes one frame
            try:
                frame, length = Frame.parse_frame_header(memoryview(bytes(buf[pos : pos + 9])))
            except HyperframeError as exc:
                self._stop(side, d, "h2_protocol_error", pkt, f"a frame header that does not parse ({type(exc).__name__})", out)
                break
            if length > self.dirs[1 - side].max_frame:  # larger than the receiver allows: not HTTP/2 (or garbage)
                self._stop(side, d, "h2_protocol_error", pkt, f"a frame of {length} bytes, over the peer's maximum frame size "
                           f"{self.dirs[1 - side].max_frame}", out)
                break
            if len(buf) - pos < 9 + length:
                break
            body = bytes(buf[pos + 9 : pos + 9 + length])
            pos += 9 + length
            self.frames += 1
            self.wire += 9 + length
            try:
                frame.parse_body(memoryview(body))
            except HyperframeError as exc:
                self._stop(side, d, "h2_protocol_error", pkt, f"a {type(frame).__name__} of {length} bytes does not parse ({type(exc).__name__})", out)
                break
            self._frame(side, d, frame, ts, pkt, out)
        del buf[:pos]
        return out

    def gap(self, side: int, nbytes: int, pkt: int | None) -> list[Out]:
        out: list[Out] = []
        d = self.dirs[side]
        if not d.stopped:
            self._stop(side, d, "h2_gap", pkt, f"{nbytes} bytes of this direction lost by the capture: HTTP/2 frames and HPACK state "
                       "cannot be followed after them; its streams end here", out)
        return out

    def close(self, side: int) -> list[Out]:
        out: list[Out] = []
        d = self.dirs[side]
        if d.stopped:
            return out
        if d.buf or d.block:
            out.append(Problem("h2_protocol_error", side, d.last_pkt,
                               f"the connection ended inside a frame ({len(d.buf)} bytes) or a header block ({len(d.block)} bytes)"))
        d.stopped = True
        d.buf = bytearray()
        return out

    # -- frames -----------------------------------------------------------------------------------------
    def _frame(self, side: int, d: _Dir, frame: Frame, ts: int | None, pkt: int, out: list[Out]) -> None:
        t = type(frame)
        if d.block and t is not ContinuationFrame:
            self._stop(side, d, "h2_protocol_error", pkt, f"a {t.__name__} inside a header block (CONTINUATION expected)", out)
            return
        if t is DataFrame:
            if frame.data:
                out.append(StreamData(frame.stream_id, side, bytes(frame.data), ts, pkt))
            if "END_STREAM" in frame.flags:
                out.append(StreamEnd(frame.stream_id, side, ts, pkt))
        elif t is HeadersFrame or t is ContinuationFrame:
            if t is HeadersFrame:
                d.block_stream, d.block_end, d.block_pkt, d.block_ts = frame.stream_id, "END_STREAM" in frame.flags, pkt, ts
            elif frame.stream_id != d.block_stream or not d.block_stream:
                self._stop(side, d, "h2_protocol_error", pkt, "a CONTINUATION frame without the HEADERS it continues", out)
                return
            d.block += frame.data
            if len(d.block) > MAX_HEADER_BLOCK:
                self._stop(side, d, "h2_protocol_error", pkt, f"a header block longer than {MAX_HEADER_BLOCK} bytes", out)
                return
            if "END_HEADERS" in frame.flags:
                block, d.block = bytes(d.block), bytearray()
                self._headers(side, d, d.block_stream, block, d.block_end, d.block_pkt, d.block_ts, ts, pkt, out)
        elif t is PushPromiseFrame:
            # the server promises a stream: its header block still updates the HPACK table, so decode it
            try:
                d.decoder.decode(bytes(frame.data), raw=True)
            except (HPACKError, ValueError, IndexError) as exc:
                self._stop(side, d, "h2_protocol_error", pkt, f"a PUSH_PROMISE header block does not decode ({type(exc).__name__})", out)
        elif t is RstStreamFrame:
            out.append(StreamReset(frame.stream_id, side, frame.error_code, ts, pkt))
        elif t is SettingsFrame:
            size = frame.settings.get(SettingsFrame.HEADER_TABLE_SIZE)
            if "ACK" not in frame.flags and 1 << 14 <= frame.settings.get(SettingsFrame.MAX_FRAME_SIZE, 0) < MAX_FRAME:
                d.max_frame = frame.settings[SettingsFrame.MAX_FRAME_SIZE]
            if size is not None and "ACK" not in frame.flags:
                # the peer's encoder may now use a table this large when it encodes for this side
                self.dirs[1 - side].decoder.max_allowed_table_size = size
        elif t is GoAwayFrame:
            out.append(GoAway(side, frame.last_stream_id, frame.error_code, pkt))
        # PING, PRIORITY, WINDOW_UPDATE, ALTSVC, extension frames: nothing a stream's content depends on

    def _headers(self, side: int, d: _Dir, stream: int, block: bytes, end: bool, pkt: int, ts: int | None,
                 last_ts: int | None, last_pkt: int, out: list[Out]) -> None:
        try:
            fields = d.decoder.decode(block, raw=True)
        except (HPACKError, ValueError, IndexError, UnicodeDecodeError) as exc:
            # the dynamic table is now unknown: every later header block of this direction is too
            self._stop(side, d, "h2_protocol_error", pkt, f"a header block of stream {stream} does not decode ({type(exc).__name__})", out)
            return
        if stream in d.headers_seen:  # trailers (or a second 1xx-final pair): no new head
            if end:
                out.append(StreamEnd(stream, side, last_ts, last_pkt))
            return
        headers, pseudo = self._materialise(fields, side, stream, pkt, out)
        if side == self.client:
            if ":authority" in pseudo and "host" not in headers:
                headers["host"] = pseudo[":authority"]
            method = pseudo.get(":method", "")
            self.methods[stream] = method
            head = Head(method, pseudo.get(":path", ""), None, "2", headers, pkt, ts)
        else:
            status_s = pseudo.get(":status", "")
            status = int(status_s) if status_s.isdigit() and len(status_s) == 3 else 0
            interim = 100 <= status < 200
            head = Head(self.methods.get(stream), None, status, "2", headers, pkt, ts, interim=interim)
            if interim:
                out.append(StreamHead(stream, side, head, False))
                return
        d.headers_seen.add(stream)
        out.append(StreamHead(stream, side, head, end))
        if end:
            out.append(StreamEnd(stream, side, last_ts, last_pkt))

    def _materialise(self, fields: list, side: int, stream: int, pkt: int, out: list[Out]) -> tuple[dict[str, str], dict[str, str]]:
        """A header list as (headers, pseudo-headers), repeated headers joined -- when it is within the bounds: at
        most ``MAX_HEADER_LIST`` and what the connection may still materialise (:meth:`_budget`).  Else only the
        first value of each header in ``READ`` (each at most ``MAX_HEADER_LIST``): the others are counted, never
        copied."""
        headers: dict[str, str] = {}
        pseudo: dict[str, str] = {}
        text = self._text
        if not self.headers_capped:
            size = 32 * len(fields) + sum(len(n) + len(v) for n, v in fields)  # RFC 7540 §6.5.2
            if size > MAX_HEADER_LIST:
                out.append(Problem("h2_header_list_too_large", side, pkt,
                                   f"stream {stream}: a header list of {size:,} bytes, over the limit of {MAX_HEADER_LIST:,} per "
                                   "header block: only the headers the analysis reads were kept"))
            elif size > self._budget():
                self.headers_capped = True
                out.append(Problem("h2_header_list_too_large", side, pkt,
                                   f"stream {stream}: a header list of {size:,} bytes would take this connection's headers past "
                                   f"its limit ({self.header_bytes:,} decoded bytes so far; at most {MAX_CONNECTION_HEADERS:,} per "
                                   f"connection, and {CONNECTION_HEADERS_FLOOR:,} + {HEADER_RATIO} times its {self.wire:,} HTTP/2 "
                                   "bytes so far): from here on only the headers the analysis reads are kept"))
            else:
                self.header_bytes += size
                for name_b, value_b in fields:
                    name = name_b.decode("latin-1").lower()
                    value = text(value_b)
                    if name.startswith(":"):
                        pseudo.setdefault(name, value)
                    else:
                        add_header(headers, name, value)
                return headers, pseudo
        for name_b, value_b in fields:
            if len(name_b) > _READ_LONGEST or len(name_b) + len(value_b) + 32 > MAX_HEADER_LIST:
                continue
            key = name_b.lower()
            if key in READ:
                name = key.decode("latin-1")
                kept = pseudo if name.startswith(":") else headers
                if name not in kept:
                    kept[name] = text(value_b)
        return headers, pseudo

    def _budget(self) -> int:
        """Decoded header bytes the connection may still materialise."""
        return min(MAX_CONNECTION_HEADERS, CONNECTION_HEADERS_FLOOR + HEADER_RATIO * self.wire) - self.header_bytes

    def _text(self, value: bytes) -> str:
        """``value`` as text; a long one decoded once while it is in use (the dynamic table hands out the same value
        to every reference), so a header repeated by reference costs its size once, not per reference."""
        if len(value) < MEMO_MIN:
            return value.decode("latin-1")
        got = self._memo.get(value)
        if got is None:
            # emptied only when it outgrows what both dynamic tables can hold (and a floor): values still in a
            # table stay shared whatever a hostile peer repeats
            if self._memo_bytes > MEMO_FLOOR + 2 * (self.dirs[0].decoder.header_table.maxsize + self.dirs[1].decoder.header_table.maxsize):
                self._memo.clear()
                self._memo_bytes = 0
            got = self._memo[value] = value.decode("latin-1")
            self._memo_bytes += len(value)
        return got

    def _stop(self, side: int, d: _Dir, code: str, pkt: int | None, detail: str, out: list[Out]) -> None:
        d.stopped = True
        d.buf = bytearray()
        d.block = bytearray()
        out.append(Problem(code, side, pkt, detail))
