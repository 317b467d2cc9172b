"""Recording server: python MCP SDK 2.x, Streamable HTTP on 127.0.0.1, with an EventStore.

Tool `slow_count(steps)` sends, on its POST SSE stream, one progress
notification (and one log notification on the first and last step) every
`--interval` seconds, then returns a text result. After the steps listed in
`--close-at`, the tool calls `ctx.close_sse_stream()`: the SDK's own
server-initiated disconnect (2025-11-25 "SSE polling"); the client reconnects
with `GET` + `Last-Event-ID` after the priming event's `retry` and the server
replays from its event store.

A line `EVENT <step>` is printed (flushed) on stdout after each step, so a
harness can kill the process at a known point (scenario server-restart).

    python server.py --port 18080 --store dense --retry-ms 500 --close-at 2,4

Only 127.0.0.1 is ever bound.
"""

from __future__ import annotations

import argparse
import sys
import warnings

import anyio

from mcp.server.mcpserver import Context, MCPServer

from event_stores import DensePerStreamEventStore, UuidEventStore

# ctx.log is deprecated by the 2026-07-28 revision; this server speaks 2025-11-25 on purpose.
warnings.filterwarnings("ignore", message="The logging capability is deprecated")


def build(args: argparse.Namespace) -> MCPServer:
    mcp = MCPServer("sse-audit-recorder")
    close_at = {int(s) for s in args.close_at.split(",") if s.strip()}

    @mcp.tool()
    async def slow_count(ctx: Context, steps: int = 5) -> str:
        """Count to `steps`, reporting progress; may close its SSE stream mid-way."""
        for step in range(1, steps + 1):
            await ctx.report_progress(step, steps, f"step {step}/{steps}")
            if step in (1, steps):
                await ctx.log("info", f"slow_count step {step}")
            print(f"EVENT {step}", flush=True)
            if step in close_at:
                print(f"CLOSE {step}", flush=True)
                await ctx.close_sse_stream()
            await anyio.sleep(args.interval)
        return f"counted to {steps}"

    return mcp


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--store", choices=("uuid", "dense"), default="dense")
    parser.add_argument("--retry-ms", type=int, default=500, help="SSE retry sent in priming events")
    parser.add_argument("--close-at", default="", help="comma-separated steps after which the stream is closed")
    parser.add_argument("--interval", type=float, default=0.3, help="seconds between steps")
    args = parser.parse_args()

    store = UuidEventStore() if args.store == "uuid" else DensePerStreamEventStore()
    mcp = build(args)
    print(f"server: port={args.port} store={args.store} retry={args.retry_ms} close_at={args.close_at}", flush=True)
    mcp.run(
        transport="streamable-http",
        host="127.0.0.1",
        port=args.port,
        event_store=store,
        retry_interval=args.retry_ms,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
