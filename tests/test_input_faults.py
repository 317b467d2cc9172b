"""Faults in the data path: damaged captures cost only the damaged records; nothing hangs.

Issue "[2/6] A data path that survives faults", items 3 and 4 (pcap): a bad record length in a classic
pcap, corrupt pcapng blocks, a damaged region of a MiB (the resync is linear: asserted by counting, never
by timing), and files that are not regular files (a FIFO, /dev/zero) in a walked directory or named.
"""
from __future__ import annotations

import os
import random
import signal
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import pcapgen as g
from analyzer.decode import capture
from analyzer.ingest import inputs
from analyzer import pipeline
from analyzer.cli import main
from analyzer.ingest.reading import Reading
from test_pcap import ids, sse_stream

ROOT = Path(__file__).resolve().parent.parent
EVENTS = 130  # with the handshake, GET, response head and RST: 136 packets


def run(*args, **kw):
    return CliRunner().invoke(main, list(args), catch_exceptions=False, **kw)


class Hung(BaseException):
    """Raised by the alarm: a BaseException, so no ``except OSError`` / ``except Exception`` on the way hides it."""


@pytest.fixture
def alarm():
    """A generous bound for the tests that would hang or crawl on the old code (never a timing assertion)."""
    def on_alarm(*_):
        raise Hung("took longer than 20 s: a hang or a quadratic loop")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def _records():
    recs = g.records(sse_stream(g.Conversation(), range(1, EVENTS + 1), chunked=False))
    assert len(recs) == 136
    return recs


def _offset(recs, i: int) -> int:
    """File offset of record ``i``'s header in ``g.pcap(recs)``."""
    return 24 + sum(16 + len(r.data) for r in recs[:i])


def _codes(got) -> list[str]:
    return [a["code"] for a in got.anomalies.to_pylist()]


# ------------------------------------------------------------------------------------------ classic pcap


@pytest.mark.parametrize("caplen", [300_000, 0x7FFFFFFF], ids=["past-snaplen", "past-64MiB"])
def test_one_bad_record_length_costs_one_packet(tmp_path, caplen):
    # before: 300000 read as a record cut by the end of the file (127 of 136 packets lost); 0x7FFFFFFF stopped reading.
    # The time is damaged too (zeroed): with a sound time the record is read with the length where the next header
    # starts, and nothing is lost (round three, item 6: test_capture_damage.py)
    recs = _records()
    data = bytearray(g.pcap(recs))
    struct.pack_into("<III", data, _offset(recs, 9), 0, 0, caplen)  # packet 10 (event 5)
    got = inputs.read_one(str(g.write(tmp_path / "c.pcap", bytes(data))))
    assert got.records == 136 and got.rejected == 1
    bad = [a for a in got.anomalies.to_pylist() if a["code"] == "pcap_bad_record"]
    assert [a["location"] for a in bad] == ["packet 10"]
    assert f"at byte {_offset(recs, 9)}; skipped {16 + len(recs[9].data)} bytes" in bad[0]["message"]
    with open(tmp_path / "c.pcap", "rb") as fh:
        numbers = [pkt[0] for pkt in capture.CaptureReader("c.pcap", fh, lambda *a: None).packets()]
    assert len(numbers) == 135  # every packet but the damaged one
    # event 5 is lost with its packet, and event 6 with it: after a TCP gap the SSE parser resumes at the
    # next blank line (tests/test_pcap.py), so the event after the gap is not trusted either
    assert ids(got) == [str(i) for i in range(1, EVENTS + 1) if i not in (5, 6)]


def test_a_wrong_but_small_record_length_is_caught_by_the_header_after_it(tmp_path):
    recs = _records()
    data = bytearray(g.pcap(recs))
    struct.pack_into("<I", data, _offset(recs, 9) + 8, len(recs[9].data) + 40)  # runs 40 bytes into packet 11
    got = inputs.read_one(str(g.write(tmp_path / "c.pcap", bytes(data))))
    # (more than on the wire: the header after it is looked for nearer, found where the record really ends, and
    # the record read with that length -- before round three, item 6: it kept 40 trailing bytes, and the header
    # after it was a pcap_bad_record that rejected nothing)
    assert _codes(got) == ["pcap_record_repaired"] and got.rejected == 0
    # the search for the next header starts inside packet 10, so packet 11 is found where it is: no packet
    # is lost (packet 10 carries 40 trailing bytes that its IP length leaves out)
    with open(tmp_path / "c.pcap", "rb") as fh:
        assert len(list(capture.CaptureReader("c.pcap", fh, lambda *a: None).packets())) == 136
    assert ids(got) == [str(i) for i in range(1, EVENTS + 1)]


def test_a_hole_of_zeros_costs_the_packets_it_overwrote(tmp_path):
    # a capture written on a machine that crashed: a block of the file reads back as zeros
    recs = _records()
    data = bytearray(g.pcap(recs))
    start, end = _offset(recs, 50) + 100, _offset(recs, 53) + 20  # from inside packet 51 to inside packet 54
    data[start:end] = bytes(end - start)
    with open(g.write(tmp_path / "c.pcap", bytes(data)), "rb") as fh:
        rows = []
        numbers = [pkt[0] for pkt in capture.CaptureReader("c.pcap", fh, lambda *a: rows.append(a)).packets()]
    assert [r[0] for r in rows] == ["pcap_bad_record"]
    assert len(numbers) == 136 - 3  # packets 52, 53 (zeros) and 54 (its header gone) are lost; 51 kept its header


def test_a_damaged_pcap_fails_the_run_at_fail_on_error(tmp_path):
    recs = _records()
    data = bytearray(g.pcap(recs))
    struct.pack_into("<III", data, _offset(recs, 9), 0, 0, 300_000)  # (a time that is sound: repaired, a warning)
    p = g.write(tmp_path / "c.pcap", bytes(data))
    r = run("analyze", str(p))
    assert r.exit_code == 1, r.output  # before: 0, the lost packets passed unnoticed
    assert "error anomalies mean lost or unreadable input" in r.stdout
    assert run("analyze", str(p), "--fail-on", "critical").exit_code == 0
    assert run("analyze", str(g.write(tmp_path / "ok.pcap", g.pcap(recs)))).exit_code == 0


def test_megabyte_of_garbage_between_pcap_records_is_searched_once(tmp_path, alarm):
    recs = _records()
    garbage = random.Random(3).randbytes(1 << 20)
    data = g.pcap(recs[:50]) + garbage + g.pcap(recs[50:])[24:]
    with open(g.write(tmp_path / "c.pcap", data), "rb") as fh:
        rows = []
        reader = capture.CaptureReader("c.pcap", fh, lambda *a: rows.append(a))
        got = list(reader.packets())
    assert len(got) == 136 and [r[0] for r in rows] == ["pcap_bad_record"]
    assert reader.resync_scanned <= len(garbage) + 2048  # each damaged byte searched once (and the record before): linear
    assert reader.resync_checks < 200  # candidates are found by pattern, not tried at every offset


# ------------------------------------------------------------------------------------------ pcapng


def test_five_corrupt_pcapng_blocks_cost_five_packets_not_the_file(tmp_path):
    # before: a small capture with five corrupt blocks counted 5 rejected of 3 records: "no input readable"
    recs = g.records(sse_stream(g.Conversation(), range(1, 5), chunked=False))  # 10 packets
    blocks = [g.epb(r) for r in recs]
    for k in (1, 3, 5, 7, 9):
        b = bytearray(blocks[k])
        struct.pack_into("<I", b, len(b) - 4, len(b) + 8)  # head and trailer lengths disagree
        struct.pack_into("<I", b, 4, len(b) - 4)  # (and neither is right: with one right, the block is repaired)
        blocks[k] = bytes(b)
    p = g.write(tmp_path / "c.pcapng", g.shb() + g.idb(g.LINK_ETHERNET) + b"".join(blocks))
    got = inputs.read_one(str(p))
    assert got.records == 10 and got.rejected == 5 and _codes(got).count("pcapng_corrupt_block") == 5
    r = run("analyze", str(p), "--json", "-", "-q")
    assert r.exit_code == 1, r.output  # readable, and the damage fails --fail-on error
    assert "no input was readable" not in r.stderr


@pytest.mark.parametrize("kind", ["short-section-headers", "random"])
def test_megabyte_corrupt_pcapng_region_is_one_linear_resync(tmp_path, alarm, kind):
    # before: 256 KiB of short section headers took 16 s (every one resynced, rescanning the rest of the file)
    recs = g.records(sse_stream(g.Conversation(), range(1, 6), chunked=False))
    blocks = [g.epb(r) for r in recs]
    if kind == "random":
        region = random.Random(5).randbytes(1 << 20)
    else:  # section headers with a valid byte order and trailer, too short to be one: each a resync before
        shb = struct.pack("<III", 0x0A0D0D0A, 24, 0x1A2B3C4D) + b"\0" * 8 + struct.pack("<I", 24)
        region = shb * ((1 << 20) // len(shb))
    data = g.shb() + g.idb(g.LINK_ETHERNET) + b"".join(blocks[:5]) + region + b"".join(blocks[5:])
    with open(g.write(tmp_path / "c.pcapng", data), "rb") as fh:
        rows = []
        reader = capture.CaptureReader("c.pcapng", fh, lambda *a: rows.append(a))
        got = list(reader.packets())
    assert [r[0] for r in rows] == ["pcapng_corrupt_block"]  # one region, one row: the interfaces survive it
    assert len(got) == len(recs)
    # (the search starts inside the block before the region, which may be what ran too long)
    assert reader.resync_scanned <= len(region) + len(blocks[4]) + 64
    assert reader.resync_checks <= len(region) // 24 + 8  # each candidate checked once


# ------------------------------------------------------------------------------------------ not regular files


def test_fifo_in_a_walked_directory_is_skipped_not_opened(tmp_path, alarm):
    (tmp_path / "ok.jsonl").write_bytes((ROOT / "sample_logs" / "synthetic" / "continuous.jsonl").read_bytes())
    os.mkfifo(tmp_path / "pipe.jsonl")  # before: open() blocked forever waiting for a writer
    got = inputs.collect([str(tmp_path)])
    assert got.files == [str(tmp_path / "ok.jsonl")]
    assert got.skipped == [str(tmp_path / "pipe.jsonl")] and got.reasons[str(tmp_path / "pipe.jsonl")] == "FIFO"
    r = run("analyze", str(tmp_path))
    assert r.exit_code == 0, r.output
    assert f"skipped: {tmp_path / 'pipe.jsonl'}: FIFO" in r.stderr


def test_named_character_device_is_skipped_with_the_reason_and_a_named_fifo_is_read(tmp_path, alarm):
    """A pipe the user names is read like standard input (issue [5/6]: process substitution; reading it
    is tests/test_cli_streams.py); a device named never is: nothing tells when it ends."""
    os.mkfifo(tmp_path / "pipe.pcap")
    got = inputs.collect([str(tmp_path / "pipe.pcap"), "/dev/zero"])
    assert got.files == [str(tmp_path / "pipe.pcap")] and got.reasons == {"/dev/zero": "character device"}
    r = run("analyze", "/dev/zero")  # before: read forever
    assert r.exit_code == 2 and "skipped: /dev/zero: character device" in r.stderr and "no input was readable" in r.stderr


def test_ingest_does_not_hash_dev_zero(tmp_path, alarm):
    # before: store.file_sha256 read /dev/zero forever
    r = run("ingest", "/dev/zero", str(ROOT / "sample_logs" / "synthetic" / "continuous.jsonl"), "--store", str(tmp_path / "s"), "-q")
    assert r.exit_code == 0, r.output


def test_dash_reads_standard_input_once(tmp_path):
    data = (ROOT / "sample_logs" / "synthetic" / "gap.jsonl").read_bytes()
    r = run("analyze", "-", "--json", "-", "-q", input=data)  # before: usage error, "-" does not exist
    assert r.exit_code == 1, r.output
    import json

    doc = json.loads(r.stdout)
    assert doc["inputs"][0]["path"] == "-" and doc["boundaries"][0]["verdict"] == "gap"


def test_dev_stdin_from_a_pipe_is_read_not_a_traceback(tmp_path):
    # a real pipe (not seekable): before, the seek after sniffing raised out of read_one
    src = (ROOT / "sample_logs" / "synthetic" / "gap.jsonl").read_bytes()
    cmd = [sys.executable, "-c", "from analyzer.cli import main; main()", "analyze", "/dev/stdin", "--json", "-", "-q"]
    p = subprocess.run(cmd, input=src, capture_output=True, timeout=120, cwd=ROOT)
    assert p.returncode == 1, p.stderr.decode()
    assert b"Traceback" not in p.stderr and b'"verdict": "gap"' in p.stdout


def test_gzip_on_standard_input_is_decompressed(tmp_path):
    import gzip
    import json

    data = gzip.compress((ROOT / "sample_logs" / "synthetic" / "gap.jsonl").read_bytes())
    r = run("analyze", "-", "--json", "-", "-q", input=data)
    assert r.exit_code == 1, r.output
    assert json.loads(r.stdout)["boundaries"][0]["verdict"] == "gap"


def test_stdin_larger_than_the_limit_is_one_input_error(tmp_path, monkeypatch):
    monkeypatch.setattr(inputs, "STDIN_LIMIT", 1000)
    r = run("analyze", "-", input=b'{"kind": "request"}\n' * 200)
    assert r.exit_code == 2 and "standard input is larger than" in r.stderr



def test_standard_input_is_hashed_from_its_copy_and_refused_by_a_store(tmp_path, monkeypatch):
    import hashlib
    import io

    data = (ROOT / "sample_logs" / "synthetic" / "gap.jsonl").read_bytes()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    assert inputs.sha256("-") == hashlib.sha256(data).hexdigest() == inputs.sha256("/dev/stdin")  # read once
    assert inputs.size("-") == len(data)
    r = run("analyze", "-", "--store", str(tmp_path / "s"), input=data)
    assert r.exit_code == 2 and "standard input or a pipe cannot go into a store" in r.stderr


def test_ingest_refuses_standard_input_without_reading_it(tmp_path):
    # the store hashes a file before reading it: a pipe hashed would be drained, and an empty input stored
    data = (ROOT / "sample_logs" / "synthetic" / "gap.jsonl").read_bytes()
    r = run("ingest", "/dev/stdin", "--store", str(tmp_path / "s"), input=data)
    assert r.exit_code == 2 and "error: /dev/stdin" in r.stderr, r.output


# ---------------------------------------------------------------------------- one bad spot in JSONL / HAR
_GOOD = '{"kind":"request","ts":"2026-01-01T00:00:00Z","conn":"c%d","method":"GET","url":"http://x/mcp","headers":{"mcp-session-id":"s"}}\n'


def _doc(path):
    from analyzer import pipeline
    return pipeline.run([str(path)]).document


def test_jsonl_whose_first_sixty_lines_are_bad_is_still_read(tmp_path):
    p = tmp_path / "late.jsonl"
    p.write_text("garbage\n" * 60 + _GOOD % 1 + _GOOD % 2)
    doc = _doc(p)
    assert (doc["inputs"][0]["format"], doc["inputs"][0]["records"], doc["inputs"][0]["rejected"]) == ("jsonl", 62, 60)
    assert len(doc["exchanges"]) == 2


def test_utf8_bom_does_not_cost_the_first_record(tmp_path):
    p = tmp_path / "bom.jsonl"
    p.write_bytes(b"\xef\xbb\xbf" + (_GOOD % 1 + _GOOD % 2).encode())
    doc = _doc(p)
    assert doc["inputs"][0]["rejected"] == 0 and len(doc["exchanges"]) == 2 and doc["anomalies"] == []


def test_one_deeply_nested_har_entry_costs_only_itself(tmp_path):
    good = ('{"startedDateTime":"2026-01-01T00:00:00Z","request":{"method":"GET","url":"http://x/mcp","headers":'
            '[{"name":"mcp-session-id","value":"s"}]},"response":{"status":200,"headers":[],"content":{"text":""}}}')
    deep = '{"a":' * 200_000 + "1" + "}" * 200_000
    p = tmp_path / "deep.har"
    p.write_text('{"log":{"version":"1.2","entries":[' + good + "," + deep + "," + good + "]}}")
    doc = _doc(p)
    inp = doc["inputs"][0]
    assert (inp["format"], inp["records"], inp["rejected"]) == ("har", 3, 1)
    assert len(doc["exchanges"]) == 2
    assert [(a["code"], a["location"]) for a in doc["anomalies"]] == [("har_entry_invalid", "entry 2")]


def test_a_blank_input_beside_a_real_one_is_read_as_empty(tmp_path):
    """A blank file read as HAR (``--format har``) has no reader's tables, only empty canonical ones; beside
    a HAR with events it costs nothing: the analysis of both is the analysis of the HAR, plus the blank
    input's anomaly."""
    har = ROOT / "sample_logs" / "real-python-resume-dense.har"
    blank = tmp_path / "blank.har"
    blank.write_text("  \n")
    both = pipeline.run([str(blank), str(har)], Reading("har")).document
    alone = pipeline.run([str(har)], Reading("har")).document
    assert sorted(r["path"] for r in both["inputs"]) == sorted([str(blank), str(har)])  # (read in path order)
    assert [(a["location"], a["code"]) for a in both["anomalies"] if a["source"] == str(blank)] == [("file", "input_empty")]
    for key in ("sessions", "exchanges", "boundaries", "findings"):
        assert both[key] == alone[key], key
