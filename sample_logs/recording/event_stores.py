"""In-memory `EventStore`s for the recording server (python MCP SDK 2.x API).

The first two are used by the original scenarios; the last three by the newer ones
(shared-store, capture-client-loss); see the README section of each scenario.

* `UuidEventStore` -- the idea of the SDK example
  `examples/servers/simple-streamablehttp/mcp_simple_streamablehttp/event_store.py`
  (not shipped in the wheel, so rewritten here the same way): every event gets
  a fresh `uuid4()` id, the last 100 events of each stream are kept in a deque,
  replay sends the same-stream events stored after the given id. The ids say
  nothing about order or stream: a resume through this store is *unverifiable*
  from the ids alone.

* `DensePerStreamEventStore` -- ids "1", "2", ... counted per stream (a stream
  = one JSON-RPC request id, or the standalone GET stream), the way Go's
  `<stream>_<idx>` ids count, but without the stream prefix. That makes
  `Last-Event-ID` + 1 == first replayed id checkable (*continuous*), at the
  price of ids that repeat across the streams of one session (the spec says
  ids MUST be unique per session): "1" is the priming event of the
  `initialize` stream and again of the `tools/call` stream. `replay_events_after`
  therefore has to guess the stream from a bare number; it picks the stream
  that has that id and has not been answered yet (most recently written first).
  That is correct for the recording scenarios (one call in flight at a time),
  not in general.

Priming events are stored with `message=None` (the SDK mints them) and are not
replayed: after a replay the SDK mints a new priming event itself.
"""

from __future__ import annotations

import itertools
import logging
from collections import deque
from dataclasses import dataclass
from uuid import uuid4

from mcp_types import JSONRPCError, JSONRPCMessage, JSONRPCResponse

from mcp.server.streamable_http import EventCallback, EventId, EventMessage, EventStore, StreamId

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _Entry:
    event_id: EventId
    stream_id: StreamId
    message: JSONRPCMessage | None


class UuidEventStore(EventStore):
    """uuid4 ids, last `max_events_per_stream` events per stream (SDK example style)."""

    def __init__(self, max_events_per_stream: int = 100) -> None:
        self.max_events_per_stream = max_events_per_stream
        self.streams: dict[StreamId, deque[_Entry]] = {}
        self.event_index: dict[EventId, _Entry] = {}

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        event_id = str(uuid4())
        entry = _Entry(event_id, stream_id, message)
        stream = self.streams.setdefault(stream_id, deque(maxlen=self.max_events_per_stream))
        if len(stream) == self.max_events_per_stream:
            self.event_index.pop(stream[0].event_id, None)  # evicted: it can no longer be resumed from
        stream.append(entry)
        self.event_index[event_id] = entry
        return event_id

    async def replay_events_after(self, last_event_id: EventId, send_callback: EventCallback) -> StreamId | None:
        last = self.event_index.get(last_event_id)
        if last is None:
            logger.warning("Event ID %s not found in store", last_event_id)
            return None
        found = False
        for entry in list(self.streams.get(last.stream_id, ())):
            if found and entry.message is not None:
                await send_callback(EventMessage(entry.message, entry.event_id))
            elif entry.event_id == last_event_id:
                found = True
        return last.stream_id


class DensePerStreamEventStore(EventStore):
    """Ids "1", "2", ... per stream; see the module docstring for the ambiguity."""

    def __init__(self) -> None:
        self.streams: dict[StreamId, list[JSONRPCMessage | None]] = {}
        self.answered: set[StreamId] = set()
        self.last_write: dict[StreamId, int] = {}
        self._clock = itertools.count(1)

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        events = self.streams.setdefault(stream_id, [])
        events.append(message)
        self.last_write[stream_id] = next(self._clock)
        if isinstance(message, JSONRPCResponse | JSONRPCError):
            self.answered.add(stream_id)
        return str(len(events))

    async def replay_events_after(self, last_event_id: EventId, send_callback: EventCallback) -> StreamId | None:
        if not last_event_id.isdigit():
            logger.warning("Event ID %r is not a dense integer id", last_event_id)
            return None
        cursor = int(last_event_id)
        candidates = [sid for sid, events in self.streams.items() if 1 <= cursor <= len(events)]
        if not candidates:
            logger.warning("Event ID %s not found in any stream", last_event_id)
            return None
        # Unanswered streams first, then the most recently written one.
        candidates.sort(key=lambda sid: (sid not in self.answered, self.last_write[sid]), reverse=True)
        stream_id = candidates[0]
        events = self.streams[stream_id]
        for index in range(cursor, len(events)):
            message = events[index]
            if message is not None:
                await send_callback(EventMessage(message, str(index + 1)))
        return stream_id


def _dump(message: JSONRPCMessage | None) -> str:
    return "<priming>" if message is None else message.model_dump_json(by_alias=True, exclude_unset=True)[:160]


class SessionCounterEventStore(EventStore):
    """One counter per store: ids "1", "2", ... across all streams (like the SDK's test/story stores).

    Ids are unique per server process (so per session too, as the spec asks). Replay: the
    same-stream events stored after the given id, in order. This is a *correct* store.
    Every call is printed (`STORE`/`REPLAY` lines) so the server log is the ground truth.
    """

    def __init__(self) -> None:
        self.entries: list[_Entry] = []
        self.by_id: dict[EventId, int] = {}

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        event_id = str(len(self.entries) + 1)
        self.by_id[event_id] = len(self.entries)
        self.entries.append(_Entry(event_id, stream_id, message))
        print(f"STORE id={event_id} stream={stream_id} {_dump(message)}", flush=True)
        return event_id

    def _replay_start(self, position: int, stream_id: StreamId) -> int:
        return position + 1

    async def replay_events_after(self, last_event_id: EventId, send_callback: EventCallback) -> StreamId | None:
        position = self.by_id.get(last_event_id)
        if position is None:
            print(f"REPLAY after={last_event_id} unknown -> None", flush=True)
            return None
        stream_id = self.entries[position].stream_id
        start = self._replay_start(position, stream_id)
        sent = []
        for entry in self.entries[start:]:
            if entry.stream_id == stream_id and entry.message is not None:
                await send_callback(EventMessage(entry.message, entry.event_id))
                sent.append(entry.event_id)
        print(f"REPLAY after={last_event_id} stream={stream_id} from_position={start} sent={sent}", flush=True)
        return stream_id


class SendBufferEventStore(SessionCounterEventStore):
    """BUGGY on purpose: resumes after the last event it handed to a connection, not after Last-Event-ID.

    It treats every event the transport turned into an SSE event for a connection
    (`mark_handed`, called by `session_managers.SendBufferTransport`) as delivered,
    as if the socket's send buffer were the client. It therefore replays only the
    events stored after the old connection stopped taking events. Events that were
    written to the old connection but never reached the client (a partition between
    the capture point and the client) are skipped: the client never gets them and
    nothing on the wire says so.
    """

    def __init__(self) -> None:
        super().__init__()
        self.handed: dict[StreamId, int] = {}  # stream -> highest position handed to a connection

    def mark_handed(self, event_id: EventId) -> None:
        position = self.by_id.get(event_id)
        if position is None:
            return
        stream_id = self.entries[position].stream_id
        if position > self.handed.get(stream_id, -1):
            self.handed[stream_id] = position
            print(f"HANDED id={event_id} stream={stream_id}", flush=True)

    def _replay_start(self, position: int, stream_id: StreamId) -> int:
        return max(position, self.handed.get(stream_id, -1)) + 1


class StreamKeyedSharedEventStore:
    """BUGGY on purpose: one store for all sessions, looked up by stream id and event id only.

    The server gives every session its own view (`for_session`, installed by
    `session_managers.RecordingSessionManager`). A view mints ids from a
    **per-session** counter ("1", "2", ... in every session, unique within the
    session as the spec asks), but writes into one table keyed by **stream id
    only** (the stream id is the JSON-RPC request id, so `tools/call` id 1 of
    session A and `tools/call` id 1 of session B share one list). `Last-Event-ID: n`
    is looked up without the session: the first stream holding an event `n` wins
    (the oldest session's), and the replay sends that stream's events with an id
    greater than `n`, in stored order, from whichever session stored them.
    """

    def __init__(self) -> None:
        self.streams: dict[StreamId, list[_Entry]] = {}
        self.counters: dict[str, itertools.count] = {}

    def for_session(self, session_id: str) -> "_SessionView":
        return _SessionView(self, session_id)


class _SessionView(EventStore):
    def __init__(self, shared: StreamKeyedSharedEventStore, session_id: str) -> None:
        self.shared = shared
        self.session_id = session_id
        self.counter = shared.counters.setdefault(session_id, itertools.count(1))

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        event_id = str(next(self.counter))
        self.shared.streams.setdefault(stream_id, []).append(_Entry(event_id, stream_id, message))
        print(f"STORE session={self.session_id[:8]} id={event_id} stream={stream_id} {_dump(message)}", flush=True)
        return event_id

    async def replay_events_after(self, last_event_id: EventId, send_callback: EventCallback) -> StreamId | None:
        if not last_event_id.isdigit():
            print(f"REPLAY session={self.session_id[:8]} after={last_event_id!r} not an integer -> None", flush=True)
            return None
        cursor = int(last_event_id)
        for stream_id, entries in self.shared.streams.items():  # oldest stream first; no session filter
            hit = next((i for i, e in enumerate(entries) if e.event_id == last_event_id), None)
            if hit is None:
                continue
            sent = []
            for entry in entries[hit + 1:]:
                if int(entry.event_id) > cursor and entry.message is not None:
                    await send_callback(EventMessage(entry.message, entry.event_id))
                    sent.append(entry.event_id)
            print(f"REPLAY session={self.session_id[:8]} after={last_event_id} stream={stream_id} "
                  f"sent={sent} (first match at position {hit} of {len(entries)})", flush=True)
            return stream_id
        print(f"REPLAY session={self.session_id[:8]} after={last_event_id} unknown -> None", flush=True)
        return None
