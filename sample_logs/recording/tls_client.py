"""Recording client over TLS: the python SDK `Client` on an httpx2 client that trusts the test certificate.

The key log: ``ssl.create_default_context()`` sets ``keylog_filename`` from ``SSLKEYLOGFILE`` (CPython does
this itself), and that context is the one httpx2 uses (``verify=ctx``), so every TLS secret of the run lands in
the file the recorder names. ``--http2`` makes httpx2 offer ALPN h2 (the ``h2`` package): every request of the
session then shares one connection as HTTP/2 streams.

    SSLKEYLOGFILE=keys.log python tls_client.py https://127.0.0.1:18443/mcp --ca cert.pem [--http2] [--tls12 SUITE]
"""

from __future__ import annotations

import argparse
import os
import ssl
import sys
import time

import anyio
import httpx2

from mcp import Client
from mcp.client.streamable_http import streamable_http_client


def stamp() -> str:
    return time.strftime("%H:%M:%S", time.localtime()) + f".{int(time.time() * 1000) % 1000:03d}"


async def run(url: str, ca: str, http2: bool, steps: int, timeout: float, tls12: str | None) -> int:
    ctx = ssl.create_default_context(cafile=ca)  # honours SSLKEYLOGFILE
    if tls12:  # TLS 1.2 with one OpenSSL cipher suite (the certificate is ECDSA: ECDHE-ECDSA-...)
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
        ctx.set_ciphers(tls12)
    if not os.environ.get("SSLKEYLOGFILE"):
        print("warning: SSLKEYLOGFILE is not set: the capture cannot be decrypted", flush=True)

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        print(f"{stamp()} progress {progress}/{total} {message}", flush=True)

    with anyio.fail_after(timeout):
        async with httpx2.AsyncClient(verify=ctx, http2=http2, timeout=httpx2.Timeout(30, read=300)) as http:
            transport = streamable_http_client(url, http_client=http)
            async with Client(transport, mode="legacy", read_timeout_seconds=timeout) as client:
                print(f"{stamp()} initialized: protocol {client.protocol_version}", flush=True)
                result = await client.call_tool("slow_count", {"steps": steps}, progress_callback=on_progress)
                texts = [getattr(c, "text", repr(c)) for c in result.content]
                print(f"{stamp()} call_tool result: isError={result.is_error} {texts}", flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("--ca", required=True, help="the server's self-signed certificate")
    parser.add_argument("--http2", action="store_true")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--tls12", metavar="OPENSSL_CIPHER", default=None,
                        help="speak TLS 1.2 with this suite only, e.g. ECDHE-ECDSA-CHACHA20-POLY1305")
    args = parser.parse_args()
    return anyio.run(run, args.url, args.ca, args.http2, args.steps, args.timeout, args.tls12)


if __name__ == "__main__":
    sys.exit(main())
