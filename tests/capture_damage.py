"""Damage a capture one record at a time, and judge what the damage cost (round three of hostile inputs, items 6, 7).

Used by tests/test_capture_damage.py (a short deterministic sweep) and bench/fuzz_campaign.py (thousands of
inputs).  Three parts:

* :class:`Layout` -- where things are in a sample capture, found by a walk of its own (not the reader under
  test): each packet record's bytes (classic pcap record header or pcapng block) with the TCP flow its packet
  belongs to, and, for TLS samples, each TLS record's header and body inside the TCP payloads;
* :data:`KINDS` -- the damage: bits flipped in or bytes zeroed over one record header (its time, lengths,
  pcapng block type, interface, trailer), and one byte changed in one TLS record (header or ciphertext); each
  returns the damaged bytes and the byte ranges it changed;
* :func:`judge` -- the mutated capture through the CLI (``analyze --json-lines``, in-process, as a user runs
  it): the exit code, the time, and per TCP flow the exchanges it gave (method, URL, status, how it ended,
  its events, first and last id, session id), compared with the undamaged run.  A flow whose packets the
  damage did not touch must come out the same; one it touched may lose what the damaged record carried, and
  then an anomaly row must say so.
"""
from __future__ import annotations

import bisect
import json
import random
import signal
import struct
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from click.testing import CliRunner

from analyzer.cli import main
from analyzer.decode import tcp

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = sorted(p for p in (ROOT / "sample_logs").rglob("*") if p.is_file() and p.suffix in (".pcap", ".pcapng"))

Flow = tuple[str, str]  # the two endpoints, sorted


def keylog_of(path: Path) -> Path | None:
    k = path.with_name(path.name.split(".")[0] + ".keylog")
    return k if k.exists() else None


@dataclass(frozen=True, slots=True)
class Record:
    pkt: int  # 1-based, as the reader numbers packets
    start: int  # file offset of the record header (pcap) or block (pcapng)
    data: int  # file offset of the packet bytes
    data_end: int  # ... and after them
    end: int  # file offset after the record / block (its padding and trailer too)
    flow: Flow | None  # its TCP flow (None: not TCP)
    payload: int  # its TCP payload bytes


@dataclass
class Layout:
    path: Path
    data: bytes
    kind: str  # "pcap" or "pcapng"
    bo: str
    records: list[Record]
    tls: list[tuple[int, int, Flow]] = field(default_factory=list)  # TLS records: (header offset, body end, flow)

    @classmethod
    def of(cls, path: Path) -> "Layout":
        data = path.read_bytes()
        if data[:4] == b"\x0a\x0d\x0d\x0a":
            bo = "<" if data[8:12] == b"\x4d\x3c\x2b\x1a" else ">"
            kind, raw = "pcapng", _pcapng(data, bo)
        else:
            bo = "<" if data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
            kind, raw = "pcap", _pcap(data, bo)
        records, streams = [], {}
        for pkt, (start, at, end, link, stop) in enumerate(raw, 1):
            seg = tcp.decode(link, data[at:end], end - at)
            flow, size = None, 0
            if type(seg) is tuple:
                src, dst = tcp.endpoint(seg[0], seg[2]), tcp.endpoint(seg[1], seg[3])
                flow = tuple(sorted((src, dst)))
                payload = seg[7]
                size = len(payload)
                if payload:  # in-order payload of each direction, for the TLS records (the samples have no loss)
                    d = streams.setdefault((src, dst), {"next": None, "starts": [], "offsets": [], "size": 0, "flow": flow})
                    if d["next"] is None or seg[4] == d["next"]:
                        off = data.find(payload, at, end)
                        d["starts"].append(d["size"])
                        d["offsets"].append(off)
                        d["size"] += len(payload)
                        d["bytes"] = d.get("bytes", b"") + payload
                        d["next"] = (seg[4] + len(payload)) & 0xFFFFFFFF
            records.append(Record(pkt, start, at, end, stop, flow, size))
        lay = cls(path, data, kind, bo, records)
        if keylog_of(path) is not None:
            for d in streams.values():
                lay.tls += _tls_records(d)
        return lay


def _pcap(data: bytes, bo: str) -> list[tuple[int, int, int, int, int]]:
    link = struct.unpack_from(bo + "I", data, 20)[0] & 0xFFFF
    out, pos = [], 24
    while pos + 16 <= len(data):
        caplen = struct.unpack_from(bo + "I", data, pos + 8)[0]
        out.append((pos, pos + 16, pos + 16 + caplen, link, pos + 16 + caplen))
        pos += 16 + caplen
    return out


def _pcapng(data: bytes, bo: str) -> list[tuple[int, int, int, int, int]]:
    out, links, pos = [], [], 0
    while pos + 12 <= len(data):
        btype, blen = struct.unpack_from(bo + "II", data, pos)
        if btype == 1:
            links.append(struct.unpack_from(bo + "H", data, pos + 8)[0])
        elif btype == 6:
            iface, caplen = struct.unpack_from(bo + "I", data, pos + 8)[0], struct.unpack_from(bo + "I", data, pos + 20)[0]
            out.append((pos, pos + 28, pos + 28 + caplen, links[iface], pos + blen))
        pos += blen
    return out


def _tls_records(d: dict) -> list[tuple[int, int, Flow]]:
    """(file offset of the header, file offset of the body's last byte + 1, flow) of each whole TLS record."""
    buf, starts, offsets = d.get("bytes", b""), d["starts"], d["offsets"]

    def at(i: int) -> int:
        k = bisect.bisect_right(starts, i) - 1
        return offsets[k] + i - starts[k]

    out, pos = [], 0
    while pos + 5 <= len(buf) and buf[pos] in (20, 21, 22, 23) and buf[pos + 1] == 3:
        end = pos + 5 + int.from_bytes(buf[pos + 3 : pos + 5], "big")
        if end > len(buf):
            break
        if end > pos + 5:
            out.append((at(pos), at(end - 1) + 1, d["flow"]))
        pos = end
    return out


# ----------------------------------------------------------------------------------------- damage


def _flip(data: bytearray, off: int, bit: int) -> list[tuple[int, int]]:
    data[off + bit // 8] ^= 1 << (bit % 8)
    return [(off + bit // 8, off + bit // 8 + 1)]


def _field_bit(lay: Layout, data: bytearray, rng: random.Random, off: int) -> list[tuple[int, int]]:
    """Flip one bit of the 32-bit field at ``off`` (bit 16 -- one flipped bit adding 64 KiB -- a quarter of the time)."""
    bit = 16 if rng.random() < 0.25 else rng.randrange(32)
    byte = bit // 8 if lay.bo == "<" else 3 - bit // 8
    data[off + byte] ^= 1 << (bit % 8)
    return [(off + byte, off + byte + 1)]


def _zero(data: bytearray, a: int, b: int) -> list[tuple[int, int]]:
    data[a:b] = bytes(b - a)
    return [(a, b)]


def _rec(lay: Layout, rng: random.Random) -> Record:
    return lay.records[rng.randrange(1, len(lay.records))] if len(lay.records) > 1 else lay.records[0]  # 2nd or later


# each: (layout, damaged copy, rng) -> the byte ranges changed; pcap record header fields: ts_sec, ts_frac, incl_len, orig_len;
# pcapng EPB: type, block length, interface, ts high, ts low, captured length, original length, ..., trailing length
PCAP_KINDS = {
    "zero_12_header": lambda lay, d, rng: _zero(d, (r := _rec(lay, rng)).start, r.start + 12),
    "zero_16_header": lambda lay, d, rng: _zero(d, (r := _rec(lay, rng)).start, r.start + 16),
    "zero_12_unaligned": lambda lay, d, rng: _zero(d, (a := _rec(lay, rng).start + rng.randrange(-11, 16)), a + 12),
    "bit_incl_len": lambda lay, d, rng: _field_bit(lay, d, rng, _rec(lay, rng).start + 8),
    "bit_orig_len": lambda lay, d, rng: _field_bit(lay, d, rng, _rec(lay, rng).start + 12),
    "bit_ts_sec": lambda lay, d, rng: _field_bit(lay, d, rng, _rec(lay, rng).start),
    "bit_ts_frac": lambda lay, d, rng: _field_bit(lay, d, rng, _rec(lay, rng).start + 4),
    "random_header": lambda lay, d, rng: _random_bytes(d, _rec(lay, rng).start, 16, rng),
}
PCAPNG_KINDS = {
    "zero_12_block": lambda lay, d, rng: _zero(d, (r := _rec(lay, rng)).start, r.start + 12),
    "bit_block_type": lambda lay, d, rng: _field_bit(lay, d, rng, _rec(lay, rng).start),
    "bit_block_len": lambda lay, d, rng: _field_bit(lay, d, rng, _rec(lay, rng).start + 4),
    "bit_trailer_len": lambda lay, d, rng: _field_bit(lay, d, rng, (r := _rec(lay, rng)).start + _blen(lay, r) - 4),
    "bit_interface": lambda lay, d, rng: _field_bit(lay, d, rng, _rec(lay, rng).start + 8),
    "bit_ts": lambda lay, d, rng: _field_bit(lay, d, rng, _rec(lay, rng).start + 12 + 4 * rng.randrange(2)),
    "bit_caplen": lambda lay, d, rng: _field_bit(lay, d, rng, _rec(lay, rng).start + 20),
    "bit_wirelen": lambda lay, d, rng: _field_bit(lay, d, rng, _rec(lay, rng).start + 24),
    "zero_12_unaligned": lambda lay, d, rng: _zero(d, (a := _rec(lay, rng).start + rng.randrange(-11, 28)), a + 12),
}
TLS_KINDS = {
    "tls_body_bit": lambda lay, d, rng: _flip(d, (t := rng.choice(lay.tls))[0] + 5, rng.randrange(8 * (t[1] - t[0] - 5))),
    "tls_body_byte": lambda lay, d, rng: _set(d, (t := rng.choice(lay.tls))[0] + 5 + rng.randrange(t[1] - t[0] - 5), rng),
    "tls_header_byte": lambda lay, d, rng: _set(d, rng.choice(lay.tls)[0] + rng.randrange(5), rng),
}


def _blen(lay: Layout, r: Record) -> int:
    return struct.unpack_from(lay.bo + "I", lay.data, r.start + 4)[0]


def _set(data: bytearray, off: int, rng: random.Random) -> list[tuple[int, int]]:
    data[off] = (data[off] + rng.randrange(1, 256)) % 256  # always another value
    return [(off, off + 1)]


def _random_bytes(data: bytearray, off: int, n: int, rng: random.Random) -> list[tuple[int, int]]:
    data[off : off + n] = rng.randbytes(n)
    return [(off, off + n)]


def kinds(lay: Layout) -> dict:
    got = dict(PCAP_KINDS if lay.kind == "pcap" else PCAPNG_KINDS)
    if lay.tls:
        got.update(TLS_KINDS)
    return got


def damage(lay: Layout, kind: str, rng: random.Random) -> tuple[bytes, set[Flow], list[tuple[int, int]]]:
    """The damaged capture, the flows of the records whose bytes it changed, and the byte ranges."""
    data = bytearray(lay.data)
    ranges = kinds(lay)[kind](lay, data, rng)
    touched = set()
    for a, b in ranges:
        for r in lay.records:
            if r.start < b and a < r.end and r.flow is not None:
                touched.add(r.flow)
    return bytes(data), touched, ranges


def in_payload(lay: Layout, kind: str, ranges: list[tuple[int, int]]) -> bool:
    """The damage changed plaintext packet bytes (not a record header, not a TLS record)."""
    return not kind.startswith("tls") and any(r.data < b and a < r.data_end for a, b in ranges for r in lay.records)


# ----------------------------------------------------------------------------------------- judging


def flow_of(conn: str) -> Flow:
    """``client->server[~k]#n`` -> the two endpoints, sorted (a reused 5-tuple is the same flow here)."""
    a, b = conn.rsplit("#", 1)[0].split("->")
    return tuple(sorted((a, b.split("~")[0])))


_SIGNATURE = ("conn", "method", "url", "status", "session_id", "last_event_id", "end_reason", "events", "cut_off_events",
              "first_id", "last_id", "started")  # (the time last: see judge)


@dataclass
class Outcome:
    code: int  # the CLI's exit code (3: an internal error; -1: timed out)
    seconds: float
    flows: dict[Flow, list[tuple]]  # flow -> its exchanges' signatures, sorted
    anomalies: list[dict]
    boundaries: list[tuple] = field(default_factory=list)  # (session id, Last-Event-ID, first id after, verdict, lost, duplicated, handled)
    findings: list[tuple] = field(default_factory=list)  # (rule, severity, session id, message)
    error: str = ""


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout()


def run(data: bytes, suffix: str, keylog: Path | None, timeout: int = 120) -> Outcome:
    """``mcp-sse-audit analyze`` on the bytes, in-process (CliRunner), bounded by ``timeout`` seconds."""
    with tempfile.TemporaryDirectory(prefix="mcp-sse-damage-") as tmp:
        src, out = Path(tmp) / f"in{suffix}", Path(tmp) / "out.jsonl"
        src.write_bytes(data)
        args = ["analyze", str(src), "--json-lines", str(out)] + (["--tls-keylog", str(keylog)] if keylog else [])
        old = signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(timeout)
        t0 = time.perf_counter()
        try:
            res = CliRunner().invoke(main, args, catch_exceptions=True)
            code = res.exit_code if not isinstance(res.exception, _Timeout) else -1
            error = "" if code in (0, 1, 2) else (res.output.strip().splitlines() or [repr(res.exception)])[-1][:300]
        except _Timeout:
            code, error = -1, f"no result within {timeout} s"
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, old)
        seconds = time.perf_counter() - t0
        got = Outcome(code, seconds, {}, [], error=error)
        if out.exists():
            for line in out.read_text().splitlines():
                row = json.loads(line)
                if row["type"] == "exchange":
                    got.flows.setdefault(flow_of(row["conn"]), []).append(tuple(str(row.get(k)) for k in _SIGNATURE))
                elif row["type"] == "anomaly":
                    got.anomalies.append(row)
                elif row["type"] == "boundary":
                    got.boundaries.append(tuple(str(row.get(k)) for k in ("session_id", "last_event_id", "first_event_id_after", "verdict",
                                                                          "lost_event_ids", "duplicated_event_ids", "handled_correctly")))
                elif row["type"] == "finding":
                    got.findings.append((row["rule"], row["severity"], row["session_id"], row["message"]))
        got.flows = {f: sorted(x) for f, x in got.flows.items()}
        return got


@dataclass
class Verdict:
    untouched: int  # flows of the undamaged run the damage did not touch
    lost: list[Flow]  # ... of which these came out different
    touched: int
    touched_changed: int
    silent: bool  # something changed and no anomaly row says anything (payload bytes aside: see judge)


def judge(base: Outcome, got: Outcome, touched: set[Flow], payload: bool = False) -> Verdict:
    """``payload``: the damage changed bytes of a packet's payload, unprotected by anything the reader checks (TCP
    checksums are not verified: captures on loopback or with offload hold wrong ones), so what it changed may
    pass without an anomaly row; TLS records are authenticated, so damage there is always said."""
    lost = [f for f in base.flows if f not in touched and got.flows.get(f) != base.flows[f]]
    lost += [f for f in got.flows if f not in touched and f not in base.flows]  # a flow that was not there: also wrong
    changed = [f for f in base.flows if f in touched and got.flows.get(f) != base.flows[f]]
    # (a packet time damaged within a day of its neighbours is a plausible time, read as it is: a changed start time
    # alone is not silent loss)
    untimed = [f for f in changed if [x[:-1] for x in got.flows.get(f, [])] != [x[:-1] for x in base.flows[f]]]
    silent = bool(lost or (untimed and not payload)) and not got.anomalies
    return Verdict(sum(1 for f in base.flows if f not in touched), lost, sum(1 for f in base.flows if f in touched), len(changed), silent)


class Campaign:
    """Inputs round-robin over the samples and their kinds of damage, seeded; figures kept as they run."""

    def __init__(self, samples: list[Path] = SAMPLES, seed: int = 2026) -> None:
        self.rng = random.Random(seed)
        self.layouts = [Layout.of(p) for p in samples]
        self.base = {lay.path: run(lay.data, lay.path.suffix, keylog_of(lay.path)) for lay in self.layouts}
        for lay in self.layouts:
            b = self.base[lay.path]
            assert b.code in (0, 1), (lay.path, b.code, b.error)
        # three families, an equal share each: classic pcap record headers, pcapng blocks, TLS records; within
        # one, its samples and kinds of damage in a seeded order, round-robin
        self.families: dict[str, list[tuple[Layout, str]]] = {}
        for lay in self.layouts:
            for kind in kinds(lay):
                fam = "TLS records" if kind.startswith("tls") else "pcap record headers" if lay.kind == "pcap" else "pcapng blocks"
                self.families.setdefault(fam, []).append((lay, kind))
        for plan in self.families.values():
            self.rng.shuffle(plan)
        self.plan = [(fam, plan) for fam, plan in sorted(self.families.items())]
        self.i = 0
        self.stats = {"inputs": 0, "exits": {}, "worst_seconds": 0.0, "worst_input": None, "untouched_flows": 0, "lost_flows": 0,
                      "touched_flows": 0, "touched_flows_changed": 0, "silent": 0, "per_kind": {}, "failures": []}

    def step(self) -> None:
        fam, plan = self.plan[self.i % len(self.plan)]
        lay, kind = plan[(self.i // len(self.plan)) % len(plan)]
        self.i += 1
        seed = self.rng.randrange(1 << 30)
        data, touched, ranges = damage(lay, kind, random.Random(seed))
        got = run(data, lay.path.suffix, keylog_of(lay.path))
        v = judge(self.base[lay.path], got, touched, in_payload(lay, kind, ranges))
        s = self.stats
        s["inputs"] += 1
        s["exits"][str(got.code)] = s["exits"].get(str(got.code), 0) + 1
        k = s["per_kind"].setdefault(f"{fam}: {kind}", {"inputs": 0, "lost_flows": 0, "bad_exits": 0})
        k["inputs"] += 1
        if got.seconds > s["worst_seconds"]:
            s["worst_seconds"], s["worst_input"] = round(got.seconds, 3), f"{lay.path.name} {kind} seed {seed}"
        s["untouched_flows"] += v.untouched
        s["lost_flows"] += len(v.lost)
        s["touched_flows"] += v.touched
        s["touched_flows_changed"] += v.touched_changed
        s["silent"] += v.silent
        k["lost_flows"] += len(v.lost)
        bad = got.code not in (0, 1, 2)
        k["bad_exits"] += bad
        if bad or v.lost or v.silent:
            s["failures"].append({"sample": str(lay.path.relative_to(ROOT)), "kind": kind, "seed": seed, "bytes": ranges,
                                  "exit": got.code, "error": got.error, "lost_flows": [list(f) for f in v.lost], "silent": v.silent})


# ----------------------------------------------------------------------------------------- every header, every bit


def _fields(lay: Layout, r: Record) -> dict[str, int]:
    if lay.kind == "pcap":
        return {"ts_sec": 0, "ts_frac": 4, "incl_len": 8, "orig_len": 12}
    return {"type": 0, "length": 4, "interface": 8, "ts_high": 12, "ts_low": 16, "captured": 20, "original": 24, "trailer": r.end - r.start - 4}


def header_sweep(lay: Layout, records: range | None = None) -> dict:
    """Every bit of every field of every record header (pcapng: of every Enhanced Packet Block, trailer included),
    and 12 or 16 bytes zeroed, set to 0xff or random over each, through the reader alone: each time, every other
    record's packet must still be read, byte for byte (numbering aside).  Counts per field, and the failures."""
    from analyzer.decode import capture
    import io

    want = [lay.data[r.data : r.data_end] for r in lay.records]
    rng = random.Random(lay.path.name)
    stats: dict = {"mutations": 0, "others_lost": 0, "silent": 0, "per_field": {}, "failures": []}
    for k in records if records is not None else range(len(lay.records)):
        r = lay.records[k]
        muts = [(f"{name} bit {bit}", r.start + off + (bit // 8 if lay.bo == "<" else 3 - bit // 8), bytes([1 << (bit % 8)]), True)
                for name, off in _fields(lay, r).items() for bit in range(32)]
        muts += [("zero 12", r.start, bytes(12), False), ("zero 16", r.start, bytes(16), False), ("0xff 12", r.start, b"\xff" * 12, False),
                 ("random 16", r.start, rng.randbytes(16), False)]
        for name, at, blob, xor in muts:
            data = bytearray(lay.data)
            if xor:
                data[at] ^= blob[0]
            else:
                data[at : at + len(blob)] = blob
            end = at + len(blob)
            hit = {i for i, x in enumerate(lay.records) if x.start < end and at < x.end}
            notes: list = []
            got = {p[3] for p in capture.CaptureReader("sweep", io.BytesIO(bytes(data)), lambda *a: notes.append(a)).packets()}
            lost = [i for i, w in enumerate(want) if i not in hit and w not in got]
            field = name.rsplit(" bit", 1)[0]
            f = stats["per_field"].setdefault(field, {"mutations": 0, "others_lost": 0})
            f["mutations"] += 1
            stats["mutations"] += 1
            if lost:
                f["others_lost"] += 1
                stats["others_lost"] += 1
                stats["silent"] += not notes
                stats["failures"].append({"sample": lay.path.name, "record": k, "damage": name, "packets_lost": len(lost)})
    return stats


def replay(sample: str, kind: str, seed: int) -> tuple[bytes, set[Flow]]:
    """The damaged bytes of one campaign input (a failure's sample, kind and seed), to reproduce it."""
    lay = Layout.of(ROOT / sample)
    data, touched, _ranges = damage(lay, kind, random.Random(seed))
    return data, touched


if __name__ == "__main__":  # python tests/capture_damage.py SAMPLE KIND SEED OUT: write one campaign input again
    import sys

    data, _ = replay(sys.argv[1], sys.argv[2], int(sys.argv[3]))
    Path(sys.argv[4]).write_bytes(data)
    key = keylog_of(ROOT / sys.argv[1])
    print(f"wrote {sys.argv[4]}; run: mcp-sse-audit analyze {sys.argv[4]}" + (f" --tls-keylog {key}" if key else ""), file=sys.stderr)
