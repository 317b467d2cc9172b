"""The canonical Arrow tables every ingester produces (documented in schemas/canonical-tables.md).

Rules never know the input format: HAR, proxy JSONL and later pcap all end up
as the same four tables.  ``Builder`` is the one place that turns parsed
records into rows, so redaction, digests and JSON-RPC extraction happen the
same way for every format.
"""
from __future__ import annotations

import hashlib
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from operator import itemgetter

import polars as pl
import polars_hash  # noqa: F401  (registers the .chash expression namespace: sha256 in Rust, column-wise)
import pyarrow as pa
import pyarrow.compute as pc

from analyzer.decode import jsonrpc
from analyzer import compiled, redact
from analyzer.anomalies import CATALOG, EXAMPLES_PER_KIND, AnomalyLog
from analyzer.formatted import formatted

TS = pa.timestamp("us", tz="UTC")
# json.dumps(h, sort_keys=True, ensure_ascii=False), without the encoder json.dumps makes for every call
# that passes options (two calls per exchange)
_HEADERS_JSON = json.JSONEncoder(sort_keys=True, ensure_ascii=False).encode


class _NoPandas:
    """A meta path finder that makes ``import pandas`` fail (used for one call, by keep_pandas_out)."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError(f"{name} is not imported by mcp-sse-audit's analysis", name=name)
        return None


def keep_pandas_out() -> None:
    """Stops pyarrow from importing pandas for nothing.

    The first time pyarrow converts Python objects (``pa.array``, ``Table.from_pylist``), it imports
    pandas when pandas is installed, only to ask whether the objects are pandas objects.  The analysis
    never holds one, and the import costs 47 MiB and 0.3 s (pandas 2.3 beside pyarrow 26).  pyarrow
    asks once and keeps the answer: asked here while the import fails, the answer is "no pandas".  A
    pyarrow call that needs pandas (``to_pandas``) still imports it then.  Not for a process that
    hands pandas objects to pyarrow (the Spark engine): those would not be recognised."""
    import sys

    if "pandas" in sys.modules:  # already paid for
        return
    blocker = _NoPandas()
    sys.meta_path.insert(0, blocker)
    try:
        pa.array([])  # pyarrow's first conversion: its look for pandas fails, and is not repeated
    finally:
        sys.meta_path.remove(blocker)


EXCHANGES = pa.schema(
    [
        ("source", pa.string()),  # input path as given
        ("xid", pa.int64()),  # exchange ordinal within the source, in request-start (capture) order
        ("conn", pa.string()),  # connection id, unique within the source
        ("location", pa.string()),  # "line 12" / "entry 3": where the request record is
        ("started", TS),
        ("ended", TS),
        ("method", pa.string()),
        ("url", pa.string()),
        ("status", pa.int32()),  # null: no response seen (aborted before headers)
        ("req_session_id", pa.string()),
        ("resp_session_id", pa.string()),
        ("last_event_id", pa.string()),  # request Last-Event-ID header
        ("protocol_version", pa.string()),  # request MCP-Protocol-Version header
        ("content_type", pa.string()),  # response media type, lower case, no parameters
        ("replay_epoch", pa.string()),  # response X-MCP-Replay-Epoch
        ("end_reason", pa.string()),  # complete | eof | reset | error | aborted | open
        ("end_by", pa.string()),  # client | server | null
        ("body_recorded", pa.bool_()),  # false: the response body (its events) is unknown, not empty
        ("request_body", pa.string()),
        ("req_headers", pa.string()),  # JSON object, lower-case names, secrets redacted
        ("resp_headers", pa.string()),
        ("user_agent", pa.string()),  # request User-Agent (first value): which client made it (signals/clients.py)
    ]
)

_EXCHANGE_FIELDS = [(f.name, itemgetter(f.name), f.type) for f in EXCHANGES]
_ROW_VALUES = itemgetter(*EXCHANGES.names)  # a row's values as a tuple, in the table's column order
_XID_AT = EXCHANGES.names.index("xid")  # (where a tuple of them holds the xid)


def _rows_table(rows: list[dict]) -> pa.Table:
    """Exchange rows (dicts) as an EXCHANGES table, a column at a time (C-level maps): a fifth less than
    ``pa.Table.from_pylist`` of the same rows (4,096 rows of the 1M bench log: 15-16 against 16-21 ms)."""
    return pa.Table.from_arrays([pa.array(list(map(get, rows)), type=t) for _, get, t in _EXCHANGE_FIELDS], schema=EXCHANGES)


def _values_table(values: list[tuple]) -> pa.Table:
    """Sealed rows (:data:`_ROW_VALUES` tuples) as an EXCHANGES table."""
    return pa.Table.from_arrays([pa.array(col, type=t) for col, (_, _, t) in zip(zip(*values), _EXCHANGE_FIELDS)], schema=EXCHANGES)


EVENTS = pa.schema(
    [
        ("source", pa.string()),
        ("xid", pa.int64()),
        ("ordinal", pa.int32()),  # position in the exchange's stream, from 0, every recorded block counts
        ("location", pa.string()),
        ("ts", TS),  # null when the producer keeps no per-event time (HAR)
        ("id", pa.string()),  # the block's own id field ("" = reset); null = none
        ("cursor", pa.string()),  # last-event-ID buffer after the block: what the client would resume from
        ("event", pa.string()),
        ("data", pa.string()),
        ("retry", pa.int64()),
        ("fate", pa.string()),  # dispatched | no_data | cut_off
        ("digest", pa.string()),  # sha256 hex of "<id>:" + data
    ]
)

MESSAGES = pa.schema(
    [
        ("source", pa.string()),
        ("xid", pa.int64()),
        ("origin", pa.string()),  # request_body | response_body | sse
        ("ordinal", pa.int32()),  # the SSE event's ordinal; null for bodies
        ("direction", pa.string()),  # client_to_server | server_to_client
        ("kind", pa.string()),  # request | notification | response | error
        ("rpc_id", pa.string()),  # JSON text of the id
        ("method", pa.string()),
        ("error_code", pa.int64()),
        ("error_message", pa.string()),
        ("protocol_version", pa.string()),
        ("params_digest", pa.string()),  # sha256 of canonical JSON params without _meta (requests only)
    ]
)

SSE_MEDIA = "text/event-stream"


def digest(event_id: str | None, data: str) -> str:
    """The reference's semantic digest: sha256 of ``<id>:`` followed by the payload (one value; the
    tables get theirs column-wise from :func:`digest_expr`, which gives the same hex)."""
    return hashlib.sha256(f"{event_id or ''}:".encode() + data.encode("utf-8", "surrogatepass")).hexdigest()


def digest_expr(event_id: pl.Expr, data: pl.Expr) -> pl.Expr:
    """:func:`digest` of every row, as one Polars expression (polars-hash's sha2_256 of the UTF-8 text)."""
    return pl.concat_str(event_id.fill_null(""), pl.lit(":"), data.fill_null("")).chash.sha2_256()


def keyed_digest_expr(hex_digest: pl.Expr, key: str) -> pl.Expr:
    """A digest a store keeps: sha256 of the store's secret ``key`` (hex) and the digest.  Equal digests stay equal
    (the rules compare them within the store), but nobody without the key can test a guess against one: a sha256
    of a 6-digit OTP or a 4-digit PIN in a redacted event or in a call's arguments took a second to brute-force."""
    return pl.concat_str(pl.lit(key), pl.lit("\x1f"), hex_digest).chash.sha2_256() if key else hex_digest


def compact_digest_expr(hex_digest: pl.Expr) -> pl.Expr:
    """The first 64 bits of a sha256 hex digest as a UInt64 (8 bytes a row, not 64 characters and a
    16-byte view): what the rules compare (see :func:`analyzer.signals.streams.compact_digest`)."""
    return hex_digest.str.slice(0, 16).str.to_integer(base=16, dtype=pl.UInt64)


def _sse_messages(events: pl.DataFrame, methods: pl.Series | None, examined: pl.Series | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """:func:`analyzer.decode.jsonrpc.sse_messages` of ``events``; where ``methods`` (a reader's, read ahead: see
    :data:`READ_AHEAD`) names an event's notification method, that is its message, and ``event_rpc`` reads the rest.
    ``examined``: the events whose method the reader's compiled core looked for already (true), so that a null there
    says "no notification", not "not read": they are not read for it again."""
    if compiled.ENABLED and events.height:  # the rest's methods by the compiled core (a HAR's, a pcap's: every event's)
        todo = events.get_column("fate") == "dispatched"
        if methods is not None:
            todo = todo & methods.is_null()
        if examined is not None:
            # (the events the core read and found no notification in: the same function would read them again here,
            # to the same nulls; 2M tiny events of plain text, a pass over every one and the read's memory peak)
            todo = todo & ~examined
        todo = todo.arg_true()
        if todo.len():
            found = jsonrpc.notification_methods(events.get_column("data").gather(todo))
            base = pl.repeat(None, events.height, dtype=pl.String, eager=True) if methods is None else methods
            methods = base.scatter(todo, found)
            del base, found
        del todo
    if methods is None or not methods.null_count() < methods.len():
        return jsonrpc.sse_messages(events)
    done = methods.is_not_null()
    rows = pl.int_range(pl.len(), dtype=pl.Int64).alias("row")
    rest = events.select(rows, "data", "fate").filter(~done)
    known = methods.to_frame("method").with_columns(rows).filter(done).select(
        "row", kind=pl.lit("notification"), rpc_id=pl.lit(None, pl.String), method="method", error_code=pl.lit(None, pl.Int64),
        error_message=pl.lit(None, pl.String), protocol_version=pl.lit(None, pl.String), params_digest=pl.lit(None, pl.String))
    rpc = jsonrpc.event_rpc(rest)
    del rest
    return jsonrpc.assemble(rpc._replace(parsed=pl.concat([known, rpc.parsed]).sort("row", maintain_order=True)), events)


def _sse_message_table(events: pl.DataFrame, methods: pl.Series | None, redact_secrets: bool,
                       examined: pl.Series | None = None, compact: bool = False) -> tuple[pa.Table | pl.DataFrame, pl.DataFrame]:
    """:func:`_sse_messages` as a MESSAGES table, their error texts redacted when ``redact_secrets`` (in the Builder's
    worker thread: at 1M events, the million rows' error column taken back from Arrow, redacted and cast again was
    0.1 s of the read's main thread).  Redaction is value by value: the same texts as over all messages at once.
    ``compact`` (the single pass): the table as a Polars frame of :data:`MESSAGES_POLARS` (:class:`Ingested`)."""
    sse, invalid = _sse_messages(events, methods, examined)
    if redact_secrets:
        errors = sse.get_column("error_message")
        done = redact.column(errors)
        if done is not errors:
            sse = sse.with_columns(done.alias("error_message"))
        del errors, done
    if compact:
        return sse.select(pl.col(name).cast(t) for name, t in MESSAGES_POLARS.items()), invalid
    return sse.to_arrow().cast(MESSAGES), invalid


# Compact events (``Builder(compact=True)``, :attr:`analyzer.ingest.reading.Reading.compact`): each event's
# digest kept in its compact form only (:func:`compact_digest_expr`), never as the canonical table's sha256
# hex.  For the single pass, which hands its tables to the analysis and never to a store: the analysis
# compacts the hex anyway, and on 2M tiny events the hex column alone is 160 MB held through the read.  Such
# events cannot be written as the canonical Arrow table (:attr:`Ingested.events` refuses).  For the same
# reason the exchanges' header objects (``req_headers``, ``resp_headers``) are not made there (null): no rule
# reads them, and lower-casing, redacting and writing them as sorted JSON was 0.9 s of a 1M-event JSONL read.


def media_type(content_type: str | None) -> str | None:
    """The media type, lower case, without parameters; of a list ("text/event-stream, text/event-stream", as a HAR's
    mimeType keeps a repeated Content-Type), the first, as the clients read it (analyzer.decode.http1.SINGLE_VALUED)."""
    if not content_type:
        return None
    return content_type.split(",", 1)[0].split(";", 1)[0].strip().lower() or None


@dataclass
class Ingested:
    """What one ingester returns for one input.

    Its events are kept as the Polars frame the Builder made (``events_frame``) until someone asks for
    the Arrow table (``events``, converted once, in place): the single-pass analysis reads the Polars
    frame as it is, so a million events are not copied into Arrow and back (two copies of the table).
    So are the single pass's messages (``messages_frame``; ``messages`` is the Arrow table of :data:`MESSAGES`):
    the million messages of the events' JSON-RPC were made Arrow with 32-bit offsets (a copy of every string) and
    then Polars again by the analysis (0.1-0.2 s at 1M events)."""

    source: str
    format: str
    records: int
    exchanges: pa.Table
    events_frame: "pl.DataFrame | pa.Table"
    messages_frame: "pl.DataFrame | pa.Table"
    anomalies: pa.Table
    rejected: int
    notes: list[str] = field(default_factory=list)

    @property
    def events(self) -> pa.Table:
        """The events as an Arrow table of :data:`EVENTS` (converted on first use; the Polars frame is let go)."""
        if isinstance(self.events_frame, pl.DataFrame):
            if self.events_frame.schema["digest"] == pl.UInt64:
                raise RuntimeError(f"{self.source}: read with compact digests (Reading.compact), not as the canonical table")
            held = [self.events_frame]
            self.events_frame = None
            self.events_frame = _to_arrow(held, EVENTS)
        return self.events_frame

    @events.setter
    def events(self, table: pa.Table) -> None:
        self.events_frame = table

    def events_polars(self) -> pl.DataFrame:
        """The events as a Polars frame (no copy when the Arrow table was never asked for)."""
        got = self.events_frame
        return got if isinstance(got, pl.DataFrame) else pl.from_arrow(got)

    @property
    def messages(self) -> pa.Table:
        """The messages as an Arrow table of :data:`MESSAGES` (converted on first use, in place)."""
        if isinstance(self.messages_frame, pl.DataFrame):
            self.messages_frame = self.messages_frame.to_arrow().cast(MESSAGES)
        return self.messages_frame

    @messages.setter
    def messages(self, table: pa.Table) -> None:
        self.messages_frame = table


VALUE_CHUNK = 65_536  # events per chunk of plain values (Builder.flush_values)
# sealed exchange rows per Arrow chunk of a capture's Builder (pcap._build; at most VALUE_CHUNK): a row waiting as a
# dict costs ~1.2 KB, in Arrow ~200 bytes, and a capture of 60,000 HTTP/2 streams never filled a chunk of 65,536
SEAL_CHUNK = 8_192
# the one event path: a reader appends each event as plain values, one list per column; ``line`` is set
# by the JSONL reader (its location is "line N", formatted column-wise), ``where`` by every other caller
VALUE_SCHEMA = {"xid": pl.Int64, "line": pl.Int64, "where": pl.String, "ts": pl.Datetime("us", "UTC"), "id": pl.String,
                "event": pl.String, "data": pl.String, "retry": pl.Int64, "fate": pl.String}
# what add_events takes: events of whole exchanges, in stream order
FRAME_COLUMNS = ("xid", "location", "ts", "id", "event", "data", "retry", "fate")
# what a reader may have read ahead of finish for some of its events, beside FRAME_COLUMNS (the compiled JSONL
# reader, analyzer.ingest.jsonl_native): the compact digest, and a JSON-RPC notification's method; null where
# finish is to make them
READ_AHEAD = {"digest": pl.UInt64, "_method": pl.String, "_clean": pl.Boolean, "_raw": pl.String}
# ... and, of the events whose data it redacted already (``_clean``: the single pass's JSONL reader, in its worker
# thread), the raw text where the redaction changed it (``_raw``): what the JSON-RPC pass reads


class Builder:
    """Accumulates canonical rows for one source.

    Events reach the table by one path: plain values (:meth:`event`, or a reader appending to
    ``event_values`` itself) are flushed into compact chunks every VALUE_CHUNK events, and whole
    frames (:meth:`add_events`) join them; ordinal, cursor and digest are derived column-wise for all
    of them at once in :meth:`finish`."""

    def __init__(self, source: str, log: AnomalyLog, redact_secrets: bool = True, compact: bool = False,
                 digest_key: str | None = None) -> None:
        self.source = source
        self.log = log
        self.redact = redact_secrets
        self.compact = compact  # digests as UInt64 only, no header objects: for the single pass (see above Builder)
        self.digest_key = digest_key  # a store's secret: the digests it keeps are keyed with it (keyed_digest_expr)
        # the exchange rows by xid; a row a reader has sealed (:meth:`seal`: it will not change again) is None here,
        # and its values wait in ``_sealed``, a tuple in the table's column order, until VALUE_CHUNK of them go into
        # one Arrow chunk of ``_exchange_chunks``
        self.exchanges: list[dict | None] = []
        self._sealed: list[tuple] = []
        self.seal_chunk = VALUE_CHUNK  # sealed rows per chunk (a capture's: SEAL_CHUNK)
        self._exchange_chunks: list[pa.Table] = []
        # messages are kept as columns: one list append per field is several times cheaper than a dict per row;
        # every VALUE_CHUNK rows they go into an Arrow chunk of ``_message_chunks``
        self.messages: dict[str, list] = {name: [] for name in MESSAGES.names}
        self._message_chunks: list[pa.Table] = []
        self.event_values: dict[str, list] = {name: [] for name in VALUE_SCHEMA}
        # ... flushed into Arrow-backed chunks (flush_values), so the Python objects of a long input never
        # outnumber one chunk: memory follows the table, not the records
        self.event_frames: list[pl.DataFrame] = []  # FRAME_COLUMNS, in the order events were added

    # -- exchanges -------------------------------------------------------
    def exchange(
        self,
        *,
        conn: str,
        location: str,
        started: datetime | None,
        method: str | None,
        url: str | None,
        req_headers: dict[str, str],
        request_body: str | None,
    ) -> dict:
        """Open an exchange; the caller fills the response fields on the returned row."""
        return self.opened(conn, location, started, method, url, request_body, req_headers.get("mcp-session-id"),
                           req_headers.get("last-event-id"), req_headers.get("mcp-protocol-version"),
                           req_headers.get("user-agent"),
                           None if self.compact else _HEADERS_JSON(redact.headers(req_headers, self.redact)))

    def opened(self, conn: str, location: str, started: datetime | None, method: str | None, url: str | None,
               request_body: str | None, session_id: str | None, last_event_id: str | None,
               protocol_version: str | None, user_agent: str | None, headers_json: str | None,
               shown_body: str | None = None) -> dict:
        """:meth:`exchange` of the request header values it keeps (the compiled reader reads them ahead:
        analyzer/ingest/jsonl.py ``_Reader.compiled``), ``headers_json`` the header object's text or None;
        ``shown_body``: the body redacted already (column-wise, a batch at a time: jsonl_native.exchange_records), or
        None: redacted here."""
        shown = redact.text(request_body, self.redact) if shown_body is None else shown_body
        row = self.request_row(len(self.exchanges), conn, location, started, method, url, session_id, last_event_id,
                               protocol_version, user_agent, headers_json, shown)
        self.exchanges.append(row)
        if request_body:
            self._messages(row["xid"], "request_body", None, "client_to_server", request_body, location)
        return row

    def request_row(self, xid: int, conn: str, location: str, started: datetime | None, method: str | None, url: str | None,
                    session_id: str | None, last_event_id: str | None, protocol_version: str | None, user_agent: str | None,
                    headers_json: str | None, shown_body: str | None) -> dict:
        """The row an exchange opens with, its response fields empty (``shown_body``: the request body as the table
        shows it, redacted already): :meth:`opened`'s, and the column-wise state machine's for an exchange still open
        at its batch's end (analyzer/ingest/jsonl_machine.py)."""
        return {
            "source": self.source,
            "xid": xid,
            "conn": conn,
            "location": location,
            "started": started,
            "ended": None,
            "method": (method or "").upper() or None,
            "url": redact.url(url, self.redact),
            "status": None,
            "req_session_id": session_id,
            "resp_session_id": None,
            "last_event_id": last_event_id,
            "protocol_version": protocol_version,
            "content_type": None,
            "replay_epoch": None,
            "end_reason": "open",
            "end_by": None,
            "body_recorded": True,
            "request_body": shown_body,
            "req_headers": headers_json,
            "resp_headers": None,
            "user_agent": user_agent,
        }

    def seal(self, row: dict) -> None:
        """``row`` will not change again (its connection closed, or the next request on it began): it leaves
        the Python rows, and every VALUE_CHUNK sealed rows become one Arrow chunk.  A log of many short
        exchanges then holds its exchanges as Arrow columns, not as a dict of 21 Python objects each (500k tiny
        POST exchanges: 1.2 KB a row as dicts, 220 bytes in Arrow).  Rows never sealed stay dicts until
        :meth:`finish`; the table is the same either way (in xid order)."""
        if self.exchanges[row["xid"]] is not row:
            return
        self.exchanges[row["xid"]] = None
        # (its values taken now, while the row was just written, in one C call: a chunk of them is then read column
        # by column from tuples made one after the other, not from dicts made far apart when each exchange began;
        # 1M events, 59k exchanges: the chunks 0.33-0.52 -> 0.24-0.34 thread-s, bench/read_profile.py --timers)
        self._sealed.append(_ROW_VALUES(row))
        if len(self._sealed) >= self.seal_chunk:
            self._flush_sealed()

    def add_sealed(self, frame: pl.DataFrame) -> None:
        """Sealed exchange rows made column-wise (the JSONL reader's ``jsonl_machine.run``: gathers from the batch's
        records, no dict per row), in :data:`EXCHANGES`' columns and order: one Arrow chunk beside the others."""
        self._exchange_chunks.append(frame.to_arrow().cast(EXCHANGES))

    def add_messages(self, frame: pl.DataFrame) -> None:
        """JSON-RPC messages of bodies made column-wise (the JSONL reader's ``jsonl_machine.run``), in :data:`MESSAGES`'
        columns and order, after every message added before them."""
        self._flush_messages()
        self._message_chunks.append(frame.to_arrow().cast(MESSAGES))

    def _flush_sealed(self) -> None:
        if self._sealed:
            self._exchange_chunks.append(_values_table(self._sealed))
            self._sealed = []

    def _exchange_table(self) -> pa.Table:
        """Every exchange row, in xid order: the sealed chunks and the rows still open."""
        self._flush_sealed()
        open_rows = [r for r in self.exchanges if r is not None]
        self.exchanges = []
        chunks, self._exchange_chunks = self._exchange_chunks, []
        if not chunks:
            return _rows_table(open_rows)
        if open_rows:
            chunks.append(_rows_table(open_rows))
        del open_rows
        table = pa.concat_tables(chunks)
        del chunks
        xids = pl.from_arrow(table.column("xid"))
        if not xids.is_sorted():  # (rows are sealed as their connections end, not in the order they began)
            table = table.take(xids.arg_sort().to_arrow())
        return table

    def response(self, row: dict, status: int | None, headers: dict[str, str]) -> None:
        self.answered(row, status, headers.get("mcp-session-id"), headers.get("content-type"), headers.get("x-mcp-replay-epoch"))
        if not self.compact:  # (compact events: see above Builder)
            row["resp_headers"] = _HEADERS_JSON(redact.headers(headers, self.redact))

    def answered(self, row: dict, status: int | None, session_id: str | None, content_type: str | None,
                 replay_epoch: str | None) -> None:
        """:meth:`response` of the header values the compact reading keeps (the compiled reader reads them ahead)."""
        row["status"] = status
        row["resp_session_id"] = session_id
        row["content_type"] = media_type(content_type)
        row["replay_epoch"] = replay_epoch

    def body(self, row: dict, text: str, location: str) -> None:
        """A non-SSE response body (JSON-RPC responses of a POST answered with application/json)."""
        if row["content_type"] in ("application/json", None) or (row["content_type"] or "").endswith("+json"):
            self._messages(row["xid"], "response_body", None, "server_to_client", text, location)

    # -- events ------------------------------------------------------------
    def event(
        self,
        row: dict,
        *,
        location: str | None,
        ts: datetime | None,
        event_id: str | None,
        event_type: str | None,
        data: str,
        retry: int | None,
        fate: str,
        line: int | None = None,
    ) -> None:
        """One event of ``row``'s stream, after the ones added before it.  ``line``: the input line it came
        from, if any (its location is then "line N" unless ``location`` says more)."""
        v = self.event_values
        v["xid"].append(row["xid"])
        v["line"].append(line)
        v["where"].append(location)
        v["ts"].append(ts)
        v["id"].append(event_id)
        v["event"].append(event_type)
        v["data"].append(data)
        v["retry"].append(retry)
        v["fate"].append(fate)
        if len(v["xid"]) >= VALUE_CHUNK:
            self.flush_values()

    def add_events(self, frame: pl.DataFrame) -> None:
        """Events of whole exchanges at once, column-wise: FRAME_COLUMNS in stream order.  The same rows as
        :meth:`event` called once per event."""
        self.flush_values()  # the events added before these stay before them
        self.event_frames.append(self.coded(frame.select(*FRAME_COLUMNS, _line=pl.lit(None, pl.Int64))))

    def coded(self, frame: pl.DataFrame) -> pl.DataFrame:
        """An events frame as it is kept until :meth:`finish`: in the compact reading, its fate, event type and retry
        already the codes of :data:`COMPACT_EVENTS` (1 and 4 bytes and a flag), not 16-byte string views and a 64-bit
        integer per event held through the whole read (2M tiny events: 34 bytes an event, 65 MiB).  Else as it is."""
        if not self.compact:
            return frame
        return frame.with_columns(pl.col("fate").cast(COMPACT_EVENTS["fate"]), pl.col("event").cast(COMPACT_EVENTS["event"]),
                                  retry=retry_flag())

    def renumber(self, order: list[int]) -> None:
        """Number the exchanges in ``order`` (old xids, the first first): rows, messages and events follow.
        For a reader that meets exchanges in another order than the tables' (HAR: completion order)."""
        if order == list(range(len(order))):
            return
        new = [0] * len(order)
        for rank, old in enumerate(order):
            new[old] = rank
        self.exchanges = [self.exchanges[old] for old in order]
        for row in self.exchanges:
            if row is not None:
                row["xid"] = new[row["xid"]]
        self._sealed = [(*v[:_XID_AT], new[v[_XID_AT]], *v[_XID_AT + 1:]) for v in self._sealed]
        self.messages["xid"] = [new[x] for x in self.messages["xid"]]
        renumbered = pa.array(new, pa.int64())
        for chunks in (self._exchange_chunks, self._message_chunks):
            chunks[:] = [c.set_column(c.schema.get_field_index("xid"), "xid", pc.take(renumbered, c.column("xid"))) for c in chunks]
        self.flush_values()
        mapping = pl.DataFrame({"xid": range(len(new)), "_new": new}, schema={"xid": pl.Int64, "_new": pl.Int64})
        self.event_frames = [
            f.join(mapping, on="xid", how="left", maintain_order="left").with_columns(xid="_new").drop("_new")
            for f in self.event_frames
        ]

    def _events(self, exchanges: pa.Table) -> tuple[pl.DataFrame, pl.DataFrame | None]:
        """Every event added, in order, with ordinal, cursor and digest derived column-wise (``exchanges``: the
        exchange table, whose Last-Event-ID each stream's cursor starts from); and, where a reader read some events'
        JSON-RPC ahead (:data:`READ_AHEAD`), what it read of each event (``_method``, ``_clean``, ``_raw``)."""
        self.flush_values()
        frames, self.event_frames = self.event_frames, []
        # compact: the fate and event type become their codes as the chunks are joined, not after the JSON-RPC
        # pass and the redaction (two 16-byte views per event held through both: 2M events, +60 MiB there)
        schema = {name: COMPACT_EVENTS[name] if self.compact and name in ("fate", "event", "retry") else _EVENTS_POLARS[name]
                  for name in FRAME_COLUMNS} | {"_line": pl.Int64}
        # frames with what a reader read ahead (READ_AHEAD) beside frames without: nulls there
        ahead = any("_method" in f.columns for f in frames)
        if ahead:
            schema |= READ_AHEAD
            frames[:] = [f.with_columns(**{k: pl.lit(None, t) for k, t in READ_AHEAD.items() if k not in f.columns}) for f in frames]
            # a text read ahead for no event at all (no notification's method, no text redacted: 2M tiny events) is
            # not joined into a column of nulls, 16 bytes an event (61 MiB for the two on 2M events): the reader's
            # other columns say the same without it (finish reads None as "none read ahead").  (Counted by a plan:
            # get_column would make the frames' one-value null columns whole.)
            for name in ("_method", "_raw"):
                if all(f.select(pl.col(name).null_count()).item() == f.height for f in frames):
                    del schema[name]
                    frames[:] = [f.drop(name) for f in frames]
        # every location left to the line (a JSONL input): none joined (2M nulls are 30 MiB of views too)
        by_line = all(f.select(pl.col("location").null_count()).item() == f.height for f in frames)
        if by_line:
            del schema["location"]
        # (Concatenated as chunks, the plan below gave columns in differing chunks, and the cast in ``finish``
        # then aligned them: a copy of every column beside the frame, +237 MiB on 2M tiny events.)
        frame = one_chunk(frames, schema)
        # "line N" where the reader left the location to the line (2M events: the 30 MiB column made once,
        # after the chunks are joined, not joined from chunks: the read's peak -30 MiB)
        line = formatted("line {}", pl.col("_line"))
        if by_line:
            frame = frame.with_columns(location=line)
        elif frame.get_column("location").null_count():
            frame = frame.with_columns(location=pl.coalesce(pl.col("location"), line))
        frame = frame.drop("_line")
        # events in exchange order, each stream's in its own order (a log interleaves concurrent streams line
        # by line): the analysis reads them in this order, and for one input it then needs no sort of its own
        if not frame.get_column("xid").is_sorted():
            frame = frame.sort("xid", maintain_order=True)
        read = None
        if ahead:
            read = frame.select(*(k for k in READ_AHEAD if k in frame.columns))
            frame = frame.drop(*READ_AHEAD, strict=False)
        # each exchange's Last-Event-ID, by xid (xids are 0..n-1): gathered per event, no join (a join copies every column)
        if self.compact:
            # the single pass has no per-event cursor (the analysis takes each connection's last one from its
            # ids: streams.build); its retry is already the flag (above) and its digest comes below
            derived = {"digest": pl.lit(None, pl.UInt64)}
        else:
            assert pl.from_arrow(exchanges.column("xid")).equals(pl.int_range(exchanges.num_rows, dtype=pl.Int64, eager=True),
                                                                 check_names=False), "exchange rows are kept in xid order"
            resumed = pl.from_arrow(exchanges.column("last_event_id")).fill_null("").rename("_lei")
            # the client's last-event-ID buffer: what it resumed from until a block carries an id field (WHATWG: it persists)
            derived = {"cursor": pl.coalesce(pl.col("id").forward_fill().over("xid"), pl.lit(resumed).gather(pl.col("xid")), pl.lit("")),
                       "digest": digest_expr(pl.col("id"), pl.col("data"))}
        # the source is added last, to the frame as it is (below)
        names = [name for name in (COMPACT_EVENTS if self.compact else EVENTS.names) if name != "source"]
        frame = (
            frame.lazy()
            .with_columns(
                ordinal=pl.int_range(pl.len(), dtype=pl.Int32).over("xid"),
                event=pl.col("event").fill_null("message"),
                data=pl.col("data").fill_null(""),
            )
            .with_columns(**derived)
            .select(names)
            # the in-memory engine keeps each column in one chunk; the default (streaming) engine gives its
            # parallel pieces, and the events were then rechunked again, all columns at once (+250 MiB on
            # 2M tiny events, at the frames)
            .collect(engine="in-memory")
        )
        if self.compact and read is not None:
            # the digests read ahead, and those of the other events (their rows alone)
            digest = read.get_column("digest")
            todo = digest.is_null().arg_true()
            if todo.len():
                part = frame.select(pl.col("id", "data").gather(todo)).select(compact_digest_expr(digest_expr(pl.col("id"), pl.col("data"))))
                digest = digest.scatter(todo, part.to_series())
            frame = frame.with_columns(digest.rechunk())
        elif self.compact:
            # by the streaming engine, a piece at a time: the in-memory engine would make every event's hex
            # first (2M tiny events: +200 MiB for a 16 MB column; streaming, +34 MiB)
            digest = frame.lazy().select(compact_digest_expr(digest_expr(pl.col("id"), pl.col("data"))).alias("digest"))
            frame = frame.with_columns(digest.collect(engine="streaming").to_series().rechunk())
        # one value for every event: added to the frame as it is, Polars keeps it as that value and a length
        # (a plan's collect, a Series or a rechunk makes it a column: 2M events, +30 MiB)
        frame = frame.with_columns(source=pl.lit(self.source, pl.String)).select("source", *names)
        # (an event the compiled core read has its digest read ahead; it looked for its notification's method too, and a
        # null _method there is none: _examined, which finish's JSON-RPC pass does not read again)
        return frame, (None if read is None else read.with_columns(_examined=pl.col("digest").is_not_null()).drop("digest"))

    def _messages(self, xid: int, origin: str, ordinal: int | None, direction: str, text: str, location: str) -> None:
        try:
            found = jsonrpc.extract_rows(text)
        except jsonrpc.NotJsonRpc as exc:
            self.log.add("jsonrpc_invalid", location, str(exc))
            return
        cols = self.messages
        if len(cols["xid"]) >= VALUE_CHUNK:
            self._flush_messages()
        for kind, rpc_id, method, code, message, version, digest in found:
            cols["source"].append(self.source)
            cols["xid"].append(xid)
            cols["origin"].append(origin)
            cols["ordinal"].append(ordinal)
            cols["direction"].append(direction)
            cols["kind"].append(kind)
            cols["rpc_id"].append(rpc_id)
            cols["method"].append(method)
            cols["error_code"].append(code)
            cols["error_message"].append(message)
            cols["protocol_version"].append(version)
            cols["params_digest"].append(digest)

    def _flush_messages(self) -> None:
        """``messages`` into one Arrow chunk; the lists are emptied (1M tiny messages as Python lists: about 200 MB)."""
        cols = self.messages
        if cols["xid"]:
            self._message_chunks.append(pa.Table.from_pydict(cols, schema=MESSAGES))
            for column in cols.values():
                column.clear()

    def flush_values(self) -> None:
        """``event_values`` into one compact frame; the lists are emptied in place (readers hold their appends)."""
        vals = self.event_values
        if not vals["xid"]:
            return
        chunk = pl.DataFrame(vals, schema=VALUE_SCHEMA)
        for column in vals.values():
            column.clear()
        # an event at a line of the input (the JSONL reader) has no location yet: "line N" is made from _line
        # once, for the whole table (_events), not per chunk and then copied into the table with the rest
        where = pl.col("where") if chunk.get_column("where").null_count() < chunk.height else pl.lit(None, pl.String)
        self.event_frames.append(self.coded(
            chunk.with_columns(location=where)
            # _line: the input line, which the JSONL reader orders its two paths' events by
            .select(*FRAME_COLUMNS, _line="line")
        ))

    def finish(self, fmt: str, records: int, notes: list[str] | None = None) -> Ingested:
        exchanges = self._exchange_table()
        events, ahead = self._events(exchanges)
        methods = clean = raw = examined = None
        if ahead is not None:
            methods, clean, raw, examined = (ahead.get_column(k) if k in ahead.columns else None
                                             for k in ("_method", "_clean", "_raw", "_examined"))
            clean = clean if clean.any() else None
        del ahead
        # the events' JSON-RPC messages are Polars work (it releases the GIL) and the exchange and body rows
        # are Python objects turned into Arrow: the two at the same time, one in a worker thread; of events the
        # reader redacted already, it reads the raw text where the redaction changed it
        rpc_events = events if raw is None or raw.null_count() == raw.len() else events.with_columns(pl.coalesce(raw, pl.col("data")).alias("data"))
        with ThreadPoolExecutor(1, thread_name_prefix="sse-messages") as pool:
            job = pool.submit(_sse_message_table, rpc_events, methods, self.redact, examined, self.compact)
            del methods, raw, rpc_events, examined
            self._flush_messages()
            chunks, self._message_chunks = self._message_chunks, []
            bodies = pa.concat_tables(chunks) if chunks else MESSAGES.empty_table()
            del chunks
            # Digests (above, in _events) and JSON-RPC messages come from the raw data; the events' text is
            # redacted meanwhile, into a new column, which replaces the raw one only after the JSON-RPC pass:
            # the analysis is the same with and without --no-redact (see analyzer.redact)
            data = None
            if self.redact and clean is None:
                data = redact.column(events["data"])
            elif self.redact and (todo := (~clean.fill_null(False)).arg_true()).len():  # the events not redacted yet
                whole = events.get_column("data")
                part = whole.gather(todo)
                done = redact.column(part)
                data = None if done is part else whole.clone().scatter(todo, done)
                del whole, part, done
            del clean
            sse, invalid = job.result()
        if self.redact:  # (the events' messages' error texts were redacted in the worker)
            errors = pl.from_arrow(bodies["error_message"])
            done = redact.column(errors)
            if done is not errors:
                bodies = bodies.set_column(MESSAGES.get_field_index("error_message"), "error_message", done.to_arrow().cast(pa.string()))
            del errors, done
        if invalid.height:  # (a million events of plain text are a million rows: located in bulk, not one call each)
            shown = invalid["row"].head(EXAMPLES_PER_KIND).append(invalid["row"].tail(1))
            at = events["location"].gather(shown).to_list()
            self.log.add_many("jsonrpc_invalid", invalid.height, at[:-1], at[-1], "not a JSON-RPC message")
        del invalid
        if data is not None:
            events = events.with_columns(data)
        del data
        # the Arrow table's types (EVENTS), in Polars; a compact digest stays a UInt64
        events = events.cast(COMPACT_EVENTS if self.compact else _EVENTS_POLARS)
        if self.compact:  # (the single pass's: a Polars frame, as the analysis reads it; Ingested.messages makes the Arrow)
            messages = pl.concat([pl.from_arrow(bodies).cast(MESSAGES_POLARS), sse], rechunk=False)
        else:
            messages = pa.concat_tables([bodies, sse])
        if self.digest_key and not self.compact:  # a store's tables: its digests keyed (keyed_digest_expr)
            events = events.with_columns(digest=keyed_digest_expr(pl.col("digest"), self.digest_key))
            keyed = pl.from_arrow(messages.select(["params_digest"])).select(
                pl.when(pl.col("params_digest").is_not_null()).then(keyed_digest_expr(pl.col("params_digest"), self.digest_key)))
            messages = messages.set_column(MESSAGES.get_field_index("params_digest"), "params_digest",
                                           keyed.to_series().to_arrow().cast(pa.string()))
        if self.redact:
            self._redact_anomalies()
        return Ingested(
            source=self.source,
            format=fmt,
            records=records,
            exchanges=exchanges,
            events_frame=events,
            messages_frame=messages,
            anomalies=self.log.table(),
            rejected=self.log.rejected,
            notes=notes or [],
        )

    def _redact_anomalies(self) -> None:
        """The detail an ingester appended to an anomaly's meaning (a producer's own anomaly text, a
        value quoted back) loses secret pairs; the catalog's meaning is ours and stays as it is."""
        for row in self.log.rows:
            head = CATALOG[row["code"]].meaning + ": "
            msg = row["message"]
            if msg.startswith(head):
                row["message"] = head + redact.text(msg[len(head):])


# MESSAGES' columns as Polars types (a frame of them becomes the Arrow table by ``.to_arrow().cast(MESSAGES)``); written
# out, not made by pl.from_arrow at import, which lets pyarrow import pandas before the command keeps it out (a test
# holds the two the same)
MESSAGES_POLARS = {"source": pl.String, "xid": pl.Int64, "origin": pl.String, "ordinal": pl.Int32, "direction": pl.String,
                   "kind": pl.String, "rpc_id": pl.String, "method": pl.String, "error_code": pl.Int64, "error_message": pl.String,
                   "protocol_version": pl.String, "params_digest": pl.String}
_EVENTS_POLARS = {"source": pl.String, "xid": pl.Int64, "ordinal": pl.Int32, "location": pl.String, "ts": pl.Datetime("us", "UTC"),
                  "id": pl.String, "cursor": pl.String, "event": pl.String, "data": pl.String, "retry": pl.Int64,
                  "fate": pl.String, "digest": pl.String}
assert list(_EVENTS_POLARS) == EVENTS.names
# the single pass's events (Reading.compact): the digest's first 64 bits, and the fate (three values) and the
# event type (a handful per capture) as codes of 1 and 4 bytes instead of a 16-byte string view per event; no
# cursor (streams.build derives each connection's last one from the ids), and of retry only that the field
# was there (true, else null: a bit, not 8 bytes, per event)
FATES = ("dispatched", "no_data", "cut_off")
COMPACT_EVENTS = {name: dtype for name, dtype in dict(_EVENTS_POLARS, digest=pl.UInt64, fate=pl.Enum(FATES), event=pl.Categorical,
                                                      retry=pl.Boolean).items() if name != "cursor"}


def compact_events_expr() -> list[pl.Expr]:
    """A canonical events frame's columns as :data:`COMPACT_EVENTS` (for ``select``): the digest's
    first 64 bits, retry as a flag, no cursor."""
    return [compact_digest_expr(pl.col("digest")) if name == "digest"
            else retry_flag().alias("retry") if name == "retry"
            else pl.col(name).cast(dtype) for name, dtype in COMPACT_EVENTS.items()]


def retry_flag() -> pl.Expr:
    """A retry field as the single pass keeps it: true where the event sent one, else null."""
    return pl.when(pl.col("retry").is_not_null()).then(True)


def one_chunk(frames: list[pl.DataFrame], schema: dict) -> pl.DataFrame:
    """The ``frames`` (taken out of the list: the caller holds no other reference) as one frame of
    ``schema``'s columns and types, each column in one chunk, made a column at a time: each column of
    the frames is let go as soon as its copy is made, so the table is held once and one column twice.
    A column already in one chunk is not copied."""
    if not frames:
        return pl.DataFrame(schema=schema)
    if len(frames) == 1 and frames[0].schema == schema and all(n == 1 for n in frames[0].n_chunks("all")):
        return frames.pop()  # as it is: a column of one repeated value (an input's source) stays one value
    columns = []
    for name, dtype in schema.items():
        columns.append(pl.concat([f.get_column(name).cast(dtype) for f in frames], rechunk=True))
        frames[:] = [f.drop(name) for f in frames]
    frames.clear()
    return pl.DataFrame(columns)


def _to_arrow(held: list[pl.DataFrame], schema: pa.Schema) -> pa.Table:
    """The frame in ``held`` (taken out of it: the caller holds no other reference) as an Arrow table of
    ``schema``, one column at a time: each Polars column is let go as soon as its Arrow copy is made,
    so the conversion holds one column twice, not the table."""
    frame = held.pop()
    columns = []
    for name in schema.names:
        columns.append(frame.get_column(name).to_arrow().cast(schema.field(name).type))
        frame = frame.drop(name)
    return pa.Table.from_arrays(columns, schema=schema)
