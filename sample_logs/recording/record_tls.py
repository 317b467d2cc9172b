"""Record real MCP Streamable HTTP traffic over TLS (python SDK server + client) as pcap + NSS key log.

For each scenario:

    tls_client.py (SDK Client on httpx2, SSLKEYLOGFILE=<scenario>.keylog)
        --> tls_server.py (the SDK app under uvicorn = HTTP/1.1, or hypercorn = ALPN h2)
    tcpdump -i lo -s 0 -U 'tcp port <server port>'

The certificate is self-signed for 127.0.0.1, made at record time with the openssl CLI in a temporary
directory and deleted afterwards (the key log is all a reader needs; the private key is not kept).
The server closes the tool call's SSE stream after a step (SDK ``close_sse_stream``); the client resumes
with GET + Last-Event-ID, over TLS (``*-resume``); or the server is SIGKILLed after a step and restarted on
the same port, and the resume reaches a process that never saw the session (``*-server-restart``).
Writes sample_logs/tls/real-python-<scenario>.{pcap,keylog}; with
``--pcapng-of`` also ``.pcapng`` with the secrets injected (``editcap --inject-secrets tls,KEYLOG``), which
decrypts without the key log file. Everything listens on 127.0.0.1 only; every wait has a deadline.

Opt-in scenarios (recorded only when named; the default run is unchanged): ``tls13-h1-resume-newconn``, where the
server sends ``Connection: close`` on POST event streams (tls_server.py ``--post-sse-connection-close``), so the
resume GET opens a new TLS connection; from its run, partial_keylog.py derives
``real-python-tls13-h1-resume-newconn-partial-keys.{pcap,keylog}`` (the pcap copied, the key log without the
client random of the tools/call POST's connection).

    sudo python3 sample_logs/recording/record_tls.py            # every default scenario (~25 s)
    sudo python3 sample_logs/recording/record_tls.py tls13-h1-resume
    sudo python3 sample_logs/recording/record_tls.py tls13-h1-resume-newconn   # opt-in only (named)
    REC_PYTHON=/work/rec-venv/bin/python (needs mcp==2.3.0 hypercorn h2), OPENSSL=openssl, TCPDUMP, EDITCAP

Needs only the standard library (and record.py beside it).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import record as rec

HERE = rec.HERE
OPENSSL = os.environ.get("OPENSSL", "openssl")


@dataclass(frozen=True)
class TlsScenario:
    server: str  # uvicorn (HTTP/1.1) | hypercorn (offers h2)
    http2: bool  # the client offers h2
    tls12: str | None  # None: TLS 1.3 (OpenSSL's default suite, AES-256-GCM); else the TLS 1.2 suite
    close_at: str = "2"
    steps: int = 5
    retry_ms: int = 500
    kill_after_step: int | None = None  # SIGKILL the server after this step and restart it on the same port
    post_sse_connection_close: bool = False  # tls_server.py --post-sse-connection-close (the resume needs a new connection)
    partial_keys: bool = False  # also derive <stem>-partial-keys.{pcap,keylog} (partial_keylog.py)


SCENARIOS = {
    # TLS 1.3, HTTP/1.1: stream closed after steps 2 and 4 -> POST -> GET -> GET chain, each GET a new TLS connection
    "tls13-h1-resume": TlsScenario("uvicorn", False, None, close_at="2,4"),
    # TLS 1.2 ChaCha20-Poly1305, HTTP/1.1
    "tls12-chacha-h1-resume": TlsScenario("uvicorn", False, "ECDHE-ECDSA-CHACHA20-POLY1305"),
    # TLS 1.3, HTTP/2: every request is a stream of one connection
    "tls13-h2-resume": TlsScenario("hypercorn", True, None),
    # TLS 1.2 AES-128-GCM, HTTP/2
    "tls12-gcm-h2-resume": TlsScenario("hypercorn", True, "ECDHE-ECDSA-AES128-GCM-SHA256"),
    # TLS 1.3, HTTP/2: the server process is killed after step 2 and restarted; the client's resume reaches a
    # process that never saw the session (404), over a new TLS connection
    "tls13-h2-server-restart": TlsScenario("hypercorn", True, None, close_at="", steps=6, retry_ms=3000, kill_after_step=2),
}

# recorded only when named on the command line (not part of the default run)
EXTRA_SCENARIOS = {
    # TLS 1.3, HTTP/1.1: Connection: close on the POST's event stream, so the TCP/TLS connection ends with the stream
    # closed after step 2 and the resume GET (Last-Event-ID) comes on a NEW TLS connection (a new client random);
    # plus the pair whose key log lacks the POST stream's connection
    "tls13-h1-resume-newconn": TlsScenario("uvicorn", False, None, post_sse_connection_close=True, partial_keys=True),
}
ALL_SCENARIOS = {**SCENARIOS, **EXTRA_SCENARIOS}


def make_cert(tmp: Path) -> tuple[Path, Path]:
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    subprocess.run([OPENSSL, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True, timeout=30)
    return cert, key


def record(name: str, sc: TlsScenario, out_dir: Path, log_dir: Path, tmp: Path, cert: Path, key: Path) -> Path:
    log_dir.mkdir(parents=True, exist_ok=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"real-python-{name}"
    pcap, keylog = out_dir / f"{stem}.pcap", out_dir / f"{stem}.keylog"
    if keylog.exists():
        keylog.unlink()  # SSLKEYLOGFILE appends
    port = rec.free_port()
    s_log, t_log = log_dir / f"{name}.server.log", log_dir / f"{name}.tcpdump.log"
    for f in (s_log, t_log):
        if f.exists():
            f.unlink()
    capture = rec.start_tcpdump(port, pcap, t_log)
    server: list = []
    stop_event = threading.Event()
    watcher = None
    server_cmd = [rec.REC_PYTHON, "-u", "tls_server.py", "--port", str(port), "--cert", str(cert), "--key", str(key),
                  "--server", sc.server, "--store", "dense", "--retry-ms", str(sc.retry_ms), "--close-at", sc.close_at]
    if sc.post_sse_connection_close:
        server_cmd.append("--post-sse-connection-close")
    try:
        server.append(rec.start(server_cmd, s_log))
        rec.wait_port(port, server[0])
        if sc.kill_after_step is not None:
            watcher = threading.Thread(target=rec.restart_after, args=(f"EVENT {sc.kill_after_step}", server, port, s_log, stop_event,
                                                                      lambda: rec.start(server_cmd, s_log), "record_tls.py"))
            watcher.start()
        cmd = [rec.REC_PYTHON, "-u", "tls_client.py", f"https://127.0.0.1:{port}/mcp", "--ca", str(cert),
               "--steps", str(sc.steps)]
        if sc.http2:
            cmd.append("--http2")
        if sc.tls12:
            cmd += ["--tls12", sc.tls12]
        env = dict(os.environ, SSLKEYLOGFILE=str(keylog))
        print(f"[{name}] {sc.server} :{port} <- client ({'h2' if sc.http2 else 'http/1.1'}, {sc.tls12 or 'TLS 1.3'})", flush=True)
        client = subprocess.run(cmd, cwd=HERE, env=env, capture_output=True, text=True, timeout=60)
        (log_dir / f"{name}.client.log").write_text(client.stdout + client.stderr)
        print(client.stdout, end="", flush=True)
        print(f"[{name}] client exit code {client.returncode}", flush=True)
        if watcher is not None:
            stop_event.set()
            watcher.join(timeout=35)
        time.sleep(0.5)
    finally:
        stop_event.set()
        if server:
            rec.stop(server[0])
        time.sleep(0.3)
        rec.stop(capture, grace_s=5.0)
    counts = [ln.strip() for ln in t_log.read_text(errors="replace").splitlines() if "packets" in ln]
    print(f"[{name}] wrote {pcap.name} ({pcap.stat().st_size} B), {keylog.name}; tcpdump: {'; '.join(counts)}", flush=True)
    return pcap


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenarios", nargs="*",
                        help=f"any of {list(ALL_SCENARIOS)} (default: {list(SCENARIOS)}; the others only when named)")
    parser.add_argument("--out-dir", type=Path, default=HERE.parent / "tls")
    parser.add_argument("--log-dir", type=Path, default=Path("/tmp/mcp-sse-audit-recording"))
    parser.add_argument("--pcapng-of", default="tls13-h1-resume", metavar="SCENARIO",
                        help="also write this scenario as .pcapng with the key log injected (default %(default)s)")
    args = parser.parse_args()
    unknown = [n for n in args.scenarios if n not in ALL_SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s) {unknown}; choose from {list(ALL_SCENARIOS)}")
    with tempfile.TemporaryDirectory(prefix="mcp-tls-cert-") as tmp:
        cert, key = make_cert(Path(tmp))
        for name in args.scenarios or list(SCENARIOS):
            sc = ALL_SCENARIOS[name]
            pcap = record(name, sc, args.out_dir.resolve(), args.log_dir, Path(tmp), cert, key)
            if sc.partial_keys:
                subprocess.run([sys.executable, str(HERE / "partial_keylog.py"), str(pcap),
                                str(pcap.with_name(pcap.stem + "-partial-keys"))], check=True, timeout=300)
            if name == args.pcapng_of:
                out = pcap.with_suffix(".pcapng")
                subprocess.run([rec.EDITCAP, "--inject-secrets", f"tls,{pcap.with_suffix('.keylog')}", str(pcap), str(out)],
                               check=True, timeout=30)
                print(f"[{name}] wrote {out.name} (editcap --inject-secrets)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
