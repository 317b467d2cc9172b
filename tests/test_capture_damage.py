"""One damaged record costs that record, never the rest of the capture (round three of hostile inputs, item 6),
and one damaged byte in a TLS record costs at most its connection (item 7).

The damage is done to the committed recordings (sample_logs/), as a disk or a copy would do it: 12 bytes zeroed
over a record header, one bit of a length flipped (+64 KiB), a length that runs past the end of the file.  Each
run goes through the CLI (``analyze --json-lines``) and is compared with the undamaged run flow by flow
(tests/capture_damage.py): a TCP flow the damage did not touch must give the same exchanges, and the boundaries
and findings must stay when the damaged record carried nothing the analysis reads.  bench/fuzz_campaign.py runs
the same judging over thousands of inputs (figures in bench/README.md).
"""
from __future__ import annotations

import random
import struct

import pytest

import capture_damage as cd
from analyzer.decode import capture

DENSE = cd.ROOT / "sample_logs" / "real-python-resume-dense.pcap"
DENSE_NG = cd.ROOT / "sample_logs" / "real-python-resume-dense.pcapng"
SHARED = cd.ROOT / "sample_logs" / "real-python-shared-store.pcap"  # three critical findings
_LAYOUTS: dict = {}
_BASE: dict = {}


def layout(path) -> cd.Layout:
    if path not in _LAYOUTS:
        _LAYOUTS[path] = cd.Layout.of(path)
    return _LAYOUTS[path]


def base(path) -> cd.Outcome:
    if path not in _BASE:
        _BASE[path] = cd.run(path.read_bytes(), path.suffix, cd.keylog_of(path))
    return _BASE[path]


def middle(lay: cd.Layout, payload: bool) -> cd.Record:
    """A record in the middle of the capture, with or without TCP payload (an ACK: nothing the analysis reads)."""
    recs = [r for r in lay.records[len(lay.records) // 3 :] if r.flow is not None and bool(r.payload) == payload]
    return recs[0]


def analyze(path, data: bytes) -> cd.Outcome:
    got = cd.run(data, path.suffix, cd.keylog_of(path))
    assert got.code in (0, 1), (got.code, got.error)
    return got


def assert_same_analysis(path, got: cd.Outcome) -> None:
    want = base(path)
    assert got.flows == want.flows
    assert got.boundaries == want.boundaries and got.findings == want.findings


def damage_rows(got: cd.Outcome) -> list[tuple[str, str]]:
    """The container's anomaly rows (what the damaged packet cost its flow -- a TCP gap -- comes on top)."""
    return [(a["code"], a["location"]) for a in got.anomalies if a["code"].startswith("pcap")]


@pytest.mark.parametrize("path", [DENSE, SHARED], ids=["dense", "shared-store"])
@pytest.mark.parametrize("payload", [False, True], ids=["ack", "data"])
def test_a_zeroed_record_header_costs_that_record_only(path, payload):
    """12 zeroed bytes over one record header (time and lengths gone).  Before: the zeroed header passed as a
    record (nothing captured, time 0, and the loopback capture's zero MAC addresses read as one more header
    after it), its time 0 then anchored the search for the next header, and every packet after it was lost
    (dense: 8 exchanges -> 0; shared-store: its 3 critical findings gone).  Now it is one pcap_bad_record row
    naming the bytes skipped, and the packets after it keep their numbers."""
    lay = layout(path)
    r = middle(lay, payload)
    data = bytearray(lay.data)
    data[r.start : r.start + 12] = bytes(12)
    got = analyze(path, bytes(data))
    verdict = cd.judge(base(path), got, {r.flow})
    assert verdict.lost == [] and verdict.untouched >= 1, f"{len(verdict.lost)} of {verdict.untouched} flows the damage did not touch lost"
    assert damage_rows(got) == [("pcap_bad_record", f"packet {r.pkt}")]
    assert f"at byte {r.start}; skipped {r.end - r.start} bytes to the next plausible record header" in next(
        a["message"] for a in got.anomalies if a["code"] == "pcap_bad_record")
    assert got.code == 1  # a packet lost: the input is damaged (an error row), which fails --fail-on error
    if not payload:  # an ACK carried nothing the analysis reads: everything else is as without the damage
        assert_same_analysis(path, got)
        assert len(got.anomalies) == 1


@pytest.mark.parametrize("path", [DENSE, DENSE_NG, SHARED], ids=["dense", "dense-pcapng", "shared-store"])
@pytest.mark.parametrize("payload", [False, True], ids=["ack", "data"])
def test_one_flipped_bit_of_a_record_length_loses_nothing(path, payload):
    """Bit 16 of a record's length (pcapng: of the block's length) flipped: 64 KiB more, past the end of these small
    files.  Before: taken for a record cut while the capture was written, every packet after it lost.  Now the
    record after it is found where it is, and -- its time being sound (pcapng: its trailer repeating the length) --
    the damaged record is read with the length it must have: nothing is lost, one pcap_record_repaired row."""
    lay = layout(path)
    r = middle(lay, payload)
    data = bytearray(lay.data)
    at = r.start + (8 if lay.kind == "pcap" else 4)
    data[at + 2] ^= 1  # (little-endian: the third byte holds bits 16-23)
    got = analyze(path, bytes(data))
    where = f"packet {r.pkt}" if lay.kind == "pcap" else f"byte {r.start}"
    assert [(a["code"], a["location"]) for a in got.anomalies] == [("pcap_record_repaired", where)]
    # (pcap: more captured than on the wire says it before the end of the file does)
    assert ("more than the" if lay.kind == "pcap" else "past the end of the file") in got.anomalies[0]["message"]
    assert_same_analysis(path, got)
    assert got.code == base(path).code  # (a warning: nothing was lost)


def test_a_length_past_the_end_is_a_cut_only_when_nothing_plausible_follows():
    lay = layout(DENSE)
    last, before = lay.records[-1], lay.records[-2]
    # the last record: nothing follows it, so a record cut while the capture was written, as before
    data = bytearray(lay.data)
    data[last.start + 10] ^= 1
    got = analyze(DENSE, bytes(data))
    assert [(a["code"], a["location"]) for a in got.anomalies] == [("pcap_truncated_record", f"packet {last.pkt}")]
    assert cd.judge(base(DENSE), got, {last.flow}).lost == []
    # the one before it: a plausible record follows inside the bytes it claims, so its length is what is damaged
    data = bytearray(lay.data)
    data[before.start + 10] ^= 1
    got = analyze(DENSE, bytes(data))
    assert [a["code"] for a in got.anomalies] == ["pcap_record_repaired"]
    assert_same_analysis(DENSE, got)
    # pcapng, the last block: its trailer, at the end of the file, repeats the length it must have
    ng = layout(DENSE_NG)
    blk = ng.records[-1]
    data = bytearray(ng.data)
    data[blk.start + 6] ^= 1
    got = analyze(DENSE_NG, bytes(data))
    assert [a["code"] for a in got.anomalies] == ["pcap_record_repaired"] and "the file ends" in got.anomalies[0]["message"]
    assert_same_analysis(DENSE_NG, got)
    # and a pcapng cut inside its last block is still a cut
    got = analyze(DENSE_NG, ng.data[:-30])
    assert [a["code"] for a in got.anomalies] == ["pcap_truncated_record"]


def test_a_time_damaged_alone_keeps_its_record():
    """A high bit of one record's seconds flipped: a time days away, but its lengths chain into the records after
    it, so it is read (with that time) and no packet is lost -- a clock jump is told from damage by the two
    headers after it, not by their times."""
    lay = layout(DENSE)
    r = middle(lay, payload=False)
    data = bytearray(lay.data)
    data[r.start + 3] ^= 0x10  # +2^28 s
    got = analyze(DENSE, bytes(data))
    assert got.anomalies == []
    assert_same_analysis(DENSE, got)


def test_a_zeroed_block_header_costs_that_block_only():
    lay = layout(DENSE_NG)
    r = middle(lay, payload=True)
    data = bytearray(lay.data)
    data[r.start : r.start + 12] = bytes(12)
    got = analyze(DENSE_NG, bytes(data))
    assert damage_rows(got) == [("pcapng_corrupt_block", f"byte {r.start}")]
    assert f"skipped {r.end - r.start} bytes to the next valid block" in next(a["message"] for a in got.anomalies if a["code"].startswith("pcap"))
    assert cd.judge(base(DENSE_NG), got, {r.flow}).lost == []


def test_a_damaged_pcapng_trailer_alone_loses_nothing():
    lay = layout(DENSE_NG)
    r = middle(lay, payload=True)
    data = bytearray(lay.data)
    data[r.end - 4] ^= 0x20
    got = analyze(DENSE_NG, bytes(data))
    assert [(a["code"], a["location"]) for a in got.anomalies] == [("pcap_record_repaired", f"byte {r.start}")]
    assert_same_analysis(DENSE_NG, got)


TLS = [cd.ROOT / "sample_logs" / "tls" / n for n in ("real-python-tls13-h1-resume.pcap", "real-python-tls13-h2-resume.pcap",
                                                       "real-python-tls13-h1-resume.pcapng")]


def test_damage_sweep_costs_only_the_flows_it_touched():
    """A short run of the campaign (bench/fuzz_campaign.py runs thousands): record headers, blocks and TLS records
    of a few samples damaged at random (seeded); no exit 3, no flow lost that the damage did not touch, and no
    change without an anomaly row."""
    camp = cd.Campaign([DENSE, DENSE_NG] + TLS, seed=7)
    for _ in range(3 * 8):  # 8 per family
        camp.step()
    s = camp.stats
    assert s["failures"] == [] and set(s["exits"]) <= {"0", "1"}, s["failures"]
    assert s["lost_flows"] == 0 and s["silent"] == 0 and s["untouched_flows"] > 0


def test_one_byte_in_the_servers_first_encrypted_record_of_each_tls_sample():
    """Item 7 on the recordings: the byte that made exit 3 -- inside the TLS 1.3 server's first encrypted record
    (EncryptedExtensions, with the ALPN) -- now costs that connection's server side, and the other connections
    are read as before."""
    for path in TLS:
        lay = layout(path)
        servers = {}
        for hdr, end, flow in lay.tls:
            if lay.data[hdr] == 23:  # the first application-data record of each direction
                servers.setdefault(flow, []).append((hdr, end))
        # per flow, the second direction's first encrypted record is the server's (the client's Finished comes after it)
        flow, recs = sorted(servers.items())[0]
        hdr, end = min(recs)
        data = bytearray(lay.data)
        data[hdr + 5 + random.Random(1).randrange(end - hdr - 5)] ^= 0x08
        got = analyze(path, bytes(data))
        assert cd.judge(base(path), got, {flow}).lost == []
        assert any(a["code"] == "tls_decrypt_failed" for a in got.anomalies)


def test_the_layout_finds_every_record():
    """The campaign's own walk of the files agrees with the reader on the packets, and finds the TLS records."""
    for path in (DENSE, DENSE_NG, TLS[0]):
        with open(path, "rb") as fh:
            packets = [(p[0], len(p[3])) for p in capture.CaptureReader(str(path), fh, lambda *a: None).packets()]
        assert packets == [(r.pkt, r.data_end - r.data) for r in layout(path).records]
    assert len(layout(TLS[0]).tls) > 20 and all(layout(TLS[0]).data[hdr] in (20, 21, 22, 23) for hdr, _end, _flow in layout(TLS[0]).tls)


@pytest.mark.parametrize("payload", [False, True], ids=["ack", "sse-event"])
def test_a_pcapng_time_no_time_column_holds_is_kept_without_a_time(payload):
    """A high bit of an Enhanced Packet Block's timestamp flipped: 2^60 microseconds, far past 2262, which 64-bit
    nanoseconds cannot hold.  Before: exit 3 (TypeError building the events' time column) -- the whole run lost.
    Now the packet is read without a time (pcap_bad_timestamp, a warning), the rest as before."""
    lay = layout(DENSE_NG)
    r = middle(lay, False) if not payload else next(r for r in lay.records if b"\ndata: " in lay.data[r.data : r.data_end])  # an SSE event's
    data = bytearray(lay.data)
    data[r.start + 12 + 3] ^= 0x10  # the high 32 bits of the time (little-endian): bit 28 of them
    got = analyze(DENSE_NG, bytes(data))
    assert [(a["code"], a["location"]) for a in got.anomalies] == [("pcap_bad_timestamp", f"packet {r.pkt}")]
    assert cd.judge(base(DENSE_NG), got, {r.flow}).lost == []
    if not payload:
        assert_same_analysis(DENSE_NG, got)


def test_every_bit_of_some_record_headers_costs_no_other_record():
    """The reader alone, every bit of every header field (and zeroed / 0xff / random headers) of a few records of
    each kind of sample: every other record's packet is still read.  bench/fuzz_campaign.py --header-sweep runs it
    over every record of every sample (the figures in bench/README.md)."""
    for path in (DENSE, DENSE_NG):
        lay = layout(path)
        n = len(lay.records)
        got = cd.header_sweep(lay, range(0, n, max(1, n // 6)))  # the first record among them
        assert got["mutations"] > 500 and got["failures"] == [], got["failures"][:5]
