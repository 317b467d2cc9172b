"""Per TCP connection of a pcap: the HTTP/1.x exchanges, their framing and content coding, and the SSE ids inside.

A checking aid for the multi-hop captures of record_proxy_host.py (not part of the analyzer):
it reassembles each direction of each connection (in packet order, duplicate segments dropped;
enough for loopback captures without loss), splits the responses, removes the chunked framing,
inflates `Content-Encoding: gzip`/`deflate` bodies with zlib and prints the `id:` lines, so the
gzip hop (client <-> nginx) and the plain hop (nginx <-> server) can be compared by eye.

    python3 sample_logs/recording/pcap_hops.py sample_logs/real-nginx-python-resume.pcap [--bodies]

Link types: 1 (Ethernet), 113 (Linux SLL), 276 (Linux SLL2). IPv4 only. Standard library only.
"""

from __future__ import annotations

import re
import struct
import sys
import zlib

HEADER_LEN = {1: 14, 113: 16, 276: 20}


def packets(path: str):
    buf = open(path, "rb").read()
    magic = buf[:4]
    bo = "<" if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    linktype = struct.unpack_from(bo + "I", buf, 20)[0] & 0xFFFF
    if linktype not in HEADER_LEN:
        raise SystemExit(f"link type {linktype} not handled")
    pos, n = 24, 0
    while pos + 16 <= len(buf):
        sec, frac, incl, _ = struct.unpack_from(bo + "IIII", buf, pos)
        data = buf[pos + 16 : pos + 16 + incl]
        pos += 16 + incl
        n += 1
        ip = data[HEADER_LEN[linktype] :]
        if not ip or ip[0] >> 4 != 4 or ip[9] != 6:
            continue
        ihl = (ip[0] & 15) * 4
        total = struct.unpack_from(">H", ip, 2)[0]
        tcp = ip[ihl:total]
        sport, dport, seq = struct.unpack_from(">HHI", tcp, 0)
        yield n, sec + frac / 1e6, sport, dport, seq, tcp[13], tcp[(tcp[12] >> 4) * 4 :]


def split_responses(data: bytes):
    pos = 0
    while pos < len(data):
        end = data.find(b"\r\n\r\n", pos)
        if end < 0:
            return
        head = data[pos:end].decode("latin-1").split("\r\n")
        pos = end + 4
        hdr = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in head[1:])}
        body, chunks, complete = b"", 0, True
        if hdr.get("transfer-encoding", "").lower() == "chunked":
            complete = False
            while True:
                eol = data.find(b"\r\n", pos)
                if eol < 0:
                    break
                size = int(data[pos:eol].split(b";")[0] or b"0", 16)
                if size == 0:
                    pos, complete = eol + 4, True
                    break
                body += data[eol + 2 : eol + 2 + size]
                chunks += 1
                pos = eol + 2 + size + 2
            framing = f"chunked({chunks} data chunks{'' if complete else ', no last chunk'})"
        elif "content-length" in hdr:
            length = int(hdr["content-length"])
            body, pos, framing = data[pos : pos + length], pos + length, f"content-length {length}"
        elif head[0].split()[1] in ("202", "204", "304"):
            framing = "no body"
        else:
            body, pos, framing = data[pos:], len(data), "until close"
        yield head[0], hdr, body, framing


def inflate(body: bytes, coding: str) -> tuple[bytes, str]:
    if coding not in ("gzip", "deflate"):
        return body, ""
    z = zlib.decompressobj(16 + zlib.MAX_WBITS if coding == "gzip" else zlib.MAX_WBITS)
    try:
        plain = z.decompress(body)
    except zlib.error as exc:
        return b"", f"inflate error {exc}"
    return plain, (f"{coding} stream complete" if z.eof else f"{coding} stream NOT finished")


def main() -> int:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    bodies = "--bodies" in sys.argv
    conns: dict[tuple, dict] = {}
    for n, _ts, sport, dport, seq, flags, payload in packets(args[0]):
        key = (min(sport, dport), max(sport, dport))
        c = conns.setdefault(key, {"client": None, "c2s": [], "s2c": [], "first": n})
        if flags & 0x02 and not flags & 0x10:
            c["client"] = sport
        if payload:
            c["c2s" if sport == c["client"] else "s2c"].append((seq, n, payload))
    for key, c in conns.items():
        if not c["c2s"] or c["client"] is None:
            continue
        server = key[1] if key[0] == c["client"] else key[0]

        def joined(segs):
            seen, out = set(), b""
            for seq, _n, pl in segs:
                if (seq, len(pl)) not in seen:
                    seen.add((seq, len(pl)))
                    out += pl
            return out

        reqs = re.findall(rb"(GET|POST|DELETE) \S+ (HTTP/1\.[01])\r\n(.*?)\r\n\r\n", joined(c["c2s"]), re.S)
        print(f"== :{c['client']} -> :{server} (first packet {c['first']}): {len(reqs)} request(s)")
        for method, version, head in reqs:
            lei = re.search(rb"(?im)^last-event-id: *(.*)$", head)
            print(f"   > {method.decode()} {version.decode()}" + (f" Last-Event-ID: {lei.group(1).decode().strip()}" if lei else ""))
        for status, hdr, body, framing in split_responses(joined(c["s2c"])):
            coding = hdr.get("content-encoding", "identity")
            plain, note = inflate(body, coding)
            ids = [i.decode() for i in re.findall(rb"(?m)^id: ?([^\r\n]*)", plain)]
            print(f"   < {status} | {hdr.get('content-type', '-')} | Content-Encoding {coding} | {framing} | "
                  f"Connection {hdr.get('connection', '-')} | {len(body)} B on the wire, {len(plain)} B plain"
                  + (f" ({note})" if note else "") + f" | ids {ids}")
            if bodies:
                print("     " + plain.decode("utf-8", "replace").replace("\n", "\n     "))
    return 0


if __name__ == "__main__":
    sys.exit(main())
