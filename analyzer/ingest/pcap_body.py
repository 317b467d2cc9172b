"""The bodies of one captured exchange: Content-Encoding undone, SSE bodies kept with their packets.

One job: take the de-chunked body bytes of an exchange's request and response as the HTTP step
(:mod:`analyzer.ingest.pcap_http`, HTTP/1.1 or HTTP/2 alike) hands them over, each piece with the
time and number of the packet that carried it, and keep what the rows need.  What it hands on:

* to :mod:`analyzer.ingest.pcap_events`, the SSE body of a ``2xx text/event-stream`` response as
  :class:`Run` s -- its bytes and, for each piece, the byte offset where it ends with its packet's
  time and number (the events are parsed later, column-wise, for all streams at once);
* to :mod:`analyzer.ingest.pcap` (the exchange row), the request body, a JSON (or untyped) response
  body up to :data:`MAX_BODY` (where JSON-RPC messages can be), and how the exchange ended.

Bodies with a ``Content-Encoding`` (nginx ``gzip on`` compresses event streams too) are decoded piece
by piece (:mod:`analyzer.decode.content_coding`) before anything looks at them: each decoded piece
keeps the time and packet of the encoded piece whose arrival made it available, so an event still
takes the packet that completed it.  A body that does not decode gets one anomaly row, where it
went wrong.

A gap in the capture inside an SSE body ends its run: the event in progress is cut off, and parsing
resumes in a new run at the next blank line (bytes before it would be read as the middle of an
event).

``end_reason``: a response whose framing completed is "complete" (:meth:`Exchange.complete`);
otherwise the HTTP step tells how the server's direction ended (:meth:`Exchange.finish`): FIN
"eof", RST "reset"; an exchange still open at the capture's end becomes "capture_end" in its row.
"""
from __future__ import annotations

import re
from array import array
from typing import Any

from analyzer.decode.content_coding import Decoder
from analyzer.decode.http1 import Head
from analyzer.tables import SSE_MEDIA, media_type


MAX_BODY = 1 << 25  # non-SSE bodies kept up to 32 MiB (JSON-RPC results); longer ones are not kept
_BLANK_LINE = re.compile(rb"(?:\r\n|\r|\n)(?:\r\n|\r|\n)")


class Run:
    """An SSE body as received, parsed as one stream: its bytes, and where each piece ended, with the
    time and number of the packet that carried it.  A gap in the capture ends a run; parsing
    resumes in a new one at the next blank line."""

    __slots__ = ("parts", "size", "ends", "ts", "pkts", "close_ts", "close_pkt", "key")

    def __init__(self) -> None:
        self.key = -1  # given when its connection is over and the body goes to the parser
        self.parts: list[bytes] = []
        self.size = 0
        self.ends = array("q")
        self.ts: list[int | None] = []
        self.pkts = array("q")
        self.close_ts: int | None = None  # time and packet given to a block the stream ended inside
        self.close_pkt = 0

    def add(self, data: bytes, ts: int | None, pkt: int) -> None:
        self.parts.append(data)
        self.size += len(data)
        self.ends.append(self.size)
        self.ts.append(ts)
        self.pkts.append(pkt)


class Exchange:
    """One HTTP request and its response on a connection (HTTP/1.1 message pair or HTTP/2 stream)."""

    __slots__ = ("conv", "index", "req", "req_body", "req_size", "req_gap", "resp", "body", "body_size", "body_gap", "body_pkt",
                 "keep", "sse", "runs", "resync", "carry", "last_ts", "last_pkt", "end_reason", "end_by", "ended", "dec", "req_dec")

    def __init__(self, conv: Any, index: int, req: Head) -> None:  # conv: its pcap_http.HttpConversation (which imports this)
        self.conv, self.index, self.req = conv, index, req
        self.req_body: list[bytes] = []
        self.req_size = 0
        self.req_gap = False
        self.resp: Head | None = None
        self.body: list[bytes] = []
        self.body_size = 0
        self.body_gap = False
        self.body_pkt = req.pkt
        self.keep = False  # keep the response body: JSON (or untyped), where JSON-RPC messages can be
        self.sse: Run | None = None  # the event stream being received (a gap starts a new one)
        self.runs: list[Run] = []
        self.resync = False  # after a gap: skip to the next blank line before parsing events again
        self.carry = b""
        self.last_ts: int | None = req.ts
        self.last_pkt = req.pkt
        self.end_reason = "open"
        self.end_by: str | None = None
        self.ended: int | None = None
        self.dec: Decoder | None = None  # the response body's Content-Encoding, when it has one
        self.req_dec: Decoder | None = None  # the request body's (rare; JSON-RPC needs it decoded all the same)

    @property
    def conn(self) -> str:
        return f"{self.conv.name}#{self.index}"

    # -- Content-Encoding -----------------------------------------------------------
    def coding(self, head: Head, part: str) -> Decoder | None:
        """The decoder of a message's body (None: no Content-Encoding, or identity)."""
        value = head.headers.get("content-encoding")
        if not value:
            return None
        dec = Decoder(value, self.conv.ing.ratio)
        if not dec.active:  # identity
            return None
        self.report(dec, head.pkt, part)  # a coding that cannot be undone is told at once
        return dec

    def report(self, dec: Decoder, pkt: int | None, part: str) -> None:
        """One anomaly row per body whose decoding did not end complete, where it went wrong."""
        if dec.reported:
            return
        got = dec.anomaly()
        if got is not None:
            dec.reported = True
            code, detail = got
            self.conv.ing.log.add(code, f"packet {pkt}" if pkt is not None else "file", f"{part} body of {self.conn}: {detail}")

    # -- the request body ------------------------------------------------------------
    def request_data(self, data: bytes, pkt: int) -> None:
        if self.req_size < MAX_BODY:
            if self.req_dec is not None:
                data = self.req_dec.feed(data)
                self.report(self.req_dec, pkt, "request")
            if data:
                self.req_body.append(data)
                self.req_size += len(data)

    def request_done(self, pkt: int | None) -> None:
        """The request body ended (``pkt``: the packet that ended it): what its decoder still held."""
        dec = self.req_dec
        if dec is None:  # (callers check first: most bodies have no coding)
            return
        tail = dec.close()
        if tail and self.req_size < MAX_BODY:
            self.req_body.append(tail)
            self.req_size += len(tail)
        self.report(dec, pkt, "request")

    def request_lost(self, nbytes: int) -> None:
        self.req_gap = True
        if self.req_dec is not None:
            self.req_dec.lost(nbytes)

    # -- the response body -----------------------------------------------------------
    def response_head(self, head: Head) -> None:
        """The response began: an event stream gets its first run, a JSON body is kept, both decoded."""
        self.resp = head  # (the server may answer before the request body ended, e.g. 413: both directions go on)
        status = head.status or 0
        media = media_type(head.headers.get("content-type"))
        if 200 <= status < 300 and media == SSE_MEDIA:
            self.sse = Run()
            self.runs.append(self.sse)
        self.keep = media is None or media == "application/json" or media.endswith("+json")
        self.last_pkt, self.last_ts = head.pkt, head.ts
        if self.sse is not None or self.keep:  # other bodies are only counted: no need to decode them
            self.dec = self.coding(head, "response")

    def response_data(self, data: bytes, ts: int | None, pkt: int) -> None:
        self.last_pkt, self.last_ts = pkt, ts
        dec = self.dec
        if dec is not None:
            # decoded output becomes available with the encoded piece that completed it: it keeps that
            # piece's time and packet, so the events' join_asof still finds the right packet
            data = dec.feed(data)
            if dec.state != "open":
                self.report(dec, pkt, "response")
            if not data:
                return
        self._decoded(data, ts, pkt)

    def _decoded(self, data: bytes, ts: int | None, pkt: int) -> None:
        sse = self.sse
        if sse is None:
            if self.keep and self.body_size < MAX_BODY:
                self.body.append(data)
            self.body_size += len(data)
            self.body_pkt = pkt
            return
        if self.resync:
            window = self.carry + data
            m = _BLANK_LINE.search(window)
            if m is None:
                self.carry = window[-3:]  # a blank line is at most 4 bytes (CRLF CRLF)
                return
            data = window[m.end() :]
            self.resync, self.carry = False, b""
            if not data:
                return
        sse.add(data, ts, pkt)

    def response_lost(self, nbytes: int) -> None:
        """The capture lost ``nbytes`` of the response body: an event stream goes on in a new run."""
        if self.dec is not None:  # compressed bytes lost: nothing after them can be decoded
            self.dec.lost(nbytes)
            self.report(self.dec, self.last_pkt, "response")
        if self.sse is not None:
            self._cut()
            self.sse, self.resync, self.carry = Run(), True, b""
            self.runs.append(self.sse)
        else:
            self.body_gap = True

    # -- the end -------------------------------------------------------------------------
    def complete(self, ts: int | None, pkt: int | None) -> None:
        """The response's framing completed (``pkt``: the packet that ended it)."""
        self._decode_end(ts, pkt)
        self._cut()
        self.end_reason = "complete"
        self.ended = ts if ts is not None else self.last_ts
        if pkt is not None:
            self.body_pkt = pkt

    def finish(self, reason: str, by: str | None, ts: int | None) -> None:
        """The response ended otherwise: its connection (or stream) ended or was reset."""
        self._decode_end(None, None)
        self._cut()
        self.end_reason = reason
        self.end_by = by
        self.ended = ts

    def _decode_end(self, ts: int | None, pkt: int | None) -> None:
        """The response body ended: what the decoder still held is the last piece (with the packet that ended it)."""
        dec = self.dec
        if dec is None or dec.closed:
            return
        if pkt is None:
            ts, pkt = self.last_ts, self.last_pkt
        tail = dec.close()
        if tail:
            self._decoded(tail, ts, pkt)
        self.report(dec, pkt, "response")

    def _cut(self) -> None:
        """The stream ends here: a block it ended inside gets the time of the last packet seen."""
        run = self.sse
        if run is not None and not self.resync:
            run.close_ts, run.close_pkt = self.last_ts, self.last_pkt
