"""Session-manager variants for the recording server (python MCP SDK 2.3.0), used only by the newer scenarios.

`server.py` installs `RecordingSessionManager` in place of the SDK's
`StreamableHTTPSessionManager` (the name `mcp.server.lowlevel.server` looks up
when it builds the Starlette app) **only** when one of its newer options is
given; the original scenarios (resume-uuid, resume-dense, server-restart) run
the unmodified SDK manager.

What it changes, each behind its own switch:

* `resurrect_unknown_sessions` (scenario resurrection-loop): a request that
  carries an `Mcp-Session-Id` the manager does not know is **not** answered 404.
  Instead a fresh `StreamableHTTPServerTransport` is created under the *same*
  session id, its server task is started exactly as the SDK starts one for a
  new session (`serve_loop`), and the request is served by it. The new session
  never saw `initialize`, so the SDK's own init gate answers every request
  except `initialize`/`ping` with -32602 "Invalid request parameters", drops
  notifications, and the (empty, new-process) event store knows no
  `Last-Event-ID`, so every resume GET is an empty `200 text/event-stream`.
  This is the "permissive default" of the reference note's session resurrection.
* `per_session_store_view` (scenario shared-store): every session's transport gets
  `store.for_session(session_id)` instead of the one shared store object, so the
  store can mint ids per session while it *looks ids up* without the session.
* `SendBufferTransport` (always, when the manager is installed): calls
  `store.mark_handed(event_id)` whenever the transport turns an `EventMessage`
  into an SSE event for a connection, i.e. hands it to the socket. Only the
  buggy `SendBufferEventStore` uses that (scenario capture-client-loss b).

Lines `RESURRECT <session id> <method> <last-event-id>` are printed (flushed) to
stdout so the server log shows every resurrection.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
from anyio.abc import TaskStatus
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from mcp.server.runner import serve_loop
from mcp.server.streamable_http import (
    LAST_EVENT_ID_HEADER,
    MCP_SESSION_ID_HEADER,
    EventMessage,
    StreamableHTTPServerTransport,
)
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

logger = logging.getLogger(__name__)


class SendBufferTransport(StreamableHTTPServerTransport):
    """Tells the store which event ids were handed to an HTTP connection (nothing else changes)."""

    def _create_event_data(self, event_message: EventMessage):  # noqa: ANN202 - SSEEvent
        mark = getattr(self._event_store, "mark_handed", None)
        if mark is not None and event_message.event_id:
            mark(event_message.event_id)
        return super()._create_event_data(event_message)


class RecordingSessionManager(StreamableHTTPSessionManager):
    resurrect_unknown_sessions: bool = False
    per_session_store_view: bool = False

    def _store_for(self, session_id: str) -> Any:
        if self.per_session_store_view and self.event_store is not None:
            return self.event_store.for_session(session_id)  # type: ignore[attr-defined]
        return self.event_store

    def _new_transport(self, session_id: str) -> StreamableHTTPServerTransport:
        return SendBufferTransport(
            mcp_session_id=session_id,
            is_json_response_enabled=self.json_response,
            event_store=self._store_for(session_id),
            security_settings=self.security_settings,
            retry_interval=self.retry_interval,
            idle_timeout=self.session_idle_timeout,
        )

    def _admit_session(self, requestor):  # noqa: ANN001, ANN202 - same signature as the SDK
        # Same as the SDK's, except for the transport class and the per-session store view.
        if self.max_sessions is not None and len(self._server_instances) >= self.max_sessions:
            return None
        from uuid import uuid4

        session_id = uuid4().hex
        http_transport = self._new_transport(session_id)
        if requestor is not None:
            self._session_owners[session_id] = requestor
        self._server_instances[session_id] = http_transport
        logger.info(f"Created new transport with session ID: {session_id}")
        return http_transport

    async def _start_session_task(self, session_id: str, http_transport: StreamableHTTPServerTransport) -> None:
        """Start the session's server task the way the SDK's `_serve_opening_request` does."""

        async def run_server(*, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
            async with http_transport.connect() as streams:
                read_stream, write_stream = streams
                task_status.started()
                try:
                    idle_scope = http_transport.idle_scope or anyio.CancelScope()
                    with idle_scope:
                        await serve_loop(
                            self.app, read_stream, write_stream,
                            lifespan_state=self._lifespan_state, session_id=session_id,
                        )
                except Exception:
                    logger.exception(f"Session {session_id} crashed")
                finally:
                    await self._discard_session(session_id, http_transport)

        assert self._task_group is not None
        await self._task_group.start(run_server)

    async def _handle_stateful_request(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.resurrect_unknown_sessions:
            request = Request(scope, receive)
            session_id = request.headers.get(MCP_SESSION_ID_HEADER)
            if session_id is not None and session_id not in self._server_instances:
                async with self._session_creation_lock:
                    if session_id not in self._server_instances:  # two requests may race for the same id
                        transport = self._new_transport(session_id)
                        self._server_instances[session_id] = transport
                        await self._start_session_task(session_id, transport)
                        print(f"RESURRECT {session_id} {request.method} "
                              f"last-event-id={request.headers.get(LAST_EVENT_ID_HEADER)!r}", flush=True)
        await super()._handle_stateful_request(scope, receive, send)


def install(*, resurrect_unknown_sessions: bool = False, per_session_store_view: bool = False) -> None:
    """Make the SDK build `RecordingSessionManager`s (call before `MCPServer.run`)."""
    import mcp.server.lowlevel.server as lowlevel_server

    RecordingSessionManager.resurrect_unknown_sessions = resurrect_unknown_sessions
    RecordingSessionManager.per_session_store_view = per_session_store_view
    lowlevel_server.StreamableHTTPSessionManager = RecordingSessionManager  # type: ignore[misc]
