"""TLS 1.2 / 1.3 record decryption of one captured connection, with an NSS key log (sans-IO).

Production MCP traffic is HTTPS.  Clients that honour ``SSLKEYLOGFILE`` (python's ``ssl``, node, curl,
browsers) write the NSS key log format, one secret per line::

    CLIENT_RANDOM <client random hex> <TLS 1.2 master secret hex>
    CLIENT_HANDSHAKE_TRAFFIC_SECRET <client random hex> <secret hex>     (TLS 1.3, and SERVER_..., and the
    CLIENT_TRAFFIC_SECRET_0 <client random hex> <secret hex>             application secrets ..._0)

which Wireshark uses to decrypt; so does this module.  :class:`KeyLog` (:mod:`analyzer.decode.tls_keys`,
with the key schedules and record AEADs) parses such files and pcapng Decryption Secrets Blocks, which
carry the same text; :class:`Connection` (here) follows both directions of
one TCP connection: it reads the ClientHello (client random, offered ALPN) and the ServerHello (cipher
suite, ``supported_versions``), derives the record keys (TLS 1.2: the PRF's key expansion of the master
secret; TLS 1.3: HKDF-Expand-Label of the traffic secrets, handshake then application, KeyUpdate to the
next), decrypts every record with ``cryptography``'s AEADs and hands on the application data as
:class:`Plain` pieces, each with the time and packet of the segment that completed its record -- so the
HTTP/1.1 (or HTTP/2) framing after it runs unchanged and every SSE event still gets its packet.

Supported: AEAD suites only (AES-128/256-GCM and ChaCha20-Poly1305; in TLS 1.2 with any key exchange,
since the key log gives the master secret).  CBC and other suites, SSLv3/TLS 1.0/1.1, a handshake the
capture did not see, a key the log lacks, a record that does not authenticate and records the capture
cut are :class:`Problem` rows with the packet where they happened.

Key material never leaves this module: secrets are kept in :class:`KeyLog` (whose ``repr`` shows only
counts) and in the AEAD objects; problems name the client random (public: it crosses the wire in clear)
and never a secret.
"""
from __future__ import annotations

import hashlib
import re
import struct
from dataclasses import dataclass

# the secrets side (key log, key schedules, record AEADs), re-exported: callers need one module
from analyzer.decode.tls_keys import (  # noqa: F401
    DSB_TLS_KEY_LOG,
    SUITES_12,
    SUITES_13,
    Cipher,
    KeyLog,
    Suite,
    current_keys,
    hkdf_expand_label,
    keys12,
    prf12,
    using_keys,
)

MAX_CIPHERTEXT = (1 << 14) + 2048  # RFC 5246 §6.2.3 (1.3 allows only 2^14 + 256): a longer record is not TLS
MAX_HANDSHAKE = 1 << 18  # a handshake message (a certificate chain) longer than 256 KiB is not followed
RESYNC_WINDOW = 1 << 16  # after bytes the capture lost: search this far for the next record that decrypts
RESYNC_TRIALS = 4096  # ... trying at most this many (record position, sequence number) pairs in all

# --- records out --------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Plain:
    """Decrypted application data of ``side``, with the segment that completed its record."""
    side: int
    data: bytes
    ts: int | None
    pkt: int


@dataclass(frozen=True, slots=True)
class Lost:
    """Application data of ``side`` that cannot be decrypted (capture gap, failed record): about ``nbytes``."""
    side: int
    nbytes: int
    pkt: int | None
    final: bool = False  # at the direction's end: nothing follows the lost bytes


@dataclass(frozen=True, slots=True)
class Problem:
    code: str  # a catalog code (tls_*)
    pkt: int | None
    detail: str
    side: int | None = None
    stop: bool = False  # the whole connection is not decrypted further


@dataclass(frozen=True, slots=True)
class Negotiated:
    """The handshake is understood: the protocol after it (ALPN ``h2``, ``http/1.1`` or None) and the client side."""
    client: int
    alpn: str | None
    version: str
    suite: str


Out = Plain | Lost | Problem | Negotiated

_HRR_RANDOM = hashlib.sha256(b"HelloRetryRequest").digest()
_VERSIONS = {0x0300: "SSL 3.0", 0x0301: "TLS 1.0", 0x0302: "TLS 1.1", 0x0303: "TLS 1.2", 0x0304: "TLS 1.3"}
# a record header: handshake, alert, change_cipher_spec or application data; version 3.x
_RECORD_HEADER = re.compile(rb"[\x14-\x17]\x03[\x01-\x04]", re.S)


class _Dir:
    __slots__ = ("buf", "buf_pkt", "buf_ts", "cipher", "hs", "stopped", "resync", "lost", "lost_pkt", "finished", "app_secret",
                 "resync_from", "trials")

    def __init__(self) -> None:
        self.buf = bytearray()  # bytes of a record not complete yet (bounded: one record)
        self.buf_pkt: int | None = None  # packet of the first byte held
        self.buf_ts: int | None = None
        self.cipher: Cipher | None = None
        self.hs = bytearray()  # handshake message bytes not complete yet (bounded: MAX_HANDSHAKE)
        self.stopped = False
        self.resync = False  # after a gap: looking for the next record that decrypts
        self.lost = 0  # ciphertext bytes lost or skipped since the last good record
        self.lost_pkt: int | None = None
        self.finished = False  # TLS 1.3: this side's Finished seen (application secret in use)
        self.app_secret: bytes | None = None
        self.resync_from = 0  # resync: candidates before this offset of buf were tried and failed
        self.trials = 0  # resync: decryptions tried since the gap (bounded by RESYNC_TRIALS)


class Connection:
    """Both directions of one TLS connection (sides 0 and 1 as in :class:`analyzer.decode.tcp.Flow`).

    ``feed(side, data, ts, pkt)``, ``gap(side, nbytes, pkt)``, ``close(side)`` return :data:`Out` records."""

    def __init__(self, keys: KeyLog) -> None:
        self.keys = keys
        self.dirs = (_Dir(), _Dir())
        self.client: int | None = None
        self.client_random: bytes | None = None
        self.server_random: bytes | None = None
        self.offered_alpn: list[str] = []
        self.alpn: str | None = None
        self.version = 0
        self.suite: Suite | None = None
        self.suite_id = 0
        self.secrets: dict[str, bytes] | None = None
        self.stopped = False
        self.negotiated = False
        self.early = False  # the client sent 0-RTT early data
        self.records = 0  # records decrypted

    @property
    def random_hex(self) -> str:
        return self.client_random.hex() if self.client_random else "unknown"

    # -- input ------------------------------------------------------------------------------------------
    def feed(self, side: int, data: bytes, ts: int | None, pkt: int) -> list[Out]:
        out: list[Out] = []
        d = self.dirs[side]
        if self.stopped or d.stopped:
            return out
        if not d.buf:
            d.buf_pkt, d.buf_ts = pkt, ts
        d.buf += data
        if d.resync:
            self._resync(side, d, pkt, out)
            if d.resync or d.stopped:
                return out
        buf = d.buf
        pos = 0
        n = len(buf)
        while n - pos >= 5 and not d.stopped and not self.stopped:  # bounded: each pass consumes a record
            ctype, major, length = buf[pos], buf[pos + 1], int.from_bytes(buf[pos + 3 : pos + 5], "big")
            if ctype not in (20, 21, 22, 23) or major != 3 or length > MAX_CIPHERTEXT:
                self._stop_dir(side, d, "tls_record_invalid", pkt,
                               f"bytes that are no TLS record header (type {ctype}, version {major}.{buf[pos + 2]}, length {length})", out)
                break
            if n - pos < 5 + length:
                break
            header = bytes(buf[pos : pos + 5])
            body = bytes(buf[pos + 5 : pos + 5 + length])
            pos += 5 + length
            self._record(side, d, ctype, header, body, ts, pkt, out)
        del buf[:pos]
        if buf:
            d.buf_pkt, d.buf_ts = (pkt, ts) if pos else (d.buf_pkt, d.buf_ts)
        return out

    def gap(self, side: int, nbytes: int, pkt: int | None) -> list[Out]:
        """``nbytes`` of this direction were lost by the capture: the record they fell in is gone; what follows
        is searched for the next record that decrypts (its sequence number found by trial, bounded)."""
        out: list[Out] = []
        d = self.dirs[side]
        if self.stopped or d.stopped:
            return out
        if d.cipher is None:
            self._stop_dir(side, d, "tls_record_cut", pkt, f"{nbytes} bytes lost by the capture before encryption started (in the handshake)", out)
            return out
        if not d.lost:
            d.lost_pkt = pkt
        d.lost += len(d.buf) + nbytes
        d.buf = bytearray()
        d.resync, d.resync_from, d.trials = True, 0, 0
        return out

    def close(self, side: int) -> list[Out]:
        """The direction ended: a record it ended inside was cut by the capture (or the peer)."""
        out: list[Out] = []
        d = self.dirs[side]
        if self.stopped or d.stopped:
            return out
        if d.resync:
            out.append(Problem("tls_record_cut", d.lost_pkt, f"{d.lost} bytes lost by the capture; no record after them decrypted", side))
            out.append(Lost(side, d.lost, d.lost_pkt, True))
        elif d.buf:
            need = int.from_bytes(d.buf[3:5], "big") + 5 if len(d.buf) >= 5 else 5
            out.append(Problem("tls_record_cut", d.buf_pkt, f"the connection ended {len(d.buf)} bytes into a {need}-byte record", side))
            if d.cipher is not None:
                out.append(Lost(side, len(d.buf), d.buf_pkt, True))
        d.buf = bytearray()
        d.stopped = True
        return out

    # -- records ----------------------------------------------------------------------------------------
    def _record(self, side: int, d: _Dir, ctype: int, header: bytes, body: bytes, ts: int | None, pkt: int, out: list[Out]) -> None:
        if ctype == 20:  # change_cipher_spec: TLS 1.2 switches this side to its keys; 1.3 sends it for show
            if self.version == 0x0303 and d.cipher is None:
                self._keys12(side, pkt, out)
            return
        cipher = d.cipher
        if cipher is None:
            if ctype == 22:
                self._handshake(side, d, body, pkt, out, encrypted=False)
            elif ctype == 21:
                pass  # a plaintext alert (handshake failure): nothing to decrypt
            elif ctype == 23:
                if side == self.client and self.server_random is None and self.client_random is not None:
                    # TLS 1.3 0-RTT early data (before the ServerHello): its key (CLIENT_EARLY_TRAFFIC_SECRET) is not used
                    if not self.early:
                        self.early = True
                        out.append(Problem("tls_unsupported", pkt, "TLS 1.3 early data (0-RTT) is not decrypted; the rest of the "
                                           "connection is", side))
                    return
                if self.client_random is None:
                    self._stop_all("tls_not_decrypted", pkt, "application data before any handshake the capture holds "
                                   "(the connection was open before the capture started): no client random to find its keys by", out)
                elif not self.stopped:
                    self._stop_all("tls_record_invalid", pkt, "application data before the handshake set keys", out)
            return
        plain = cipher.open(ctype, header, body, cipher.seq)
        if plain is None and self.early and side == self.client and not d.finished:
            return  # early data (or EndOfEarlyData) after the ServerHello: skipped by trial, as a server does
        if plain is None:
            self._stop_dir(side, d, "tls_decrypt_failed", pkt,
                           f"record {cipher.seq} ({len(body)} bytes) of client random {self.random_hex} does not authenticate: "
                           "wrong key in the key log, or corrupt bytes", out, len(body))
            return
        cipher.seq += 1
        self.records += 1
        if cipher.v13:
            end = len(plain)
            while end and plain[end - 1] == 0:  # RFC 8446 §5.4: content, type, zero padding
                end -= 1
            if not end:
                self._stop_dir(side, d, "tls_record_invalid", pkt, "a TLS 1.3 record without a content type", out)
                return
            ctype, plain = plain[end - 1], plain[: end - 1]
        if ctype == 23:
            if plain:
                out.append(Plain(side, plain, ts, pkt))
        elif ctype == 22:
            self._handshake(side, d, plain, pkt, out, encrypted=True)
        # alerts (21), and a 1.3 change_cipher_spec inside: nothing to hand on

    def _handshake(self, side: int, d: _Dir, data: bytes, pkt: int, out: list[Out], encrypted: bool) -> None:
        d.hs += data
        hs = d.hs
        pos = 0
        while len(hs) - pos >= 4 and not d.stopped and not self.stopped:  # bounded: each pass consumes a message
            mtype, mlen = hs[pos], int.from_bytes(hs[pos + 1 : pos + 4], "big")
            if mlen > MAX_HANDSHAKE:
                self._stop_all("tls_record_invalid", pkt, f"a handshake message of type {mtype} claims {mlen} bytes", out)
                return
            if len(hs) - pos < 4 + mlen:
                break
            body = bytes(hs[pos + 4 : pos + 4 + mlen])
            pos += 4 + mlen
            try:
                self._message(side, d, mtype, body, pkt, out)
            except (IndexError, struct.error, ValueError):
                self._stop_all("tls_record_invalid", pkt, f"a handshake message of type {mtype} ({mlen} bytes) does not parse", out)
                return
        del hs[:pos]

    def _message(self, side: int, d: _Dir, mtype: int, body: bytes, pkt: int, out: list[Out]) -> None:
        if mtype == 1 and self.client is None:  # ClientHello
            self.client = side
            self.client_random = body[2:34]
            at = 34
            at += 1 + body[at]  # session id
            at += 2 + int.from_bytes(body[at : at + 2], "big")  # cipher suites
            at += 1 + body[at]  # compression methods
            for etype, ext in _extensions(body, at):
                if etype == 16:
                    self.offered_alpn = _alpn(ext)
        elif mtype == 2 and side != self.client and self.client is not None:  # ServerHello
            random = body[2:34]
            if random == _HRR_RANDOM:
                return  # HelloRetryRequest: a second ClientHello (same random) and a real ServerHello follow
            self.server_random = random
            version = int.from_bytes(body[0:2], "big")
            at = 34
            at += 1 + body[at]
            self.suite_id = int.from_bytes(body[at : at + 2], "big")
            at += 3
            for etype, ext in _extensions(body, at):
                if etype == 43 and len(ext) >= 2:
                    version = int.from_bytes(ext[:2], "big")
                elif etype == 16:
                    got = _alpn(ext)
                    self.alpn = got[0] if got else None
            self.version = version
            if version == 0x0304:
                self._keys13(pkt, out)
            elif version != 0x0303:
                self._stop_all("tls_unsupported", pkt, f"{_VERSIONS.get(version, hex(version))}: only TLS 1.2 and 1.3 are decrypted", out)
            elif self.suite_id not in SUITES_12:
                self._stop_all("tls_unsupported", pkt, f"TLS 1.2 cipher suite 0x{self.suite_id:04x}: only the AEAD suites "
                               "(AES-GCM, ChaCha20-Poly1305) are decrypted", out)
            else:
                self.suite = SUITES_12[self.suite_id]
                self._negotiated(out)  # the 1.2 ServerHello carries the ALPN: known now
        elif mtype == 8 and self.version == 0x0304 and side != self.client:  # EncryptedExtensions: 1.3's ALPN
            for etype, ext in _extensions(body, 0):
                if etype == 16:
                    got = _alpn(ext)
                    self.alpn = got[0] if got else None
            self._negotiated(out)
        elif mtype == 20 and self.version == 0x0304 and not d.finished:  # Finished: this side's application keys
            d.finished = True
            label = "CLIENT_TRAFFIC_SECRET_0" if side == self.client else "SERVER_TRAFFIC_SECRET_0"
            secret = (self.secrets or {}).get(label)
            if secret is None or self.suite is None:
                self._stop_dir(side, d, "tls_no_key", pkt, f"the key log has no {label} for client random {self.random_hex}", out)
                return
            d.app_secret = secret
            d.cipher = Cipher.tls13(self.suite, secret)
        elif mtype == 24 and self.version == 0x0304 and d.app_secret is not None and self.suite is not None:  # KeyUpdate
            d.app_secret = hkdf_expand_label(d.app_secret, "traffic upd", b"", len(d.app_secret), self.suite.hash_name)
            d.cipher = Cipher.tls13(self.suite, d.app_secret)

    def _negotiated(self, out: list[Out]) -> None:
        if self.negotiated or self.suite is None or self.client is None:
            return
        self.negotiated = True
        out.append(Negotiated(self.client, self.alpn, _VERSIONS.get(self.version, hex(self.version)), self.suite.name))

    # -- keys -------------------------------------------------------------------------------------------
    def _lookup(self, pkt: int, out: list[Out], labels: tuple[str, ...]) -> dict[str, bytes] | None:
        got = self.keys.get(self.client_random or b"")
        if got is None or any(label not in got for label in labels):
            missing = ", ".join(label for label in labels if got is None or label not in got)
            self._stop_all("tls_no_key", pkt, f"the key log has no {missing} for client random {self.random_hex}", out)
            return None
        return got

    def _keys12(self, side: int, pkt: int, out: list[Out]) -> None:
        if self.suite is None or self.client_random is None or self.server_random is None or self.stopped:
            return
        if self.secrets is None:
            self.secrets = self._lookup(pkt, out, ("CLIENT_RANDOM",))
            if self.secrets is None:
                return
        client, server = keys12(self.suite, self.secrets["CLIENT_RANDOM"], self.client_random, self.server_random)
        self.dirs[side].cipher = client if side == self.client else server

    def _keys13(self, pkt: int, out: list[Out]) -> None:
        suite = SUITES_13.get(self.suite_id)
        if suite is None:
            self._stop_all("tls_unsupported", pkt, f"TLS 1.3 cipher suite 0x{self.suite_id:04x}: only AES-GCM and ChaCha20-Poly1305 are decrypted", out)
            return
        self.suite = suite
        self.secrets = self._lookup(pkt, out, ("CLIENT_HANDSHAKE_TRAFFIC_SECRET", "SERVER_HANDSHAKE_TRAFFIC_SECRET"))
        if self.secrets is None:
            return
        c = self.client
        assert c is not None
        self.dirs[c].cipher = Cipher.tls13(suite, self.secrets["CLIENT_HANDSHAKE_TRAFFIC_SECRET"])
        self.dirs[1 - c].cipher = Cipher.tls13(suite, self.secrets["SERVER_HANDSHAKE_TRAFFIC_SECRET"])

    # -- after a gap --------------------------------------------------------------------------------------
    def _resync(self, side: int, d: _Dir, pkt: int, out: list[Out]) -> None:
        """Find the first record header in what arrived after the gap whose record decrypts with some sequence
        number past the last good one.  How many records the gap swallowed is bounded by its size (a record
        is at least 22 bytes), so the trials are few; all of them are bounded by RESYNC_TRIALS."""
        cipher = d.cipher
        assert cipher is not None
        buf = bytes(d.buf)  # a snapshot: the regex's iterator must not hold the bytearray that is cut below
        max_records = d.lost // 22 + 2
        for m in _RECORD_HEADER.finditer(buf, d.resync_from):
            at = m.start()
            if at >= RESYNC_WINDOW or d.trials >= RESYNC_TRIALS:
                break
            if len(buf) < at + 5:
                return  # wait for the candidate's header
            length = int.from_bytes(buf[at + 3 : at + 5], "big")
            if length > MAX_CIPHERTEXT:
                d.resync_from = at + 1
                continue
            if len(buf) < at + 5 + length:
                return  # wait for the rest of the candidate (bounded: one record); it is tried once, when whole
            header, body = bytes(buf[at : at + 5]), bytes(buf[at + 5 : at + 5 + length])
            for skip in range(max_records + at // 22 + 1):
                d.trials += 1
                if d.trials > RESYNC_TRIALS:
                    break
                if cipher.open(buf[at], header, body, cipher.seq + skip) is not None:
                    lost = d.lost + at
                    overhead = 5 + 16 + (8 if cipher.gcm12 else 1 if cipher.v13 else 0)
                    out.append(Problem("tls_record_cut", d.lost_pkt,
                                       f"{lost} encrypted bytes ({skip} records) lost by the capture; decryption resumed at packet {pkt}", side))
                    out.append(Lost(side, max(lost - skip * overhead, 0), d.lost_pkt))
                    cipher.seq += skip
                    del d.buf[:at]
                    d.resync, d.lost = False, 0
                    return
            d.resync_from = at + 1
        else:
            d.resync_from = max(d.resync_from, len(buf) - 4)  # a header may still start in the last bytes
        if len(buf) >= RESYNC_WINDOW or d.trials >= RESYNC_TRIALS:
            self._stop_dir(side, d, "tls_record_cut", d.lost_pkt,
                           f"{d.lost} bytes lost by the capture, and no record in the {len(buf)} bytes after them decrypted: "
                           "this direction is not decrypted further", out, d.lost + len(buf))

    # -- stopping ---------------------------------------------------------------------------------------
    def _stop_dir(self, side: int, d: _Dir, code: str, pkt: int | None, detail: str, out: list[Out], lost: int = 0) -> None:
        """This direction is not decrypted further.  Once HTTP runs on top, the framing is told that bytes were
        lost here (``lost``, at least what was held): the message in progress is cut, not silently complete."""
        if self.negotiated and not d.stopped:
            out.append(Problem(code, pkt, detail, side))
            out.append(Lost(side, max(lost, len(d.buf), 1), pkt))
        else:
            out.append(Problem(code, pkt, detail, side))
        d.stopped = True
        d.buf = bytearray()
        d.hs = bytearray()

    def _stop_all(self, code: str, pkt: int | None, detail: str, out: list[Out]) -> None:
        if self.stopped:
            return
        self.stopped = True
        out.append(Problem(code, pkt, detail, None, True))
        for side, d in enumerate(self.dirs):
            if self.negotiated and not d.stopped and d.cipher is not None:
                out.append(Lost(side, max(len(d.buf), 1), pkt))
            d.buf = bytearray()
            d.hs = bytearray()


def _extensions(body: bytes, at: int):
    """(type, data) of a hello's extensions from ``at`` (the extensions' length field); bounded by the body."""
    if at + 2 > len(body):
        return
    end = min(at + 2 + int.from_bytes(body[at : at + 2], "big"), len(body))
    at += 2
    while at + 4 <= end:
        etype, elen = int.from_bytes(body[at : at + 2], "big"), int.from_bytes(body[at + 2 : at + 4], "big")
        yield etype, body[at + 4 : at + 4 + elen]
        at += 4 + elen


def _alpn(ext: bytes) -> list[str]:
    names, at = [], 2
    while at < len(ext):  # bounded: each name consumes at least one byte
        n = ext[at]
        names.append(ext[at + 1 : at + 1 + n].decode("ascii", "replace"))
        at += 1 + n
    return names
