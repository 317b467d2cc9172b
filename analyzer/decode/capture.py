"""pcap / pcapng container reader: packets out of a capture file, streaming.

Why our own reader and not a library: the container formats are small and
stable (classic pcap: a 24-byte file header and a 16-byte record header;
pcapng: typed, length-framed blocks), and the libraries do not fit.  dpkt and
scapy build Python objects per packet and per protocol layer (scapy also
brings a large dependency), which costs more per packet than this whole
reader plus our link/IP/TCP decode; pyshark drives a tshark subprocess.  We
need two things they do not give: speed (one ``unpack_from`` per record over
a 1 MiB buffered window, no object per packet: ~1 GB/s on large segments),
and forensic control of bad input -- a cut-off last record, a corrupt block,
an impossible length become named anomalies with their location, and the
reader keeps what came before and resyncs to the next plausible record or
valid block (or reads a record whose length alone is damaged with the length
the next sound record gives it) instead of raising and losing the file: one
damaged record header costs that record at most.  No dependency is added.

Packets are numbered as Wireshark numbers them: 1-based, every packet record
(EPB, SPB, OPB in pcapng) counts, whatever its interface or content.
Timestamps are integer nanoseconds since the epoch (None for pcapng's Simple
Packet Block, which has none).
"""
from __future__ import annotations

import re
import struct
from typing import BinaryIO, Callable, Iterator

from analyzer.decode.pcapng import MAX_RECORD, PCAP_MAX_CAPLEN, RESUMED, RESYNC_LIMIT, SKIPPED, Packet, PcapngBlocks
from analyzer.errors import InputError

Note = Callable[[str, str, str], None]  # (catalog code, location, detail)
Secrets = Callable[[int, bytes, str], None]  # (secrets type, secrets data, location): pcapng DSB

CHUNK = 1 << 20  # read the file in 1 MiB pieces
PCAP_TS_WINDOW = 86_400 * 1_000_000_000  # a resync candidate's time is within a day of the last good packet's
_ANY = re.compile(b".", re.S)  # no time to anchor on: every offset is a candidate

_PCAP_MAGIC = {
    b"\xd4\xc3\xb2\xa1": ("<", 1000),  # little-endian, microseconds
    b"\xa1\xb2\xc3\xd4": (">", 1000),
    b"\x4d\x3c\xb2\xa1": ("<", 1),  # little-endian, nanoseconds
    b"\xa1\xb2\x3c\x4d": (">", 1),
}


class CaptureReader(PcapngBlocks):
    """``packets()`` yields :data:`Packet` tuples; problems go to ``note`` as catalog anomalies.  The buffer,
    the resync search and classic pcap are here; pcapng's blocks in :class:`analyzer.decode.pcapng.PcapngBlocks`."""

    def __init__(self, source: str, stream: BinaryIO, note: Note, secrets: Secrets | None = None) -> None:
        self.source = source
        self.secrets = secrets  # gets each Decryption Secrets Block's (secrets type, data, location)
        self.stream = stream
        self.note = note
        self.buf = b""
        self.pos = 0
        self.eof = False
        self.dropped = 0  # file offset of buf[0]
        self.count = 0  # packet records: those numbered (read, or damaged and skipped) plus the damaged ones not numbered
        self.damaged = 0  # damaged records or blocks skipped by a resync and not numbered (not known to be a packet)
        self.keep = 0  # bytes before pos that _fill keeps: classic pcap's last record, for a resync to go back into
        self.resync_scanned = 0  # bytes searched by resyncs (each once: the search is linear)
        self.resync_checks = 0  # candidate positions checked by resyncs
        self.kind = ""
        head = self._peek(4)
        if head[:4] in _PCAP_MAGIC:
            self.kind = "pcap"
        elif head[:4] == b"\x0a\x0d\x0d\x0a":
            self.kind = "pcapng"
        else:
            raise InputError(
                source,
                f"not a pcap or pcapng capture (starts with {head[:4].hex() or 'nothing'}); expected a file written by tcpdump, dumpcap or Wireshark",
            )

    # -- buffer --------------------------------------------------------------
    def _fill(self, need: int) -> bool:
        """Make ``need`` bytes available from ``pos``; False when the file ends first."""
        have = len(self.buf) - self.pos
        if have >= need:
            return True
        if self.eof:  # nothing more will come: no copy (a resync near the end asks again and again)
            return False
        keep = min(self.keep, self.pos)  # bytes before pos that a resync may go back to
        parts = [self.buf[self.pos - keep :]]
        while have < need and not self.eof:
            got = self.stream.read(max(CHUNK, need - have))
            if not got:
                self.eof = True
                break
            parts.append(got)
            have += len(got)
        self.buf = b"".join(parts)
        self.dropped += self.pos - keep
        self.pos = keep
        return have >= need

    @property
    def offset(self) -> int:
        """File offset of ``pos`` (of the decompressed stream for .gz)."""
        return self.dropped + self.pos

    def _peek(self, n: int) -> bytes:
        self._fill(n)
        return self.buf[self.pos : self.pos + n]

    def packets(self) -> Iterator[Packet]:
        return self._pcap() if self.kind == "pcap" else self._pcapng()

    # -- classic pcap ---------------------------------------------------------
    def _pcap(self) -> Iterator[Packet]:
        if not self._fill(24):
            raise InputError(self.source, "pcap file header cut short (less than 24 bytes): the file is truncated")
        bo, mult = _PCAP_MAGIC[self.buf[self.pos : self.pos + 4]]
        _major, _minor, _zone, _sigfigs, snaplen, network = struct.unpack_from(bo + "HHiIII", self.buf, self.pos + 4)
        # The upper bits of the link-type field carry FCS information (pcap spec §LinkType); the type is the low 16.
        linktype = network & 0xFFFF
        self.pos += 24
        rec = struct.Struct(bo + "IIII")
        unpack = rec.unpack_from
        # A record longer than the snapshot length (or than 256 KiB, Wireshark's largest standard packet)
        # or with a sub-second field of a second or more is not a record header: the file is damaged here.
        cap = min(snaplen, PCAP_MAX_CAPLEN) if snaplen else PCAP_MAX_CAPLEN
        frac_limit = 1_000_000_000 // mult
        n = 0
        prev_ts: int | None = None
        while True:
            buf, pos = self.buf, self.pos
            if len(buf) - pos < 16:
                if not self._fill(16):
                    if len(self.buf) > self.pos:
                        left = len(self.buf) - self.pos
                        self.note("pcap_truncated_record", f"packet {n + 1}", f"{left} bytes of a 16-byte record header at the end of the file")
                    break
                buf, pos = self.buf, self.pos
            sec, frac, caplen, wirelen = unpack(buf, pos)
            ts = sec * 1_000_000_000 + frac * mult
            bad = cut = ""
            if caplen > MAX_RECORD:
                bad = f"record length {caplen} bytes"
            elif frac >= frac_limit:
                bad = f"sub-second field {frac}, a second or more"
            elif caplen > cap or caplen > wirelen or not wirelen or (abs(ts - prev_ts) > PCAP_TS_WINDOW if prev_ts is not None else not caplen):
                # Longer than the snapshot length, nothing on the wire (a hole of zeros), or a day away from the
                # packet before: a stray header, unless a sane record header follows exactly where it ends
                # (writers that ignore their own snaplen; a capture idle for days; a clock that jumped; a time
                # field damaged alone).  A new time re-anchors every later check (and the resync's search), so a
                # jump needs two such headers after it: a header zeroed by damage (time 0) followed by bytes that
                # read as one more (the zero MAC addresses of a loopback capture) is no record.  So does the first
                # record when it captured nothing (a zeroed header): its time would anchor everything after it.
                jump = prev_ts is None or abs(ts - prev_ts) > PCAP_TS_WINDOW
                # More captured than was on the wire: a length damaged (one flipped bit), whose record may well end
                # on a later record's boundary and chain -- swallowing the records between, with no anomaly at all.
                # A plausible header nearer than it says is where the record ends: read with that length.
                fixed = -1
                if caplen > wirelen and wirelen and (prev_ts is None or not jump):  # (the first record: its own time)
                    fixed = self._pcap_probe(rec, ts if prev_ts is None else prev_ts, frac_limit, mult, min(wirelen, cap))
                if fixed >= 0:
                    self.note("pcap_record_repaired", f"packet {n + 1}", f"record length {caplen} bytes, more than the {wirelen} on the wire, "
                              f"at byte {self.offset}; the next plausible record header starts {fixed} bytes after it, and its time is "
                              "sound: read with that length")
                    caplen = fixed
                elif not self._pcap_chains(rec, 0, frac_limit, 2 if jump else 1):
                    bad = f"record length {caplen} bytes on the wire {wirelen} (snapshot length {snaplen}), time {sec} s, and no plausible record after it"
                    if self.eof and self.pos + 16 + caplen > len(self.buf):  # (the check read up to the end of the file)
                        cut = self._cut(caplen)
            if not bad:
                buf, pos = self.buf, self.pos  # (_pcap_chains may have refilled the buffer: the same bytes, at another pos)
                stop = pos + 16 + caplen
                if stop > len(buf):
                    if self._fill(16 + caplen):
                        buf, pos = self.buf, self.pos
                        stop = pos + 16 + caplen
                    else:
                        # Past the end of the file: the capture was cut while being written -- or the length field
                        # is damaged (one flipped bit adds 64 KiB), and the records after it are in the file.  A
                        # plausible record inside the bytes it claims says which.
                        cut = self._cut(caplen)
                        bad = f"record length {caplen} bytes, past the end of the file ({len(self.buf) - self.pos - 16} bytes after its header)"
            if bad:
                # A header whose time is sound (and whose sub-second field is) may have only its length damaged:
                # then the next plausible header gives it, when it is at most what was on the wire.
                sound = frac < frac_limit and wirelen and prev_ts is not None and abs(ts - prev_ts) <= PCAP_TS_WINDOW
                got = self._pcap_resync(n, bad, rec, prev_ts, frac_limit, mult, cut, min(wirelen, cap) if sound else -1)
                if got is None:
                    break
                if got < 0:
                    n += got == SKIPPED  # the damaged record keeps its number: the packets after it keep theirs
                    continue
                caplen = got  # repaired: the record ends where the next one starts (pos is there now)
                buf, stop = self.buf, self.pos
                pos = stop - caplen - 16
            n += 1
            self.pos = stop
            self.keep = 16 + caplen
            prev_ts = ts
            yield n, ts, linktype, buf[pos + 16 : stop], wirelen
        self.count = n + self.damaged

    def _pcap_header_ok(self, rec: struct.Struct, rel: int, prev_ts: int | None, frac_limit: int, mult: int = 1) -> int:
        """The caplen of a plausible record header at ``pos + rel`` (the 16 bytes must be in the buffer), else -1.

        Plausible: a captured length of at most 256 KiB and at most the length on the wire, which is not 0;
        a sub-second field under a second; with ``prev_ts``, a time within a day of it."""
        sec, frac, caplen, wirelen = rec.unpack_from(self.buf, self.pos + rel)
        if caplen > PCAP_MAX_CAPLEN or frac >= frac_limit or wirelen < caplen or not wirelen:
            return -1
        if prev_ts is not None and abs(sec * 1_000_000_000 + frac * mult - prev_ts) > PCAP_TS_WINDOW:
            return -1
        return caplen

    def _pcap_chains(self, rec: struct.Struct, rel: int, frac_limit: int, depth: int = 1) -> bool:
        """The record at ``pos + rel`` is followed by ``depth`` plausible headers (whatever their time), each where
        the record before it ends, or by the end of the file."""
        for _ in range(depth):  # bounded: depth
            caplen = rec.unpack_from(self.buf, self.pos + rel)[2]
            nxt = rel + 16 + caplen
            if not self._fill(nxt + 16):
                # the file ends right after it (or within the next header): nothing contradicts it; a record
                # running past the end of the file is no evidence (a truncated last record is caught apart)
                return len(self.buf) - self.pos >= nxt
            if self._pcap_header_ok(rec, nxt, None, frac_limit) < 0:
                return False
            rel = nxt
        return True

    def _cut(self, caplen: int) -> str:
        """What ``pcap_truncated_record`` says of the record at ``pos`` that runs past the end of the file."""
        return f"the record promises {caplen} bytes, the file holds {len(self.buf) - self.pos - 16}"

    def _pcap_resync(self, n: int, detail: str, rec: struct.Struct, prev_ts: int | None, frac_limit: int, mult: int, cut: str = "",
                     repair: int = -1) -> int | None:
        """A damaged record header at ``pos``: skip to the next plausible one (None: none, stop reading).
        ``cut``: the record runs past the end of the file; with nothing plausible in the bytes it claims, it is a
        record the capture cut while being written (``pcap_truncated_record`` with ``cut``), not damage.
        ``repair``: the header's time is sound, and its record may be this long at most: when the next plausible
        header starts within that, its length alone was damaged, and the length it must have is returned (``pos``
        at the next header, the record's bytes just before it).  Else :data:`SKIPPED` (the damaged record was
        skipped: it is numbered, so the packets after it keep their numbers) or :data:`RESUMED` (the header was
        none: the record before it ran too long).

        A candidate is a plausible header (``_pcap_header_ok``) whose time is within a day of the last good
        packet's, followed exactly where it ends by another plausible header (or the end of the file).  Candidates are found with a regular expression over the high
        half of the seconds field (two bytes that can take at most four values within a day of the last
        good time), so the search is one C-speed pass over the damaged bytes, never a parse per offset.
        Without a good packet before (the first record is damaged) every offset of the next 64 KiB is tried, and
        three plausible headers must follow the candidate (bytes of a packet read as one header, seldom three).
        """
        where = f"packet {n + 1}"
        start = self.offset
        regex, back, limit, check = self._pcap_finder(rec, prev_ts, frac_limit, mult)
        # A header that is no header may be the record before it running too long or too short: the search
        # starts inside that record's data (kept in the buffer), so a length that ran into the next record
        # costs no more than that record.
        first = 16 - self.keep if self.keep else 1  # (the bytes before pos stay kept while the search runs)
        short = 0  # what the record before lacks of its length on the wire (its length may be what is damaged)
        if self.keep >= 16:
            _sec, _frac, before, on_wire = rec.unpack_from(self.buf, self.pos - self.keep)
            short = on_wire - before
        if repair >= 0:
            self._fill(repair + 32)  # the record's bytes stay in the buffer while the search runs within them
        found = self._scan(regex, back, check, limit, first)
        self.keep = 0
        if found is None:
            if cut:  # (not a damaged record: the last one, cut)
                self.note("pcap_truncated_record", where, cut)
            else:
                self.damaged += 1
                self.note("pcap_bad_record", where, f"{detail}, at byte {start}; no plausible record header {self._within(start, limit)}, reading stopped")
            return None
        if found < 0:
            self.note("pcap_bad_record", where, f"{detail}, at byte {start}: packet {n} claimed {-found} bytes of the record after it "
                      f"(its length field is wrong; it kept those trailing bytes); reading resumed at byte {start + found}")
            return RESUMED
        if 16 < found <= repair + 16 and self.pos - found >= 0:
            self.note("pcap_record_repaired", where, f"{detail}, at byte {start}; the next plausible record header starts {found - 16} bytes "
                      f"after it (at byte {start + found}), and its time is sound: read with that length")
            return found - 16
        if found == short:  # the bytes the record before lacks: its length is what is damaged (too short)
            self.note("pcap_bad_record", where, f"{detail}, at byte {start}: packet {n} is {short} bytes short of its length on the wire, "
                      f"and a plausible record header follows those bytes (its length field is wrong; it lost them); reading resumed "
                      f"at byte {start + found}")
            return RESUMED
        self.note("pcap_bad_record", where, f"{detail}, at byte {start}; skipped {found} bytes to the next plausible record header, at byte {start + found}")
        # (fewer bytes than a record header: the tail of the record before, or stray bytes -- no packet)
        return RESUMED if found < 16 else SKIPPED

    def _pcap_finder(self, rec: struct.Struct, prev_ts: int | None, frac_limit: int, mult: int):
        """(regex, back, limit, check) of a search for the next plausible record header (see _pcap_resync)."""
        bo = rec.format[0]
        if prev_ts is not None:
            sec = prev_ts // 1_000_000_000
            window = PCAP_TS_WINDOW // 1_000_000_000
            highs = range(max(sec - window, 0) >> 16, (min(sec + window, 0xFFFFFFFF) >> 16) + 1)
            regex = re.compile(b"|".join(re.escape(struct.pack(bo + "H", h)) for h in highs))
            back = 2 if bo == "<" else 0  # where the high half sits in the 16-byte header
            limit = RESYNC_LIMIT
        else:  # no time to anchor on: every offset is a candidate, and three more headers must follow it
            regex, back, limit = _ANY, 0, 1 << 16
        depth = 1 if prev_ts is not None else 3

        def check(rel: int) -> bool:
            if not self._fill(rel + 16):
                return False
            if self._pcap_header_ok(rec, rel, prev_ts, frac_limit, mult) < 0:
                return False
            return self._pcap_chains(rec, rel, frac_limit, depth)

        return regex, back, limit, check

    def _pcap_probe(self, rec: struct.Struct, prev_ts: int, frac_limit: int, mult: int, most: int) -> int:
        """The length of the record at ``pos`` when a plausible header starts within ``most`` bytes after its header
        (nearer than its own length says), else -1; ``pos`` stays where it is."""
        regex, back, _limit, check = self._pcap_finder(rec, prev_ts, frac_limit, mult)
        self._fill(most + 32)  # (the search then needs no refill of its own)
        origin = self.offset
        found = self._scan(regex, back, check, most + 17, 17)
        self.pos = origin - self.dropped  # (a check may have refilled the buffer: the same bytes, at another index)
        return -1 if found is None else found - 16

    def _within(self, start: int, limit: int) -> str:
        """Where a resync from byte ``start`` searched in vain: up to the end of the file, or ``limit`` bytes."""
        if self.eof and self.dropped + len(self.buf) - start < limit:
            return "before the end of the file"
        return f"within {limit >> 10} KiB after it" if limit < 1 << 20 else f"within {limit >> 20} MiB after it"

    def _scan(self, regex: "re.Pattern[bytes]", back: int, check: Callable[[int], bool], limit: int, first: int = 1) -> int | None:
        """Move ``pos`` to the first offset from ``pos + first`` (within ``limit`` bytes) where ``regex``
        matches ``back`` bytes in and ``check(offset from pos)`` accepts; return how far it moved (negative:
        back into bytes kept before ``pos``), None when nothing qualifies.

        Linear: each byte is searched once (``resync_scanned`` counts them) and every candidate is checked
        once; bytes already searched are dropped from the buffer as the search moves on."""
        origin = self.offset
        rel = first  # candidates start after the damaged header (or inside the record before it)
        while True:
            stop_rel = origin + limit - self.offset  # no candidate at or past this (relative to pos)
            buf, base = self.buf, self.pos
            end = min(len(buf), base + stop_rel + back + 2)
            m = regex.search(buf, base + rel + back, end) if base + rel + back < end else None
            if m is None:
                self.resync_scanned += max(end - (base + rel + back), 0)
                if self.eof or base + stop_rel <= len(buf):
                    return None
                # keep a few bytes (a pattern may straddle the refill) and read on
                keep = max(len(buf) - base - rel - 16, 0)
                self.pos = base + rel + keep
                rel = 0
                self._fill(len(self.buf) - self.pos + CHUNK)
                continue
            cand = m.start() - back - base
            self.resync_scanned += m.start() + 1 - (base + rel + back)
            self.resync_checks += 1
            if check(cand):
                self.pos += cand
                return self.offset - origin
            rel = cand + 1 if cand >= rel else rel + 1
