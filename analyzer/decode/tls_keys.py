"""The secrets side of TLS decryption: NSS key logs, the TLS 1.2 PRF and TLS 1.3 HKDF key schedules, AEAD records.

:class:`KeyLog` holds what ``SSLKEYLOGFILE`` (python's ``ssl``, node, curl, browsers) or a pcapng Decryption
Secrets Block carries, by client random; :func:`keys12` and :meth:`Cipher.tls13` turn a master secret or a
traffic secret into one direction's record protection; :meth:`Cipher.open` authenticates and decrypts one
record (``cryptography``'s AES-GCM and ChaCha20-Poly1305, never hand-rolled ciphers).  The record and
handshake state machine that uses them is :mod:`analyzer.decode.tls`.

Secrets never leave: :class:`KeyLog`'s ``repr`` shows counts only, and nothing here formats a secret into a
message.  Checked against RFC 8448 and the TLS working group's PRF vectors (tests/test_tls.py).
"""
from __future__ import annotations

import contextlib
import hmac
import re
import struct
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305

# --- key log -----------------------------------------------------------------------------------------------

_LABELS_13 = ("CLIENT_HANDSHAKE_TRAFFIC_SECRET", "SERVER_HANDSHAKE_TRAFFIC_SECRET", "CLIENT_TRAFFIC_SECRET_0",
              "SERVER_TRAFFIC_SECRET_0")
_KNOWN = frozenset(("CLIENT_RANDOM", *_LABELS_13, "EXPORTER_SECRET", "EARLY_EXPORTER_SECRET",
                    "CLIENT_EARLY_TRAFFIC_SECRET", "RSA"))
_HEX = re.compile(rb"[0-9a-fA-F]+")


class KeyLog:
    """Secrets by client random, from NSS key log text.  Comments (``#``), blank lines and labels this tool
    does not use are skipped; lines that are not ``LABEL HEX HEX`` are counted in ``malformed``."""

    __slots__ = ("_secrets", "malformed", "lines")

    def __init__(self) -> None:
        self._secrets: dict[bytes, dict[str, bytes]] = {}
        self.malformed = 0
        self.lines = 0

    def __repr__(self) -> str:  # never the secrets
        return f"KeyLog({len(self._secrets)} client randoms, {self.malformed} malformed lines)"

    def __len__(self) -> int:
        return len(self._secrets)

    def add_text(self, data: bytes) -> None:
        for raw in data.splitlines():
            line = raw.strip()
            if not line or line.startswith(b"#"):
                continue
            self.lines += 1
            parts = line.split()
            if len(parts) != 3 or not _HEX.fullmatch(parts[1]) or not _HEX.fullmatch(parts[2]) or len(parts[1]) % 2 or len(parts[2]) % 2:
                self.malformed += 1
                continue
            label = parts[0].decode("ascii", "replace")
            if label not in _KNOWN:
                continue  # a label of a newer format: not an error
            if label == "RSA":  # keyed by encrypted pre-master prefix, not by random: not used
                continue
            random = bytes.fromhex(parts[1].decode())
            if len(random) != 32:
                self.malformed += 1
                continue
            self._secrets.setdefault(random, {})[label] = bytes.fromhex(parts[2].decode())

    def copy(self) -> "KeyLog":
        new = KeyLog()
        new._secrets = {r: dict(d) for r, d in self._secrets.items()}
        new.malformed, new.lines = self.malformed, self.lines
        return new

    def get(self, client_random: bytes) -> dict[str, bytes] | None:
        return self._secrets.get(client_random)

    def secrets_hex(self) -> list[str]:
        """Every secret as lower-case hex: for the tests that check no output holds one."""
        return [s.hex() for d in self._secrets.values() for s in d.values()]


DSB_TLS_KEY_LOG = 0x544C534B  # pcapng Decryption Secrets Block, secrets type 'TLSK': NSS key log text

_current = KeyLog()


def current_keys() -> KeyLog:
    """The key log of this run (``--tls-keylog``); empty unless set by :func:`using_keys`."""
    return _current


@contextlib.contextmanager
def using_keys(keys: KeyLog):
    """Read captures with these keys (the CLI sets them once per command, as analyzer.limits does its limits)."""
    global _current
    old, _current = _current, keys
    try:
        yield keys
    finally:
        _current = old


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
