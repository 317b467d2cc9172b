"""Recording client: python MCP SDK 2.x `Client`, initialize + one `tools/call`, then exit.

`mode="legacy"` forces the 2025-11-25 initialize handshake (sessions,
`Mcp-Session-Id`, resumable SSE); the default `mode="auto"` would probe
`server/discover` and talk the stateless 2026-07-28 protocol, which has no
resumption at all. The whole run is bounded by `--timeout` seconds.

    python client.py http://127.0.0.1:18081/mcp --steps 5
"""

from __future__ import annotations

import argparse
import sys
import time

import anyio

from mcp import Client


def stamp() -> str:
    return time.strftime("%H:%M:%S", time.localtime()) + f".{int(time.time() * 1000) % 1000:03d}"


async def run(url: str, steps: int, timeout: float) -> int:
    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        print(f"{stamp()} progress {progress}/{total} {message}", flush=True)

    async def on_log(params) -> None:  # noqa: ANN001 - mcp_types.LoggingMessageNotificationParams
        print(f"{stamp()} log {params.level}: {params.data}", flush=True)

    with anyio.fail_after(timeout):
        async with Client(url, mode="legacy", read_timeout_seconds=timeout, logging_callback=on_log) as client:
            print(f"{stamp()} initialized: protocol {client.protocol_version}", flush=True)
            try:
                result = await client.call_tool("slow_count", {"steps": steps}, progress_callback=on_progress)
            except Exception as exc:  # report what the SDK surfaced, then leave (DELETE is sent on exit)
                print(f"{stamp()} call_tool failed: {type(exc).__name__}: {exc}", flush=True)
                return 1
            texts = [getattr(c, "text", repr(c)) for c in result.content]
            print(f"{stamp()} result: isError={result.is_error} {texts}", flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=30.0)
    args = parser.parse_args()
    try:
        return anyio.run(run, args.url, args.steps, args.timeout)
    except Exception as exc:
        leaves = exc.exceptions if isinstance(exc, BaseExceptionGroup) else [exc]
        for leaf in leaves:
            print(f"{stamp()} client error: {type(leaf).__name__}: {leaf}", flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
