"""One TCP flow as the capture's reassembly hands it over: TLS followed when there is a key, plaintext handed on.

One job: be the flow's consumer (:class:`analyzer.decode.tcp.App`: ``data`` / ``gap`` / ``end``) and
decide what its bytes are.  A flow whose first bytes are a TLS record is followed by
:mod:`analyzer.decode.tls` with the key log (``--tls-keylog``, through
:attr:`analyzer.ingest.reading.Reading.keys`, plus the capture's own pcapng Decryption Secrets Blocks):
each direction's records become plaintext pieces that keep the packet of the record's last segment,
and the handshake names the client and the protocol (ALPN ``h2`` or HTTP/1.1).  The plaintext -- or,
for a flow without TLS, the bytes as captured -- goes on to the HTTP step this class extends
(:class:`analyzer.ingest.pcap_http.HttpConversation`).

Without any key log, TLS flows get one ``tls_not_decrypted`` row each and are dropped; with one, a
connection it has no key for gets ``tls_no_key`` naming its client random (never a secret).

(The HTTP step is the base class, not an object this one calls, so a plain flow's bytes reach the
HTTP parsers with no extra call per packet.)
"""
from __future__ import annotations

import re
from typing import Any

from analyzer.decode import h2, http1, tcp, tls
from analyzer.ingest.pcap_http import HttpConversation


_TLS_RECORD = re.compile(rb"[\x14-\x17]\x03[\x00-\x04]")
# a ClientHello whose 5-byte record header is damaged: handshake type 1, a length under 64 KiB, version 3.x
_HELLO_BODY = re.compile(rb".{5}\x01\x00..\x03[\x00-\x04]", re.S)


class Conversation(HttpConversation):
    """One TCP flow's consumer (:class:`analyzer.decode.tcp.App`): TLS, then both directions through HTTP framing."""

    def __init__(self, ing: Any, flow: tcp.Flow) -> None:  # ing: ingest/pcap._Ingest (not imported: pcap imports this)
        super().__init__(ing, flow)
        self.tls: tls.Connection | None = None  # a TLS connection decrypted with the key log (None: plain HTTP)

    # -- tcp.App -----------------------------------------------------------------
    def data(self, side: int, data: bytes, ts: int | None, pkt: int) -> None:
        if self.dead:
            return
        if self.tls is not None:
            self._decrypted(self.tls.feed(side, data, ts, pkt))
            return
        if self.client is None:
            if len(data) >= 3 and (_TLS_RECORD.match(data) or _HELLO_BODY.match(data)):
                if not len(self.ing.keys):
                    self._tls(side, pkt)  # no key log at all: named and skipped, as always
                    return
                self.tls = tls.Connection(self.ing.keys)
                self._decrypted(self.tls.feed(side, data, ts, pkt))
                return
            self._roles(side, data)
        self._plain(side, data, ts, pkt)

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

    def end(self, side: int, reason: str, by: int | None, ts: int | None, pkt: int | None) -> None:
        if not self.dead and self.tls is not None:
            self._decrypted(self.tls.close(side))
            if self.client is None:  # the handshake never completed: no HTTP to end
                self._side_ended()
                return
        super().end(side, reason, by, ts, pkt)

    # -- TLS records -------------------------------------------------------------
    def _decrypted(self, recs: list) -> None:
        """What the TLS layer made of the bytes: plaintext into HTTP framing, problems into anomaly rows."""
        for r in recs:
            t = type(r)
            if t is tls.Plain:
                if self.client is None:  # plaintext before the handshake named the protocol (see _unnegotiated)
                    self._unnegotiated(r)
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
        if self.client is not None:  # framed already, by the first plaintext (_unnegotiated): what was spoken stands
            return
        self.scheme = "https"
        key = (r.version, r.suite, r.alpn or "http/1.1")
        self.ing.tls_kinds[key] = self.ing.tls_kinds.get(key, 0) + 1
        self._start(r.client, False, r.alpn)

    def _unnegotiated(self, r: tls.Plain) -> None:
        """Plaintext before the handshake said which protocol follows: in TLS 1.3 the ALPN is in the server's
        first encrypted record (EncryptedExtensions), so when that record does not authenticate (a damaged
        byte: the server's direction stops, a ``tls_decrypt_failed`` row) -- or the capture holds the server's
        flight after the client's request -- the client's records decrypt first.  The ClientHello named the
        client; the protocol is read from the bytes themselves: HTTP/2's connection preface from the client, or
        from the server anything but an HTTP/1.x status line when it offered ``h2``."""
        conn = self.tls
        assert conn is not None and conn.client is not None  # (a record decrypts only after the hellos)
        head = r.data[: len(h2.PREFACE)]
        if r.side == conn.client:
            alpn = "h2" if h2.PREFACE.startswith(head) else None
        else:
            alpn = "h2" if "h2" in conn.offered_alpn and not http1.starts_like_response(r.data) else None
        self.scheme = "https"
        version = {0x0303: "TLS 1.2", 0x0304: "TLS 1.3"}.get(conn.version, hex(conn.version))
        key = (version, conn.suite.name if conn.suite is not None else "?", alpn or "http/1.1")
        self.ing.tls_kinds[key] = self.ing.tls_kinds.get(key, 0) + 1
        self._start(conn.client, False, alpn)

    def _tls(self, side: int, pkt: int) -> None:
        f = self.flow
        a, b = tcp.endpoint(f.addrs[side], f.ports[side]), tcp.endpoint(f.addrs[1 - side], f.ports[1 - side])
        self.ing.log.add("tls_not_decrypted", f"packet {pkt}", f"{a} ↔ {b}")
        self._retire()
