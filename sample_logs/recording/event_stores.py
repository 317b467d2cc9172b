"""Two in-memory `EventStore`s for the recording server (python MCP SDK 2.x API).

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
