"""Link layer, IPv4/IPv6 and TCP: decoding packets and reassembling each flow's two byte streams.

Decoding (:func:`decode`) is one function over ``bytes`` with index
arithmetic and precompiled ``Struct``s: no object per layer.

Reassembly (:class:`Reassembler`) follows each direction of a flow (the
5-tuple; the flow's two directions share one :class:`Flow`) in *stream
offsets*: offset 0 is the byte after the SYN (ISN + 1), or, for a flow that
was already open when the capture started, the first sequence number seen.
Sequence numbers are 32-bit and wrap; offsets are unwrapped against the next
expected offset, so streams longer than 4 GiB stay ordered.

What the capture shows is not what the endpoints saw, so reassembly decides:

* in-order data is handed to the flow's consumer (``Flow.app``) at once, with
  the time and packet number of the segment that carried it;
* out-of-order data is held and handed over in order when the hole fills;
* a retransmission of bytes already handed over is compared with them:
  identical -> dropped; different -> ``tcp_overlap_conflict``, the first copy
  is kept (what a receiving stack that already acknowledged it would keep);
* a hole nothing fills is *lost by the capture*: declared as a gap (the
  consumer is told how many bytes are missing and between which packets) when
  the receiver's ACK proves it got bytes beyond the hole (the receiver had
  them, the capture did not -- Zeek's "ack above hole"), when too much data is
  held behind it, or when the flow ends;
* FIN ends a direction ("eof") once every byte before it was handed over;
  RST ends both ("reset"); the capture's end ends what is left ("capture_end").
"""
from __future__ import annotations

import socket
import struct
from bisect import insort
from collections import deque
from typing import Callable, Protocol

MASK = 0xFFFFFFFF
HALF = 1 << 31
WRAP = 1 << 32
HISTORY = 1 << 18  # keep the last 256 KiB handed over per direction to compare retransmissions with
HOLD_LIMIT = 1 << 22  # 4 MiB held behind a hole: the hole is declared lost
KEEP_CLOSED = 1 << 16  # closed flows remembered (to ignore their stragglers) before the oldest are forgotten

FIN, SYN, RST, ACK = 0x01, 0x02, 0x04, 0x10

# decode() outcomes that are not a TCP segment
NOT_IP = 0  # ARP, LLDP, ...: ignored (counted)
NOT_TCP = 1  # UDP, ICMP, ...: ignored (counted)
FRAGMENT = 2  # an IP fragment: not reassembled
UNSUPPORTED_LINK = 3

_ETH_TAGS = (0x8100, 0x88A8, 0x9100)  # 802.1Q, 802.1ad, old QinQ
_AF_INET6 = (10, 24, 28, 30)  # Linux, OpenBSD/NetBSD, FreeBSD, macOS
_IPV4 = struct.Struct("!BxHxxHxBxx4s4s")  # ver/ihl, total length, flags/fragment, protocol, src, dst
_IPV6 = struct.Struct("!4xHBx16s16s")  # payload length, next header, src, dst
_TCP = struct.Struct("!HHIIBB")  # ports, seq, ack, data offset, flags
_U16 = struct.Struct("!H")

Segment = tuple[bytes, bytes, int, int, int, int, int, bytes, int]  # src, dst, sport, dport, seq, ack, flags, payload, missing


def decode(linktype: int, data: bytes, wirelen: int) -> Segment | int | str:
    """One captured frame -> a TCP segment tuple, an outcome code (int), or why it is malformed (str).

    ``missing``: payload bytes the frame should carry but the capture cut (snaplen).
    """
    n = len(data)
    # ---- link layer: find the network protocol and where its header starts
    if linktype == 1:  # Ethernet II, with any number of VLAN tags
        if n < 14:
            return "Ethernet header cut short"
        etype = data[12] << 8 | data[13]
        off = 14
        while etype in _ETH_TAGS:
            if n < off + 4:
                return "VLAN tag cut short"
            etype = data[off + 2] << 8 | data[off + 3]
            off += 4
    elif linktype == 113:  # Linux cooked capture v1 (tcpdump -i any)
        if n < 16:
            return "SLL header cut short"
        etype, off = data[14] << 8 | data[15], 16
    elif linktype == 276:  # Linux cooked capture v2
        if n < 20:
            return "SLL2 header cut short"
        etype, off = data[0] << 8 | data[1], 20
    elif linktype in (101, 12, 14, 228, 229):  # raw IP (12/14: raw on some BSDs; 228/229: IPv4/IPv6 only)
        if n < 1:
            return "empty raw IP packet"
        etype, off = (0x0800 if data[0] >> 4 == 4 else 0x86DD if data[0] >> 4 == 6 else 0), 0
    elif linktype in (0, 108):  # BSD loopback: a 4-byte address family in host byte order (108: always big-endian)
        if n < 4:
            return "loopback header cut short"
        fam = data[3] if linktype == 108 or (data[0] == 0 and data[1] == 0) else data[0]
        etype, off = (0x0800 if fam == 2 else 0x86DD if fam in _AF_INET6 else 0), 4
    else:
        return UNSUPPORTED_LINK

    # ---- network layer
    if etype == 0x0800:
        if n < off + 20:
            return "IPv4 header cut short"
        vihl, total, frag, proto, src, dst = _IPV4.unpack_from(data, off)
        ihl = (vihl & 0x0F) * 4
        if vihl >> 4 != 4 or ihl < 20:
            return f"bad IPv4 version/header length byte 0x{vihl:02x}"
        if frag & 0x3FFF:  # more-fragments flag or a fragment offset
            return FRAGMENT
        if proto != 6:
            return NOT_TCP
        l4 = off + ihl
        # total length 0: a TSO/GSO super-packet captured on the sending host; the frame is the truth
        end = off + total if total else n
        if total and total < ihl:
            return f"IPv4 total length {total} shorter than its header"
    elif etype == 0x86DD:
        if n < off + 40:
            return "IPv6 header cut short"
        plen, nh, src, dst = _IPV6.unpack_from(data, off)
        if data[off] >> 4 != 6:
            return "bad IPv6 version"
        l4 = off + 40
        end = l4 + plen if plen else n  # 0: jumbogram or TSO
        for _ in range(8):  # extension headers we can walk (bounded: a chain longer than 8 is not real traffic)
            if nh in (0, 43, 60, 135):  # hop-by-hop, routing, destination options, mobility
                if n < l4 + 2:
                    return "IPv6 extension header cut short"
                nh, l4 = data[l4], l4 + (data[l4 + 1] + 1) * 8
            elif nh == 44:  # fragment header
                if n < l4 + 8:
                    return "IPv6 fragment header cut short"
                if _U16.unpack_from(data, l4 + 2)[0] & 0xFFF9:  # offset or M flag: a real fragment
                    return FRAGMENT
                nh, l4 = data[l4], l4 + 8  # an atomic fragment: the whole packet
            elif nh == 51:  # authentication header
                if n < l4 + 2:
                    return "IPv6 AH cut short"
                nh, l4 = data[l4], l4 + (data[l4 + 1] + 2) * 4
            else:
                break
        if nh != 6:
            return NOT_TCP
    else:
        return NOT_IP

    # ---- TCP
    if n < l4 + 20 or end < l4 + 20:
        return "TCP header cut short"
    sport, dport, seq, ack, doff, flags = _TCP.unpack_from(data, l4)
    start = l4 + (doff >> 4) * 4
    if start < l4 + 20:
        return f"TCP data offset {doff >> 4} below 5"
    if start > end or start > n:
        return "TCP options cut short"
    if end <= n:
        return src, dst, sport, dport, seq, ack, flags, data[start:end], 0  # (Ethernet padding after `end` dropped)
    if wirelen <= n:
        return f"IP length says {end - off} bytes, the frame holds {n - off}"
    return src, dst, sport, dport, seq, ack, flags, data[start:n], end - n  # cut by the capture's snaplen


def endpoint(addr: bytes, port: int) -> str:
    if len(addr) == 4:
        return f"{socket.inet_ntop(socket.AF_INET, addr)}:{port}"
    return f"[{socket.inet_ntop(socket.AF_INET6, addr)}]:{port}"


class App(Protocol):
    """What a flow's consumer receives, per direction (``side`` 0 or 1 of :class:`Flow`)."""

    def data(self, side: int, data: bytes, ts: int | None, pkt: int) -> None: ...
    def gap(self, side: int, nbytes: int, pkt_before: int | None, pkt_after: int | None, cause: str) -> None: ...
    def end(self, side: int, reason: str, by: int | None, ts: int | None, pkt: int | None) -> None: ...


class Direction:
    """One direction of a flow: the bytes side ``i`` sent."""

    __slots__ = ("started", "base", "nxt", "held", "held_bytes", "fin", "ended", "hist", "hist_bytes", "last_pkt", "peer_ack", "arrivals")

    def __init__(self) -> None:
        self.started = False
        self.base = 0  # sequence number of offset 0
        self.nxt = 0  # next offset expected
        self.held: list[tuple[int, int, bytes, int | None, int, int]] = []  # (offset, arrival, data, ts, pkt, missing) sorted
        self.held_bytes = 0
        self.fin: int | None = None  # offset of the FIN
        self.ended = ""
        self.hist: deque[tuple[int, bytes, int]] = deque()  # recent (offset, data, pkt) handed over
        self.hist_bytes = 0
        self.last_pkt: int | None = None  # packet that carried the last byte handed over
        self.peer_ack: int | None = None  # latest ACK number the other side sent
        self.arrivals = 0

    def offset(self, seq: int) -> int:
        off = (self.nxt & ~MASK) | ((seq - self.base) & MASK)
        d = off - self.nxt
        if d > HALF:
            off -= WRAP
        elif d < -HALF:
            off += WRAP
        return off


class Flow:
    """Both directions of one TCP connection.  ``side`` 0 sent the first packet the capture has."""

    __slots__ = ("addrs", "ports", "dirs", "client", "closer", "app", "ordinal", "first_pkt", "closed", "ignored")

    def __init__(self, src: bytes, dst: bytes, sport: int, dport: int, ordinal: int, pkt: int) -> None:
        self.addrs = (src, dst)
        self.ports = (sport, dport)
        self.dirs = (Direction(), Direction())
        self.client: int | None = None  # side that sent the SYN (None: not seen)
        self.closer: tuple[str, int] | None = None  # first FIN/RST: (reason, side)
        self.app: App | None = None
        self.ordinal = ordinal  # 1 for the first connection on this 5-tuple, 2 after a reuse, ...
        self.first_pkt = pkt
        self.closed = False
        self.ignored = False

    def name(self, side: int) -> str:
        """``ip:port->ip:port`` with ``side`` as the sender."""
        return f"{endpoint(self.addrs[side], self.ports[side])}->{endpoint(self.addrs[1 - side], self.ports[1 - side])}"


Note = Callable[[str, str, str], None]


class Reassembler:
    """Feed decoded segments in capture order; ``finish()`` at the end of the capture."""

    def __init__(self, on_flow: Callable[[Flow], App | None], note: Note) -> None:
        self.on_flow = on_flow  # returns the flow's consumer, or None to ignore the flow
        self.note = note
        self.flows: dict[tuple[bytes, int, bytes, int], tuple[Flow, int]] = {}
        self.open: dict[Flow, None] = {}  # insertion-ordered set of flows not yet closed
        self.closed: deque[Flow] = deque()

    # -- packets ---------------------------------------------------------------
    def segment(self, seg: Segment, ts: int | None, pkt: int) -> None:
        src, dst, sport, dport, seq, ack, flags, payload, missing = seg
        got = self.flows.get((src, sport, dst, dport))
        if got is None:
            if flags & RST:
                return  # a reset of a connection the capture never saw: nothing to follow
            flow, side = self._new(src, dst, sport, dport, 1, pkt), 0
        else:
            flow, side = got
            if flow.closed or (flags & SYN and not flags & ACK and self._reopened(flow, side, seq)):
                if not (flags & SYN and not flags & ACK):
                    return  # a straggler (ACK after FIN, retransmitted RST) on a finished connection
                if not flow.closed:
                    self._close(flow, "capture_end", None, ts, pkt)  # the old connection's end is not in the capture
                flow, side = self._new(src, dst, sport, dport, flow.ordinal + 1, pkt), 0
        if flow.ignored:  # not followed (other port, TLS): forget its buffers; later packets are stragglers
            self._release(flow)
            return
        d = flow.dirs[side]
        if flags & SYN:
            if flow.client is None:
                flow.client = 1 - side if flags & ACK else side
            if not d.started or (d.nxt == 0 and not d.hist):
                d.base, d.started, d.nxt = (seq + 1) & MASK, True, 0
            seq += 1
        elif not d.started:
            d.base, d.started = seq, True  # already open when the capture started: the first seen byte is offset 0
        if flags & ACK:
            peer = flow.dirs[1 - side]
            peer.peer_ack = ack
            if peer.held and peer.started:
                self._ack_above_hole(flow, 1 - side, ack, ts, pkt)
        if payload or missing:
            self._data(flow, side, d, d.offset(seq), payload, missing, ts, pkt)
        if flags & RST:
            if flow.closer is None:
                flow.closer = ("reset", side)
            self._close(flow, "reset", side, ts, pkt)
            return
        if flags & FIN and d.fin is None:
            d.fin = d.offset(seq) + len(payload) + missing
            if flow.closer is None:
                flow.closer = ("eof", side)
            if d.nxt >= d.fin and not d.ended:
                self._end(flow, side, "eof", ts, pkt)

    def _new(self, src: bytes, dst: bytes, sport: int, dport: int, ordinal: int, pkt: int) -> Flow:
        flow = Flow(src, dst, sport, dport, ordinal, pkt)
        self.flows[(src, sport, dst, dport)] = (flow, 0)
        self.flows[(dst, dport, src, sport)] = (flow, 1)
        self.open[flow] = None
        app = self.on_flow(flow)
        if app is None:
            flow.ignored = True
        flow.app = app
        return flow

    @staticmethod
    def _reopened(flow: Flow, side: int, seq: int) -> bool:
        """A SYN with another ISN on a side that already carried data: the 5-tuple was reused."""
        d = flow.dirs[side]
        return d.started and bool(d.hist or d.nxt) and ((seq + 1 - d.base) & MASK) != 0

    def _data(self, flow: Flow, side: int, d: Direction, off: int, payload: bytes, missing: int, ts: int | None, pkt: int) -> None:
        if d.ended:
            return
        end = off + len(payload)
        nxt = d.nxt
        if off == nxt and not d.held:  # the common case: the next bytes, in order
            self._hand(flow, side, d, off, payload, ts, pkt)
            if missing:
                self._gap(flow, side, d, missing, pkt, pkt, "snaplen")
        elif end + missing <= nxt:  # all of it was handed over already: a retransmission
            self._compare(flow, side, d, off, payload, pkt)
            return
        elif off <= nxt:  # starts inside what was handed over: compare that part, hand over the rest
            self._compare(flow, side, d, off, payload[: nxt - off], pkt)
            if end > nxt:
                self._hand(flow, side, d, nxt, payload[nxt - off :], ts, pkt)
            if missing and end + missing > d.nxt:
                self._gap(flow, side, d, end + missing - d.nxt, pkt, pkt, "snaplen")
        else:
            self._hold(flow, side, d, off, payload, missing, ts, pkt)
            if d.held_bytes > HOLD_LIMIT:
                self._skip_hole(flow, side, d)
        if d.held:
            self._drain(flow, side, d)
        if d.fin is not None and d.nxt >= d.fin and not d.ended:
            self._end(flow, side, "eof", ts, pkt)

    def _hand(self, flow: Flow, side: int, d: Direction, off: int, data: bytes, ts: int | None, pkt: int) -> None:
        """Hand ``data`` (starting exactly at ``d.nxt``) to the consumer and remember it for comparisons."""
        d.nxt = off + len(data)
        d.last_pkt = pkt
        hist = d.hist
        hist.append((off, data, pkt))
        d.hist_bytes += len(data)
        while d.hist_bytes - len(hist[0][1]) >= HISTORY:
            d.hist_bytes -= len(hist.popleft()[1])
        flow.app.data(side, data, ts, pkt)  # type: ignore[union-attr]

    def _compare(self, flow: Flow, side: int, d: Direction, off: int, data: bytes, pkt: int) -> None:
        """Retransmitted bytes against the copy handed over (as far as the history reaches)."""
        end = off + len(data)
        for hoff, hdata, hpkt in reversed(d.hist):
            hend = hoff + len(hdata)
            if hend <= off:
                break
            if hoff >= end:
                continue
            a, b = max(off, hoff), min(end, hend)
            if hdata[a - hoff : b - hoff] != data[a - off : b - off]:
                self.note(
                    "tcp_overlap_conflict", f"packet {pkt}",
                    f"{flow.name(side)}: bytes {a}-{b - 1} of the stream differ from packet {hpkt}'s copy, which was kept",
                )
                return

    def _hold(self, flow: Flow, side: int, d: Direction, off: int, data: bytes, missing: int, ts: int | None, pkt: int) -> None:
        """Keep out-of-order bytes; where they overlap bytes already held, the first copy wins."""
        pieces = [(off, data)]
        end = off + len(data)
        for hoff, _arr, hdata, _ts, hpkt, _m in d.held:
            hend = hoff + len(hdata)
            if hoff >= end:
                break
            if hend <= off:
                continue
            rest = []
            for poff, pdata in pieces:
                pend = poff + len(pdata)
                a, b = max(poff, hoff), min(pend, hend)
                if a >= b:
                    rest.append((poff, pdata))
                    continue
                if hdata[a - hoff : b - hoff] != pdata[a - poff : b - poff]:
                    self.note(
                        "tcp_overlap_conflict", f"packet {pkt}",
                        f"{flow.name(side)}: bytes {a}-{b - 1} of the stream differ from packet {hpkt}'s copy, which was kept",
                    )
                if poff < a:
                    rest.append((poff, pdata[: a - poff]))
                if b < pend:
                    rest.append((b, pdata[b - poff :]))
            pieces = rest
        for poff, pdata in pieces:
            d.arrivals += 1
            m = missing if poff + len(pdata) == end else 0
            insort(d.held, (poff, d.arrivals, pdata, ts, pkt, m))
            d.held_bytes += len(pdata)
        if not pieces and missing:
            d.arrivals += 1
            insort(d.held, (end, d.arrivals, b"", ts, pkt, missing))

    def _drain(self, flow: Flow, side: int, d: Direction) -> None:
        held = d.held
        while held and held[0][0] <= d.nxt and not d.ended:
            off, _arr, data, ts, pkt, missing = held.pop(0)
            d.held_bytes -= len(data)
            end = off + len(data)
            if off < d.nxt:
                self._compare(flow, side, d, off, data[: d.nxt - off], pkt)
            if end > d.nxt:
                self._hand(flow, side, d, d.nxt, data[d.nxt - off :], ts, pkt)
            if missing and end + missing > d.nxt:
                self._gap(flow, side, d, end + missing - d.nxt, pkt, pkt, "snaplen")

    def _gap(self, flow: Flow, side: int, d: Direction, n: int, before: int | None, after: int | None, cause: str) -> None:
        d.nxt += n
        flow.app.gap(side, n, before, after, cause)  # type: ignore[union-attr]

    def _skip_hole(self, flow: Flow, side: int, d: Direction) -> None:
        """Declare the first hole lost and hand over what waited behind it."""
        first = d.held[0]
        self._gap(flow, side, d, first[0] - d.nxt, d.last_pkt, first[4], "lost")
        self._drain(flow, side, d)

    def _ack_above_hole(self, flow: Flow, side: int, ack: int, ts: int | None, pkt: int) -> None:
        d = flow.dirs[side]
        acked = d.offset(ack)
        while d.held and d.held[0][0] > d.nxt and d.held[0][0] <= acked and not d.ended:
            self._skip_hole(flow, side, d)
        if d.fin is not None and d.nxt >= d.fin and not d.ended:
            self._end(flow, side, "eof", ts, pkt)

    def _flush(self, flow: Flow, side: int) -> None:
        """The flow is over: every hole left is lost."""
        d = flow.dirs[side]
        while d.held and not d.ended:
            self._skip_hole(flow, side, d)
        if d.ended or not d.started:
            return
        if d.fin is not None and d.fin > d.nxt:
            self._gap(flow, side, d, d.fin - d.nxt, d.last_pkt, None, "lost")  # lost just before the FIN
        elif d.fin is None and d.peer_ack is not None:
            acked = d.offset(d.peer_ack)
            if d.nxt + 1 < acked <= d.nxt + HALF:  # +1: an acknowledged FIN the capture lacks is no data
                self._gap(flow, side, d, acked - d.nxt, d.last_pkt, None, "lost")  # the receiver acknowledged bytes the capture lacks

    def _end(self, flow: Flow, side: int, reason: str, ts: int | None, pkt: int | None, by: int | None = None) -> None:
        """``by``: the side whose FIN/RST ended it (eof: the first side that closed the connection)."""
        d = flow.dirs[side]
        d.ended = reason
        if reason == "eof":
            by = flow.closer[1] if flow.closer else side
        flow.app.end(side, reason, by, ts, pkt)  # type: ignore[union-attr]
        if flow.dirs[1 - side].ended:
            self._release(flow)

    def _close(self, flow: Flow, reason: str, by: int | None, ts: int | None, pkt: int | None) -> None:
        for side in (0, 1):
            d = flow.dirs[side]
            if not d.ended:
                self._flush(flow, side)
                if not d.ended:
                    # a FIN already reached (and handed over) ends as eof; the rest end as the flow does
                    self._end(flow, side, "eof" if d.fin is not None and d.nxt >= d.fin else reason, ts, pkt, by)
        self._release(flow)

    def _release(self, flow: Flow) -> None:
        if flow.closed:
            return
        flow.closed = True
        for d in flow.dirs:
            d.hist = deque()
            d.held = []
            d.hist_bytes = d.held_bytes = 0
        self.open.pop(flow, None)
        # Remember closed flows for a while (their last ACKs and retransmitted FINs still come), then forget.
        self.closed.append(flow)
        if len(self.closed) > KEEP_CLOSED:
            old = self.closed.popleft()
            for key in ((old.addrs[0], old.ports[0], old.addrs[1], old.ports[1]), (old.addrs[1], old.ports[1], old.addrs[0], old.ports[0])):
                if self.flows.get(key, (None,))[0] is old:
                    del self.flows[key]

    def finish(self, ts: int | None) -> None:
        """The capture ended: flush and end every flow still open."""
        for flow in list(self.open):
            if not flow.closed and not flow.ignored:
                self._close(flow, "capture_end", None, ts, None)
