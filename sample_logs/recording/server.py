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

Newer scenarios add (all off by default, so the original scenarios run unchanged):
`--tagged` (slow_count gets a `tag` argument echoed in its messages and result),
`--log-calls` (`TOOL START/END` lines per call), `--close-first-only`,
`--store counter|send-buffer|shared-stream` (event_stores.py) and
`--resurrect-unknown-sessions` (session_managers.py).

Only 127.0.0.1 is ever bound.
"""

from __future__ import annotations

import argparse
import sys
import warnings

import anyio

from mcp.server.mcpserver import Context, MCPServer

from event_stores import (
    DensePerStreamEventStore,
    SendBufferEventStore,
    SessionCounterEventStore,
    StreamKeyedSharedEventStore,
    UuidEventStore,
)

STORES = {
    "uuid": UuidEventStore,
    "dense": DensePerStreamEventStore,
    "counter": SessionCounterEventStore,  # one counter per process, correct replay
    "send-buffer": SendBufferEventStore,  # buggy: resumes after the last event handed to a connection
    "shared-stream": StreamKeyedSharedEventStore,  # buggy: all sessions, looked up without the session
}

# ctx.log is deprecated by the 2026-07-28 revision; this server speaks 2025-11-25 on purpose.
warnings.filterwarnings("ignore", message="The logging capability is deprecated")


def build(args: argparse.Namespace) -> MCPServer:
    mcp = MCPServer("sse-audit-recorder")
    close_at = {int(s) for s in args.close_at.split(",") if s.strip()}

    calls = 0

    async def count(ctx: Context, steps: int, tag: str) -> str:
        nonlocal calls
        calls += 1
        call_no = calls
        suffix = f" [{tag}]" if tag else ""
        closing = close_at if (call_no == 1 or not args.close_first_only) else set()
        if args.log_calls:
            print(f"TOOL START call={call_no} request_id={ctx.request_id} steps={steps} tag={tag!r}", flush=True)
        for step in range(1, steps + 1):
            await ctx.report_progress(step, steps, f"step {step}/{steps}{suffix}")
            if step in (1, steps):
                await ctx.log("info", f"slow_count step {step}{suffix}")
            print(f"EVENT {step}", flush=True)
            if step in closing:
                print(f"CLOSE {step}", flush=True)
                await ctx.close_sse_stream()
            await anyio.sleep(args.interval)
        if args.log_calls:
            print(f"TOOL END call={call_no} request_id={ctx.request_id} tag={tag!r}", flush=True)
        return f"counted to {steps}{suffix}"

    if args.tagged:
        # Newer scenarios only (the original ones keep the tool schema they were recorded with).
        @mcp.tool()
        async def slow_count(ctx: Context, steps: int = 5, tag: str = "") -> str:
            """Count to `steps`, reporting progress; may close its SSE stream mid-way. `tag` is echoed in every message."""
            return await count(ctx, steps, tag)
    else:
        @mcp.tool()
        async def slow_count(ctx: Context, steps: int = 5) -> str:
            """Count to `steps`, reporting progress; may close its SSE stream mid-way."""
            return await count(ctx, steps, "")

    return mcp


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--store", choices=tuple(STORES), default="dense")
    parser.add_argument("--retry-ms", type=int, default=500, help="SSE retry sent in priming events")
    parser.add_argument("--close-at", default="", help="comma-separated steps after which the stream is closed")
    parser.add_argument("--interval", type=float, default=0.3, help="seconds between steps")
    parser.add_argument("--close-first-only", action="store_true",
                        help="apply --close-at only to the first slow_count call of the process")
    parser.add_argument("--tagged", action="store_true",
                        help="slow_count takes a `tag` argument echoed in its progress/log messages and result")
    parser.add_argument("--log-calls", action="store_true", help="print TOOL START/END lines per tool call")
    parser.add_argument("--resurrect-unknown-sessions", action="store_true",
                        help="BUGGY: serve an unknown Mcp-Session-Id with a fresh, uninitialized session "
                             "under the same id instead of 404 (session_managers.py)")
    args = parser.parse_args()

    store = STORES[args.store]()
    shared_view = args.store == "shared-stream"
    if args.resurrect_unknown_sessions or shared_view or args.store == "send-buffer":
        import session_managers

        session_managers.install(resurrect_unknown_sessions=args.resurrect_unknown_sessions,
                                 per_session_store_view=shared_view)
    mcp = build(args)
    print(f"server: port={args.port} store={args.store} retry={args.retry_ms} close_at={args.close_at}"
          + (" resurrect-unknown-sessions" if args.resurrect_unknown_sessions else "")
          + (" close-first-only" if args.close_first_only else ""), flush=True)
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
