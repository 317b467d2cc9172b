"""The secrets side of TLS decryption: NSS key logs, the TLS 1.2 PRF and TLS 1.3 HKDF key schedules, AEAD records.

:class:`KeyLog` holds what ``SSLKEYLOGFILE`` (python's ``ssl``, node, curl, browsers) or a pcapng Decryption
Secrets Block carries, by client random (a key log file is streamed, and filtered to the client randoms the
captures hold, so its size does not matter); :func:`keys12` and :meth:`Cipher.tls13` turn a master secret or a
traffic secret into one direction's record protection; :meth:`Cipher.open` authenticates and decrypts one
record (``cryptography``'s AES-GCM and ChaCha20-Poly1305, never hand-rolled ciphers).  The record and
handshake state machine that uses them is :mod:`analyzer.decode.tls`.

Secrets never leave: :class:`KeyLog`'s ``repr`` shows counts only, and nothing here formats a secret into a
message.  Checked against RFC 8448 and the TLS working group's PRF vectors (tests/test_tls.py).
"""
from __future__ import annotations

import hmac
import re
import struct
from collections import deque
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305

# --- key log -----------------------------------------------------------------------------------------------

_LABELS_13 = ("CLIENT_HANDSHAKE_TRAFFIC_SECRET", "SERVER_HANDSHAKE_TRAFFIC_SECRET", "CLIENT_TRAFFIC_SECRET_0",
              "SERVER_TRAFFIC_SECRET_0")
_KNOWN = frozenset(("CLIENT_RANDOM", *_LABELS_13, "EXPORTER_SECRET", "EARLY_EXPORTER_SECRET",
                    "CLIENT_EARLY_TRAFFIC_SECRET", "RSA"))
_KEYED = frozenset(label.encode() for label in _KNOWN if label != "RSA")  # labels keyed by client random (RSA is not)
_HEX = re.compile(rb"[0-9a-fA-F]+")
_BOM = b"\xef\xbb\xbf"  # a UTF-8 byte order mark (an editor's "save as UTF-8"): not part of the first label

KEYLOG_BLOCK = 1 << 20  # a key log is read in pieces of this size, never whole
KEYLOG_BOUND = 1 << 28  # default for :meth:`KeyLog.read`'s ``bound``
KEYLOG_LINE = 1 << 12  # a "line" longer than this is no key log line (the longest real one is ~230 bytes): skipped
RESCAN_LIMIT = 16  # client randoms no pre-pass foresaw, searched for in the key log files again (a full read each)


class KeyLog:
    """Secrets by client random, from NSS key log text.  Comments (``#``), blank lines and labels this tool
    does not use are skipped; lines that are not ``LABEL HEX HEX`` are counted in ``malformed``.

    A key log is read in blocks (:meth:`read`, :meth:`read_file`) and may be filtered: only the lines of the
    client randoms in ``wanted`` (those the captures hold, found by :func:`analyzer.decode.tls.client_randoms`)
    are kept, so memory follows the captures, not the key log a browser has been appending to for months.
    A client random nobody foresaw (a ClientHello the pre-pass could not see whole) is searched for in the
    filtered files again when it is asked for (:meth:`get`, at most RESCAN_LIMIT times)."""

    __slots__ = ("_secrets", "malformed", "lines", "unwanted", "_files", "_wanted", "_looked", "_rescans")

    def __init__(self) -> None:
        self._secrets: dict[bytes, dict[str, bytes]] = {}
        self.malformed = 0
        self.lines = 0
        self.unwanted = 0  # client randoms with secrets in the key log that were not kept (counted by runs of lines)
        self._files: tuple[str, ...] = ()  # files read with a filter: searched again for a random no pre-pass saw
        self._wanted: frozenset[bytes] = frozenset()  # the randoms a pre-pass foresaw: not searched for again
        self._looked: set[bytes] = set()  # randoms searched for again (found or not)
        self._rescans = [0]  # searches made, shared with copies (one budget per run)

    def __repr__(self) -> str:  # never the secrets
        return f"KeyLog({len(self._secrets)} client randoms, {self.malformed} malformed lines)"

    def __len__(self) -> int:
        """Client randoms the key log holds secrets for: those kept, plus those left out (no capture holds them)."""
        return len(self._secrets) + self.unwanted

    @property
    def kept(self) -> int:
        """Client randoms whose secrets are held in memory."""
        return len(self._secrets)

    def add_text(self, data: bytes) -> None:
        """Key log text, every line kept (a pcapng Decryption Secrets Block: the capture's own secrets)."""
        if data.startswith(_BOM):
            data = data[3:]
        for raw in data.splitlines():
            self._line(raw, None, True)

    def read(self, stream, wanted: "frozenset[bytes] | set[bytes] | None" = None, bound: int = KEYLOG_BOUND,
             block: int = KEYLOG_BLOCK) -> int:
        """Key log text from ``stream``, read ``block`` bytes at a time.  ``wanted`` None: every line is kept.
        Otherwise the lines of the client randoms in ``wanted`` are kept, and of the others the newest ``bound``
        bytes of lines (0: none; for captures no pre-pass could read, such as standard input).  Returns the
        bytes of lines left out because of ``bound`` (the oldest ones); 0 when nothing was cut."""
        keep = None if wanted is None else {r.hex().encode() for r in wanted}
        window: deque[bytes] = deque()  # lines of other randoms, newest last, within ``bound``
        held = dropped = 0
        last = b""  # the random of the last line left out (``unwanted`` counts runs)
        for chunk in self._chunks(stream, block, True):
            for raw in chunk.splitlines():
                rnd = self._line(raw, keep, True)
                if rnd is None:
                    continue
                if bound <= 0:
                    if rnd != last:
                        self.unwanted, last = self.unwanted + 1, rnd
                    continue
                window.append(raw)
                held += len(raw) + 1
                while held > bound:  # bounded: each pass drops a line
                    old = window.popleft()
                    held -= len(old) + 1
                    dropped += len(old) + 1
                    rnd = old.split()[1].lower()
                    if rnd != last:
                        self.unwanted, last = self.unwanted + 1, rnd
        while window:
            self._line(window.popleft(), None, False)
        return dropped

    def read_file(self, path: str, wanted: "frozenset[bytes] | set[bytes] | None" = None, bound: int = KEYLOG_BOUND,
                  block: int = KEYLOG_BLOCK) -> int:
        """:meth:`read` of a file (OSError when it cannot be read).  Filtered without a bound (every capture was
        pre-read), the file is remembered, to search it again for a client random the pre-pass did not see."""
        with open(path, "rb") as f:
            dropped = self.read(f, wanted, bound, block)
        if wanted is not None and bound <= 0:
            self._files += (path,)
            self._wanted = self._wanted | frozenset(wanted)
        return dropped

    def _line(self, raw: bytes, keep: "set[bytes] | None", count: bool) -> bytes | None:
        """One line: its secret stored (``keep`` None, or its random in ``keep``); or the lower-case hex random
        of a well-formed secret line left out; or None (comment, malformed, a label not keyed by client random)."""
        line = raw.strip()
        if not line or line.startswith(b"#"):
            return None
        if count:
            self.lines += 1
        parts = line.split()
        if len(parts) != 3 or not _HEX.fullmatch(parts[1]) or not _HEX.fullmatch(parts[2]) or len(parts[1]) % 2 or len(parts[2]) % 2:
            self.malformed += count
            return None
        if parts[0] not in _KEYED:
            return None  # a label of a newer format (not an error), or RSA (keyed by encrypted pre-master prefix)
        if len(parts[1]) != 64:
            self.malformed += count
            return None
        rnd = parts[1].lower()
        if keep is not None and rnd not in keep:
            return rnd
        self._secrets.setdefault(bytes.fromhex(rnd.decode()), {})[parts[0].decode()] = bytes.fromhex(parts[2].decode())
        return None

    def _chunks(self, stream, block: int, count: bool):
        """Whole lines of ``stream``, ``block`` bytes at a time; a leading BOM dropped; a "line" longer than
        KEYLOG_LINE is skipped to its end (a malformed line), so no line is ever held whole."""
        carry = b""
        head: bytes | None = b""  # the first bytes, until the BOM question is settled (None: settled)
        skipping = False
        while True:  # bounded by the stream: each pass reads a block
            data = stream.read(block)
            if not data:
                break
            if head is not None:
                head += data
                if len(head) < 3:
                    continue
                data, head = (head[3:] if head.startswith(_BOM) else head), None
            if skipping:
                cut = min((at for at in (data.find(b"\n"), data.find(b"\r")) if at >= 0), default=-1)
                if cut < 0:
                    continue
                data, skipping = data[cut:], False
            text = carry + data if carry else data
            cut = max(text.rfind(b"\n"), text.rfind(b"\r")) + 1
            carry = text[cut:]
            if len(carry) > KEYLOG_LINE:
                skipping, carry = True, b""
                if count:
                    self.lines += 1
                    self.malformed += 1
            if cut:
                yield text[:cut]
        if head:
            carry = head[3:] if head.startswith(_BOM) else head
        if carry and not skipping:
            yield carry

    def copy(self) -> "KeyLog":
        new = KeyLog()
        new._secrets = {r: dict(d) for r, d in self._secrets.items()}
        new.malformed, new.lines, new.unwanted = self.malformed, self.lines, self.unwanted
        new._files, new._wanted, new._looked, new._rescans = self._files, self._wanted, set(self._looked), self._rescans
        return new

    def get(self, client_random: bytes) -> dict[str, bytes] | None:
        got = self._secrets.get(client_random)
        if got is None and self._files and client_random not in self._wanted and client_random not in self._looked:
            self._search(client_random)
            got = self._secrets.get(client_random)
        return got

    def unsearched(self, client_random: bytes) -> bool:
        """Whether the key log files may hold this random after all: no pre-pass foresaw it and the searches
        for such randoms ran out (RESCAN_LIMIT).  For a message that does not claim the key log lacks it."""
        return bool(self._files) and client_random not in self._wanted and client_random not in self._looked

    def _search(self, client_random: bytes) -> None:
        """Read the filtered files again for one client random's lines (lower- or upper-case hex)."""
        if self._rescans[0] >= RESCAN_LIMIT:
            return
        self._rescans[0] += 1
        self._looked.add(client_random)
        lo = client_random.hex().encode()
        up = lo.upper()
        for path in self._files:
            try:
                with open(path, "rb") as f:
                    for chunk in self._chunks(f, KEYLOG_BLOCK, False):
                        if lo in chunk or up in chunk:
                            for raw in chunk.splitlines():
                                if lo in raw or up in raw:
                                    self._line(raw, {lo}, False)
            except OSError:
                continue  # gone since it was read: what was kept stays

    def secrets_hex(self) -> list[str]:
        """Every secret as lower-case hex: for the tests that check no output holds one."""
        return [s.hex() for d in self._secrets.values() for s in d.values()]


DSB_TLS_KEY_LOG = 0x544C534B  # pcapng Decryption Secrets Block, secrets type 'TLSK': NSS key log text



# --- key derivation ------------------------------------------------------------------------------------------

def prf12(secret: bytes, label: bytes, seed: bytes, size: int, hash_name: str) -> bytes:
    """TLS 1.2 PRF (RFC 5246 §5): P_hash(secret, label + seed)."""
    seed = label + seed
    out, a = b"", seed
    for _ in range(size // 16 + 2):  # bounded: each round gives at least 32 bytes
        if len(out) >= size:
            break
        a = hmac.new(secret, a, hash_name).digest()
        out += hmac.new(secret, a + seed, hash_name).digest()
    return out[:size]


def hkdf_expand_label(secret: bytes, label: str, context: bytes, size: int, hash_name: str) -> bytes:
    """TLS 1.3 HKDF-Expand-Label (RFC 8446 §7.1)."""
    full = b"tls13 " + label.encode()
    info = struct.pack("!HB", size, len(full)) + full + bytes([len(context)]) + context
    out, block = b"", b""
    for i in range(1, size // 32 + 2):  # bounded: each block is at least 32 bytes
        if len(out) >= size:
            break
        block = hmac.new(secret, block + info + bytes([i]), hash_name).digest()
        out += block
    return out[:size]


@dataclass(frozen=True, slots=True)
class Suite:
    name: str
    aead: str  # "gcm" | "chacha"
    key_len: int
    hash_name: str


SUITES_13 = {
    0x1301: Suite("TLS_AES_128_GCM_SHA256", "gcm", 16, "sha256"),
    0x1302: Suite("TLS_AES_256_GCM_SHA384", "gcm", 32, "sha384"),
    0x1303: Suite("TLS_CHACHA20_POLY1305_SHA256", "chacha", 32, "sha256"),
}
SUITES_12 = {
    0x009C: Suite("TLS_RSA_WITH_AES_128_GCM_SHA256", "gcm", 16, "sha256"),
    0x009D: Suite("TLS_RSA_WITH_AES_256_GCM_SHA384", "gcm", 32, "sha384"),
    0x009E: Suite("TLS_DHE_RSA_WITH_AES_128_GCM_SHA256", "gcm", 16, "sha256"),
    0x009F: Suite("TLS_DHE_RSA_WITH_AES_256_GCM_SHA384", "gcm", 32, "sha384"),
    0xC02B: Suite("TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "gcm", 16, "sha256"),
    0xC02C: Suite("TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", "gcm", 32, "sha384"),
    0xC02F: Suite("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "gcm", 16, "sha256"),
    0xC030: Suite("TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", "gcm", 32, "sha384"),
    0xCCA8: Suite("TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256", "chacha", 32, "sha256"),
    0xCCA9: Suite("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", "chacha", 32, "sha256"),
    0xCCAA: Suite("TLS_DHE_RSA_WITH_CHACHA20_POLY1305_SHA256", "chacha", 32, "sha256"),
}


class Cipher:
    """One direction's record protection: the AEAD, its IV (1.3, ChaCha20 in 1.2) or salt (GCM in 1.2),
    and the record sequence number."""

    __slots__ = ("aead", "iv", "v13", "gcm12", "seq")

    def __init__(self, suite: Suite, key: bytes, iv: bytes, v13: bool) -> None:
        self.aead = AESGCM(key) if suite.aead == "gcm" else ChaCha20Poly1305(key)
        self.iv = iv
        self.v13 = v13
        self.gcm12 = not v13 and suite.aead == "gcm"
        self.seq = 0

    @classmethod
    def tls13(cls, suite: Suite, secret: bytes) -> "Cipher":
        return cls(suite, hkdf_expand_label(secret, "key", b"", suite.key_len, suite.hash_name),
                   hkdf_expand_label(secret, "iv", b"", 12, suite.hash_name), True)

    def open(self, ctype: int, header: bytes, body: bytes, seq: int) -> bytes | None:
        """The plaintext of one record at sequence number ``seq`` (None: it does not authenticate)."""
        try:
            if self.gcm12:  # RFC 5288: salt(4) + explicit nonce(8) carried in the record
                if len(body) < 24:
                    return None
                nonce = self.iv + body[:8]
                aad = struct.pack("!QB2sH", seq, ctype, header[1:3], len(body) - 24)
                return self.aead.decrypt(nonce, body[8:], aad)
            nonce = (int.from_bytes(self.iv, "big") ^ seq).to_bytes(12, "big")  # RFC 7905, RFC 8446 §5.3
            if len(body) < 16:
                return None
            aad = header if self.v13 else struct.pack("!QB2sH", seq, ctype, header[1:3], len(body) - 16)
            return self.aead.decrypt(nonce, body, aad)
        except InvalidTag:
            return None


def keys12(suite: Suite, master: bytes, client_random: bytes, server_random: bytes) -> tuple[Cipher, Cipher]:
    """(client write, server write) for a TLS 1.2 AEAD suite: the key block of RFC 5246 §6.3 (no MAC keys)."""
    iv_len = 4 if suite.aead == "gcm" else 12
    block = prf12(master, b"key expansion", server_random + client_random, 2 * (suite.key_len + iv_len), suite.hash_name)
    k = suite.key_len
    ck, sk = block[:k], block[k : 2 * k]
    civ, siv = block[2 * k : 2 * k + iv_len], block[2 * k + iv_len :]
    return Cipher(suite, ck, civ, False), Cipher(suite, sk, siv, False)
