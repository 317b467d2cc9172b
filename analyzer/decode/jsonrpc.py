"""JSON-RPC 2.0 messages out of request bodies, JSON response bodies and SSE data.

This is parsing (one ``json.loads`` per body, at ingest), not analysis: the
rules only ever see the resulting ``messages`` table.  Batches (allowed by
protocol revision 2025-03-26) yield one message per element.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import NamedTuple

import msgspec

from analyzer import compiled

META_VERSION = "io.modelcontextprotocol/protocolVersion"  # params._meta key of revision 2026-07-28
# json.dumps with these options, without the encoder json.dumps makes for every call that passes options
_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_CANONICAL = json.JSONEncoder(sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode


@dataclass(frozen=True, slots=True)
class Message:
    kind: str  # request | notification | response | error
    rpc_id: str | None  # JSON text of the id: 1 and "1" stay distinct
    method: str | None
    error_code: int | None
    error_message: str | None
    protocol_version: str | None  # initialize params/result protocolVersion, or params._meta (2026-07-28)
    params_digest: str | None  # sha256 of the canonical JSON of params without _meta: the same call re-issued under a new id


def id_text(rid: object) -> str | None:
    """The id as JSON-ish text, so 1 and "1" stay distinct: a string is quoted with only
    ``\\`` and ``"`` escaped (the same text the column-wise reader builds)."""
    if rid is None:
        return None
    if isinstance(rid, str):
        return text_safe('"' + rid.replace("\\", "\\\\").replace('"', '\\"') + '"')
    return text_safe(_COMPACT(rid))


_MSGSPEC = msgspec.json.decode
# Python's json and msgspec both refuse nesting past the recursion limit, counted from the depth of the stack of the
# call: a text that may nest this deep (brackets counted, in strings too) is left to json.loads (jsonl_typed._DEEP)
_DEEP = 500


def loads(text: str) -> object:
    """``json.loads(text)``, the same value or the same exception, by msgspec's decoder where it reads the text
    (1.8 µs against 5 µs for a proxy log's request line).  Where the two differ msgspec raises -- a lone surrogate
    escape, ``NaN``/``Infinity``, a number past a float, an integer past Python's digit limit, deep nesting --
    and ``json.loads`` reads the text, so its value or its error is the result (tests/test_jsonrpc.py compares them
    on the fuzz corpus)."""
    if text.count("[") + text.count("{") < _DEEP:
        try:
            return _MSGSPEC(text)
        except Exception:  # (msgspec's errors, RecursionError, a str with a lone surrogate: json.loads decides)
            pass
    return json.loads(text)


class NotJsonRpc(ValueError):
    """The text is not JSON-RPC (the caller records ``jsonrpc_invalid``)."""


_SURROGATE = re.compile("[\ud800-\udfff]")


def text_safe(value: str) -> str:
    """A string JSON decoding may have given with lone surrogates (an escape like \\ud800): those become
    U+FFFD, as no UTF-8 text (and no Arrow column) can hold them; other strings come back unchanged."""
    if _SURROGATE.search(value) is None:
        return value
    return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _one(obj: object) -> Message:
    if not isinstance(obj, dict):
        raise NotJsonRpc("element is not an object")
    rpc_id = id_text(obj.get("id"))
    method = obj.get("method")
    if method is not None and not isinstance(method, str):
        raise NotJsonRpc("method is not a string")
    version = None
    for holder in ("params", "result"):
        part = obj.get(holder)
        if isinstance(part, dict) and isinstance(part.get("protocolVersion"), str):
            version = part["protocolVersion"]
    params = obj.get("params")
    if version is None and isinstance(params, dict) and isinstance(params.get("_meta"), dict):
        meta = params["_meta"].get(META_VERSION)
        version = meta if isinstance(meta, str) else None
    if method is not None:
        method = text_safe(method)
        digest = None
        # only requests are compared by their arguments (a re-issued call, a renumbered server
        # request); notifications are the bulk of SSE traffic and never are
        if params is not None and obj.get("id") is not None:
            # params._meta is the SDK's, not the call's (progressToken, protocol version, trace
            # context): a call re-issued under a new id carries a new progressToken
            if isinstance(params, dict) and "_meta" in params:
                params = {k: v for k, v in params.items() if k != "_meta"}
            canon = _CANONICAL(params)
            digest = hashlib.sha256(canon.encode("utf-8", "surrogatepass")).hexdigest()
        # an id of null cannot be answered: it is read as a notification, as the column-wise reader does
        version = None if version is None else text_safe(version)
        return Message("request" if rpc_id is not None else "notification", rpc_id, method, None, None, version, digest)
    if "error" in obj:
        err = obj["error"]
        code = err.get("code") if isinstance(err, dict) else None
        msg = err.get("message") if isinstance(err, dict) else None
        return Message(
            "error",
            rpc_id,
            None,
            # (a code past 64 bits is none the tables can hold: as none at all, not a failed read)
            code if isinstance(code, int) and not isinstance(code, bool) and -2**63 <= code < 2**63 else None,
            text_safe(msg) if isinstance(msg, str) else None,
            None,
            None,
        )
    if "result" in obj:
        return Message("response", rpc_id, None, None, None, None if version is None else text_safe(version), None)
    raise NotJsonRpc("object has neither method, result nor error")


# Python's str.isspace() also takes the four information separators U+001C-U+001F, which are no Unicode
# White_Space (and no JSON whitespace): blank text is White_Space only, as the column-wise test (\S) reads it
_SEPARATORS = re.compile("[\x1c-\x1f]")


def extract(text: str) -> list[Message]:
    """All JSON-RPC messages in ``text``; ``[]`` for blank text (e.g. a priming event).  Raises :class:`NotJsonRpc`
    with the reason for text that is not JSON-RPC."""
    if compiled.ENABLED and (got := compiled.core.rpc_messages(text)) is not None:
        return [Message(*m) for m in got]
    return _extract(text)


def extract_rows(text: str) -> list[tuple]:
    """:func:`extract`'s messages as tuples of :class:`Message`'s fields, in its order (the Builder appends them to its
    columns: no Message made).  Where the compiled core is built it reads the common texts (one object that
    serde_json reads, no float where Python would write it otherwise: ``rpc_message`` in analyzer/native/src/lib.rs),
    about 5 times faster than the Python path, which reads the rest and says why a text is not JSON-RPC
    (tests/test_native.py compares the two)."""
    if compiled.ENABLED and (got := compiled.core.rpc_messages(text)) is not None:
        return got
    return [(m.kind, m.rpc_id, m.method, m.error_code, m.error_message, m.protocol_version, m.params_digest)
            for m in _extract(text)]


def _extract(text: str) -> list[Message]:
    """:func:`extract` in Python: the reference, and the reading of what the compiled core leaves."""
    if not text or (text.isspace() and _SEPARATORS.search(text) is None):
        return []
    try:
        obj = loads(text)
    except (ValueError, RecursionError) as exc:
        raise NotJsonRpc(f"not JSON ({exc.__class__.__name__})") from None
    if isinstance(obj, list):
        return [_one(o) for o in obj]
    return [_one(obj)]


class EventRpc(NamedTuple):
    """The JSON-RPC of some events, each event known by its ``row`` (an Int64 the caller chose: its row in the
    events table, or its input line): what :func:`assemble` turns into the messages table.  Each part is in row
    order."""

    parsed: "pl.DataFrame"  # ``RPC_COLUMNS``: one message per event whose data is one JSON-RPC object
    arrays: "pl.DataFrame"  # ``RPC_COLUMNS``: the messages of events whose data is a batch (a JSON array), in order
    invalid: "pl.Series"  # Int64: the rows whose data is not JSON-RPC


# what event_rpc gives per message (Polars type names: polars is imported when used)
RPC_COLUMNS = {"row": "Int64", "kind": "String", "rpc_id": "String", "method": "String", "error_code": "Int64",
               "error_message": "String", "protocol_version": "String", "params_digest": "String"}


def _schema(names: dict[str, str]) -> dict:
    import polars as pl

    return {k: getattr(pl, v) for k, v in names.items()}


def event_rpc(rows: "pl.DataFrame") -> EventRpc:
    """JSON-RPC messages of the dispatched SSE events among ``rows`` (``row``, ``data``, ``fate``: see
    Int64, String, String), as Polars expressions.  Each event's messages depend on its own data alone: the
    JSONL reader runs this on each batch's events in its worker thread, while the per-line reader reads the
    batch's other lines (:mod:`analyzer.ingest.jsonl`), and :meth:`analyzer.tables.Builder.finish` on the events
    that were not (:func:`sse_messages`: all of them).

    SSE data is the bulk of a capture (hundreds of thousands of notifications), so the requests and notifications
    whose reading is certain (see ``sure`` below) are read column-wise rather than with one ``json.loads`` per event;
    every other event -- a response, an error, an ``initialize``, a value the JSON paths read their own way, a batch
    (a JSON array: allowed in POST bodies by 2025-03-26, never seen in SSE) -- goes through :func:`extract` one by
    one, so that both readings agree on every text.

    Lazy plans over the columns they need, and the text is carried on only for requests and those events."""
    import polars as pl

    d = pl.col("data")
    # Each dispatched event with data is first classed by its first character, into one byte per event:
    # an object (1), a batch (2: a JSON array) or neither (3: plain text, a number, invalid without the
    # JSON paths below, each of which would give a column of nulls for it: 2M events of plain text,
    # +120 MiB).  Only then are the rows of each class taken, with the columns they need; a plan
    # that filtered the events once for all three classes kept every live row's columns (+89 MiB on
    # 2M events of plain text).
    # The tests are regexes on the text as it is (``\s``: Unicode White_Space, what strip_chars strips):
    # stripped first, every event's text was copied twice (2M events: +31 MiB at the read's peak).
    shape = rows.select(
        pl.when((pl.col("fate") == "dispatched") & d.str.contains(r"\S"))
        .then(pl.when(d.str.contains(r"^\s*\[")).then(2).when(d.str.contains(r"^\s*\{")).then(1).otherwise(3))
        .cast(pl.UInt8)
    ).to_series()

    def rows_of(kind: int) -> "pl.LazyFrame":
        return rows.lazy().select("row", "data").filter(pl.lit(shape == kind))

    one = rows_of(1)
    # the id's text, taken once into a column (as an expression used four times below, Polars' common
    # subexpression elimination still parsed every message twice for it: +0.3 s at 1M events)
    rid = pl.col("_rid")
    # json_path_match returns 5 and "5" alike: the raw text tells a string id from a number
    esc = rid.str.replace_all("\\", "\\\\", literal=True).str.replace_all('"', '\\"', literal=True)
    quoted = pl.concat_str([pl.lit('"'), esc, pl.lit('"')])
    method = pl.col("method")
    m_esc = method.str.replace_all("\\", "\\\\", literal=True).str.replace_all('"', '\\"', literal=True)

    def written(key: str, value: "pl.Expr") -> "pl.Expr":
        """The text holds ``"key":value`` (or ``"key": value``) as it is written."""
        return (d.str.contains(pl.concat_str([pl.lit(f'"{key}":'), value]), literal=True)
                | d.str.contains(pl.concat_str([pl.lit(f'"{key}": '), value]), literal=True))

    # Polars reads the messages it is certain to read as extract does: a request or notification whose method is
    # a string written as it is, its key once (json_path_match reads a number, `true` or an object as its JSON text,
    # and takes the last of two keys, or a nested one's text may be the one found in the raw text), an id that is
    # a string written as it is or a plain integer, its key at most once, no protocol version, no key spelled with
    # an escape (json_path_match decodes it, the raw text does not show it: "i\u0064").  Every other message --
    # responses (the old plan also called one without `jsonrpc` invalid), errors, initialize, and those -- is
    # extract's (the compiled core's where it is built), one text at a time: they are few beside the notifications
    # (tests/test_jsonrpc.py compares both on hostile texts).
    sure = (
        method.is_not_null()
        & ~d.str.contains(r'\\u[0-9a-fA-F]{4}[^"]*"\s*:')  # a key spelled with an escape (or, safely, a value like one)
        & ~d.str.contains("protocolVersion", literal=True)
        & (d.str.count_matches('"method"', literal=True) == 1)
        & written("method", pl.concat_str([pl.lit('"'), m_esc, pl.lit('"')]))
        & (d.str.count_matches('"id"', literal=True) <= 1)
        & (rid.is_null() | rid.str.contains(r"^-?[0-9]{1,18}$") | written("id", quoted))
    )
    is_str = ~rid.str.contains(r"^-?[0-9]{1,18}$") | written("id", quoted)
    first = (
        one.with_columns(_rid=d.str.json_path_match("$.id"), method=d.str.json_path_match("$.method"))
        .with_columns(_sure=sure, rpc_id=pl.when(rid.is_null()).then(None).when(is_str).then(quoted).otherwise(rid))
        .drop("_rid")
    )
    # (one plan for both: the JSON paths are read once; the text is carried on for requests and the rest alone)
    parsed, texts = pl.collect_all([
        first.filter(pl.col("_sure")).select(
            "row",
            kind=pl.when(pl.col("rpc_id").is_not_null()).then(pl.lit("request")).otherwise(pl.lit("notification")),
            rpc_id="rpc_id", method="method",
            error_code=pl.lit(None, pl.Int64), error_message=pl.lit(None, pl.String), protocol_version=pl.lit(None, pl.String),
            data=pl.when(pl.col("rpc_id").is_not_null()).then(d),  # requests are few: their params digest needs the text
        ),
        first.filter(~pl.col("_sure")).select("row", "data"),
    ])
    # the params digest of requests comes from the same canonical JSON as the Python path
    reqs = parsed.filter(pl.col("kind") == "request")
    digests = [next((m.params_digest for m in _safe_extract(t)[:1]), None) for t in reqs["data"].to_list()]
    parsed = (
        parsed.join(reqs.select("row", params_digest=pl.Series(digests, dtype=pl.String)), on="row", how="left", maintain_order="left")
        .select(list(RPC_COLUMNS))
        .cast(_schema(RPC_COLUMNS))
    )
    other = rows.get_column("row").filter(shape == 3)
    # the rest, one text at a time: the objects Polars does not read (above), then the batches (the rare slow path)
    found, bad, single = [], [], []
    for frame, into in ((texts, single), (rows_of(2).collect(), found)):
        for row, data in frame.iter_rows():
            try:
                into += [(row, *m) for m in extract_rows(data)]  # (the Message fields in order, as RPC_COLUMNS has them)
            except NotJsonRpc:
                bad.append(row)
    good = parsed
    if single:  # (in row order among the others: each such text is one object, one message)
        good = pl.concat([parsed, pl.DataFrame(single, schema=_schema(RPC_COLUMNS), orient="row")]).sort("row", maintain_order=True)
    arrays = pl.DataFrame(found, schema=_schema(RPC_COLUMNS), orient="row")
    invalid = [other, pl.Series("row", bad, dtype=pl.Int64)]
    return EventRpc(good, arrays, pl.concat([s.cast(pl.Int64).rename("row") for s in invalid]).sort())


def assemble(rpc: EventRpc, events: "pl.DataFrame") -> tuple["pl.DataFrame", "pl.DataFrame"]:
    """The messages table's rows of ``events``' JSON-RPC (``rpc``'s rows are rows of ``events``) and the rows
    whose data is not JSON-RPC (``row``): the one-message events first, then the batches' messages, each in
    event order."""
    import polars as pl

    # (an expression: events["source"] would turn the input's one source into a column of it, kept: +30 MiB)
    source = events.select(pl.col("source").first()).item() if events.height else None
    base = [pl.lit(source, pl.String).alias("source"), pl.col("xid"), pl.lit("sse").alias("origin"), pl.col("ordinal"),
            pl.lit("server_to_client").alias("direction")]
    names = [n for n in RPC_COLUMNS if n != "row"]
    xid, ordinal = events.get_column("xid"), events.get_column("ordinal")

    def placed(frame):
        at = frame.get_column("row")
        return frame.with_columns(xid=xid.gather(at), ordinal=ordinal.gather(at)).select(*base, *names)

    good = pl.concat([placed(rpc.parsed), placed(rpc.arrays)])
    return good, rpc.invalid.cast(pl.get_index_type()).rename("row").to_frame()


def notification_methods(data: "pl.Series") -> "pl.Series":
    """The method of each text of ``data`` that is a JSON-RPC notification, as :func:`event_rpc` reads it (an object
    with a string ``method``, no ``id`` or a null one, no ``protocolVersion`` in the text), else null: by the compiled
    core (analyzer/native, one serde_json parse of each text, where event_rpc's plan makes two), which the caller
    checks is there (:data:`analyzer.compiled.ENABLED`)."""
    import polars as pl

    from analyzer import compiled

    got = compiled.buffers(data)
    return pl.Series("method", compiled.strings(got[0], compiled.core.notification_methods(*got)), dtype=pl.String)


def sse_messages(events: "pl.DataFrame") -> tuple["pl.DataFrame", "pl.DataFrame"]:
    """JSON-RPC messages of all dispatched SSE events of ``events`` (an events table: its ``data``, ``fate``,
    ``xid``, ``ordinal``, ``source``), and the rows (``row``, in ``events``) of the events whose data is not a
    JSON-RPC message: :func:`event_rpc` of every event, :func:`assemble` d."""
    import polars as pl

    rows = events.select(pl.int_range(pl.len(), dtype=pl.Int64).alias("row"), "data", "fate")
    return assemble(event_rpc(rows), events)


def _safe_extract(text: str) -> list[Message]:
    try:
        return extract(text)
    except NotJsonRpc:
        return []
