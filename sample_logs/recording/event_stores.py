"""In-memory `EventStore`s for the recording server (python MCP SDK 2.x API).

The first two are used by the original scenarios; the next three by the newer ones
(shared-store, capture-client-loss), `SessionLogEventStore` by replica-failover, and
`UuidSkipFirstEventStore` / `UuidDropLogEventStore` (uuid4 ids, replays that really lose an
event) by uuid-lossy-replay / uuid-drops-log; see the README section of each scenario.
`UuidEventStore(log_events=True)` (server.py `--log-events`, off by default) prints a `STORE`
line per stored event and a `REPLAY` line per replay (`sent=[…] SKIPPED=[…]`, ids and kinds).
The uuid-skip-*, uuid-evicted-buffer and uuid-ttl-expired scenarios add `UuidSkipTwoEventStore`,
`UuidRingEventStore` (a bounded per-stream buffer) and `UuidTtlEventStore` (events expire); the
stale-cursor scenario uses `DensePerStreamEventStore(log_events=True)` (the same ids and replay as
before, plus `STORE`/`REPLAY` lines).

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
import time
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


def _dump(message: JSONRPCMessage | None) -> str:
    return "<priming>" if message is None else message.model_dump_json(by_alias=True, exclude_unset=True)[:160]


def _kind(message: JSONRPCMessage | None) -> str:
    """A short description of a stored event: priming, progress <token>:<value>, log "<data>", response id=<id>."""
    if message is None:
        return "priming"
    method = getattr(message, "method", None)
    params = getattr(message, "params", None) or {}
    if not isinstance(params, dict):
        params = params.model_dump(by_alias=True) if hasattr(params, "model_dump") else {}
    if method == "notifications/progress":
        return f"progress token={params.get('progressToken')} value={params.get('progress')}"
    if method == "notifications/message":
        return f"log {params.get('data')!r}"
    if method is not None:
        return f"{method}"
    if isinstance(message, JSONRPCError):
        return f"error id={message.id}"
    if isinstance(message, JSONRPCResponse):
        return f"response id={message.id}"
    return _dump(message)


class UuidEventStore(EventStore):
    """uuid4 ids, last `max_events_per_stream` events per stream (SDK example style)."""

    def __init__(self, max_events_per_stream: int = 100, log_events: bool = False) -> None:
        self.max_events_per_stream = max_events_per_stream
        self.streams: dict[StreamId, deque[_Entry]] = {}
        self.event_index: dict[EventId, _Entry] = {}
        # server.py --log-events (newer scenarios only): print a STORE line per stored event and a
        # REPLAY line per replay (ids and kinds), the ground truth of what the server emitted.
        self.log_events = log_events
        self.skip_label = "SKIPPED"  # what the REPLAY line calls the events a replay leaves out

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        event_id = str(uuid4())
        entry = _Entry(event_id, stream_id, message)
        stream = self.streams.setdefault(stream_id, deque(maxlen=self.max_events_per_stream))
        if len(stream) == self.max_events_per_stream:
            self.event_index.pop(stream[0].event_id, None)  # evicted: it can no longer be resumed from
        stream.append(entry)
        self.event_index[event_id] = entry
        if self.log_events:
            print(f"STORE id={event_id} stream={stream_id} {_kind(message)}", flush=True)
        return event_id

    def _skip(self, after: list[_Entry]) -> set[EventId]:
        """Ids of the replayable events after the cursor that the replay leaves out (none: a correct store)."""
        return set()

    async def replay_events_after(self, last_event_id: EventId, send_callback: EventCallback) -> StreamId | None:
        last = self.event_index.get(last_event_id)
        if last is None:
            logger.warning("Event ID %s not found in store", last_event_id)
            if self.log_events:
                print(f"REPLAY after={last_event_id} unknown -> None (the SDK ends the stream, no event)", flush=True)
            return None
        found = False
        after: list[_Entry] = []
        for entry in list(self.streams.get(last.stream_id, ())):
            if found and entry.message is not None:
                after.append(entry)
            elif entry.event_id == last_event_id:
                found = True
        skip = self._skip(after)
        for entry in after:
            if entry.event_id not in skip:
                await send_callback(EventMessage(entry.message, entry.event_id))
        if self.log_events:
            sent = [f"{e.event_id} {_kind(e.message)}" for e in after if e.event_id not in skip]
            skipped = [f"{e.event_id} {_kind(e.message)}" for e in after if e.event_id in skip]
            print(f"REPLAY after={last_event_id} stream={last.stream_id} sent={sent} {self.skip_label}={skipped}",
                  flush=True)
        return last.stream_id


class UuidSkipFirstEventStore(UuidEventStore):
    """BUGGY on purpose (scenario uuid-lossy-replay): uuid4 ids; a replay after a known id
    silently leaves out the **first** event stored after the cursor (an off-by-one of the kind
    "start after the cursor's successor"), then replays the rest; the live stream goes on."""

    def _skip(self, after: list[_Entry]) -> set[EventId]:
        return {after[0].event_id} if after else set()


class UuidDropLogEventStore(UuidEventStore):
    """BUGGY on purpose (scenario uuid-drops-log): uuid4 ids; a replay after a known id leaves out
    the `notifications/message` (log) events stored between the cursor and the next
    `notifications/progress`; every progress notification and the response are replayed."""

    def _skip(self, after: list[_Entry]) -> set[EventId]:
        skip: set[EventId] = set()
        for entry in after:
            method = getattr(entry.message, "method", None)
            if method == "notifications/progress":
                break
            if method == "notifications/message":
                skip.add(entry.event_id)
        return skip


class UuidSkipTwoEventStore(UuidEventStore):
    """BUGGY on purpose (scenario uuid-skip-two): `UuidSkipFirstEventStore`, but a replay after a
    known id leaves out the **first two** events stored after the cursor on that stream."""

    def _skip(self, after: list[_Entry]) -> set[EventId]:
        return {entry.event_id for entry in after[:2]}


class UuidRingEventStore(UuidEventStore):
    """LOSSY by design (scenario uuid-evicted-buffer): a bounded per-stream buffer that serves only
    the last `ring` events of each stream (priming events count), like a capped Redis stream.

    It still knows which stream an evicted id was on (its id index outlives the payload), so a
    `Last-Event-ID` that has been evicted is not refused: the replay sends what the buffer still
    holds of that stream after the cursor, returns the stream (the live stream goes on), and the
    events evicted in between are silently gone. A cursor still in the buffer replays exactly
    (correct). The events themselves are kept here only to print what was lost (`EVICTED=[…]`).
    """

    def __init__(self, ring: int = 2, log_events: bool = False) -> None:
        super().__init__(log_events=log_events)
        self.ring = ring
        self.skip_label = "EVICTED"

    def _skip(self, after: list[_Entry]) -> set[EventId]:
        if not after:
            return set()
        held = {entry.event_id for entry in list(self.streams[after[0].stream_id])[-self.ring:]}
        return {entry.event_id for entry in after if entry.event_id not in held}


class UuidTtlEventStore(UuidEventStore):
    """LOSSY by design (scenario uuid-ttl-expired): every event's payload expires `ttl` seconds
    after it was stored (like per-entry TTLs in a cache); the id index (id -> stream, order)
    does not expire. A replay sends the same-stream events after the cursor that have not expired
    yet and returns the stream (the live stream goes on); the expired ones are silently gone
    (`EXPIRED=[…]`, with their age at the replay, in the REPLAY line)."""

    def __init__(self, ttl: float = 0.5, log_events: bool = False) -> None:
        super().__init__(log_events=log_events)
        self.ttl = ttl
        self.stored_at: dict[EventId, float] = {}
        self.skip_label = "EXPIRED"

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        event_id = await super().store_event(stream_id, message)
        self.stored_at[event_id] = time.monotonic()
        return event_id

    def _skip(self, after: list[_Entry]) -> set[EventId]:
        now = time.monotonic()
        ages = {entry.event_id: now - self.stored_at[entry.event_id] for entry in after}
        if self.log_events:
            print("REPLAY ages " + ", ".join(f"{event_id[:8]}={age:.3f}s" for event_id, age in ages.items())
                  + f" (ttl {self.ttl:g}s)", flush=True)
        return {event_id for event_id, age in ages.items() if age > self.ttl}


class DensePerStreamEventStore(EventStore):
    """Ids "1", "2", ... per stream; see the module docstring for the ambiguity."""

    def __init__(self, log_events: bool = False) -> None:
        self.streams: dict[StreamId, list[JSONRPCMessage | None]] = {}
        self.answered: set[StreamId] = set()
        self.last_write: dict[StreamId, int] = {}
        self._clock = itertools.count(1)
        # server.py --log-events (stale-cursor only): STORE/REPLAY lines; ids and replay unchanged.
        self.log_events = log_events

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        events = self.streams.setdefault(stream_id, [])
        events.append(message)
        self.last_write[stream_id] = next(self._clock)
        if isinstance(message, JSONRPCResponse | JSONRPCError):
            self.answered.add(stream_id)
        if self.log_events:
            print(f"STORE id={len(events)} stream={stream_id} {_kind(message)}", flush=True)
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
        sent = []
        for index in range(cursor, len(events)):
            message = events[index]
            if message is not None:
                await send_callback(EventMessage(message, str(index + 1)))
                sent.append(f"{index + 1} {_kind(message)}")
        if self.log_events:
            print(f"REPLAY after={last_event_id} stream={stream_id} sent={sent}", flush=True)
        return stream_id




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


class SessionLogEventStore:
    """BUGGY on purpose (scenario replica-failover): a naive per-session log that "starts over".

    One instance per server process (= per replica: each replica keeps its own, in memory).
    Every session gets a view (`for_session`, installed by `session_managers.RecordingSessionManager`)
    that appends to that session's log and mints ids "1", "2", ... per session. A known
    `Last-Event-ID` replays the same-stream events stored after it (correct). An id the log
    does not know (say, one minted by *another replica*) is not refused: the view "starts over"
    and replays **every** event it holds for the session from the beginning, whatever request
    they answered, and returns no stream (the SDK then ends the resumed stream after the replay).
    `STORE`/`REPLAY` lines, prefixed with the replica name, are the ground truth in the server log.
    """

    def __init__(self, replica: str = "") -> None:
        self.replica = replica
        self.logs: dict[str, list[_Entry]] = {}

    def for_session(self, session_id: str) -> "_SessionLogView":
        return _SessionLogView(self, session_id)


class _SessionLogView(EventStore):
    def __init__(self, store: SessionLogEventStore, session_id: str) -> None:
        self.store = store
        self.session_id = session_id
        self.log = store.logs.setdefault(session_id, [])
        self.prefix = f"{store.replica} " if store.replica else ""

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        event_id = str(len(self.log) + 1)
        self.log.append(_Entry(event_id, stream_id, message))
        print(f"{self.prefix}STORE session={self.session_id[:8]} id={event_id} stream={stream_id} {_dump(message)}",
              flush=True)
        return event_id

    async def replay_events_after(self, last_event_id: EventId, send_callback: EventCallback) -> StreamId | None:
        hit = next((i for i, e in enumerate(self.log) if e.event_id == last_event_id), None)
        if hit is not None:
            stream_id = self.log[hit].stream_id
            replay = [e for e in self.log[hit + 1:] if e.stream_id == stream_id and e.message is not None]
        else:  # unknown id: start over from the beginning of the session, every stream
            stream_id = None
            replay = [e for e in self.log if e.message is not None]
        for entry in replay:
            await send_callback(EventMessage(entry.message, entry.event_id))
        how = f"stream={stream_id}" if hit is not None else f"unknown -> start over ({len(self.log)} events held)"
        print(f"{self.prefix}REPLAY session={self.session_id[:8]} after={last_event_id} {how} "
              f"sent={[(e.event_id, e.stream_id) for e in replay]} "
              f"{[_dump(e.message)[:100] for e in replay]}", flush=True)
        return stream_id


class DenseSkipSecondReplayEventStore(DensePerStreamEventStore):
    """BUGGY on purpose (scenario ts-client-cut-twice of ts/record_ts.py): the dense per-stream ids of
    `DensePerStreamEventStore` ("1", "2", ... per stream, so a gap is provable from the ids). The
    **first** replay of the process is correct; the **second** silently leaves out the first event
    stored after the cursor, then replays the rest (the live stream goes on). Every stored event and
    every replay is printed (`STORE` / `REPLAY #n ... sent=[...] SKIPPED=[...]`): the ground truth."""

    def __init__(self) -> None:
        super().__init__()
        self.replays = 0

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        event_id = await super().store_event(stream_id, message)
        print(f"STORE id={event_id} stream={stream_id} {_kind(message)}", flush=True)
        return event_id

    async def replay_events_after(self, last_event_id: EventId, send_callback: EventCallback) -> StreamId | None:
        self.replays += 1
        lossy = self.replays == 2
        sent: list[str] = []
        skipped: list[str] = []

        async def send(event: EventMessage) -> None:
            what = f"{event.event_id} {_kind(event.message)}"
            if lossy and not sent and not skipped:
                skipped.append(what)
                return
            sent.append(what)
            await send_callback(event)

        stream_id = await super().replay_events_after(last_event_id, send)
        print(f"REPLAY #{self.replays} after={last_event_id} stream={stream_id} sent={sent} SKIPPED={skipped}",
              flush=True)
        return stream_id
