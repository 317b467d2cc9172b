"""Derive a "key log is missing a connection" pair from a TLS recording: the pcap copied byte for byte, and the
key log without the lines of ONE client random, the TLS connection that carried the tools/call POST's SSE stream.

Real-world reason: a browser or app writes keys only after SSLKEYLOGFILE is set (it was set after the stream's
connection was opened), or the key log was rotated between connections, so the first connection's keys are
missing while the capture has all its packets.

    python3 partial_keylog.py sample_logs/tls/real-python-tls13-h1-resume-newconn.pcap \\
        sample_logs/tls/real-python-tls13-h1-resume-newconn-partial-keys

writes <out stem>.pcap (a copy) and <out stem>.keylog. The connection is found with tshark and the full key log
(the tools/call POST's TCP stream, and that stream's ClientHello random); the script refuses when the resume GET
(Last-Event-ID) is on the same TCP stream, since dropping the key would then hide the resume too. Prints only the
first 8 hex characters of client randoms, never a secret. Needs only the standard library and tshark
(TSHARK=tshark).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

TSHARK = os.environ.get("TSHARK", "tshark")


def tshark_rows(pcap: Path, keylog: Path, display_filter: str, fields: list[str]) -> list[list[str]]:
    cmd = [TSHARK, "-r", str(pcap), "-o", f"tls.keylog_file:{keylog}", "-Y", display_filter, "-T", "fields",
           "-E", "separator=/t", "-E", "aggregator=|"]
    for f in fields:
        cmd += ["-e", f]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True).stdout
    return [line.split("\t") for line in out.splitlines() if line.strip()]


def find_connections(pcap: Path, keylog: Path) -> dict:
    """The tools/call POST and the resume GET (packet, TCP stream) and the POST stream's client random."""
    rows = tshark_rows(pcap, keylog, "http.request", ["frame.number", "tcp.stream", "http.request.method",
                                                      "http.request.line", "http.file_data"])
    post = resume = None
    for frame, stream, method, lines, body in ((r + [""] * 5)[:5] for r in rows):
        if method == "POST" and '"method":"tools/call"' in body.replace(" ", ""):
            post = post or (int(frame), int(stream))
        if method == "GET" and "last-event-id:" in lines.lower():
            resume = resume or (int(frame), int(stream), next(
                ln.split(":", 1)[1].strip().removesuffix("\\r\\n") for ln in lines.split("|") if ln.lower().startswith("last-event-id:")))
    if post is None or resume is None:
        raise SystemExit(f"no tools/call POST ({post}) or no resume GET with Last-Event-ID ({resume}) decrypted in {pcap}")
    hellos = tshark_rows(pcap, keylog, "tls.handshake.type == 1", ["frame.number", "tcp.stream", "tls.handshake.random"])
    randoms = {int(s): r.replace(":", "").lower() for _, s, r in hellos}
    return {"post": post, "resume": resume, "post_random": randoms[post[1]], "resume_random": randoms[resume[1]]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pcap", type=Path)
    parser.add_argument("out_stem", type=Path, help="writes OUT_STEM.pcap and OUT_STEM.keylog")
    parser.add_argument("--keylog", type=Path, help="the full key log (default: the pcap's .keylog)")
    args = parser.parse_args()
    keylog = args.keylog or args.pcap.with_suffix(".keylog")
    c = find_connections(args.pcap, keylog)
    (pf, ps), (gf, gs, lei) = c["post"], c["resume"]
    print(f"tools/call POST: packet {pf}, tcp.stream {ps}, client random {c['post_random'][:8]}…")
    print(f"resume GET (Last-Event-ID {lei}): packet {gf}, tcp.stream {gs}, client random {c['resume_random'][:8]}…")
    if ps == gs or c["post_random"] == c["resume_random"]:
        raise SystemExit("the resume GET is on the POST's connection: dropping its key would hide the resume too")
    drop = c["post_random"]
    lines = keylog.read_bytes().splitlines(keepends=True)
    kept = [ln for ln in lines if not (len(ln.split()) >= 3 and ln.split()[1].decode("ascii", "replace").lower() == drop)]
    if len(lines) - len(kept) == 0:
        raise SystemExit(f"no key-log line has client random {drop[:8]}…")
    out_pcap, out_keylog = args.out_stem.with_name(args.out_stem.name + ".pcap"), args.out_stem.with_name(args.out_stem.name + ".keylog")
    shutil.copyfile(args.pcap, out_pcap)
    out_keylog.write_bytes(b"".join(kept))
    print(f"wrote {out_pcap.name} (copy, {out_pcap.stat().st_size} B) and {out_keylog.name}: "
          f"{len(lines) - len(kept)} of {len(lines)} lines dropped (client random {drop[:8]}…)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
