"""Recording client: python MCP SDK 2.x `Client`, initialize + one `tools/call`, then exit.

`mode="legacy"` forces the 2025-11-25 initialize handshake (sessions,
`Mcp-Session-Id`, resumable SSE); the default `mode="auto"` would probe
`server/discover` and talk the stateless 2026-07-28 protocol, which has no
resumption at all. The whole run is bounded by `--timeout` seconds.

    python client.py http://127.0.0.1:18081/mcp --steps 5

Options of the newer scenarios (off by default): `--tag` (slow_count's `tag`),
`--sessions N` (N sessions one after the other, tags `<tag>-1` ...), `--call-timeout`,
`--max-reconnect N` (sets `mcp.client.streamable_http.MAX_RECONNECTION_ATTEMPTS`; note
that 0 also means the standalone GET stream is never opened), `--reissue` (call again
with the same arguments after a failure), `--follow-up` / `--follow-up-pause`
(`tools/list` + another `tools/call` in the same session after a failure).

Options of replica-failover and shared-store-concurrent (off by default):
`--pre STEP` (repeatable; run after initialize, before the slow_count call: `sleep:S`,
`ping`, or `call:TOOL:JSON-ARGUMENTS`), and `--pair TOOL` (two sessions in one process,
concurrently: session A calls TOOL with `{"steps": --pair-steps}`, session B calls
slow_count `--stagger` s after A sent its call; both stay open until both calls are over).
Every result the application gets is printed, with its text content and structured content.

`--app-log` (the uuid-skip-*, uuid-evicted-buffer, uuid-ttl-expired, uuid-healthy-*,
uuid-no-progress and stale-cursor scenarios): what the application received for the call, in
order, each line prefixed `APP`: `APP call slow_count {...} start`, `APP progress #k value=…
total=… message=…` (every progress callback, duplicates included), `APP log #k level=… data=…`,
and at the end `APP result …` or `APP error …`, then one `APP summary` line: the progress
values and log data in the order the application got them, and the outcome.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import anyio

from mcp import Client


def stamp() -> str:
    return time.strftime("%H:%M:%S", time.localtime()) + f".{int(time.time() * 1000) % 1000:03d}"


async def run(url: str, steps: int, timeout: float, opts: argparse.Namespace | None = None) -> int:
    """One session: initialize, call slow_count, exit (plus the optional follow-ups of the newer scenarios)."""
    tag = getattr(opts, "tag", None)
    call_timeout = getattr(opts, "call_timeout", None)

    app_log = bool(getattr(opts, "app_log", False))
    got_progress: list[float] = []
    got_logs: list[str] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        print(f"{stamp()} progress {progress}/{total} {message}", flush=True)
        if app_log:
            got_progress.append(progress)
            print(f"{stamp()} APP progress #{len(got_progress)} value={progress:g} total={total} "
                  f"message={message!r}", flush=True)

    async def on_log(params) -> None:  # noqa: ANN001 - mcp_types.LoggingMessageNotificationParams
        print(f"{stamp()} log {params.level}: {params.data}", flush=True)
        if app_log:
            got_logs.append(str(params.data))
            print(f"{stamp()} APP log #{len(got_logs)} level={params.level} data={params.data!r}", flush=True)

    def app_summary(outcome: str) -> None:
        if app_log:
            print(f"{stamp()} APP summary: progress={[f'{v:g}' for v in got_progress]} logs={got_logs} "
                  f"outcome={outcome}", flush=True)

    arguments: dict = {"steps": steps}
    if tag:
        arguments["tag"] = tag

    async def call(client: Client, what: str) -> bool:
        if app_log:
            print(f"{stamp()} APP call slow_count {json.dumps(arguments)} start", flush=True)
        try:
            result = await client.call_tool("slow_count", arguments, read_timeout_seconds=call_timeout,
                                            progress_callback=on_progress)
        except Exception as exc:  # report what the SDK surfaced
            print(f"{stamp()} {what} failed: {type(exc).__name__}: {exc}", flush=True)
            if app_log:
                print(f"{stamp()} APP error {type(exc).__name__}: {exc}", flush=True)
                app_summary(f"error {type(exc).__name__}: {exc}")
            return False
        texts = [getattr(c, "text", repr(c)) for c in result.content]
        print(f"{stamp()} {what} result: isError={result.is_error} {texts}", flush=True)
        if app_log:
            print(f"{stamp()} APP result {describe(result)}", flush=True)
            app_summary(f"result isError={result.is_error} {texts}")
        return True

    with anyio.fail_after(timeout):
        async with Client(url, mode="legacy", read_timeout_seconds=timeout, logging_callback=on_log) as client:
            print(f"{stamp()} initialized: protocol {client.protocol_version} session "
                  f"{getattr(client.session, 'session_id', None) or ''}".rstrip(), flush=True)
            for step in getattr(opts, "pre", None) or ():
                await pre_step(client, step, on_progress)
            if getattr(opts, "pre", None):
                # Show what the application got for the main call in full (text and structured content).
                try:
                    result = await client.call_tool("slow_count", arguments, read_timeout_seconds=call_timeout,
                                                    progress_callback=on_progress)
                except Exception as exc:
                    print(f"{stamp()} call_tool slow_count {arguments} failed: {type(exc).__name__}: {exc}",
                          flush=True)
                    return 1
                print(f"{stamp()} call_tool slow_count {json.dumps(arguments)} -> {describe(result)}", flush=True)
                return 0
            if await call(client, "call_tool"):
                return 0
            if opts is not None and opts.reissue:
                # The application retries the failed call: same tool, same arguments, new request id.
                print(f"{stamp()} re-issuing the same tools/call {arguments}", flush=True)
                return 0 if await call(client, "re-issued call_tool") else 1
            if opts is not None and opts.follow_up:
                # The application goes on using the session after the failed call (after a pause, so the
                # capture shows what the transport keeps doing for the abandoned request meanwhile).
                await anyio.sleep(opts.follow_up_pause)
                try:
                    tools = await client.list_tools()
                    print(f"{stamp()} follow-up list_tools: {[t.name for t in tools.tools]}", flush=True)
                except Exception as exc:
                    print(f"{stamp()} follow-up list_tools failed: {type(exc).__name__}: {exc}", flush=True)
                await call(client, "follow-up call_tool")
            return 1  # DELETE is sent on exit


def describe(result) -> str:  # noqa: ANN001 - mcp_types.CallToolResult
    texts = [getattr(c, "text", repr(c)) for c in result.content]
    return f"isError={result.is_error} content={texts} structuredContent={json.dumps(result.structured_content)}"


async def pre_step(client: Client, step: str, on_progress) -> None:  # noqa: ANN001
    """One `--pre` step: `sleep:S`, `ping`, or `call:TOOL:JSON-ARGUMENTS`."""
    kind, _, rest = step.partition(":")
    if kind == "sleep":
        await anyio.sleep(float(rest))
    elif kind == "ping":
        await client.send_ping()
        print(f"{stamp()} ping: ok", flush=True)
    elif kind == "call":
        tool, _, raw = rest.partition(":")
        arguments = json.loads(raw) if raw else {}
        result = await client.call_tool(tool, arguments, progress_callback=on_progress)
        print(f"{stamp()} call_tool {tool} {json.dumps(arguments)} -> {describe(result)}", flush=True)
    else:
        raise ValueError(f"unknown --pre step {step!r}")


async def run_pair(url: str, opts: argparse.Namespace) -> int:
    """Two sessions at once: A calls `--pair` TOOL, B calls slow_count `--stagger` s after A sent its call."""
    a_calling = anyio.Event()
    finished = {"A": anyio.Event(), "B": anyio.Event()}
    outcome: dict[str, bool] = {}

    async def session(label: str, tool: str, arguments: dict) -> None:
        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            print(f"{stamp()} [{label}] progress {progress}/{total} {message}", flush=True)

        async def on_log(params) -> None:  # noqa: ANN001
            print(f"{stamp()} [{label}] log {params.level}: {params.data}", flush=True)

        try:
            async with Client(url, mode="legacy", read_timeout_seconds=opts.timeout, logging_callback=on_log) as client:
                print(f"{stamp()} [{label}] initialized: protocol {client.protocol_version} session "
                      f"{getattr(client.session, 'session_id', None) or ''}".rstrip(), flush=True)
                if label == "A":
                    a_calling.set()
                else:
                    await a_calling.wait()
                    await anyio.sleep(opts.stagger)
                print(f"{stamp()} [{label}] calling {tool} {json.dumps(arguments)}", flush=True)
                try:
                    result = await client.call_tool(tool, arguments, read_timeout_seconds=opts.call_timeout,
                                                    progress_callback=on_progress)
                    print(f"{stamp()} [{label}] call_tool {tool} {json.dumps(arguments)} -> {describe(result)}",
                          flush=True)
                    outcome[label] = True
                except Exception as exc:
                    print(f"{stamp()} [{label}] call_tool {tool} failed: {type(exc).__name__}: {exc}", flush=True)
                    outcome[label] = False
                finished[label].set()
                for event in finished.values():  # keep the session open until both calls are over
                    await event.wait()
        finally:
            finished[label].set()
            a_calling.set()

    with anyio.fail_after(opts.timeout):
        async with anyio.create_task_group() as tg:
            tg.start_soon(session, "A", opts.pair, {"steps": opts.pair_steps})
            tg.start_soon(session, "B", "slow_count", {"steps": opts.steps})
    return 0 if all(outcome.get(k) for k in ("A", "B")) else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=30.0)
    # Newer scenarios (all off by default: the original scenarios run exactly as before).
    parser.add_argument("--tag", default=None, help="pass slow_count(tag=...) (server --tagged)")
    parser.add_argument("--sessions", type=int, default=1,
                        help="run this many sessions one after the other; tag '<tag>-<n>' for session n")
    parser.add_argument("--call-timeout", type=float, default=None, help="read timeout of the tools/call")
    parser.add_argument("--max-reconnect", type=int, default=None,
                        help="set mcp.client.streamable_http.MAX_RECONNECTION_ATTEMPTS (mcp 2.3.0 has no API for it)")
    parser.add_argument("--reissue", action="store_true", help="if the call fails, call again with the same arguments")
    parser.add_argument("--follow-up", action="store_true",
                        help="if the call fails, go on with tools/list and another tools/call in the same session")
    parser.add_argument("--follow-up-pause", type=float, default=0.0, help="seconds to wait before the follow-ups")
    parser.add_argument("--app-log", action="store_true",
                        help="print what the application received for the call (APP lines and a summary)")
    parser.add_argument("--pre", action="append", default=[], metavar="STEP",
                        help="after initialize, before the slow_count call: sleep:S | ping | call:TOOL:JSON")
    parser.add_argument("--pair", default=None, metavar="TOOL",
                        help="two concurrent sessions: A calls TOOL, B calls slow_count (--stagger s later)")
    parser.add_argument("--pair-steps", type=int, default=3, help="steps argument of the --pair tool")
    parser.add_argument("--stagger", type=float, default=0.5, help="seconds between A's call and B's call")
    args = parser.parse_args()
    if args.pair:
        try:
            return anyio.run(run_pair, args.url, args)
        except Exception as exc:
            leaves = exc.exceptions if isinstance(exc, BaseExceptionGroup) else [exc]
            for leaf in leaves:
                print(f"{stamp()} client error: {type(leaf).__name__}: {leaf}", flush=True)
            return 2
    if args.max_reconnect is not None:
        import mcp.client.streamable_http as client_transport

        print(f"{stamp()} MAX_RECONNECTION_ATTEMPTS {client_transport.MAX_RECONNECTION_ATTEMPTS} -> "
              f"{args.max_reconnect}", flush=True)
        client_transport.MAX_RECONNECTION_ATTEMPTS = args.max_reconnect
    base_tag = args.tag
    code = 0
    for n in range(1, args.sessions + 1):
        if args.sessions > 1:
            args.tag = f"{base_tag or 'session'}-{n}"
            print(f"{stamp()} --- session {n} (tag {args.tag})", flush=True)
        try:
            code = max(code, anyio.run(run, args.url, args.steps, args.timeout, args))
        except Exception as exc:
            leaves = exc.exceptions if isinstance(exc, BaseExceptionGroup) else [exc]
            for leaf in leaves:
                print(f"{stamp()} client error: {type(leaf).__name__}: {leaf}", flush=True)
            code = 2
    return code


if __name__ == "__main__":
    sys.exit(main())
