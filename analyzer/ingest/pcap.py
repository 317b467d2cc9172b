"""pcap / pcapng ingester: packets -> TCP flows -> HTTP/1.1 exchanges -> canonical tables.

The layers, each its own module: :mod:`analyzer.decode.capture` (container),
:mod:`analyzer.decode.tcp` (link/IP/TCP decoding, reassembly), :mod:`analyzer.decode.http1`
(framing), :mod:`analyzer.decode.sse` (events).  This module joins them and maps
the result onto the same rows the HAR and JSONL ingesters make:

* one exchange per HTTP request; ``conn`` = ``client->server#n`` (n-th request
  on the connection; ``~k`` after the server port when the 5-tuple was reused);
  ``location`` = the packet that carried the request's first byte;
* SSE events carry the time and number of the packet that completed them
  (their terminating blank line), so pcap gives exact per-event times.  Each
  piece of a reassembled stream travels with the time and number of the
  segment that carried it; the body is kept with the byte offset where each
  piece ends, parsed once at the end for all streams together
  (:mod:`analyzer.decode.sse_columns`), and each event takes the piece that carried
  its blank line's first byte;
* bodies with a ``Content-Encoding`` (nginx ``gzip on`` compresses event streams too) are decoded
  piece by piece after de-chunking (:mod:`analyzer.decode.content_coding`), before SSE or JSON-RPC
  parsing: each decoded piece keeps the time and packet of the encoded piece whose arrival made it
  available, so an event still takes the packet that completed it;
* ``end_reason``: a response whose framing completed is "complete"; otherwise
  the TCP ending of the server's direction: FIN "eof", RST "reset", the
  capture's end "capture_end"; ``end_by`` is the side that closed first / reset.

Which flows become exchanges is decided by content, not by port: a flow is
MCP when any of its messages carries ``Mcp-Session-Id``, a
``text/event-stream`` response or a JSON-RPC body -- or, with ``ports``,
exactly the flows whose server port is listed.  Other HTTP flows are counted
in a note.

TLS flows are decrypted when a key log is at hand (``--tls-keylog``, through
:func:`analyzer.decode.tls.using_keys`, plus the capture's own pcapng Decryption Secrets Blocks):
:mod:`analyzer.decode.tls` turns each direction's records into plaintext pieces that keep the packet
of the record's last segment, and they enter the same HTTP/1.1 parsers -- or, when the ALPN is ``h2``,
:mod:`analyzer.decode.h2`, whose streams become exchanges one by one (``conn`` ``...#n``, n = the
stream's order on the connection) through the same body, Content-Encoding and SSE paths.  Without
any key log, TLS flows get one ``tls_not_decrypted`` row each, as before; with one, a connection it
has no key for gets ``tls_no_key`` naming its client random (never a secret).
"""
from __future__ import annotations

import gc
import re
from array import array
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from typing import BinaryIO

import polars as pl

from analyzer.decode import h2, http1, sse_columns, tcp, tls
from analyzer.anomalies import CATALOG, AnomalyLog
from analyzer.decode.content_coding import Decoder
from analyzer.decode.capture import CaptureReader
from analyzer.decode.http1 import Body, BodyGap, Done, Head, MessageParser, Skipped, Stop
from analyzer.tables import SSE_MEDIA, Builder, Ingested, media_type

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MIN_NS, _MAX_NS = -62_135_596_800 * 10**9, 253_402_300_799 * 10**9  # years 1 .. 9999
MAX_BODY = 1 << 25  # non-SSE bodies kept up to 32 MiB (JSON-RPC results); longer ones are not kept
PER_PACKET_ROWS = 100  # per-packet anomaly codes: rows for the first 100, then one summary row
_BLANK_LINE = re.compile(rb"(?:\r\n|\r|\n)(?:\r\n|\r|\n)")
_TLS_RECORD = re.compile(rb"[\x14-\x17]\x03[\x00-\x04]")
_PER_PACKET = ("pcap_snaplen_truncated", "packet_malformed", "ip_fragment", "pcap_bad_timestamp")
_LIMIT_KEYS = {"snaplen_gap": "tcp_seq_gap"}


class _Exchange:
    __slots__ = ("conv", "index", "req", "req_body", "req_size", "req_gap", "resp", "body", "body_size", "body_gap", "body_pkt",
                 "keep", "sse", "runs", "resync", "carry", "last_ts", "last_pkt", "end_reason", "end_by", "ended", "dec", "req_dec")

    def __init__(self, conv: "_Conversation", index: int, req: Head) -> None:
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
        self.sse: _Run | None = None  # the event stream being received (a gap starts a new one)
        self.runs: list[_Run] = []
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


class _Run:
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


class _Parsing:
    """SSE bodies are parsed while packets are still being read: when a connection is over, its
    bodies join a batch, and full batches are parsed by :func:`analyzer.decode.sse_columns.parse` in one
    worker thread.  Polars releases the GIL, so the parse runs on the second core while this
    thread reassembles TCP; what is left is parsed at the end."""

    BATCH = 8 << 20  # bytes of body per batch: big enough for Polars, small enough to overlap

    def __init__(self) -> None:
        self.pool: ThreadPoolExecutor | None = None
        self.jobs: list[Future] = []
        self.keys: list[int] = []
        self.bodies: list[bytes] = []
        self.size = 0
        self.next = 0

    def add(self, runs) -> None:
        for run in runs:
            if not run.size:
                continue
            run.key = self.next
            self.next += 1
            self.keys.append(run.key)
            self.bodies.append(b"".join(run.parts))
            run.parts = []
            self.size += run.size
        if self.size >= self.BATCH:
            self._submit()

    def _submit(self) -> None:
        if not self.keys:
            return
        if self.pool is None:
            self.pool = ThreadPoolExecutor(1, thread_name_prefix="sse-parse")
        self.jobs.append(self.pool.submit(sse_columns.parse, self.keys, self.bodies))
        self.keys, self.bodies, self.size = [], [], 0

    def results(self) -> pl.DataFrame:
        """Every event of every body added, grouped by key (blocks in order within a key)."""
        if self.keys and not self.jobs:  # small capture: no thread
            frames = [sse_columns.parse(self.keys, self.bodies)]
            self.keys, self.bodies = [], []
        else:
            self._submit()
            try:
                frames = [job.result() for job in self.jobs]
            finally:
                self.close()
        return pl.concat(frames) if frames else pl.DataFrame(schema=sse_columns.COLUMNS)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None
        self.jobs = []


class _Conversation:
    """One TCP flow's consumer (:class:`analyzer.decode.tcp.App`): both directions through HTTP framing."""

    def __init__(self, ing: "_Ingest", flow: tcp.Flow) -> None:
        self.ing = ing
        self.flow = flow
        self.client: int | None = None
        self.name = ""
        self.req: MessageParser | None = None
        self.resp: MessageParser | None = None
        self.exchanges: list[_Exchange] = []
        self.unanswered: deque[_Exchange] = deque()
        self.sending: _Exchange | None = None  # request whose body is arriving
        self.receiving: _Exchange | None = None  # exchange whose response body is arriving
        self.ended = 0
        self.dead = False
        self.http = False  # at least one message parsed
        self.not_http: tuple[int | None, str] | None = None
        self.server_end: tuple[str, str | None, int | None] | None = None  # (reason, by, ts) once the server's side ended
        self.tls: tls.Connection | None = None  # a TLS connection decrypted with the key log (None: plain HTTP)
        self.h2: h2.Connection | None = None  # ALPN h2: HTTP/2 framing instead of the two HTTP/1.1 parsers
        self.streams: dict[int, _Exchange] = {}  # h2: stream id -> its exchange
        self.scheme = "http"

    # -- roles -------------------------------------------------------------------
    def _roles(self, side: int, first: bytes | None) -> None:
        f = self.flow
        ports = self.ing.ports
        if f.client is not None:
            c = f.client
        elif ports and (f.ports[0] in ports) != (f.ports[1] in ports):
            c = 1 if f.ports[0] in ports else 0
        elif first is not None and http1.starts_like_response(first):
            c = 1 - side
        elif first is not None and http1.starts_like_request(first):
            c = side
        else:
            c = 1 if f.ports[0] < f.ports[1] else 0  # no SYN, no hint: the lower port is the server's
        self.client = c
        midstream = f.client is None
        self.name = f.name(c)
        if f.ordinal > 1:
            self.name = f"{self.name}~{f.ordinal}"
        self.req = MessageParser("request", midstream)
        self.resp = MessageParser("response", midstream, self._request_pending)

    @property
    def server(self) -> tuple[bytes, int]:
        s = 1 - self.client  # type: ignore[operator]
        return self.flow.addrs[s], self.flow.ports[s]

    def _request_pending(self) -> bool:
        """A request that may answer to a response head just parsed is still coming (bounded: heads are at
        most 64 KiB, held data at most tcp.HOLD_LIMIT before a gap is declared)."""
        return self.req.partial_head or bool(self.flow.dirs[self.client].held)  # type: ignore[union-attr, index]

    def side_name(self, side: int | None) -> str | None:
        if side is None or self.client is None:
            return None
        return "client" if side == self.client else "server"

    # -- tcp.App -----------------------------------------------------------------
    def data(self, side: int, data: bytes, ts: int | None, pkt: int) -> None:
        if self.dead:
            return
        if self.tls is not None:
            self._decrypted(self.tls.feed(side, data, ts, pkt))
            return
        if self.client is None:
            if len(data) >= 3 and _TLS_RECORD.match(data):
                if not len(self.ing.keys):
                    self._tls(side, pkt)  # no key log at all: named and skipped, as always
                    return
                self.tls = tls.Connection(self.ing.keys)
                self._decrypted(self.tls.feed(side, data, ts, pkt))
                return
            self._roles(side, data)
        self._plain(side, data, ts, pkt)

    def _plain(self, side: int, data: bytes, ts: int | None, pkt: int) -> None:
        """Application bytes of one direction (as captured, or decrypted) into HTTP framing."""
        if self.dead:
            return
        if self.h2 is not None:
            self._streams(self.h2.feed(side, data, ts, pkt))
            return
        if side == self.client:
            self._requests(self.req.feed(data, ts, pkt))  # type: ignore[union-attr]
        else:
            self._responses(self.resp.feed(data, ts, pkt))  # type: ignore[union-attr]

    def gap(self, side: int, nbytes: int, before: int | None, after: int | None, cause: str) -> None:
        if self.dead:
            return
        if self.tls is not None:
            at = after if after is not None else before
            if cause == "lost":
                around = f"after packet {before}" if after is None else f"between packet {before} and packet {after}"
                self.ing.log.add("tcp_seq_gap", f"packet {at}" if at is not None else "file",
                                 f"{nbytes} bytes missing in {self.flow.name(side)} {around}, inside a TLS connection")
            self._decrypted(self.tls.gap(side, nbytes, at))
            return
        self._plain_gap(side, nbytes, before, after, cause)

    def _plain_gap(self, side: int, nbytes: int, before: int | None, after: int | None, cause: str) -> None:
        if self.dead:
            return
        if self.h2 is not None:
            self._streams(self.h2.gap(side, nbytes, after if after is not None else before))
            return
        if self.client is None:
            self._roles(side, None)
        parser = self.req if side == self.client else self.resp
        at = after if after is not None else before
        where = f"packet {at}" if at is not None else "file"
        ex = self.sending if side == self.client else self.receiving
        context = self._gap_context(side, parser, ex)
        recs = parser.gap(nbytes, at)  # type: ignore[union-attr]
        stop = next((r for r in recs if type(r) is Stop), None)
        if stop is not None:
            context = f", in {ex.conn}" if ex is not None else ""
            context += f": {stop.detail}; this direction is not parsed further"
        if cause == "lost":
            around = f"after packet {before}" if after is None else f"between packet {before} and packet {after}"
            self.ing.log.add("tcp_seq_gap", where, f"{nbytes} bytes missing in {self.flow.name(side)} {around}{context}")
        elif cause == "snaplen" and context:  # cut by snaplen: the packet's own row says so; this one says what it hit
            self.ing.note("tcp_seq_gap", where, f"{nbytes} bytes missing in {self.flow.name(side)} (cut by the capture's snaplen){context}", "snaplen_gap")
        if side == self.client:
            self._requests(recs)
        else:
            self._responses(recs)

    def _gap_context(self, side: int, parser: MessageParser | None, ex: _Exchange | None) -> str:
        if parser is None or parser.state == http1.STOPPED:
            return ""
        if ex is not None and side != self.client and ex.sse is not None:
            return f", inside the SSE body of {ex.conn}: the event in progress is cut off, parsing resumes at the next blank line"
        if ex is not None and parser.state in (http1.LENGTH, http1.CHUNK_DATA, http1.UNTIL_CLOSE):
            part = "request" if side == self.client else "response"
            return f", inside the {part} body of {ex.conn}"
        return ""

    def end(self, side: int, reason: str, by: int | None, ts: int | None, pkt: int | None) -> None:
        if not self.dead and self.tls is not None:
            self._decrypted(self.tls.close(side))
            if self.client is None:  # the handshake never completed: no HTTP to end
                self.ended += 1
                if self.ended == 2 and not self.dead:
                    self.dead = True
                    self.ing.conversation_done(self)
                return
        if not self.dead and self.h2 is not None:
            self._streams(self.h2.close(side))
            if side != self.client:
                when = ts if ts is not None else self.ing.last_ts
                self.server_end = (reason, self.side_name(by), when)
                for ex in self.streams.values():
                    if ex.end_reason == "open":
                        self._finish(ex, *self.server_end)
        elif not self.dead:
            if self.client is None:
                self._roles(side, None)
            if side == self.client:
                self._requests(self.req.close())  # type: ignore[union-attr]
                self._responses(self.resp.requests_done())  # type: ignore[union-attr]
            else:
                self._responses(self.resp.close())  # type: ignore[union-attr]
                when = ts if ts is not None else self.ing.last_ts
                self.server_end = (reason, self.side_name(by), when)
                for ex in ([self.receiving] if self.receiving else []) + list(self.unanswered):
                    self._finish(ex, *self.server_end)
                self.receiving = None
                self.unanswered.clear()
        self.ended += 1
        if self.ended == 2 and not self.dead:
            self.dead = True
            self.ing.conversation_done(self)

    # -- records -----------------------------------------------------------------
    def _requests(self, recs: list) -> None:
        for r in recs:
            t = type(r)
            if t is Body:
                ex = self.sending
                if ex is not None and ex.req_size < MAX_BODY:
                    data = r.data
                    if ex.req_dec is not None:
                        data = ex.req_dec.feed(data)
                        self._coding(ex, ex.req_dec, r.pkt, "request")
                    if data:
                        ex.req_body.append(data)
                        ex.req_size += len(data)
            elif t is Head:
                self.http = True
                ex = _Exchange(self, len(self.exchanges) + 1, r)
                self.exchanges.append(ex)
                self.sending = ex
                ex.req_dec = self._decoder(ex, r, "request")
                if self.server_end is not None:  # sent after the server's side had ended: no answer can come
                    self._finish(ex, *self.server_end)
                    continue
                self.unanswered.append(ex)
                self._responses(self.resp.expect(r.method, r.pkt))  # type: ignore[union-attr, arg-type]
            elif t is Done:
                ex = self.sending
                if ex is not None and ex.req_dec is not None:
                    tail = ex.req_dec.close()
                    if tail and ex.req_size < MAX_BODY:
                        ex.req_body.append(tail)
                        ex.req_size += len(tail)
                    self._coding(ex, ex.req_dec, r.pkt if r.pkt is not None else ex.req.pkt, "request")
                self.sending = None
            elif t is BodyGap:
                if self.sending is not None:
                    self.sending.req_gap = True
                    if self.sending.req_dec is not None:
                        self.sending.req_dec.lost(r.nbytes)
            else:
                self._problem(r, self.client)  # type: ignore[arg-type]
                if t is Stop:
                    self._responses(self.resp.requests_done())  # type: ignore[union-attr]

    def _responses(self, recs: list) -> None:
        for r in recs:
            t = type(r)
            if t is Body:
                if self.receiving is not None:
                    self._body(self.receiving, r.data, r.ts, r.pkt)
            elif t is Head:
                self.http = True
                if r.interim:
                    continue
                if not r.paired:  # its body arrives while receiving is None: dropped
                    self.ing.log.add("http_response_without_request", f"packet {r.pkt}",
                                     f"{self.flow.name(1 - self.client)}: HTTP {r.status}; its body is skipped")  # type: ignore[operator]
                    continue
                if not self.unanswered:  # cannot happen while both parsers agree; never crash on it
                    continue
                ex = self.unanswered.popleft()
                self._head(ex, r)
            elif t is Done:
                if self.receiving is not None:
                    self._complete(self.receiving, r.ts, r.pkt)
                    self.receiving = None
            elif t is BodyGap:
                ex = self.receiving
                if ex is not None:
                    if ex.dec is not None:  # compressed bytes lost: nothing after them can be decoded
                        ex.dec.lost(r.nbytes)
                        self._coding(ex, ex.dec, ex.last_pkt, "response")
                    if ex.sse is not None:
                        self._sse_cut(ex)
                        ex.sse, ex.resync, ex.carry = _Run(), True, b""
                        ex.runs.append(ex.sse)
                    else:
                        ex.body_gap = True
            else:
                self._problem(r, 1 - self.client)  # type: ignore[operator]

    def _problem(self, r: Skipped | Stop, side: int) -> None:
        log = self.ing.log
        if type(r) is Skipped:
            found = "skipped to the next message start" if r.found else "no message start followed"
            detail = f"{self.flow.name(side)}: {r.nbytes} bytes of a message begun before the capture could not be framed; {found}"
            log.add("http_midstream", f"packet {r.pkt}", detail)
            return
        where = f"packet {r.pkt}" if r.pkt is not None else "file"
        if r.kind == "parse":
            if r.at_start and not self.http:
                self.not_http = (r.pkt, f"{self.flow.name(side)}: {r.detail}")
                self._retire()  # not HTTP at all: whether that is an error is decided at the end (see _build)
                return
            log.add("http_parse_error", where, f"{self.flow.name(side)}: {r.detail}; this direction is not parsed further")
        elif r.kind == "gap":
            pass  # told in the tcp_seq_gap row of the gap that caused it
        elif r.kind == "cut":
            log.add("http_head_cut_off", where, f"{self.flow.name(side)}: {r.detail}")
        else:  # upgrade: the rest of the connection is another protocol; the 101 exchange itself is complete
            if self.receiving is not None:
                self._complete(self.receiving, self.receiving.last_ts, r.pkt)
                self.receiving = None
            self.ing.upgraded += 1
            self._retire()

    # -- TLS and HTTP/2 ---------------------------------------------------------------
    def _decrypted(self, recs: list) -> None:
        """What the TLS layer made of the bytes: plaintext into HTTP framing, problems into anomaly rows."""
        for r in recs:
            t = type(r)
            if t is tls.Plain:
                self._plain(r.side, r.data, r.ts, r.pkt)
            elif t is tls.Lost:
                # (HTTP/2 at the direction's end: its close says what was cut; a gap row would say it twice)
                if self.client is not None and not (r.final and self.h2 is not None):
                    self._plain_gap(r.side, r.nbytes, r.pkt, r.pkt, "tls")
            elif t is tls.Negotiated:
                self._tls_roles(r)
            else:  # tls.Problem: never a secret in it (tls.py names the client random only)
                where = f"packet {r.pkt}" if r.pkt is not None else "file"
                who = self.flow.name(r.side) if r.side is not None else self._endpoints()
                self.ing.log.add(r.code, where, f"{who}: {r.detail}")
                if r.stop and self.client is None:
                    self._retire()  # nothing of it was decrypted: no HTTP to follow

    def _endpoints(self) -> str:
        f = self.flow
        return f"{tcp.endpoint(f.addrs[0], f.ports[0])} ↔ {tcp.endpoint(f.addrs[1], f.ports[1])}"

    def _tls_roles(self, r: tls.Negotiated) -> None:
        """The handshake named the client (it sent the ClientHello) and the protocol (ALPN)."""
        f = self.flow
        self.client = r.client
        self.name = f.name(r.client) + (f"~{f.ordinal}" if f.ordinal > 1 else "")
        self.scheme = "https"
        key = (r.version, r.suite, r.alpn or "http/1.1")
        self.ing.tls_kinds[key] = self.ing.tls_kinds.get(key, 0) + 1
        if r.alpn == "h2":
            self.h2 = h2.Connection(r.client)
        else:
            self.req = MessageParser("request", False)
            self.resp = MessageParser("response", False, self._request_pending)

    def _streams(self, recs: list) -> None:
        """HTTP/2 records: each stream is one exchange, fed through the same body, SSE and coding paths as HTTP/1.1."""
        for r in recs:
            t = type(r)
            if t is h2.StreamData:
                ex = self.streams.get(r.stream)
                if ex is None:
                    continue
                if r.side == self.client:
                    if ex.req_size < MAX_BODY:
                        data = r.data
                        if ex.req_dec is not None:
                            data = ex.req_dec.feed(data)
                            self._coding(ex, ex.req_dec, r.pkt, "request")
                        if data:
                            ex.req_body.append(data)
                            ex.req_size += len(data)
                elif ex.resp is not None and ex.end_reason == "open":
                    self._body(ex, r.data, r.ts, r.pkt)
            elif t is h2.StreamHead:
                self.http = True
                if r.side == self.client:
                    if r.stream in self.streams:
                        continue
                    ex = _Exchange(self, len(self.exchanges) + 1, r.head)
                    self.exchanges.append(ex)
                    self.streams[r.stream] = ex
                    ex.req_dec = self._decoder(ex, r.head, "request")
                    if self.server_end is not None:
                        self._finish(ex, *self.server_end)
                elif not r.head.interim:
                    ex = self.streams.get(r.stream)
                    if ex is None or ex.resp is not None:
                        self.ing.log.add("http_response_without_request", f"packet {r.head.pkt}",
                                         f"{self.flow.name(r.side)}: HTTP/2 stream {r.stream}, status {r.head.status}; its body is skipped")
                        continue
                    self._head(ex, r.head)
                    self.receiving = None  # (HTTP/1.1's one-at-a-time bookkeeping; streams are by id)
            elif t is h2.StreamEnd:
                ex = self.streams.get(r.stream)
                if ex is None:
                    continue
                if r.side == self.client:
                    if ex.req_dec is not None and not ex.req_dec.closed:
                        tail = ex.req_dec.close()
                        if tail and ex.req_size < MAX_BODY:
                            ex.req_body.append(tail)
                            ex.req_size += len(tail)
                        self._coding(ex, ex.req_dec, r.pkt, "request")
                elif ex.resp is not None and ex.end_reason == "open":
                    self._complete(ex, r.ts, r.pkt)
            elif t is h2.StreamReset:
                ex = self.streams.get(r.stream)
                if ex is not None and ex.end_reason == "open":
                    ex.last_ts, ex.last_pkt = r.ts, r.pkt
                    self._finish(ex, "reset", self.side_name(r.side), r.ts)
            elif t is h2.GoAway:
                pass  # streams above its last id were never processed: they end with the connection
            else:  # h2.Problem
                where = f"packet {r.pkt}" if r.pkt is not None else "file"
                self.ing.log.add(r.code, where, f"{self.flow.name(r.side)}: {r.detail}")

    def _tls(self, side: int, pkt: int) -> None:
        f = self.flow
        a, b = tcp.endpoint(f.addrs[side], f.ports[side]), tcp.endpoint(f.addrs[1 - side], f.ports[1 - side])
        self.ing.log.add("tls_not_decrypted", f"packet {pkt}", f"{a} ↔ {b}")
        self._retire()

    def _retire(self) -> None:
        """Stop following the connection (TLS, not HTTP, protocol switch): reassembly drops it at its next packet."""
        if self.dead:
            return
        self.dead = True
        self.flow.ignored = True
        self.ing.conversation_done(self)

    # -- exchanges ---------------------------------------------------------------
    def _head(self, ex: _Exchange, head: Head) -> None:
        ex.resp = head  # (the server may answer before the request body ended, e.g. 413: both directions go on)
        self.receiving = ex
        status = head.status or 0
        media = media_type(head.headers.get("content-type"))
        if 200 <= status < 300 and media == SSE_MEDIA:
            ex.sse = _Run()
            ex.runs.append(ex.sse)
        ex.keep = media is None or media == "application/json" or media.endswith("+json")
        ex.last_pkt, ex.last_ts = head.pkt, head.ts
        if ex.sse is not None or ex.keep:  # other bodies are only counted: no need to decode them
            ex.dec = self._decoder(ex, head, "response")

    def _decoder(self, ex: _Exchange, head: Head, part: str) -> Decoder | None:
        value = head.headers.get("content-encoding")
        if not value:
            return None
        dec = Decoder(value)
        if not dec.active:  # identity
            return None
        self._coding(ex, dec, head.pkt, part)  # a coding that cannot be undone is told at once
        return dec

    def _coding(self, ex: _Exchange, dec: Decoder, pkt: int | None, part: str) -> None:
        """One anomaly row per body whose decoding did not end complete, where it went wrong."""
        if dec.reported:
            return
        got = dec.anomaly()
        if got is not None:
            dec.reported = True
            code, detail = got
            self.ing.log.add(code, f"packet {pkt}" if pkt is not None else "file", f"{part} body of {ex.conn}: {detail}")

    def _decode_end(self, ex: _Exchange, ts: int | None, pkt: int | None) -> None:
        """The response body ended: what the decoder still held is the last piece (with the packet that ended it)."""
        dec = ex.dec
        if dec is None or dec.closed:
            return
        if pkt is None:
            ts, pkt = ex.last_ts, ex.last_pkt
        tail = dec.close()
        if tail:
            self._decoded(ex, tail, ts, pkt)
        self._coding(ex, dec, pkt, "response")

    def _body(self, ex: _Exchange, data: bytes, ts: int | None, pkt: int) -> None:
        ex.last_pkt, ex.last_ts = pkt, ts
        dec = ex.dec
        if dec is not None:
            # decoded output becomes available with the encoded piece that completed it: it keeps that
            # piece's time and packet, so the events' join_asof below still finds the right packet
            data = dec.feed(data)
            if dec.state != "open":
                self._coding(ex, dec, pkt, "response")
            if not data:
                return
        self._decoded(ex, data, ts, pkt)

    def _decoded(self, ex: _Exchange, data: bytes, ts: int | None, pkt: int) -> None:
        sse = ex.sse
        if sse is None:
            if ex.keep and ex.body_size < MAX_BODY:
                ex.body.append(data)
            ex.body_size += len(data)
            ex.body_pkt = pkt
            return
        if ex.resync:
            window = ex.carry + data
            m = _BLANK_LINE.search(window)
            if m is None:
                ex.carry = window[-3:]  # a blank line is at most 4 bytes (CRLF CRLF)
                return
            data = window[m.end() :]
            ex.resync, ex.carry = False, b""
            if not data:
                return
        sse.add(data, ts, pkt)

    def _sse_cut(self, ex: _Exchange) -> None:
        """The stream ends here: a block it ended inside gets the time of the last packet seen."""
        run = ex.sse
        if run is not None and not ex.resync:
            run.close_ts, run.close_pkt = ex.last_ts, ex.last_pkt

    def _complete(self, ex: _Exchange, ts: int | None, pkt: int | None) -> None:
        self._decode_end(ex, ts, pkt)
        self._sse_cut(ex)
        ex.end_reason = "complete"
        ex.ended = ts if ts is not None else ex.last_ts
        if pkt is not None:
            ex.body_pkt = pkt

    def _finish(self, ex: _Exchange, reason: str, by: str | None, ts: int | None) -> None:
        self._decode_end(ex, None, None)
        self._sse_cut(ex)
        ex.end_reason = reason
        ex.end_by = by
        ex.ended = ts

    def is_mcp(self) -> bool:
        if self.ing.ports:
            return True
        for ex in self.exchanges:
            h = ex.req.headers
            if "mcp-session-id" in h or any(b'"jsonrpc"' in p for p in ex.req_body):
                return True
            if ex.resp is not None:
                if "mcp-session-id" in ex.resp.headers or ex.sse is not None or media_type(ex.resp.headers.get("content-type")) == SSE_MEDIA:
                    return True
                if any(b'"jsonrpc"' in p for p in ex.body):
                    return True
        return False


class _Ingest:
    def __init__(self, source: str, log: AnomalyLog, ports: frozenset[int] | None, keys: tls.KeyLog | None = None) -> None:
        self.source = source
        self.log = log
        self.ports = ports
        self.last_ts: int | None = None
        self.mcp: list[_Conversation] = []  # finished connections whose exchanges become rows
        self.not_http: list[_Conversation] = []  # decided at the end: error on an HTTP endpoint, else a note
        self.http_servers: set[tuple[bytes, int]] = set()
        self.other_flows = self.other_requests = 0
        self.counts = {"non_ip": 0, "non_tcp": 0, "other_ports": 0}
        self.upgraded = 0
        self.per_packet: dict[str, int] = {}
        self.unsupported: dict[int, list[int]] = {}  # link type -> [first packet, count]
        self.parsing = _Parsing()
        self.keys = keys if keys is not None else tls.KeyLog()
        self.tls_kinds: dict[tuple[str, str, str], int] = {}  # (version, suite, ALPN) -> connections decrypted

    def on_flow(self, flow: tcp.Flow) -> _Conversation | None:
        if self.ports and flow.ports[0] not in self.ports and flow.ports[1] not in self.ports:
            self.counts["other_ports"] += 1
            return None
        return _Conversation(self, flow)

    def conversation_done(self, conv: _Conversation) -> None:
        """A connection is over: keep it if it is MCP, else only count it (its bodies are freed now)."""
        if conv.http and conv.client is not None:
            self.http_servers.add(conv.server)
        if conv.not_http is not None:
            self.not_http.append(conv)
        if not conv.exchanges:
            return
        if conv.is_mcp():
            self.mcp.append(conv)
            self.parsing.add(run for ex in conv.exchanges for run in ex.runs)
        else:
            self.other_flows += 1
            self.other_requests += len(conv.exchanges)
            conv.exchanges = []

    def secrets(self, kind: int, data: bytes, where: str) -> None:
        """A pcapng Decryption Secrets Block (``editcap --inject-secrets``): TLS key log text joins the keys."""
        if kind != tls.DSB_TLS_KEY_LOG:
            self.log.add("tls_keylog_invalid", where, f"a Decryption Secrets Block of type 0x{kind:08x}, not a TLS key log: not used")
            return
        before = self.keys.malformed
        self.keys.add_text(data)
        if self.keys.malformed > before:
            self.log.add("tls_keylog_invalid", where, f"{self.keys.malformed - before} line(s) of its TLS key log are not "
                         "'LABEL CLIENT_RANDOM SECRET' in hex: skipped")

    def note(self, code: str, where: str, detail: str = "", key: str | None = None) -> None:
        """Anomalies that can occur once per packet: the first rows, then one summary row per code (or ``key``)."""
        if code in _PER_PACKET or key:
            key = key or code
            n = self.per_packet.get(key, 0) + 1
            self.per_packet[key] = n
            if n > PER_PACKET_ROWS:
                if CATALOG[code].rejects:
                    self.log.rejected += 1
                return
        self.log.add(code, where, detail)

    def summaries(self) -> None:
        for key, n in self.per_packet.items():
            code = _LIMIT_KEYS.get(key, key)
            if n > PER_PACKET_ROWS:
                more = n - PER_PACKET_ROWS
                self.log.add_summary(code, "file", f"{more} more packet(s) like the rows above (rows are kept for the first {PER_PACKET_ROWS})")
        for lt, (first, n) in sorted(self.unsupported.items()):
            self.log.add("pcap_unsupported_linktype", f"packet {first}", f"{n} packet(s) on link type {lt}")
            self.log.rejected += n - 1


def _dt(ns: int | None) -> datetime | None:
    if ns is None or not _MIN_NS <= ns <= _MAX_NS:
        return None
    return EPOCH + timedelta(microseconds=ns // 1000)


def read(source: str, stream: BinaryIO, redact_secrets: bool = True, ports: frozenset[int] | None = None) -> Ingested:
    # Ingestion allocates millions of small acyclic objects (segments, events, rows) that all live until
    # the tables are built; the cyclic garbage collector would rescan them again and again (over a
    # quarter of the run time on a 100 MB capture) and can free none of them.  Paused, then restored.
    paused = gc.isenabled()
    gc.disable()
    try:
        return _read(source, stream, redact_secrets, ports)
    finally:
        if paused:
            gc.enable()


def _read(source: str, stream: BinaryIO, redact_secrets: bool, ports: frozenset[int] | None) -> Ingested:
    log = AnomalyLog(source)
    # the --tls-keylog files (tls.using_keys), plus this capture's own Decryption Secrets Blocks (copied:
    # one capture's secrets are not another's)
    ing = _Ingest(source, log, ports, tls.current_keys().copy())
    try:
        return _packets(source, stream, redact_secrets, log, ing)
    finally:
        ing.parsing.close()


def _packets(source: str, stream: BinaryIO, redact_secrets: bool, log: AnomalyLog, ing: "_Ingest") -> Ingested:
    reader = CaptureReader(source, stream, ing.note, ing.secrets)
    reasm = tcp.Reassembler(ing.on_flow, ing.note)
    decode, segment = tcp.decode, reasm.segment
    counts = ing.counts
    last_ts = None
    for pkt, ts, linktype, data, wirelen in reader.packets():
        last_ts = ts if ts is not None else last_ts
        seg = decode(linktype, data, wirelen)
        if type(seg) is tuple:
            if seg[8]:
                detail = f"{len(data)} of {wirelen} bytes captured; {seg[8]} TCP payload bytes missing, treated as a gap"
                ing.note("pcap_snaplen_truncated", f"packet {pkt}", detail)
            ing.last_ts = last_ts
            segment(seg, ts, pkt)
        elif type(seg) is str:
            if wirelen > len(data) and "cut short" in seg:
                ing.note("packet_malformed", f"packet {pkt}", f"{seg} (the capture kept {len(data)} of {wirelen} bytes)")
            else:
                ing.note("packet_malformed", f"packet {pkt}", seg)
        elif seg == tcp.NOT_TCP:
            counts["non_tcp"] += 1
        elif seg == tcp.NOT_IP:
            counts["non_ip"] += 1
        elif seg == tcp.FRAGMENT:
            ing.note("ip_fragment", f"packet {pkt}", "IP fragments are not reassembled; the TCP bytes it carries become a gap")
        else:  # UNSUPPORTED_LINK
            got = ing.unsupported.setdefault(linktype, [pkt, 0])
            got[1] += 1
    ing.last_ts = last_ts
    reasm.finish(last_ts)
    ing.summaries()
    return _build(source, log, ing, reader, redact_secrets)


def _build(source: str, log: AnomalyLog, ing: _Ingest, reader: CaptureReader, redact_secrets: bool) -> Ingested:
    b = Builder(source, log, redact_secrets)
    not_http = 0
    for conv in ing.not_http:
        # Garbage towards an endpoint that spoke HTTP in other connections (or a selected port) is an
        # error; another protocol on another endpoint (SSH, a database) is only counted.
        if ing.ports or conv.server in ing.http_servers:
            pkt, detail = conv.not_http  # type: ignore[misc]
            log.add("http_parse_error", f"packet {pkt}" if pkt is not None else "file", f"{detail}; the connection is not parsed further")
        else:
            not_http += 1
    mcp = [ex for conv in ing.mcp for ex in conv.exchanges]
    mcp.sort(key=lambda ex: (ex.req.pkt, ex.conv.flow.first_pkt, ex.index))
    runs: list[tuple[int, str, _Run]] = []
    for ex in mcp:
        xid = _emit(b, ex, ing.note)
        runs.extend((xid, ex.conn, run) for run in ex.runs if run.size)
    _events(b, runs, ing.parsing.results(), ing.note)
    notes = []
    if ing.other_flows:
        notes.append(
            f"{ing.other_flows} HTTP connection(s) with {ing.other_requests} request(s) carried no MCP traffic "
            "(no Mcp-Session-Id, event stream or JSON-RPC body) and were not analyzed."
        )
    if not_http:
        notes.append(f"{not_http} TCP connection(s) did not speak HTTP/1.x and were not analyzed.")
    if ing.counts["other_ports"]:
        notes.append(f"{ing.counts['other_ports']} TCP connection(s) on ports not selected were skipped.")
    if ing.counts["non_tcp"] or ing.counts["non_ip"]:
        notes.append(f"{ing.counts['non_tcp']} non-TCP IP packet(s) and {ing.counts['non_ip']} non-IP frame(s) were ignored.")
    if ing.tls_kinds:
        kinds = ", ".join(f"{n} {v} {suite} {alpn}" for (v, suite, alpn), n in sorted(ing.tls_kinds.items()))
        notes.append(f"{sum(ing.tls_kinds.values())} TLS connection(s) decrypted with the key log: {kinds}.")
    if ing.upgraded:
        notes.append(f"{ing.upgraded} connection(s) switched protocols (101 / CONNECT); what followed was not parsed.")
    if reader.count == 0:
        log.add("input_empty", "file")
    return b.finish("pcap", reader.count, notes)


def _text(parts: list[bytes]) -> str:
    return b"".join(parts).decode("utf-8", "replace")


def _emit(b: Builder, ex: _Exchange, note) -> None:
    req = ex.req

    last: list = [None, None]  # events of one segment share its time: convert once

    def when(ns: int | None, where: str) -> datetime | None:
        if ns == last[0]:
            return last[1]
        got = _dt(ns)
        if got is None and ns is not None:
            note("pcap_bad_timestamp", where, f"{ns} ns since 1970")
        last[0], last[1] = ns, got
        return got

    host = req.headers.get("host")
    target = req.target or ""
    if target.startswith("/"):  # origin-form: the authority is the Host header (else the server's address)
        url = f"{ex.conv.scheme}://{host or tcp.endpoint(*ex.conv.server)}{target}"
    else:
        url = target
    where = f"packet {req.pkt}"
    dec = ex.req_dec
    if dec is not None and not dec.closed:  # the request body never ended (the connection did first)
        tail = dec.close()
        if tail:
            ex.req_body.append(tail)
        got = dec.anomaly()
        if got is not None and not dec.reported:
            dec.reported = True
            b.log.add(got[0], where, f"request body of {ex.conn}: {got[1]}")
    row = b.exchange(
        conn=ex.conn,
        location=where,
        started=when(req.ts, where),
        method=req.method,
        url=url,
        req_headers=req.headers,
        request_body=_text(ex.req_body) if ex.req_body else None,
    )
    resp = ex.resp
    if resp is not None:
        b.response(row, resp.status, resp.headers)
        if ex.dec is not None and ex.dec.undecodable:
            row["body_recorded"] = False  # its events are unknown, not absent (the anomaly row says why)
        if ex.runs:
            pass  # events: column-wise, for all streams at once (_events)
        elif ex.body and not ex.body_gap and ex.body_size <= MAX_BODY:
            b.body(row, _text(ex.body), f"packet {ex.body_pkt}")
        elif ex.keep and ex.body_size > MAX_BODY:
            b.log.add("http_body_not_kept", f"packet {ex.body_pkt}", f"{ex.conn}: {ex.body_size} bytes")
    row["end_reason"] = ex.end_reason if ex.end_reason != "open" else "capture_end"
    row["end_by"] = ex.end_by
    row["ended"] = _dt(ex.ended)
    return row["xid"]


def _events(b: Builder, runs: list[tuple[int, str, _Run]], parsed: pl.DataFrame, note) -> None:
    """Every SSE event of the capture (``parsed``: all bodies, see :class:`_Parsing`), each given the
    packet that carried the first byte of its blank line (a block the stream ended inside: the last
    packet seen), in the order of the exchanges."""
    if not runs:
        return
    base, bases = 0, []
    ends, ts, pkts = array("q"), [], array("q")
    for _xid, _conn, run in runs:
        bases.append(base)
        ends.extend(base + e for e in run.ends)  # offsets in all bodies laid end to end: one sorted axis
        ts.extend(run.ts)
        pkts.extend(run.pkts)
        base += run.size
    meta = pl.DataFrame(
        {
            "key": [r[2].key for r in runs],
            "_o": range(len(runs)),
            "xid": [r[0] for r in runs],
            "conn": [r[1] for r in runs],
            "base": bases,
            "close_ts": [r[2].close_ts for r in runs],
            "close_pkt": [r[2].close_pkt for r in runs],
        },
        schema={"key": pl.Int64, "_o": pl.Int64, "xid": pl.Int64, "conn": pl.String, "base": pl.Int64, "close_ts": pl.Int64, "close_pkt": pl.Int64},
    )
    marks = pl.DataFrame({"_end": ends, "_ts": ts, "_pkt": pkts}, schema={"_end": pl.Int64, "_ts": pl.Int64, "_pkt": pl.Int64})
    ev = (
        parsed.join(meta, on="key", how="inner")
        # the piece whose end lies past the blank line's first byte carried it
        .with_columns(_at=(pl.col("base") + pl.col("dispatch") + 1).fill_null(-1))
        .sort("_at")
        .join_asof(marks, left_on="_at", right_on="_end", strategy="forward")
        .sort("_o", "block")
        .with_columns(
            ns=pl.when(pl.col("dispatch").is_null()).then(pl.col("close_ts")).otherwise(pl.col("_ts")),
            pkt=pl.when(pl.col("dispatch").is_null()).then(pl.col("close_pkt")).otherwise(pl.col("_pkt")),
        )
        .with_columns(location=pl.format("packet {}", pl.col("pkt")), ns_ok=pl.col("ns").is_between(_MIN_NS, _MAX_NS))
    )
    # anomaly rows: the parser's codes, blocks the stream ended inside, times out of range
    flagged = ev.filter((pl.col("anomalies").list.len() > 0) | (pl.col("fate") == "cut_off") | (pl.col("ns").is_not_null() & ~pl.col("ns_ok")))
    last_bad = None
    for codes, fate, where, conn, ns, ok in flagged.select("anomalies", "fate", "location", "conn", "ns", "ns_ok").iter_rows():
        for code in codes:
            b.log.add(code, where, conn)
        if fate == "cut_off":
            b.log.add("sse_unterminated_event", where, conn)
        if ns is not None and not ok and ns != last_bad:
            note("pcap_bad_timestamp", where, f"{ns} ns since 1970")
            last_bad = ns
    b.add_events(
        ev.select(
            "xid",
            "location",
            ts=pl.when(pl.col("ns_ok")).then(pl.from_epoch(pl.col("ns") // 1000, time_unit="us")).dt.replace_time_zone("UTC"),
            id=pl.col("id"),
            event=pl.col("event"),
            data=pl.col("data"),
            retry=pl.col("retry"),
            fate=pl.col("fate"),
        )
    )
