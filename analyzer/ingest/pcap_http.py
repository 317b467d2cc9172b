"""The HTTP exchanges of one TCP connection: HTTP/1.1 message pairs, or HTTP/2 streams.

One job: take a connection's application bytes, direction by direction (as captured, or the
plaintext :mod:`analyzer.ingest.pcap_tls` decrypted), through HTTP framing -- the two parsers of
:mod:`analyzer.decode.http1`, or :mod:`analyzer.decode.h2` when the ALPN is ``h2`` -- and make each
request an :class:`analyzer.ingest.pcap_body.Exchange`, handing it the request's and the response's
body bytes with their packets.  Framing problems become anomaly rows; the connection's exchanges
go back to :mod:`analyzer.ingest.pcap` when both directions have ended (``ing.conversation_done``).

* one exchange per HTTP request; ``conn`` = ``client->server#n`` (n-th request on the connection, or
  for HTTP/2 the stream's order on it; ``~k`` after the server port when the 5-tuple was reused);
  ``location`` = the packet that carried the request's first byte;
* which side is the client: the SYN, else the selected ports, else the first bytes (a request or a
  response start), else the lower port is the server's -- or the TLS handshake;
* how a response ended when its framing did not complete: the TCP ending of the server's direction
  (FIN "eof", RST "reset"), by the side that closed first / reset; an HTTP/2 stream's own RST_STREAM.
"""
from __future__ import annotations

from collections import deque
from typing import Any

from analyzer.decode import h2, http1, tcp
from analyzer.decode.http1 import Body, BodyGap, Done, Head, MessageParser, Skipped, Stop
from analyzer.ingest.pcap_body import Exchange



class HttpConversation:
    """One TCP connection's HTTP: both directions through HTTP framing, into exchanges.  The tcp.App
    around it (:class:`analyzer.ingest.pcap_tls.Conversation`) feeds :meth:`_plain` / :meth:`_plain_gap`."""

    def __init__(self, ing: Any, flow: tcp.Flow) -> None:  # ing: the capture's state (ingest/pcap._Ingest; not imported: pcap imports this)
        self.ing = ing
        self.flow = flow
        self.client: int | None = None
        self.name = ""
        self.req: MessageParser | None = None
        self.resp: MessageParser | None = None
        self.exchanges: list[Exchange] = []
        self.unanswered: deque[Exchange] = deque()
        self.sending: Exchange | None = None  # request whose body is arriving
        self.receiving: Exchange | None = None  # exchange whose response body is arriving
        self.ended = 0
        self.dead = False
        self.http = False  # at least one message parsed
        self.not_http: tuple[int | None, str] | None = None
        self.server_end: tuple[str, str | None, int | None] | None = None  # (reason, by, ts) once the server's side ended
        self.h2: h2.Connection | None = None  # ALPN h2: HTTP/2 framing instead of the two HTTP/1.1 parsers
        self.streams: dict[int, Exchange] = {}  # h2: stream id -> its exchange
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
        self._start(c, f.client is None)

    def _start(self, client: int, midstream: bool, alpn: str | None = None) -> None:
        """The client is known: the connection's name, and its framing (HTTP/2 for ALPN ``h2``, else HTTP/1.1)."""
        f = self.flow
        self.client = client
        self.name = f.name(client) + (f"~{f.ordinal}" if f.ordinal > 1 else "")
        if alpn == "h2":
            self.h2 = h2.Connection(client)
        else:
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

    # -- application bytes ----------------------------------------------------------
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

    def _gap_context(self, side: int, parser: MessageParser | None, ex: Exchange | None) -> str:
        if parser is None or parser.state == http1.STOPPED:
            return ""
        if ex is not None and side != self.client and ex.sse is not None:
            return f", inside the SSE body of {ex.conn}: the event in progress is cut off, parsing resumes at the next blank line"
        if ex is not None and parser.state in (http1.LENGTH, http1.CHUNK_DATA, http1.UNTIL_CLOSE):
            part = "request" if side == self.client else "response"
            return f", inside the {part} body of {ex.conn}"
        return ""

    def end(self, side: int, reason: str, by: int | None, ts: int | None, pkt: int | None) -> None:
        """One direction of the connection ended (tcp.App): the server's ending ends its open responses."""
        if not self.dead:
            if self.h2 is not None:
                self._streams(self.h2.close(side))
                if side != self.client:
                    when = ts if ts is not None else self.ing.last_ts
                    self.server_end = (reason, self.side_name(by), when)
                    for ex in self.streams.values():
                        if ex.end_reason == "open":
                            ex.finish(*self.server_end)
            else:
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
                        ex.finish(*self.server_end)
                    self.receiving = None
                    self.unanswered.clear()
        self._side_ended()

    def _side_ended(self) -> None:
        self.ended += 1
        if self.ended == 2 and not self.dead:
            self.dead = True
            self.ing.conversation_done(self)

    def _retire(self) -> None:
        """Stop following the connection (TLS, not HTTP, protocol switch): reassembly drops it at its next packet."""
        if self.dead:
            return
        self.dead = True
        self.flow.ignored = True
        self.ing.conversation_done(self)

    # -- HTTP/1.1 records -----------------------------------------------------------
    def _requests(self, recs: list) -> None:
        for r in recs:
            t = type(r)
            if t is Body:
                if self.sending is not None:
                    self.sending.request_data(r.data, r.pkt)
            elif t is Head:
                self.http = True
                ex = Exchange(self, len(self.exchanges) + 1, r)
                self.exchanges.append(ex)
                self.sending = ex
                ex.req_dec = ex.coding(r, "request")
                if self.server_end is not None:  # sent after the server's side had ended: no answer can come
                    ex.finish(*self.server_end)
                    continue
                self.unanswered.append(ex)
                self._responses(self.resp.expect(r.method, r.pkt))  # type: ignore[union-attr, arg-type]
            elif t is Done:
                ex = self.sending
                if ex is not None and ex.req_dec is not None:
                    ex.request_done(r.pkt if r.pkt is not None else ex.req.pkt)
                self.sending = None
            elif t is BodyGap:
                if self.sending is not None:
                    self.sending.request_lost(r.nbytes)
            else:
                self._problem(r, self.client)  # type: ignore[arg-type]
                if t is Stop:
                    self._responses(self.resp.requests_done())  # type: ignore[union-attr]

    def _responses(self, recs: list) -> None:
        for r in recs:
            t = type(r)
            if t is Body:
                if self.receiving is not None:
                    self.receiving.response_data(r.data, r.ts, r.pkt)
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
                self.receiving = ex
                ex.response_head(r)
            elif t is Done:
                if self.receiving is not None:
                    self.receiving.complete(r.ts, r.pkt)
                    self.receiving = None
            elif t is BodyGap:
                if self.receiving is not None:
                    self.receiving.response_lost(r.nbytes)
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
                self._retire()  # not HTTP at all: whether that is an error is decided at the end (pcap._build)
                return
            log.add("http_parse_error", where, f"{self.flow.name(side)}: {r.detail}; this direction is not parsed further")
        elif r.kind == "gap":
            pass  # told in the tcp_seq_gap row of the gap that caused it
        elif r.kind == "cut":
            log.add("http_head_cut_off", where, f"{self.flow.name(side)}: {r.detail}")
        else:  # upgrade: the rest of the connection is another protocol; the 101 exchange itself is complete
            if self.receiving is not None:
                self.receiving.complete(self.receiving.last_ts, r.pkt)
                self.receiving = None
            self.ing.upgraded += 1
            self._retire()

    # -- HTTP/2 records ---------------------------------------------------------------
    def _streams(self, recs: list) -> None:
        """HTTP/2 records: each stream is one exchange, fed through the same body, SSE and coding paths as HTTP/1.1."""
        for r in recs:
            t = type(r)
            if t is h2.StreamData:
                ex = self.streams.get(r.stream)
                if ex is None:
                    continue
                if r.side == self.client:
                    ex.request_data(r.data, r.pkt)
                elif ex.resp is not None and ex.end_reason == "open":
                    ex.response_data(r.data, r.ts, r.pkt)
            elif t is h2.StreamHead:
                self.http = True
                if r.side == self.client:
                    if r.stream in self.streams:
                        continue
                    ex = Exchange(self, len(self.exchanges) + 1, r.head)
                    self.exchanges.append(ex)
                    self.streams[r.stream] = ex
                    ex.req_dec = ex.coding(r.head, "request")
                    if self.server_end is not None:
                        ex.finish(*self.server_end)
                elif not r.head.interim:
                    ex = self.streams.get(r.stream)
                    if ex is None or ex.resp is not None:
                        self.ing.log.add("http_response_without_request", f"packet {r.head.pkt}",
                                         f"{self.flow.name(r.side)}: HTTP/2 stream {r.stream}, status {r.head.status}; its body is skipped")
                        continue
                    ex.response_head(r.head)  # (no HTTP/1.1 `receiving`: streams are found by id)
            elif t is h2.StreamEnd:
                ex = self.streams.get(r.stream)
                if ex is None:
                    continue
                if r.side == self.client:
                    if ex.req_dec is not None and not ex.req_dec.closed:
                        ex.request_done(r.pkt)
                elif ex.resp is not None and ex.end_reason == "open":
                    ex.complete(r.ts, r.pkt)
            elif t is h2.StreamReset:
                ex = self.streams.get(r.stream)
                if ex is not None and ex.end_reason == "open":
                    ex.last_ts, ex.last_pkt = r.ts, r.pkt
                    ex.finish("reset", self.side_name(r.side), r.ts)
            elif t is h2.GoAway:
                pass  # streams above its last id were never processed: they end with the connection
            else:  # h2.Problem
                where = f"packet {r.pkt}" if r.pkt is not None else "file"
                self.ing.log.add(r.code, where, f"{self.flow.name(r.side)}: {r.detail}")
