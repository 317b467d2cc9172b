"""A small pcap / pcapng WRITER for tests: synthetic captures built in the test itself.

Nothing here is used by the analyzer.  It writes

* classic pcap, both byte orders, microsecond or nanosecond timestamps;
* pcapng with several interfaces (each its own link type and ``if_tsresol``);
* frames for link types Ethernet (1, with 802.1Q tags), Linux SLL (113),
  SLL2 (276), raw IP (101) and NULL/loopback (0, either byte order);
* IPv4 and IPv6 packets carrying arbitrary TCP segments (flags, seq, ack).

Checksums are left zero: the analyzer, like Wireshark by default, does not
verify them (offloading makes them wrong in most real captures anyway).

``Conversation`` keeps the sequence numbers of one TCP connection so a test
can say "the client sends these bytes in these pieces" and get segments back;
tests then reorder, duplicate, drop or corrupt segments as they need.
"""
from __future__ import annotations

import gzip
import ipaddress
import struct
from dataclasses import dataclass, replace
from pathlib import Path

FIN, SYN, RST, PSH, ACK = 0x01, 0x02, 0x04, 0x08, 0x10

LINK_NULL, LINK_ETHERNET, LINK_RAW, LINK_SLL, LINK_SLL2 = 0, 1, 101, 113, 276

T0_NS = 1_794_733_200_000_000_000  # 2026-11-15T09:00:00Z, a round number to read timestamps by


# ---------------------------------------------------------------------------- packets


@dataclass(frozen=True)
class Seg:
    """One TCP segment as it went over the wire."""

    src: str
    dst: str
    sport: int
    dport: int
    seq: int
    ack: int
    flags: int
    payload: bytes = b""

    def __len__(self) -> int:
        return len(self.payload)


def tcp(seg: Seg, options: bytes = b"") -> bytes:
    pad = (-len(options)) % 4
    options += b"\x01" * pad  # NOP padding
    doff = (20 + len(options)) // 4
    return struct.pack(
        "!HHIIBBHHH", seg.sport, seg.dport, seg.seq & 0xFFFFFFFF, seg.ack & 0xFFFFFFFF, doff << 4, seg.flags, 65535, 0, 0
    ) + options + seg.payload


def ipv4(src: str, dst: str, proto: int, payload: bytes, *, ident: int = 1, frag_offset: int = 0, more_fragments: bool = False,
         options: bytes = b"", total_length: int | None = None) -> bytes:
    ihl = 5 + len(options) // 4
    flags_frag = (0x2000 if more_fragments else 0) | (frag_offset // 8)
    total = total_length if total_length is not None else ihl * 4 + len(payload)
    return struct.pack(
        "!BBHHHBBH4s4s", 0x40 | ihl, 0, total, ident, flags_frag, 64, proto, 0,
        ipaddress.IPv4Address(src).packed, ipaddress.IPv4Address(dst).packed,
    ) + options + payload


def ipv6(src: str, dst: str, next_header: int, payload: bytes, *, ext: list[tuple[int, bytes]] = ()) -> bytes:
    """``ext``: extension headers as (their own type, body after the 2-byte next/len prefix), in order."""
    chain = b""
    types = [t for t, _ in ext] + [next_header]
    for i, (_t, body) in enumerate(ext):
        nh = types[i + 1]
        raw = bytes([nh, 0]) + body
        raw += b"\x00" * ((-len(raw)) % 8)
        if _t == 44:  # fragment header: fixed 8 bytes, second byte reserved
            raw = raw[:8]
        else:
            raw = raw[:1] + bytes([len(raw) // 8 - 1]) + raw[2:]
        chain += raw
    first = types[0]
    return struct.pack(
        "!IHBB16s16s", 0x60000000, len(chain) + len(payload), first, 64,
        ipaddress.IPv6Address(src).packed, ipaddress.IPv6Address(dst).packed,
    ) + chain + payload


def ip_packet(seg: Seg) -> bytes:
    if ":" in seg.src:
        return ipv6(seg.src, seg.dst, 6, tcp(seg))
    return ipv4(seg.src, seg.dst, 6, tcp(seg))


def ethertype_of(ip: bytes) -> int:
    return 0x86DD if ip[0] >> 4 == 6 else 0x0800


def ethernet(ip: bytes, vlans: tuple[int, ...] = (), pad_to: int = 60) -> bytes:
    head = b"\x02\x00\x00\x00\x00\x02" + b"\x02\x00\x00\x00\x00\x01"
    for i, vid in enumerate(vlans):
        tpid = 0x88A8 if i == 0 and len(vlans) > 1 else 0x8100
        head += struct.pack("!HH", tpid, vid & 0x0FFF)
    frame = head + struct.pack("!H", ethertype_of(ip)) + ip
    return frame + b"\x00" * max(0, pad_to - len(frame))  # Ethernet minimum frame: padding after the IP packet


def sll(ip: bytes) -> bytes:
    return struct.pack("!HHH8sH", 0, 772, 6, b"\x00" * 8, ethertype_of(ip)) + ip


def sll2(ip: bytes) -> bytes:
    return struct.pack("!HHIHBB8s", ethertype_of(ip), 0, 1, 772, 0, 6, b"\x00" * 8) + ip


def null(ip: bytes, byteorder: str = "<", family: int | None = None) -> bytes:
    if family is None:
        family = 30 if ip[0] >> 4 == 6 else 2  # macOS AF_INET6 = 30
    return struct.pack(byteorder + "I", family) + ip


def frame(seg: Seg | bytes, link: int = LINK_ETHERNET, **kw) -> bytes:
    ip = seg if isinstance(seg, (bytes, bytearray)) else ip_packet(seg)
    if link == LINK_ETHERNET:
        return ethernet(ip, **kw)
    if link == LINK_SLL:
        return sll(ip)
    if link == LINK_SLL2:
        return sll2(ip)
    if link == LINK_RAW:
        return bytes(ip)
    if link == LINK_NULL:
        return null(ip, **kw)
    raise ValueError(link)


# ---------------------------------------------------------------------------- a TCP connection


class Conversation:
    """Sequence bookkeeping for one TCP connection (client = the side that sends SYN).

    ``c(data)`` / ``s(data)``: the client / server sends ``data`` (in pieces of
    ``sizes``); each call returns the segments, with seq and ack as a real stack
    would set them at that moment.
    """

    def __init__(self, client: str = "10.0.0.1", cport: int = 51234, server: str = "10.0.0.2", sport: int = 8000,
                 isn_c: int = 1000, isn_s: int = 5000) -> None:
        self.caddr, self.cport, self.saddr, self.sport = client, cport, server, sport
        self.nxt = {True: isn_c & 0xFFFFFFFF, False: isn_s & 0xFFFFFFFF}  # True: the client side

    def _seg(self, from_client: bool, flags: int, payload: bytes = b"", consume: int = 0) -> Seg:
        if from_client:
            src, sp, dst, dp = self.caddr, self.cport, self.saddr, self.sport
        else:
            src, sp, dst, dp = self.saddr, self.sport, self.caddr, self.cport
        seg = Seg(src, dst, sp, dp, self.nxt[from_client], self.nxt[not from_client], flags, payload)
        self.nxt[from_client] = (self.nxt[from_client] + len(payload) + consume) & 0xFFFFFFFF
        return seg

    def handshake(self) -> list[Seg]:
        syn = replace(self._seg(True, SYN, consume=1), ack=0)
        synack = self._seg(False, SYN | ACK, consume=1)
        return [syn, synack, self._seg(True, ACK)]

    def send(self, from_client: bool, data: bytes, sizes: int | list[int] | None = None) -> list[Seg]:
        """``data`` in segments: one, or of ``sizes`` bytes each (an int: fixed size; a list: those sizes, rest last)."""
        if sizes is None:
            pieces = [data]
        elif isinstance(sizes, int):
            pieces = [data[i : i + sizes] for i in range(0, len(data), sizes)]
        else:
            pieces, at = [], 0
            for n in sizes:
                pieces.append(data[at : at + n])
                at += n
            if at < len(data):
                pieces.append(data[at:])
        return [self._seg(from_client, PSH | ACK, p) for p in pieces if p]

    def c(self, data: bytes, sizes: int | list[int] | None = None) -> list[Seg]:
        return self.send(True, data, sizes)

    def s(self, data: bytes, sizes: int | list[int] | None = None) -> list[Seg]:
        return self.send(False, data, sizes)

    def ack(self, from_client: bool) -> Seg:
        return self._seg(from_client, ACK)

    def fin(self, from_client: bool) -> Seg:
        return self._seg(from_client, FIN | ACK, consume=1)

    def rst(self, from_client: bool) -> Seg:
        return self._seg(from_client, RST | ACK)

    def skip(self, from_client: bool, n: int) -> None:
        """Advance a side's sequence number as if ``n`` bytes were sent (and lost)."""
        self.nxt[from_client] = (self.nxt[from_client] + n) & 0xFFFFFFFF


# ---------------------------------------------------------------------------- containers


@dataclass(frozen=True)
class Rec:
    """One captured packet: link-layer bytes, time, interface, and the length on the wire."""

    data: bytes
    ts_ns: int
    iface: int = 0
    wire_len: int | None = None  # > len(data): the capture cut the packet (snaplen)


def pcap(records: list[Rec], linktype: int = LINK_ETHERNET, byteorder: str = "<", nanos: bool = False,
         snaplen: int = 262144) -> bytes:
    magic = 0xA1B23C4D if nanos else 0xA1B2C3D4
    out = [struct.pack(byteorder + "IHHiIII", magic, 2, 4, 0, 0, snaplen, linktype)]
    hdr = struct.Struct(byteorder + "IIII")
    div = 1_000_000_000 if nanos else 1_000_000
    for r in records:
        sec, frac = divmod(r.ts_ns, 1_000_000_000)
        if not nanos:
            frac //= 1000
        assert frac < div
        out.append(hdr.pack(sec, frac, len(r.data), r.wire_len or len(r.data)))
        out.append(r.data)
    return b"".join(out)


def _block(bo: str, btype: int, body: bytes) -> bytes:
    body += b"\x00" * ((-len(body)) % 4)
    n = len(body) + 12
    return struct.pack(bo + "II", btype, n) + body + struct.pack(bo + "I", n)


def _option(bo: str, code: int, value: bytes) -> bytes:
    return struct.pack(bo + "HH", code, len(value)) + value + b"\x00" * ((-len(value)) % 4)


def shb(byteorder: str = "<") -> bytes:
    return _block(byteorder, 0x0A0D0D0A, struct.pack(byteorder + "IHHq", 0x1A2B3C4D, 1, 0, -1))


def idb(linktype: int, tsresol: int | None = None, byteorder: str = "<", tsoffset: int | None = None, snaplen: int = 0) -> bytes:
    opts = b""
    if tsresol is not None:
        opts += _option(byteorder, 9, bytes([tsresol]))
    if tsoffset is not None:
        opts += _option(byteorder, 14, struct.pack(byteorder + "q", tsoffset))
    if opts:
        opts += _option(byteorder, 0, b"")
    return _block(byteorder, 1, struct.pack(byteorder + "HHI", linktype, 0, snaplen) + opts)


def _units(ts_ns: int, tsresol: int | None) -> int:
    r = 6 if tsresol is None else tsresol
    if r & 0x80:
        return (ts_ns << (r & 0x7F)) // 1_000_000_000
    return ts_ns * 10**r // 1_000_000_000


def epb(r: Rec, tsresol: int | None = None, byteorder: str = "<") -> bytes:
    t = _units(r.ts_ns, tsresol)
    return _block(byteorder, 6, struct.pack(byteorder + "IIIII", r.iface, t >> 32, t & 0xFFFFFFFF, len(r.data), r.wire_len or len(r.data)) + r.data)


def spb(r: Rec, byteorder: str = "<") -> bytes:
    return _block(byteorder, 3, struct.pack(byteorder + "I", r.wire_len or len(r.data)) + r.data)


def opb(r: Rec, tsresol: int | None = None, byteorder: str = "<") -> bytes:
    t = _units(r.ts_ns, tsresol)
    return _block(byteorder, 2, struct.pack(byteorder + "HHIIII", r.iface, 0, t >> 32, t & 0xFFFFFFFF, len(r.data), r.wire_len or len(r.data)) + r.data)


def pcapng(records: list[Rec], interfaces: list[tuple[int, int | None]] = ((LINK_ETHERNET, None),), byteorder: str = "<",
           extra_blocks: dict[int, bytes] | None = None) -> bytes:
    """``interfaces``: (link type, if_tsresol or None) per interface; ``extra_blocks``: raw bytes inserted before packet i."""
    out = [shb(byteorder)] + [idb(lt, res, byteorder) for lt, res in interfaces]
    for i, r in enumerate(records):
        if extra_blocks and i in extra_blocks:
            out.append(extra_blocks[i])
        out.append(epb(r, interfaces[r.iface][1], byteorder))
    return b"".join(out)


def custom_block(btype: int, body: bytes, byteorder: str = "<") -> bytes:
    return _block(byteorder, btype, body)


# ---------------------------------------------------------------------------- convenience


def records(segs: list[Seg], link: int = LINK_ETHERNET, t0: int = T0_NS, step_ns: int = 1_000_000, iface: int = 0, **kw) -> list[Rec]:
    """Each segment as one captured packet, ``step_ns`` apart."""
    return [Rec(frame(s, link, **kw), t0 + i * step_ns, iface) for i, s in enumerate(segs)]


def write(path: Path, data: bytes, gz: bool = False) -> Path:
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def sse_bench_capture(path: Path, target_bytes: int = 100 * 2**20, single: float = 1.0, seed: int = 7) -> dict:
    """Write a large classic pcap of MCP SSE traffic on loopback, streaming (for speed measurements).

    Flows one after another: handshake, a GET with Mcp-Session-Id, a chunked
    ``text/event-stream`` response of 1000-4000 JSON-RPC notifications (60-1200
    bytes of payload each), a client ACK every two segments, then RST.  A
    fraction ``single`` of the server's writes carry one event (one segment
    each, as servers that flush every event produce); the others carry 10-150
    events, cut into loopback-MSS (65483-byte) segments.
    """
    import json
    import random

    rng = random.Random(seed)
    hdr = struct.Struct("<IIII")
    stats = {"bytes": 24, "packets": 0, "flows": 0, "events": 0}
    ts = T0_NS
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, LINK_ETHERNET))

        def emit(seg: Seg) -> None:
            nonlocal ts
            fr = frame(seg)
            ts += rng.randint(20_000, 400_000)
            sec, ns = divmod(ts, 10**9)
            f.write(hdr.pack(sec, ns // 1000, len(fr), len(fr)) + fr)
            stats["bytes"] += 16 + len(fr)
            stats["packets"] += 1

        while stats["bytes"] < target_bytes:
            stats["flows"] += 1
            c = Conversation("127.0.0.1", 30000 + stats["flows"] % 30000, "127.0.0.1", 8000, rng.randrange(2**32), rng.randrange(2**32))
            sid = f"{rng.getrandbits(128):032x}"
            for s in c.handshake() + c.c(f"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nAccept: text/event-stream\r\nMcp-Session-Id: {sid}\r\n\r\n".encode()):
                emit(s)
            emit(c.ack(False))
            for s in c.s(f"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nmcp-session-id: {sid}\r\ntransfer-encoding: chunked\r\n\r\n".encode()):
                emit(s)
            n, total, unacked = 0, rng.randint(1000, 4000), 0
            while n < total:
                batch = 1 if rng.random() < single else rng.randint(10, 150)
                parts = []
                for _ in range(batch):
                    n += 1
                    data = json.dumps({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "x" * rng.randint(60, 1200), "n": n}})
                    ev = f"id: {n}\nevent: message\ndata: {data}\n\n".encode()
                    parts.append(b"%x\r\n" % len(ev) + ev + b"\r\n")
                for s in c.s(b"".join(parts), 65483):
                    emit(s)
                    unacked += 1
                    if unacked == 2:
                        emit(c.ack(True))
                        unacked = 0
                stats["events"] += batch
            emit(c.rst(True))
    return stats
