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

* `shared_sessions_dir` (scenario replica-failover): session validity lives outside
  the process, as when several replicas keep their sessions in Redis. The replica
  that answers an `initialize` **publishes** the new session id with the
  `initialize` params (one JSON file per session in the directory, written when the
  response status leaves the server, before any byte of the body). A request that
  carries an id this replica does not know but the directory does is served by a
  fresh transport under that id whose connection is **already initialized** (client
  params and protocol version from the published `initialize`); it gets its own
  (empty) event-store view. A DELETE answered here removes the entry. Unknown to
  both: 404 as usual.

Lines `RESURRECT <session id> <method> <last-event-id>` are printed (flushed) to
stdout so the server log shows every resurrection; `SESSION PUBLISH|ADOPT|DELETE`
lines every use of the shared session directory.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskStatus
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from mcp.server.connection import Connection
from mcp.server.runner import ServerRunner, serve_connection, serve_loop
from mcp.server.streamable_http import (
    LAST_EVENT_ID_HEADER,
    MCP_SESSION_ID_HEADER,
    EventMessage,
    StreamableHTTPServerTransport,
)
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher

logger = logging.getLogger(__name__)


class SendBufferTransport(StreamableHTTPServerTransport):
    """Tells the store which event ids were handed to an HTTP connection (nothing else changes)."""

    def _create_event_data(self, event_message: EventMessage):  # noqa: ANN202 - SSEEvent
        mark = getattr(self._event_store, "mark_handed", None)
        if mark is not None and event_message.event_id:
            mark(event_message.event_id)
        return super()._create_event_data(event_message)


class SharedSessionDirectory:
    """Session validity shared by replicas: one JSON file per published session id (a stand-in for Redis)."""

    def __init__(self, path: str, replica: str) -> None:
        self.path = Path(path)
        self.replica = replica
        self.path.mkdir(parents=True, exist_ok=True)

    def _file(self, session_id: str) -> Path:
        if not session_id.isalnum():  # uuid4().hex; never build a path from anything else
            raise ValueError(f"unexpected session id {session_id[:64]!r}")
        return self.path / f"{session_id}.json"

    def publish(self, session_id: str, init_params: dict[str, Any]) -> None:
        record = {"session_id": session_id, "initialize_params": init_params,
                  "published_by": self.replica, "published_at": time.time()}
        tmp = self.path / f".{session_id}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(record))
        tmp.replace(self._file(session_id))  # atomic: another replica sees all of it or nothing
        print(f"SESSION PUBLISH {session_id} by={self.replica}", flush=True)

    def lookup(self, session_id: str) -> dict[str, Any] | None:
        try:
            return json.loads(self._file(session_id).read_text())
        except (OSError, ValueError):
            return None

    def delete(self, session_id: str) -> None:
        try:
            self._file(session_id).unlink()
            print(f"SESSION DELETE {session_id} by={self.replica}", flush=True)
        except (OSError, ValueError):
            pass


class RecordingSessionManager(StreamableHTTPSessionManager):
    resurrect_unknown_sessions: bool = False
    per_session_store_view: bool = False
    shared_sessions: SharedSessionDirectory | None = None

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

    async def _start_session_task(self, session_id: str, http_transport: StreamableHTTPServerTransport,
                                  adopt_params: dict[str, Any] | None = None) -> None:
        """Start the session's server task the way the SDK's `_serve_opening_request` does.

        With `adopt_params` (the published `initialize` params of a session another replica
        opened), the connection starts out initialized, as `serve_loop`'s would after the
        handshake: same dispatcher recipe, `client_params`/`protocol_version` committed the
        way `ServerRunner._on_request` commits them, `initialized` set.
        """

        async def run_server(*, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
            async with http_transport.connect() as streams:
                read_stream, write_stream = streams
                task_status.started()
                try:
                    idle_scope = http_transport.idle_scope or anyio.CancelScope()
                    with idle_scope:
                        if adopt_params is None:
                            await serve_loop(
                                self.app, read_stream, write_stream,
                                lifespan_state=self._lifespan_state, session_id=session_id,
                            )
                        else:
                            dispatcher: JSONRPCDispatcher[Any] = JSONRPCDispatcher(
                                read_stream, write_stream, inline_methods=frozenset({"initialize"}))
                            connection = Connection.for_loop(dispatcher, session_id=session_id)
                            connection.client_params, connection.protocol_version = (
                                ServerRunner._negotiate_initialize(adopt_params))
                            connection.initialized.set()
                            await serve_connection(self.app, dispatcher, connection=connection,
                                                   lifespan_state=self._lifespan_state)
                except Exception:
                    logger.exception(f"Session {session_id} crashed")
                finally:
                    await self._discard_session(session_id, http_transport)

        assert self._task_group is not None
        await self._task_group.start(run_server)

    async def _serve_opening_request(self, http_transport: StreamableHTTPServerTransport, scope: Scope,
                                     receive: Receive, send: Send) -> None:
        if self.shared_sessions is None:
            await super()._serve_opening_request(http_transport, scope, receive, send)
            return
        # Read the opening request's body first (to publish its `initialize` params), then hand the
        # SDK the same body again.
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay_receive() -> dict[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        session_id = http_transport.mcp_session_id
        published = False

        async def publishing_send(message: dict[str, Any]) -> None:
            nonlocal published
            if (message["type"] == "http.response.start" and message["status"] < 400 and not published
                    and session_id is not None):
                published = True
                try:
                    request = json.loads(body)
                except ValueError:
                    request = None
                if isinstance(request, dict) and request.get("method") == "initialize":
                    self.shared_sessions.publish(session_id, request.get("params") or {})
            await send(message)

        await super()._serve_opening_request(http_transport, scope, replay_receive, publishing_send)

    async def _handle_stateful_request(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.shared_sessions is not None:
            request = Request(scope, receive)
            session_id = request.headers.get(MCP_SESSION_ID_HEADER)
            if session_id is not None and session_id not in self._server_instances:
                record = self.shared_sessions.lookup(session_id)
                if record is not None:
                    async with self._session_creation_lock:
                        if session_id not in self._server_instances:
                            transport = self._new_transport(session_id)
                            self._server_instances[session_id] = transport
                            await self._start_session_task(session_id, transport,
                                                           adopt_params=record["initialize_params"])
                            print(f"SESSION ADOPT {session_id} published_by={record['published_by']} "
                                  f"{request.method} last-event-id={request.headers.get(LAST_EVENT_ID_HEADER)!r}",
                                  flush=True)
            await super()._handle_stateful_request(scope, receive, send)
            if request.method == "DELETE" and session_id is not None and session_id not in self._server_instances:
                self.shared_sessions.delete(session_id)
            return
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


def install(*, resurrect_unknown_sessions: bool = False, per_session_store_view: bool = False,
            shared_sessions_dir: str | None = None, replica: str = "") -> None:
    """Make the SDK build `RecordingSessionManager`s (call before `MCPServer.run`)."""
    import mcp.server.lowlevel.server as lowlevel_server

    RecordingSessionManager.resurrect_unknown_sessions = resurrect_unknown_sessions
    RecordingSessionManager.per_session_store_view = per_session_store_view
    RecordingSessionManager.shared_sessions = (
        SharedSessionDirectory(shared_sessions_dir, replica) if shared_sessions_dir else None)
    lowlevel_server.StreamableHTTPSessionManager = RecordingSessionManager  # type: ignore[misc]
