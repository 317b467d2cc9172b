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
`--resurrect-unknown-sessions` (session_managers.py). The replica-failover and
shared-store-concurrent scenarios add `--extra-tools add,slow_side` (two more tools,
registered after slow_count), `--store session-log` (a naive per-replica store that
"starts over" on an unknown Last-Event-ID), `--replica-name` and `--shared-sessions DIR`
(session validity shared by several server processes; session_managers.py).
The uuid-* scenarios add `--store uuid-skip-first|uuid-drop-log` (uuid4 stores whose replay
really loses an event; event_stores.py), `--log-events` (a `STORE`/`REPLAY` line per stored /
replayed event of the uuid stores: the ground truth of what the server emitted),
`--log-every-step` (slow_count logs at every step, not only the first and last) and
`--close-after-progress` (close the stream right after the step's progress notification has
gone out, before that step's log; `--close-pause` seconds in between).
The TypeScript-client scenarios of ts/record_ts.py (ts-client-*) run this server too; they add
`--store dense-skip-second` (dense per-stream ids; the second replay of the process leaves out
the first event after the cursor, the first replay is correct; event_stores.py).

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
    DenseSkipSecondReplayEventStore,
    SendBufferEventStore,
    SessionCounterEventStore,
    SessionLogEventStore,
    StreamKeyedSharedEventStore,
    UuidDropLogEventStore,
    UuidEventStore,
    UuidSkipFirstEventStore,
)

STORES = {
    "uuid": UuidEventStore,
    "dense": DensePerStreamEventStore,
    "counter": SessionCounterEventStore,  # one counter per process, correct replay
    "send-buffer": SendBufferEventStore,  # buggy: resumes after the last event handed to a connection
    "shared-stream": StreamKeyedSharedEventStore,  # buggy: all sessions, looked up without the session
    "session-log": SessionLogEventStore,  # buggy: per-session log, an unknown id replays the whole session
    "uuid-skip-first": UuidSkipFirstEventStore,  # buggy: uuid4; a replay leaves out the first event after the cursor
    "uuid-drop-log": UuidDropLogEventStore,  # buggy: uuid4; a replay leaves out the logs before the next progress
    "dense-skip-second": DenseSkipSecondReplayEventStore,  # buggy: dense ids; the 2nd replay leaves out one event
}
UUID_STORES = ("uuid", "uuid-skip-first", "uuid-drop-log")
EXTRA_TOOLS = ("add", "slow_side")

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
            if args.close_after_progress and step in closing:
                # Newer scenario uuid-drops-log: let the progress notification reach the wire (an event
                # emitted just before close_sse_stream() would otherwise only come with the replay), then
                # close, so the client's Last-Event-ID is this progress event and the step's log follows it.
                await anyio.sleep(args.close_pause)
                print(f"CLOSE {step} (after progress)", flush=True)
                await ctx.close_sse_stream()
            if step in (1, steps) or args.log_every_step:
                await ctx.log("info", f"slow_count step {step}{suffix}")
            print(f"EVENT {step}", flush=True)
            if step in closing and not args.close_after_progress:
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

    # Newer scenarios only (replica-failover, shared-store-concurrent): more tools, after slow_count.
    extra = [t.strip() for t in args.extra_tools.split(",") if t.strip()]
    if "add" in extra:
        @mcp.tool()
        async def add(ctx: Context, a: int, b: int) -> str:
            """Add two integers at once (a fast tool)."""
            if args.log_calls:
                print(f"TOOL add request_id={ctx.request_id} a={a} b={b} -> sum={a + b}", flush=True)
            return f"sum={a + b}"

    if "slow_side" in extra:
        @mcp.tool()
        async def slow_side(ctx: Context, steps: int = 3) -> str:
            """Work for `steps` intervals, reporting progress; never closes its SSE stream."""
            if args.log_calls:
                print(f"TOOL START slow_side request_id={ctx.request_id} steps={steps}", flush=True)
            for step in range(1, steps + 1):
                await ctx.report_progress(step, steps, f"slow_side step {step}/{steps}")
                if step in (1, steps):
                    await ctx.log("info", f"slow_side step {step}")
                print(f"SIDE EVENT {step}", flush=True)
                await anyio.sleep(args.interval)
            if args.log_calls:
                print(f"TOOL END slow_side request_id={ctx.request_id}", flush=True)
            return "slow_side done"

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
    parser.add_argument("--log-events", action="store_true",
                        help="uuid stores: print a STORE line per stored event and a REPLAY line per replay")
    parser.add_argument("--log-every-step", action="store_true",
                        help="slow_count sends a log notification at every step (default: first and last only)")
    parser.add_argument("--close-after-progress", action="store_true",
                        help="close at the --close-at steps right after the step's progress notification "
                             "(after --close-pause s), before the step's log (default: after the step)")
    parser.add_argument("--close-pause", type=float, default=0.1,
                        help="with --close-after-progress: seconds between the progress notification and the close")
    parser.add_argument("--resurrect-unknown-sessions", action="store_true",
                        help="BUGGY: serve an unknown Mcp-Session-Id with a fresh, uninitialized session "
                             "under the same id instead of 404 (session_managers.py)")
    parser.add_argument("--extra-tools", default="",
                        help=f"comma-separated tools to register after slow_count, of {list(EXTRA_TOOLS)}")
    parser.add_argument("--replica-name", default="", help="name printed in the log (and by --store session-log)")
    parser.add_argument("--shared-sessions", default=None, metavar="DIR",
                        help="session validity shared through DIR by several server processes (replicas): "
                             "publish new sessions there, serve published ids of other replicas as "
                             "initialized sessions (session_managers.py)")
    args = parser.parse_args()
    unknown_tools = [t for t in args.extra_tools.split(",") if t.strip() and t.strip() not in EXTRA_TOOLS]
    if unknown_tools:
        parser.error(f"unknown --extra-tools {unknown_tools}")

    if args.store == "session-log":
        store = SessionLogEventStore(args.replica_name)
    elif args.store in UUID_STORES and args.log_events:
        store = STORES[args.store](log_events=True)
    else:
        store = STORES[args.store]()
    shared_view = args.store in ("shared-stream", "session-log")
    if args.resurrect_unknown_sessions or shared_view or args.store == "send-buffer" or args.shared_sessions:
        import session_managers

        session_managers.install(resurrect_unknown_sessions=args.resurrect_unknown_sessions,
                                 per_session_store_view=shared_view,
                                 shared_sessions_dir=args.shared_sessions, replica=args.replica_name)
    mcp = build(args)
    print(f"server: port={args.port} store={args.store} retry={args.retry_ms} close_at={args.close_at}"
          + (" resurrect-unknown-sessions" if args.resurrect_unknown_sessions else "")
          + (" close-first-only" if args.close_first_only else "")
          + (f" extra-tools={args.extra_tools}" if args.extra_tools else "")
          + (f" replica={args.replica_name}" if args.replica_name else "")
          + (f" shared-sessions={args.shared_sessions}" if args.shared_sessions else "")
          + (" log-events" if args.log_events else "")
          + (" log-every-step" if args.log_every_step else "")
          + (f" close-after-progress(pause={args.close_pause:g})" if args.close_after_progress else ""), flush=True)
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
