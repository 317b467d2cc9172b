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

Resynchronisation: after bytes the capture lost (a gap), and after a damaged record once records with the same
keys authenticated (a header with an impossible type, version or length -- over 2^14 + 256 bytes in TLS 1.3,
2^14 + 2048 in 1.2 -- or a record that does not authenticate, such as one whose length field runs into the next
record), the bytes that follow are searched for the next record header whose record authenticates with the
expected sequence number or a few past it (bounded: RESYNC_WINDOW, RESYNC_TRIALS, RESYNC_BUDGET).  A damaged
length is then corrected from where that record starts, and the damaged record decrypted too when it
authenticates so; otherwise its bytes are skipped (a :class:`Lost`) and decryption goes on.  A direction stops
only when nothing after the damage authenticates.  :func:`client_randoms` is the pre-pass over capture bytes
that tells :class:`KeyLog` which key log lines to keep.

Key material never leaves this module: secrets are kept in :class:`KeyLog` (whose ``repr`` shows only
counts) and in the AEAD objects; problems name the connection by its addresses and packet, never a secret and
not its client random (public, but it ties an output to a line of the user's key log).
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
    hkdf_expand_label,
    keys12,
    prf12,
)

MAX_CIPHERTEXT = (1 << 14) + 2048  # RFC 5246 §6.2.3: a longer record is not TLS
MAX_CIPHERTEXT_13 = (1 << 14) + 256  # RFC 8446 §5.2: TLS 1.3's limit
MAX_HANDSHAKE = 1 << 18  # a handshake message (a certificate chain) longer than 256 KiB is not followed
RESYNC_WINDOW = 1 << 16  # after bytes the capture lost or a damaged record: search this far for the next record that decrypts
RESYNC_TRIALS = 4096  # ... trying at most this many (record position, sequence number) pairs in all
RESYNC_BUDGET = 16 * RESYNC_TRIALS  # trials one direction may spend on damaged records in all; then a damaged record stops it
# the anomaly kinds of a damaged record skipped (what it carried is lost) and of damage that cost nothing (a header
# whose length the next record's start corrects, or bytes that are no record between two records)
RECORD_SKIPPED = "tls_record_skipped"
RECORD_REPAIRED = "tls_record_repaired"

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
# the start of a ClientHello record: handshake record header (length <= MAX_CIPHERTEXT), message type 1 with a
# length <= MAX_HANDSHAKE, the 2-byte legacy version; the 32-byte client random follows
_CLIENT_HELLO = re.compile(rb"\x16\x03[\x00-\x04][\x00-\x48].\x01[\x00-\x04]....(?=(.{32}))", re.S)
_HELLO_SPAN = 43  # header (5) + message header (4) + version (2) + random (32)
PREPASS_BLOCK = 1 << 20
PREPASS_LIMIT = 1 << 22  # client randoms collected at most (~0.4 GB); a capture made of ClientHello look-alikes stops there


def client_randoms(stream, block: int = PREPASS_BLOCK, into: set[bytes] | None = None, limit: int = PREPASS_LIMIT) -> set[bytes]:
    """The client randoms of the ClientHellos in a capture's bytes (pcap or pcapng, any link type: the bytes are
    searched, not parsed), read ``block`` bytes at a time: the pre-pass that tells which key log lines to keep.
    Added to ``into`` when given; the search stops when the set holds ``limit`` randoms (the caller then cannot
    know which lines the captures need).

    A ClientHello's first TCP segment holds its first 43 bytes (header, message header, version, random): a
    random split over two segments is not seen here, and :meth:`KeyLog.get` searches the key log for it later.
    Bytes that only look like a ClientHello add a random no key log holds: harmless.  Memory: the randoms."""
    found: set[bytes] = set() if into is None else into
    tail = b""
    while len(found) < limit:  # bounded by the stream
        data = stream.read(block)
        if not data:
            break
        text = tail + data
        for m in _CLIENT_HELLO.finditer(text):
            found.add(m.group(1))
            if len(found) >= limit:
                break
        tail = text[-(_HELLO_SPAN - 1) :]  # a ClientHello that starts in the last 42 bytes is found with the next block
    return found


class _Dir:
    __slots__ = ("buf", "buf_pkt", "buf_ts", "cipher", "hs", "stopped", "resync", "lost", "lost_pkt", "finished", "app_secret",
                 "resync_from", "trials", "damage", "spent")

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
        self.damage: tuple[str, str, int | None, int | None, int] | None = None  # resync after a damaged record:
        # (code if nothing after it authenticates, what was wrong, its packet and time, its sequence number)
        self.spent = 0  # decryptions tried after damaged records, in all (bounded by RESYNC_BUDGET)


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
        self._pump(side, d, ts, pkt, out)
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
        if not d.lost and d.damage is None:
            d.lost_pkt = pkt
        d.damage = None  # lost while resyncing past a damaged record: the damaged bytes held count as lost too
        d.lost += len(d.buf) + nbytes
        d.buf = bytearray()
        d.resync, d.resync_from, d.trials = True, 0, 0
        return out

    def close(self, side: int) -> list[Out]:
        """The direction ended: a record it ended inside was cut by the capture (or the peer) -- or its header's
        length is damaged, and the records it swallowed are found (as after any damaged record)."""
        out: list[Out] = []
        d = self.dirs[side]
        if self.stopped or d.stopped:
            return out
        if d.resync:
            self._pump(side, d, d.buf_ts, d.buf_pkt, out, at_end=True)
        for _ in range(len(d.buf)):  # bounded: each pass consumes held bytes, or ends the loop
            if d.resync or d.stopped or self.stopped or len(d.buf) < 5 or not self._may_resync(d):
                break
            length = int.from_bytes(d.buf[3:5], "big")
            before = len(d.buf)
            self._damaged(d, 0, d.buf_pkt, d.buf_ts, "tls_record_cut",
                          f"a record header whose length ({length}) runs past the end of the direction ({len(d.buf) - 5} bytes after it)", 1)
            buf = bytes(d.buf)
            state, at, skip = self._search(d, buf, True)
            if state != "found":  # nothing after it authenticates: a record cut short, as it looked
                d.resync, d.damage = False, None
                break
            self._resynced(side, d, buf, at, skip, d.buf_pkt, out)
            self._pump(side, d, d.buf_ts, d.buf_pkt, out, at_end=True)
            if len(d.buf) >= before:
                break
        if d.stopped or self.stopped:
            return out
        if d.resync and d.damage is not None:
            code, detail, pkt, _ts, _seq = d.damage
            out.append(Problem(code, pkt, f"{detail}; the direction ended and no record after it authenticates", side))
            out.append(Lost(side, max(len(d.buf), 1), pkt, True))
        elif d.resync:
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

    def _pump(self, side: int, d: _Dir, ts: int | None, pkt: int | None, out: list[Out], at_end: bool = False) -> None:
        """The whole records held, in order; a resync (after a gap, or a damaged record) first, when one is on."""
        for _ in range(len(d.buf) + 2):  # bounded: each pass after the first consumes held bytes (or returns)
            if d.stopped or self.stopped:
                return
            if d.resync:
                self._resync(side, d, pkt, out, at_end)
                if d.resync or d.stopped or self.stopped:
                    return
            if not self._records(side, d, ts, pkt, out):
                return

    def _records(self, side: int, d: _Dir, ts: int | None, pkt: int | None, out: list[Out]) -> bool:
        """Decrypt the whole records at the start of ``d.buf``.  True: a damaged one (a header that is none,
        or a record that does not authenticate, after records that did) started a resync at its first byte."""
        buf = d.buf
        pos = 0
        n = len(buf)
        limit = MAX_CIPHERTEXT_13 if self.version == 0x0304 else MAX_CIPHERTEXT
        while n - pos >= 5 and not d.stopped and not self.stopped:  # bounded: each pass consumes a record
            ctype, major, length = buf[pos], buf[pos + 1], int.from_bytes(buf[pos + 3 : pos + 5], "big")
            if ctype not in (20, 21, 22, 23) or major != 3 or length > limit:
                what = f"bytes that are no TLS record header (type {ctype}, version {major}.{buf[pos + 2]}, length {length})"
                hello = self._hello_behind(side, d, buf, pos)
                if hello is None:
                    break  # (the hello it may be is not whole yet: bounded, one record)
                if hello:
                    buf[pos : pos + 5] = b"\x16\x03\x01" + hello.to_bytes(2, "big")
                    out.append(Problem(RECORD_REPAIRED, pkt, f"{what}; the {hello} bytes after it are a whole "
                                       f"{'ClientHello' if self.client is None else 'ServerHello'}: read as the handshake record they are", side))
                    continue
                if self._may_resync(d):
                    self._damaged(d, pos, pkt, ts, "tls_record_invalid", what, 1)
                    return True
                self._stop_dir(side, d, "tls_record_invalid", pkt, what, out)
                break
            if n - pos < 5 + length:
                break
            header = bytes(buf[pos : pos + 5])
            body = bytes(buf[pos + 5 : pos + 5 + length])
            start = pos
            pos += 5 + length
            if self._record(side, d, ctype, header, body, ts, pkt, out):
                seq = d.cipher.seq if d.cipher is not None else 0
                self._damaged(d, start, pkt, ts, "tls_decrypt_failed",
                              f"record {seq} (its header says {length} bytes) does not authenticate", 0)
                return True
        del buf[:pos]
        if buf:
            d.buf_pkt, d.buf_ts = (pkt, ts) if pos else (d.buf_pkt, d.buf_ts)
        return False

    def _hello_behind(self, side: int, d: _Dir, buf: bytearray, pos: int) -> int | None:
        """The length of the record whose header at ``buf[pos]`` is damaged, when it is the hello this direction
        sends first (before any key: a ClientHello, or the ServerHello answering it) -- its body says so: the
        handshake type, a length that fills one record, legacy version 3.x; 0 when it is not; None when the
        hello it may be is not whole yet.  A damaged ClientHello header otherwise costs the whole connection."""
        if d.cipher is not None or d.hs or (self.client is not None and (side == self.client or self.server_random is not None)):
            return 0
        mtype = 1 if self.client is None else 2
        if len(buf) - pos < 11:
            return None
        if buf[pos + 5] != mtype or buf[pos + 9] != 3 or buf[pos + 10] > 4:
            return 0
        size = int.from_bytes(buf[pos + 6 : pos + 9], "big") + 4
        if size > 1 << 14:  # (a hello over several records: its first record's length cannot be told)
            return 0
        return size if len(buf) - pos >= 5 + size else None

    # -- records ----------------------------------------------------------------------------------------
    def _record(self, side: int, d: _Dir, ctype: int, header: bytes, body: bytes, ts: int | None, pkt: int, out: list[Out]) -> bool:
        """One whole record.  True: it does not authenticate after records with the same keys that did (a damaged
        record: the caller resyncs past it); a first record that does not is a wrong key: the direction stops."""
        if ctype == 20:  # change_cipher_spec: TLS 1.2 switches this side to its keys; 1.3 sends it for show
            if self.version == 0x0303 and d.cipher is None:
                self._keys12(side, pkt, out)
            return False
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
            return False
        plain = cipher.open(ctype, header, body, cipher.seq)
        if plain is None and self.early and side == self.client and not d.finished:
            return False  # early data (or EndOfEarlyData) after the ServerHello: skipped by trial, as a server does
        if plain is None:
            if self._may_resync(d):
                return True
            self._stop_dir(side, d, "tls_decrypt_failed", pkt,
                           f"record {cipher.seq} ({len(body)} bytes) does not authenticate "
                           "(a wrong key in the key log, or corrupt bytes)", out, len(body))
            return False
        self._opened(side, d, ctype, plain, ts, pkt, out)
        return False

    def _opened(self, side: int, d: _Dir, ctype: int, plain: bytes, ts: int | None, pkt: int | None, out: list[Out]) -> None:
        """A record that authenticated with ``d.cipher`` at its sequence number: its content handed on."""
        cipher = d.cipher
        assert cipher is not None
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
                self._stop_dir(side, d, "tls_no_key", pkt, f"the key log has no {label} for this connection's client random", out)
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
        if got is None and self.keys.unsearched(self.client_random or b""):
            self._stop_all("tls_no_key", pkt, f"the key log's lines for this connection's client random were not kept: no pre-pass "
                           "over the captures saw this ClientHello whole, and the searches of the key log for such client randoms "
                           "were used up", out)
            return None
        if got is None or any(label not in got for label in labels):
            missing = ", ".join(label for label in labels if got is None or label not in got)
            self._stop_all("tls_no_key", pkt, f"the key log has no {missing} for this connection's client random", out)
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

    # -- after a gap, or a damaged record --------------------------------------------------------------------
    def _may_resync(self, d: _Dir) -> bool:
        """A damaged record is resynced past (not the end of the direction) once records authenticated with the
        keys in use: they are right.  A first record that does not authenticate is a wrong key (and the search
        would cost RESYNC_TRIALS decryptions for nothing); the trials spent on damaged records are bounded per
        direction too (RESYNC_BUDGET)."""
        return d.cipher is not None and d.cipher.seq > 0 and d.spent < RESYNC_BUDGET and not d.stopped

    def _damaged(self, d: _Dir, start: int, pkt: int | None, ts: int | None, code: str, detail: str, first: int) -> None:
        """The record at ``d.buf[start]`` is damaged: resync from its byte ``first`` (1: its header is none; 0:
        it does not authenticate, and may still at a later sequence number, when records before it were lost)."""
        if start:
            del d.buf[:start]  # (the record at `start` began in this packet: those before it were whole before it)
        else:
            pkt, ts = d.buf_pkt, d.buf_ts
        d.buf_pkt, d.buf_ts = pkt, ts
        d.resync, d.resync_from, d.trials = True, first, 0
        d.lost, d.lost_pkt = 0, pkt
        d.damage = (code, detail, pkt, ts, d.cipher.seq if d.cipher is not None else 0)

    def _resync(self, side: int, d: _Dir, pkt: int | None, out: list[Out], at_end: bool = False) -> None:
        """Find the first record header in what is held whose record decrypts with some sequence number past the
        last good one.  How many records the lost or damaged bytes swallowed is bounded by their size (a record
        is at least 22 bytes), so the trials are few; all of them are bounded by RESYNC_TRIALS."""
        buf = bytes(d.buf)  # a snapshot: the regex's iterator must not hold the bytearray that is cut below
        state, at, skip = self._search(d, buf, at_end)
        if state == "found":
            self._resynced(side, d, buf, at, skip, pkt, out)
        elif state == "none" and not at_end and (len(buf) >= RESYNC_WINDOW or d.trials >= RESYNC_TRIALS
                                                  or (d.damage is not None and d.spent >= RESYNC_BUDGET)):
            if d.damage is not None:
                code, detail, dpkt, _ts, _seq = d.damage
                self._stop_dir(side, d, code, dpkt, f"{detail} (a wrong key in the key log, or corrupt bytes), and no record in the {len(buf)} "
                               "bytes after it authenticates either; this direction is not decrypted further", out, len(buf))
            else:
                self._stop_dir(side, d, "tls_record_cut", d.lost_pkt,
                               f"{d.lost} bytes lost by the capture, and no record in the {len(buf)} bytes after them decrypted: "
                               "this direction is not decrypted further", out, d.lost + len(buf))

    def _search(self, d: _Dir, buf: bytes, at_end: bool) -> tuple[str, int, int]:
        """("found", offset, records skipped) of the first candidate record that authenticates; ("wait", 0, 0)
        when a candidate is not whole yet (``at_end``: it never will be, and is passed over); else ("none", 0, 0).
        Candidates tried are not tried again (``d.resync_from``)."""
        cipher = d.cipher
        assert cipher is not None
        limit = MAX_CIPHERTEXT_13 if self.version == 0x0304 else MAX_CIPHERTEXT
        max_records = d.lost // 22 + 2
        for m in _RECORD_HEADER.finditer(buf, d.resync_from):
            at = m.start()
            if at >= RESYNC_WINDOW or d.trials >= RESYNC_TRIALS or (d.damage is not None and d.spent >= RESYNC_BUDGET):
                return "none", 0, 0
            if len(buf) < at + 5:
                return ("none" if at_end else "wait"), 0, 0  # wait for the candidate's header
            length = int.from_bytes(buf[at + 3 : at + 5], "big")
            if length > limit:
                d.resync_from = at + 1
                continue
            if len(buf) < at + 5 + length:
                if at_end:
                    continue
                return "wait", 0, 0  # wait for the rest of the candidate (bounded: one record); it is tried once, when whole
            header, body = buf[at : at + 5], buf[at + 5 : at + 5 + length]
            for skip in range(max_records + at // 22 + 1):
                d.trials += 1
                if d.damage is not None:
                    d.spent += 1
                if d.trials > RESYNC_TRIALS:
                    break
                if cipher.open(buf[at], header, body, cipher.seq + skip) is not None:
                    return "found", at, skip
            d.resync_from = at + 1
        if not at_end:
            d.resync_from = max(d.resync_from, len(buf) - 4)  # a header may still start in the last bytes
        return "none", 0, 0

    def _resynced(self, side: int, d: _Dir, buf: bytes, at: int, skip: int, pkt: int | None, out: list[Out]) -> None:
        """The record at ``buf[at]`` authenticates ``skip`` records past the last good one: what came before it is
        named (and, after a damaged record, recovered when it can be), and decryption goes on from it."""
        cipher = d.cipher
        assert cipher is not None
        overhead = 5 + 16 + (8 if cipher.gcm12 else 1 if cipher.v13 else 0)
        damage, d.damage = d.damage, None
        lost, d.lost, d.resync = d.lost, 0, False
        del d.buf[:at]
        if damage is None:  # after a capture gap
            lost += at
            out.append(Problem("tls_record_cut", d.lost_pkt,
                               f"{lost} encrypted bytes ({skip} records) lost by the capture; decryption resumed at packet {pkt}", side))
            out.append(Lost(side, max(lost - skip * overhead, 0), d.lost_pkt))
            cipher.seq += skip
            return
        _code, detail, dpkt, dts, seq = damage
        if skip == 0:  # bytes that were no record, between two records: nothing lost
            out.append(Problem(RECORD_REPAIRED, dpkt, f"{detail}; the {at} bytes from there to the next record (at packet {pkt}) are no "
                               "record and were skipped, and nothing was lost: that record follows the last one decrypted", side))
            return
        if skip == 1 and at > 5:  # one record: its header's length may be what is wrong; the next record's start gives it
            fixed = self._reopen(d, buf[:at])
            if fixed is not None:
                out.append(Problem(RECORD_REPAIRED, dpkt, f"{detail}; with the length where the next record starts ({at - 5} bytes) "
                                   f"record {seq} authenticates, so it was decrypted and nothing lost (its header was damaged)", side))
                self._opened(side, d, fixed[0], fixed[1], dts, dpkt, out)
                return
        out.append(Problem(RECORD_SKIPPED, dpkt, f"{detail}; {at} bytes ({skip} record(s) from record {seq}) were skipped and what they "
                           f"carried is unknown; decryption resumed at packet {pkt}", side))
        out.append(Lost(side, max(at - skip * overhead, 1), dpkt))
        cipher.seq += skip

    def _reopen(self, d: _Dir, rec: bytes) -> tuple[int, bytes] | None:
        """(content type, plaintext) of a record whose header is damaged, with the header it must have had:
        ``rec``'s length, the type it says (application data when it says none), version 3.3."""
        cipher = d.cipher
        assert cipher is not None
        ctype = 23 if cipher.v13 or rec[0] not in (21, 22, 23) else rec[0]
        body = rec[5:]
        d.spent += 1
        plain = cipher.open(ctype, bytes([ctype]) + b"\x03\x03" + len(body).to_bytes(2, "big"), body, cipher.seq)
        return None if plain is None else (ctype, plain)

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
