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
The uuid-skip-two / uuid-evicted-buffer / uuid-ttl-expired / uuid-healthy-* / uuid-no-progress /
stale-cursor scenarios add `--store uuid-skip-two|uuid-ring|uuid-ttl` (`--ring-size`, `--ttl`),
`--log-events` for the dense store too, `--progress-values` (uneven progress values),
`--no-progress` (slow_count sends only log notifications), `--close-after-log` (close right
after the step's log has gone out) and `--break-resume-after N` (an ASGI wrapper that drops the
TCP connection of the first resumed GET after its N-th SSE event: no terminating chunk, the
client sees an incomplete chunked body).

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
    UuidRingEventStore,
    UuidSkipFirstEventStore,
    UuidSkipTwoEventStore,
    UuidTtlEventStore,
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
    "uuid-skip-two": UuidSkipTwoEventStore,  # buggy: uuid4; a replay leaves out the first two events after the cursor
    "uuid-ring": UuidRingEventStore,  # lossy: uuid4; serves only the last --ring-size events per stream
    "uuid-ttl": UuidTtlEventStore,  # lossy: uuid4; events expire --ttl seconds after they were stored
}
UUID_STORES = ("uuid", "uuid-skip-first", "uuid-drop-log", "uuid-skip-two", "uuid-ring", "uuid-ttl")
EXTRA_TOOLS = ("add", "slow_side")

# ctx.log is deprecated by the 2026-07-28 revision; this server speaks 2025-11-25 on purpose.
warnings.filterwarnings("ignore", message="The logging capability is deprecated")


def build(args: argparse.Namespace) -> MCPServer:
    mcp = MCPServer("sse-audit-recorder")
    close_at = {int(s) for s in args.close_at.split(",") if s.strip()}
    progress_values = [int(v) for v in args.progress_values.split(",") if v.strip()]

    calls = 0

    async def count(ctx: Context, steps: int, tag: str) -> str:
        nonlocal calls
        calls += 1
        call_no = calls
        suffix = f" [{tag}]" if tag else ""
        closing = close_at if (call_no == 1 or not args.close_first_only) else set()
        if args.log_calls:
            print(f"TOOL START call={call_no} request_id={ctx.request_id} steps={steps} tag={tag!r}", flush=True)
        values = progress_values or list(range(1, steps + 1))
        if progress_values:  # newer scenario uuid-healthy-uneven: these values, total = the last one
            steps = len(values)
        for step in range(1, steps + 1):
            if not args.no_progress:
                await ctx.report_progress(values[step - 1], values[-1], f"step {step}/{steps}{suffix}")
            if args.close_after_progress and step in closing:
                # Newer scenario uuid-drops-log: let the progress notification reach the wire (an event
                # emitted just before close_sse_stream() would otherwise only come with the replay), then
                # close, so the client's Last-Event-ID is this progress event and the step's log follows it.
                await anyio.sleep(args.close_pause)
                print(f"CLOSE {step} (after progress)", flush=True)
                await ctx.close_sse_stream()
            if step in (1, steps) or args.log_every_step:
                await ctx.log("info", f"slow_count step {step}{suffix}")
            if args.close_after_log and step in closing:
                # Newer scenario uuid-no-progress: the step's log reaches the wire, then the close.
                await anyio.sleep(args.close_pause)
                print(f"CLOSE {step} (after log)", flush=True)
                await ctx.close_sse_stream()
            print(f"EVENT {step}", flush=True)
            if step in closing and not args.close_after_progress and not args.close_after_log:
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
    parser.add_argument("--close-after-log", action="store_true",
                        help="close at the --close-at steps right after the step's log notification "
                             "(after --close-pause s); with --no-progress --log-every-step")
    parser.add_argument("--progress-values", default="",
                        help="comma-separated progress values slow_count reports, one per step (total = the "
                             "last); replaces 1..steps")
    parser.add_argument("--no-progress", action="store_true",
                        help="slow_count sends no progress notifications (only its log notifications)")
    parser.add_argument("--ring-size", type=int, default=2, help="--store uuid-ring: events kept per stream")
    parser.add_argument("--ttl", type=float, default=0.5, help="--store uuid-ttl: seconds an event is kept")
    parser.add_argument("--break-resume-after", type=int, default=0, metavar="N",
                        help="drop the TCP connection of the first resumed GET (Last-Event-ID) after its N-th "
                             "SSE event (0 = never)")
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
    elif args.store == "uuid-ring":
        store = UuidRingEventStore(ring=args.ring_size, log_events=args.log_events)
    elif args.store == "uuid-ttl":
        store = UuidTtlEventStore(ttl=args.ttl, log_events=args.log_events)
    elif args.store in UUID_STORES and args.log_events:
        store = STORES[args.store](log_events=True)
    elif args.store == "dense" and args.log_events:
        store = DensePerStreamEventStore(log_events=True)
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
          + (f" close-after-progress(pause={args.close_pause:g})" if args.close_after_progress else "")
          + (f" close-after-log(pause={args.close_pause:g})" if args.close_after_log else "")
          + (f" progress-values={args.progress_values}" if args.progress_values else "")
          + (" no-progress" if args.no_progress else "")
          + (f" ring-size={args.ring_size}" if args.store == "uuid-ring" else "")
          + (f" ttl={args.ttl:g}" if args.store == "uuid-ttl" else "")
          + (f" break-resume-after={args.break_resume_after}" if args.break_resume_after else ""), flush=True)
    if args.break_resume_after:
        run_breaking(mcp, store, args)
        return 0
    mcp.run(
        transport="streamable-http",
        host="127.0.0.1",
        port=args.port,
        event_store=store,
        retry_interval=args.retry_ms,
    )
    return 0


class _Break(Exception):
    """Raised into the SDK's SSE writer by `BreakResumedStream` (the SDK logs and swallows it)."""


class BreakResumedStream:
    """ASGI wrapper (scenario stale-cursor): the first resumed GET (one with `Last-Event-ID`) gets its
    first `after_events` SSE events, then its TCP connection is dropped without the terminating chunk.

    After the N-th event has been handed to uvicorn, the wrapper makes every further `send` raise
    (the SDK's replay response fails and is logged), then raises itself once the app returns:
    uvicorn, whose response has started, closes the transport (`Exception in ASGI application`),
    which flushes the bytes already written and sends a FIN in the middle of the chunked body. Every
    other request passes through untouched. Prints `BREAK ...` lines.
    """

    def __init__(self, app, after_events: int, count: int = 1) -> None:  # noqa: ANN001 - an ASGI app
        self.app = app
        self.after_events = after_events
        self.count = count
        self.broken = 0

    async def __call__(self, scope, receive, send) -> None:  # noqa: ANN001 - ASGI
        headers = dict(scope.get("headers") or ()) if scope["type"] == "http" else {}
        last_event_id = headers.get(b"last-event-id")
        if scope["type"] != "http" or scope["method"] != "GET" or last_event_id is None or self.broken >= self.count:
            await self.app(scope, receive, send)
            return
        self.broken += 1
        label = f"resumed GET #{self.broken} last-event-id={last_event_id.decode(errors='replace')}"
        ids: list[str] = []
        state = {"broke": False}

        async def breaking_send(message) -> None:  # noqa: ANN001
            if state["broke"]:
                raise _Break(label)
            await send(message)
            body = (message.get("body") or b"") if message["type"] == "http.response.body" else b""
            if body.strip() and not body.lstrip().startswith(b":"):  # an SSE event, not a comment
                event_id = next((ln[3:].strip().decode() for ln in body.splitlines() if ln.startswith(b"id:")), "")
                ids.append(event_id or "<no id>")
                if len(ids) >= self.after_events:
                    state["broke"] = True
                    print(f"BREAK {label}: dropping the connection after {len(ids)} events, ids {ids}", flush=True)
                    raise _Break(label)

        await self.app(scope, receive, breaking_send)
        if state["broke"]:
            raise RuntimeError(f"recording: drop the connection of the {label} (after events {ids})")
        print(f"BREAK {label}: ended after {len(ids)} events {ids}, before the break point", flush=True)


def run_breaking(mcp: MCPServer, store, args: argparse.Namespace) -> None:  # noqa: ANN001 - an EventStore
    """`mcp.run(transport="streamable-http", ...)` with `BreakResumedStream` around the app (same uvicorn config)."""
    import uvicorn

    app = mcp.streamable_http_app(event_store=store, retry_interval=args.retry_ms, host="127.0.0.1")
    config = uvicorn.Config(BreakResumedStream(app, args.break_resume_after), host="127.0.0.1", port=args.port,
                            log_level=mcp.settings.log_level.lower())
    anyio.run(uvicorn.Server(config).serve)


if __name__ == "__main__":
    sys.exit(main())
