"""Synthetic TLS connections for tests: the records a client and a server would send, sealed with ``cryptography``.

Not a TLS implementation: no key exchange, no certificates, no Finished MACs (the decoder verifies none of
them; it only needs the hellos, the key log and the records).  The secrets are random bytes written to an
NSS key log, as SSLKEYLOGFILE would; real captures (sample_logs/tls/, checked against tshark) cover the rest.
"""
from __future__ import annotations

import os
import struct

from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305

from analyzer.decode.tls import SUITES_12, SUITES_13, hkdf_expand_label, prf12


def _hs(mtype: int, body: bytes) -> bytes:
    return bytes([mtype]) + len(body).to_bytes(3, "big") + body


def _ext(etype: int, data: bytes) -> bytes:
    return struct.pack("!HH", etype, len(data)) + data


def _alpn(names: list[str]) -> bytes:
    lst = b"".join(bytes([len(n)]) + n.encode() for n in names)
    return struct.pack("!H", len(lst)) + lst


def record(ctype: int, body: bytes, version: bytes = b"\x03\x03") -> bytes:
    return bytes([ctype]) + version + struct.pack("!H", len(body)) + body


class Session:
    """One TLS connection's two byte streams, record by record.  ``client_bytes()`` / ``server_bytes()``
    after the calls; ``keylog`` is the NSS key log line(s) that decrypt it."""

    def __init__(self, version: int = 0x0304, suite: int = 0x1301, alpn: str | None = "http/1.1", seed: int = 1) -> None:
        rnd = __import__("random").Random(seed)
        self.client_random = bytes(rnd.randrange(256) for _ in range(32))
        self.server_random = bytes(rnd.randrange(256) for _ in range(32))
        self.version, self.suite_id, self.alpn = version, suite, alpn
        self.records: list[tuple[bool, bytes]] = []  # (from client, record bytes)
        self.seq = {True: 0, False: 0}
        self.keylog = ""
        self._hello()

    # -- handshake ------------------------------------------------------------------------------------
    def _hello(self) -> None:
        exts = _ext(43, b"\x02\x03\x04") + (_ext(16, _alpn(["h2", "http/1.1"])) if self.alpn else b"")
        ch = b"\x03\x03" + self.client_random + b"\x00" + b"\x00\x04\x13\x01\xc0\x2f" + b"\x01\x00" + struct.pack("!H", len(exts)) + exts
        self.records.append((True, record(22, _hs(1, ch), b"\x03\x01")))
        if self.version == 0x0304:
            sexts = _ext(43, b"\x03\x04")
        else:
            sexts = _ext(16, _alpn([self.alpn])) if self.alpn else b""
        sh = struct.pack("!H", min(self.version, 0x0303)) + self.server_random + b"\x00" + struct.pack("!H", self.suite_id) + b"\x00" + struct.pack("!H", len(sexts)) + sexts
        self.records.append((False, record(22, _hs(2, sh))))
        if self.version == 0x0304:
            self._keys13()
        elif self.version == 0x0303:
            self._keys12()

    def _keys13(self) -> None:
        suite = SUITES_13.get(self.suite_id)
        if suite is None:
            return
        self.suite = suite
        n = 48 if suite.hash_name == "sha384" else 32
        self.secrets = {k: os.urandom(n) for k in ("CLIENT_HANDSHAKE_TRAFFIC_SECRET", "SERVER_HANDSHAKE_TRAFFIC_SECRET",
                                                   "CLIENT_TRAFFIC_SECRET_0", "SERVER_TRAFFIC_SECRET_0")}
        self.keylog = "".join(f"{k} {self.client_random.hex()} {v.hex()}\n" for k, v in self.secrets.items())
        self.app = {True: self.secrets["CLIENT_TRAFFIC_SECRET_0"], False: self.secrets["SERVER_TRAFFIC_SECRET_0"]}
        self.keys = {True: self._k13(self.secrets["CLIENT_HANDSHAKE_TRAFFIC_SECRET"]),
                     False: self._k13(self.secrets["SERVER_HANDSHAKE_TRAFFIC_SECRET"])}
        self.records.append((True, record(20, b"\x01")))  # middlebox-compatibility CCS, in clear
        ee_exts = _ext(16, _alpn([self.alpn])) if self.alpn else b""
        self._seal13(False, _hs(8, struct.pack("!H", len(ee_exts)) + ee_exts) + _hs(11, b"\x00" * 40) + _hs(20, os.urandom(32)), 22)
        self.keys[False], self.seq[False] = self._k13(self.app[False]), 0
        self._seal13(True, _hs(20, os.urandom(32)), 22)
        self.keys[True], self.seq[True] = self._k13(self.app[True]), 0

    def _k13(self, secret: bytes):
        s = self.suite
        key = hkdf_expand_label(secret, "key", b"", s.key_len, s.hash_name)
        iv = hkdf_expand_label(secret, "iv", b"", 12, s.hash_name)
        return (AESGCM(key) if s.aead == "gcm" else ChaCha20Poly1305(key)), iv

    def _seal13(self, from_client: bool, data: bytes, ctype: int, pad: int = 0) -> bytes:
        aead, iv = self.keys[from_client]
        inner = data + bytes([ctype]) + b"\x00" * pad
        header = b"\x17\x03\x03" + struct.pack("!H", len(inner) + 16)
        nonce = (int.from_bytes(iv, "big") ^ self.seq[from_client]).to_bytes(12, "big")
        self.seq[from_client] += 1
        rec = header + aead.encrypt(nonce, inner, header)
        self.records.append((from_client, rec))
        return rec

    def _keys12(self) -> None:
        suite = SUITES_12.get(self.suite_id)
        if suite is None:
            return
        self.suite = suite
        master = os.urandom(48)
        self.secrets = {"CLIENT_RANDOM": master}
        self.keylog = f"CLIENT_RANDOM {self.client_random.hex()} {master.hex()}\n"
        iv_len = 4 if suite.aead == "gcm" else 12
        k = suite.key_len
        block = prf12(master, b"key expansion", self.server_random + self.client_random, 2 * (k + iv_len), suite.hash_name)
        mk = (lambda key: AESGCM(key)) if suite.aead == "gcm" else (lambda key: ChaCha20Poly1305(key))
        self.keys = {True: (mk(block[:k]), block[2 * k : 2 * k + iv_len]), False: (mk(block[k : 2 * k]), block[2 * k + iv_len :])}
        for side in (False, True):  # server: ServerHelloDone... CCS + Finished; client: CCS + Finished (order irrelevant here)
            self.records.append((side, record(20, b"\x01")))
            self._seal12(side, _hs(20, os.urandom(12)), 22)

    def _seal12(self, from_client: bool, data: bytes, ctype: int) -> bytes:
        aead, iv = self.keys[from_client]
        seq = self.seq[from_client]
        self.seq[from_client] += 1
        aad = struct.pack("!QB2sH", seq, ctype, b"\x03\x03", len(data))
        if self.suite.aead == "gcm":
            explicit = struct.pack("!Q", seq)
            body = explicit + aead.encrypt(iv + explicit, data, aad)
        else:
            body = aead.encrypt((int.from_bytes(iv, "big") ^ seq).to_bytes(12, "big"), data, aad)
        rec = record(ctype, body)
        self.records.append((from_client, rec))
        return rec

    # -- application data -------------------------------------------------------------------------------
    def send(self, from_client: bool, data: bytes, record_size: int = 1 << 14) -> list[bytes]:
        """Application data in records of at most ``record_size`` bytes; returns the records."""
        out = []
        for i in range(0, len(data), record_size):
            piece = data[i : i + record_size]
            out.append(self._seal13(from_client, piece, 23) if self.version == 0x0304 else self._seal12(from_client, piece, 23))
        return out

    def key_update(self, from_client: bool) -> None:
        """TLS 1.3 KeyUpdate from this side: its next records use the next application secret."""
        self._seal13(from_client, _hs(24, b"\x00"), 22)
        s = self.suite
        self.app[from_client] = hkdf_expand_label(self.app[from_client], "traffic upd", b"", len(self.app[from_client]), s.hash_name)
        self.keys[from_client], self.seq[from_client] = self._k13(self.app[from_client]), 0

    def bytes_of(self, from_client: bool) -> bytes:
        return b"".join(r for c, r in self.records if c == from_client)
