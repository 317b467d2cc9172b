"""pcapng blocks for :class:`analyzer.decode.capture.CaptureReader` (its base class: the reader's buffer, its
``_fill`` / ``_scan`` search and its ``note`` are the reader's).

pcapng is typed, length-framed blocks: a Section Header Block sets the byte order, Interface Description
Blocks the link types and time resolutions, and Enhanced / Simple / obsolete Packet Blocks carry the packets;
every block repeats its length at its end.  That repeated length is what damage is judged by: a block whose
head and trailer disagree, whose length is impossible or runs past the end of the file, is searched past
(one regular expression over the known block types, each candidate checked as the loop would) -- or, when
the next valid block shows that one length field alone is damaged, read with the length it must have
(``pcap_record_repaired``).  The bounds below are the classic pcap reader's too.
"""
from __future__ import annotations

import re
import struct
from typing import Iterator

from analyzer.errors import InputError

MAX_RECORD = 1 << 26  # 64 MiB: no link layer carries a packet this big; a longer record length is corruption
SKIPPED, RESUMED = -1, -2  # a resync's outcomes besides stopping or a repaired length (see CaptureReader._pcap_resync)
RESYNC_LIMIT = 1 << 24  # a damaged record or block: look this far (16 MiB) for the next plausible one, then give up
PCAP_MAX_CAPLEN = 1 << 18  # 256 KiB: Wireshark's largest standard packet (WTAP_MAX_PACKET_SIZE_STANDARD)

_SHB = 0x0A0D0D0A
_IDB, _OPB, _SPB, _NRB, _ISB, _EPB, _DSB = 1, 2, 3, 4, 5, 6, 0x0A
_KNOWN_BLOCKS = (_SHB, _IDB, _OPB, _SPB, _NRB, _ISB, _EPB, _DSB, 0x0BAD, 0x40000BAD)

Packet = tuple[int, "int | None", int, bytes, int]  # (number, ts_ns, link type, captured bytes, length on the wire)


class PcapngBlocks:
    """The pcapng half of :class:`analyzer.decode.capture.CaptureReader`."""

    def _pcapng(self) -> Iterator[Packet]:
        if not self._fill(28):
            raise InputError(self.source, "pcapng section header cut short (less than 28 bytes): the file is truncated")
        if self.buf[self.pos + 8 : self.pos + 12] not in (b"\x4d\x3c\x2b\x1a", b"\x1a\x2b\x3c\x4d"):
            raise InputError(self.source, "starts like pcapng but its section header has no byte-order magic: not a capture file")
        bo = "<"
        ifaces: list[tuple[int, int, int, int]] = []  # (link type, mul, div, offset ns) per interface of the section
        n = 0
        head, u32, epb = struct.Struct("<II"), struct.Struct("<I"), struct.Struct("<IIIII")
        while True:
            buf, pos = self.buf, self.pos
            if len(buf) - pos < 12:
                if not self._fill(12):
                    if len(self.buf) > self.pos:
                        self.note("pcap_truncated_record", f"packet {n + 1}", f"{len(self.buf) - self.pos} bytes of a block header at the end of the file")
                    break
                buf, pos = self.buf, self.pos
            btype, blen = head.unpack_from(buf, pos)
            check = u32
            if btype == _SHB:  # (its type reads the same in both byte orders)
                # A section header sets the byte order of everything up to the next one (once it proved valid:
                # a corrupt one must not wipe the section's interfaces or its byte order).
                bom = buf[pos + 8 : pos + 12]
                if bom not in _BOM:
                    if self._corrupt(n, f"section header with an unknown byte-order magic {bom.hex()}", bo) is None:
                        break
                    continue
                check = _BOM[bom]
                blen = check.unpack_from(buf, pos + 4)[0]
            # A damaged block: _corrupt finds the next valid block; None: none, stop; 0: reading goes on from it;
            # a length: the damage was this block's head length alone (its trailer gives the length to the next
            # valid block), pos is back at the block, and it is read with that length.
            if blen < 12 or blen % 4 or blen > MAX_RECORD or (btype == _SHB and blen < 28):
                got = self._corrupt(n, f"block type 0x{btype:x} with impossible length {blen}", bo, "", btype)
                if got is None:
                    break
                if got <= 0:
                    n += got == SKIPPED  # a packet block skipped keeps its number: the packets after it keep theirs
                    continue
                buf, pos, blen = self.buf, self.pos, got
            if len(buf) - pos < blen:
                if not self._fill(blen):
                    # Past the end of the file: cut while being written -- or a damaged length (one flipped bit
                    # adds 64 KiB) with the blocks after it in the file: a valid block in the bytes it claims says which.
                    what = "packet" if btype in (_EPB, _SPB, _OPB) else f"block type 0x{btype:x}"
                    held = len(self.buf) - self.pos
                    cut = f"the {what} promises {blen} bytes, the file holds {held}"
                    got = self._corrupt(n, f"block type 0x{btype:x} with length {blen}, past the end of the file ({held} bytes left)", bo, cut, btype)
                    if got is None:
                        break
                    if got <= 0:
                        n += got == SKIPPED
                        continue
                    blen = got
                buf, pos = self.buf, self.pos
            trailer = check.unpack_from(buf, pos + blen - 4)[0]
            if trailer != blen:
                got = self._corrupt(n, f"block type 0x{btype:x}: length {blen} at the head, {trailer} at the trailer", bo, "", btype, blen)
                if got is None:
                    break
                if got <= 0:
                    n += got == SKIPPED
                    continue
                buf, pos, blen = self.buf, self.pos, got
            if btype == _SHB:
                bo = "<" if check is _BOM[b"\x4d\x3c\x2b\x1a"] else ">"
                head, u32, epb = struct.Struct(bo + "II"), struct.Struct(bo + "I"), struct.Struct(bo + "IIIII")
                ifaces = []
            self.pos = pos + blen
            self.keep = blen  # (kept for a resync: a block whose length was too long, yet whose trailer matched)
            if btype == _EPB or btype == _OPB:
                n += 1
                if blen < 32:
                    self.note("pcapng_corrupt_block", f"packet {n}", "packet block too short for its fields")
                    continue
                if btype == _EPB:
                    iface, tsh, tsl, caplen, wirelen = epb.unpack_from(buf, pos + 8)
                else:
                    iface, _drops, tsh, tsl, caplen, wirelen = struct.unpack_from(bo + "HHIIII", buf, pos + 8)
                if 28 + caplen > blen - 4:
                    self.note("pcapng_corrupt_block", f"packet {n}", f"captured length {caplen} does not fit the {blen}-byte block")
                    continue
                if iface >= len(ifaces):
                    self.note("pcapng_corrupt_block", f"packet {n}", f"packet on interface {iface}, but the section declares {len(ifaces)}")
                    continue
                linktype, mul, div, off = ifaces[iface]
                ts = ((tsh << 32 | tsl) * mul) // div + off
                if ts >> 63:  # before 1970 or after 2262: no time column holds it (64-bit nanoseconds)
                    ts = self._no_time(n, ts)
                yield n, ts, linktype, buf[pos + 28 : pos + 28 + caplen], wirelen
            elif btype == _SPB:
                n += 1
                if blen < 16 or not ifaces:
                    self.note("pcapng_corrupt_block", f"packet {n}", "simple packet block without an interface or too short")
                    continue
                wirelen = u32.unpack_from(buf, pos + 8)[0]
                caplen = min(wirelen, blen - 16)
                yield n, None, ifaces[0][0], buf[pos + 12 : pos + 12 + caplen], wirelen
            elif btype == _IDB:
                if blen < 20:
                    self.note("pcapng_corrupt_block", f"byte {self.offset - blen}", "interface description block too short; its packets are not decoded")
                    ifaces.append((-1, 1000, 1, 0))
                    continue
                ifaces.append(self._interface(buf, pos, blen, bo))
            elif btype == _DSB and self.secrets is not None:
                # Decryption Secrets Block (editcap --inject-secrets): type, length, data; before the packets it decrypts
                where = f"byte {self.offset - blen}"
                if blen < 20:
                    self.note("pcapng_corrupt_block", where, "decryption secrets block too short")
                    continue
                stype, slen = struct.unpack_from(bo + "II", buf, pos + 8)
                if 16 + slen > blen - 4:
                    self.note("pcapng_corrupt_block", where, f"decryption secrets length {slen} does not fit the {blen}-byte block")
                    continue
                self.secrets(stype, bytes(buf[pos + 16 : pos + 16 + slen]), where)
            elif (btype == _NRB or btype not in _KNOWN_BLOCKS) and bin(btype ^ _EPB).count("1") == 1 and blen >= 32:
                # one bit from an Enhanced Packet Block, with that block's fields (an interface the section has, a
                # captured length that fits): a packet block whose type is damaged, read as one -- not skipped as
                # an unknown block, which would lose the packet without a word
                iface, tsh, tsl, caplen, wirelen = epb.unpack_from(buf, pos + 8)
                if iface < len(ifaces) and 28 + caplen <= blen - 4 and caplen <= wirelen:
                    n += 1
                    self.note("pcap_record_repaired", f"packet {n}", f"block type 0x{btype:x}, one bit from an Enhanced Packet Block's "
                              f"(6), with that block's fields: read as one, at byte {self.offset - blen}")
                    linktype, mul, div, off = ifaces[iface]
                    ts = ((tsh << 32 | tsl) * mul) // div + off
                    yield n, ts if not ts >> 63 else self._no_time(n, ts), linktype, buf[pos + 28 : pos + 28 + caplen], wirelen
            # other blocks (NRB, ISB, custom, unknown types): skipped by their length
        self.count = n + self.damaged

    def _no_time(self, n: int, ts: int) -> None:
        """A packet time a 64-bit count of nanoseconds since 1970 cannot hold (64 bits of a timestamp field, times
        its resolution, plus the interface's offset): a corrupt time; the packet is kept without one."""
        self.note("pcap_bad_timestamp", f"packet {n}", f"{ts} ns since 1970")
        return None

    def _interface(self, buf: bytes, pos: int, blen: int, bo: str) -> tuple[int, int, int, int]:
        linktype = struct.unpack_from(bo + "H", buf, pos + 8)[0]
        resol, offset = 6, 0
        at, end = pos + 16, pos + blen - 4
        while at + 4 <= end:  # options: (code, length, value padded to 4); bounded by the block
            code, olen = struct.unpack_from(bo + "HH", buf, at)
            at += 4
            if code == 0 or at + olen > end:
                break
            if code == 9 and olen >= 1:  # if_tsresol
                resol = buf[at]
            elif code == 14 and olen >= 8:  # if_tsoffset, seconds
                offset = struct.unpack_from(bo + "q", buf, at)[0] * 1_000_000_000
            at += olen + (-olen % 4)
        if resol & 0x80:  # negative power of two
            mul, div = 1_000_000_000, 1 << min(resol & 0x7F, 127)
        else:
            exp = min(resol, 30)
            mul, div = (10 ** (9 - exp), 1) if exp <= 9 else (1, 10 ** (exp - 9))
        return linktype, mul, div, offset

    def _block_ok(self, rel: int, u32: struct.Struct) -> bool:
        """A valid block at ``pos + rel``: a sane length, repeated at its trailer; a section header by its own rules
        (the byte-order magic after the length says its byte order)."""
        if not self._fill(rel + 12):
            return False
        at = self.pos + rel
        btype = u32.unpack_from(self.buf, at)[0]
        if btype == _SHB:
            bom = self.buf[at + 8 : at + 12]
            if bom not in _BOM:
                return False
            v = _BOM[bom]
            blen = v.unpack_from(self.buf, at + 4)[0]
            if blen < 28:
                return False
        else:
            v = u32
            blen = v.unpack_from(self.buf, at + 4)[0]
        if not (12 <= blen <= MAX_RECORD and blen % 4 == 0) or not self._fill(rel + blen):
            return False
        return v.unpack_from(self.buf, self.pos + rel + blen - 4)[0] == blen

    def _fits(self, btype: int, at: int, blen: int, u32: struct.Struct) -> bool:
        """The fields of the block at ``buf[at]`` fit a length of ``blen``: a packet block's captured bytes, an
        interface block's options ending with opt_endofopt (or none)."""
        if btype in (_EPB, _OPB):
            return blen >= 32 and 28 + u32.unpack_from(self.buf, at + 20)[0] <= blen - 4
        if btype == _IDB:
            return blen == 20 or (blen > 24 and self.buf[at + blen - 8 : at + blen - 4] == b"\0\0\0\0")
        return False

    def _corrupt(self, n: int, detail: str, bo: str, cut: str = "", btype: int | None = None, head: int = 0) -> int | None:
        """Log a corrupt block and move ``pos`` to the next valid block: 0 (:data:`SKIPPED` when the block was a packet
        block: it is numbered); None: none found, stop.
        ``cut``: the block runs past the end of the file; with no valid block in the bytes it claims, it is a block
        the capture cut while being written (``pcap_truncated_record`` with ``cut``), not damage.
        ``btype``: the damaged block's type (sound), to repair its length from the next valid block: if the 4 bytes
        before it repeat the distance to it, that is the block's trailer, and the head length alone was damaged;
        else if it starts where the ``head`` length says, the trailer alone was.  Then ``pos`` goes back to the
        block, and the length to read it with is returned.  (The next valid block decides, not the head: a
        damaged head length often lands on a later block boundary.)

        The next block is found by searching for the known block types (in the section's byte order) with
        one regular expression and checking each candidate as the main loop would (length sane, repeated
        at the trailer, a section header's own rules): a damaged region costs one pass over its bytes and
        one anomaly row, however many stray block-like patterns it holds."""
        start = self.offset
        where = f"byte {start}"
        u32 = struct.Struct(bo + "I")
        if btype in _REPAIRABLE:
            self._fill(PCAP_MAX_CAPLEN + 64)  # a repairable block's bytes stay in the buffer while the search runs

        def check(rel: int) -> bool:
            return self._block_ok(rel, u32)

        # A block that is no block may be the one before running too long (a damaged head length that still met a
        # matching "trailer", the next block's length field): the search starts inside that block.
        found = self._scan(_BLOCK_RE[bo], 0, check, RESYNC_LIMIT, min(1, 12 - self.keep))
        self.keep = 0
        if found is not None and found < 0:
            self.note("pcapng_corrupt_block", where, f"{detail} (after packet {n}): the block before claimed {-found} bytes of the block "
                      f"after it (its length field is wrong); reading resumed at byte {start + found}")
            return 0
        if found is None and btype in _REPAIRABLE and self.eof and 0 <= start - self.dropped:
            # no block after it, but it is the last one: the file's last 4 bytes repeat the distance from it (its
            # trailer), or the file ends where its head says
            size = self.dropped + len(self.buf) - start
            if 12 <= size <= MAX_RECORD and not size % 4 and (size == head or u32.unpack_from(self.buf, len(self.buf) - 4)[0] == size):
                self.pos, found = start - self.dropped + size, size
        if found is None:
            if cut:
                self.note("pcap_truncated_record", f"packet {n + 1}", cut)
                return None
            self.damaged += 1
            self.note("pcapng_corrupt_block", where, f"{detail} (after packet {n}); no valid block {self._within(start, RESYNC_LIMIT)}, reading stopped")
            return None
        at = self.pos - found  # the damaged block in the buffer (when it is still there)
        if btype in _REPAIRABLE and found >= 12 and at >= 0:
            nxt = "the file ends" if self.eof and self.pos == len(self.buf) else "the next valid block starts"
            if u32.unpack_from(self.buf, self.pos - 4)[0] == found:
                why = f"{nxt} {found} bytes on, and the 4 bytes before it (the block's trailer) say {found}: the block was read with that length"
            elif found == head:
                why = f"{nxt} where its head says: its trailer alone is damaged, and the block was read with the head's length"
            elif 12 <= head < found and self._fits(btype, at, head, u32):
                # the bytes from where its head says it ends are damaged too (the trailer and the next block's head:
                # one damaged stretch over the boundary), and its fields fit the head's length: read with it, the
                # rest is a resync of its own
                found = head
                why = "its trailer is damaged and so is what follows it (the next valid block is further on): read with the head's length"
            else:
                why = ""
            if why:
                self.pos = at
                self.note("pcap_record_repaired", where, f"{detail} (after packet {n}); {why}")
                return found
        if btype in (_EPB, _SPB, _OPB):  # a packet block (its type is sound): numbered, as the packet it was
            self.note("pcapng_corrupt_block", where, f"{detail} (packet {n + 1}); skipped {found} bytes to the next valid block")
            return SKIPPED
        self.damaged += 1
        self.note("pcapng_corrupt_block", where, f"{detail} (after packet {n}); skipped {found} bytes to the next valid block")
        return 0


_BOM = {b"\x4d\x3c\x2b\x1a": struct.Struct("<I"), b"\x1a\x2b\x3c\x4d": struct.Struct(">I")}
_REPAIRABLE = (_IDB, _OPB, _SPB, _NRB, _ISB, _EPB, _DSB)  # block types whose damaged length a trailer may repair (not a section header)
_BLOCK_RE = {
    bo: re.compile(b"|".join(re.escape(struct.pack(bo + "I", t)) for t in _KNOWN_BLOCKS)) for bo in "<>"
}
