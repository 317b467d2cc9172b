"""The column-wise half of the proxy JSONL reader before msgspec: the plain ``sse`` records, the bulk of a log.

Since issue [4/5] :mod:`analyzer.ingest.jsonl_typed` calls it first and decodes the ``sse`` lines it leaves (any
other writer's JSON) with msgspec; its time grammar (``_TS``) is the typed reader's too.  (``jsonl._grammar``, this
alone, is the reader before msgspec, which the tests compare.)  Since issue #42 the reader calls :func:`sse_frame`:
the same grammar with any JSON white space (:data:`SSE_ANY`, Python's default ``", "`` / ``": "`` too), and the
lines it vets parsed by one ``read_ndjson``; :func:`sse_rows` below, one regular expression or split per field, is
the reader before, kept for the tests.

:mod:`analyzer.ingest.jsonl` reads a log in batches of lines.  Of each batch, the lines that are an
``sse`` record in the recorder's own shape (analyzer/mitm_addon.py writes ``json.dumps(...,
separators=(",", ":"))`` with the keys ``kind, ts, conn, id, event, data, retry`` in that order) are
recognised here by one regular expression over the whole line and decoded by Polars, column-wise.
Every other line -- and every line this grammar does not cover: another key order or spacing, an
integer ``conn``, ``truncated``/``dispatched`` flags, a negative or huge ``retry``, a ``\\u0000`` or a
lone surrogate escape, invalid UTF-8, a byte order mark, a time Python would not read the same -- goes
through the per-line reader, which decides its anomalies.  The grammar is deliberately narrow: a line
taken here is one the per-line reader reads without any anomaly, to the same values
(tests/test_jsonl_columns.py checks both paths against each other).
"""
from __future__ import annotations

import io
from itertools import compress

import polars as pl

# a JSON string without escapes that change meaning between readers: no control characters (Python's
# json rejects them), no \u0000 (an id with NUL is an anomaly) and no surrogate escape (lone ones are
# an anomaly; pairs are left to the per-line reader too)
_H = "[0-9a-fA-F]"
_U = rf"u(?:[1-9a-cA-Ce-fE-F]{_H}{{3}}|[dD][0-7]{_H}{{2}}|0[1-9a-fA-F]{_H}{{2}}|00[1-9a-fA-F]{_H}|000[1-9a-fA-F])"
_STR = r'"(?:[^"\\\x00-\x1f]|\\(?:["\\/bfnrt]|' + _U + r'))*"'
# RFC 3339 UTC as the recorder writes it, in the range where datetime.fromisoformat and Polars agree
# (no leap second, no year 0, no hour 24: Python rejects those, Polars would not)
_TS = r"(?:1[0-9]|20)[0-9]{2}-[0-9]{2}-[0-9]{2}T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{1,6})?Z"
_RETRY = r"(?:0|[1-9][0-9]{0,17})"  # below 2**63, no sign: the per-line reader's range check is moot
# the whole line: what the column-wise path takes
SSE_LINE = (
    r'\A\{"kind":"sse","ts":"' + _TS + r'","conn":"[^"\\\x00-\x1f]*"'
    r'(?:,"id":(?:null|' + _STR + r'))?'
    r'(?:,"event":(?:null|' + _STR + r'))?'
    r'(?:,"data":(?:null|' + _STR + r'))?'
    r'(?:,"retry":(?:null|' + _RETRY + r'))?'
    r'\}\r?\n?\z'
)
# The same record as any writer may space it (Python's default json.dumps: ", " and ": "; tabs; white space around
# the object; CRLF), in the recorder's key order: the lines :func:`sse_frame` hands to ``read_ndjson``.  What it
# vets is what ``read_ndjson`` and the per-line reader read alike: strings that are strings (no escape that changes
# meaning between readers, above), ``retry`` an integer below 2**63, ``ts`` a time both read the same.
_W = r"[ \t\r]*"  # JSON white space within a line (its LF is gone)


def _key(name: str) -> str:
    return _W + "," + _W + '"' + name + '"' + _W + ":" + _W


SSE_ANY = (
    r"\A" + _W + r"\{" + _W + '"kind"' + _W + ":" + _W + '"sse"' + _key("ts") + '"' + _TS + '"' + _key("conn") + r'"[^"\\\x00-\x1f]*"'
    + "".join("(?:" + _key(k) + "(?:null|" + _STR + "))?" for k in ("id", "event", "data"))
    + "(?:" + _key("retry") + "(?:null|" + _RETRY + "))?"
    + _W + r"\}" + _W + r"\n?\z"
)
# ... and each field's JSON text in a line SSE_LINE matched: `,"key":` occurs once there, and never inside a
# string (a quote in a JSON string is escaped), so the first match is the field.  One capture regex per field
# is about twice as fast as one regex with a group per field over the long `data` of real logs.
_FIELD = {"id": r',"id":(null|"(?:[^"\\]|\\.)*")', "event": r',"event":(null|"(?:[^"\\]|\\.)*")',
          "retry": r',"retry":(null|[0-9]+)'}


def _data_text(raw: pl.Expr) -> pl.Expr:
    """The JSON text of ``data`` in a line SSE_LINE matched, as a capture regex like _FIELD's would find it,
    by two literal splits (the regex took twice as long over long data): what follows `,"data":`, up to `,"retry":` or the
    closing brace (neither key can occur inside a string, whose quotes are escaped; the data text ends
    with a quote or `null`, never with a brace or a CR)."""
    after = raw.str.splitn(',"data":', 2).struct.field("field_1")
    return after.str.splitn(',"retry":', 2).struct.field("field_0").str.strip_suffix("\r").str.strip_suffix("}")


COLUMNS = {"pos": pl.UInt32, "conn": pl.String, "ts": pl.Datetime("us", "UTC"), "id": pl.String, "event": pl.String, "data": pl.String, "retry": pl.Int64}


def _text(lines: list) -> pl.Series:
    """The batch's lines as one String column; a line that is not UTF-8 (or too long: an int) is null."""
    raw = pl.Series("raw", [r if type(r) is bytes else None for r in lines], dtype=pl.Binary)
    try:
        return raw.cast(pl.String)
    except (pl.exceptions.ComputeError, pl.exceptions.InvalidOperationError):  # some line is not UTF-8: the others still can be taken
        pass
    out = []
    for r in lines:
        try:
            out.append(r.decode("utf-8") if type(r) is bytes else None)
        except UnicodeDecodeError:
            out.append(None)
    return pl.Series("raw", out, dtype=pl.String)


_NDJSON = {"ts": pl.String, "conn": pl.String, "id": pl.String, "event": pl.String, "data": pl.String, "retry": pl.Int64}


def sse_frame(lines: list) -> tuple[pl.DataFrame, list[int]]:
    """The plain ``sse`` records among ``lines`` as :func:`sse_rows` gives them, of any writer's spacing in the
    recorder's key order (:data:`SSE_ANY`), and the positions of the other lines that may be ``sse`` records (they
    hold ``"sse"``: another key order, escapes the grammar leaves out; :mod:`analyzer.ingest.jsonl_typed` reads them).

    The lines the grammar vets are parsed once, by ``read_ndjson`` over their bytes joined (in Rust, on Polars'
    threads): one pass for every field, where :func:`sse_rows` ran a regular expression or a split and a JSON decode
    per field (1M events: 2.3 against 3.2-3.8 CPU-s).  ``read_ndjson`` coerces what it should refuse (``5`` read as
    ``"5"``, a lone surrogate dropped), which is why only vetted lines go to it."""
    text = _text(lines)
    raw = pl.col("raw")
    marks = pl.DataFrame({"raw": text}).select(take=raw.str.contains(SSE_ANY).fill_null(False),
                                               maybe=raw.str.contains('"sse"', literal=True))
    take = marks.get_column("take")
    pos = take.arg_true()
    frame = None
    if pos.len():
        try:
            frame = pl.read_ndjson(io.BytesIO(b"\n".join(compress(lines, take.to_list()))), schema=_NDJSON)
        except pl.exceptions.PolarsError:  # (never seen: a vetted line read_ndjson refuses; the per-field reading decides)
            pass
    if frame is None or frame.height != pos.len():  # (... or does not take as one row)
        frame = sse_rows(lines) if pos.len() else pl.DataFrame(schema=COLUMNS)
    else:
        frame = (
            frame.select(
                pos=pos, conn="conn",
                ts=pl.col("ts").str.to_datetime("%Y-%m-%dT%H:%M:%S%.fZ", time_unit="us", time_zone="UTC", strict=False),
                id="id", event="event", data="data", retry="retry")
            .filter(pl.col("ts").is_not_null())  # a date that does not exist (Feb 30): the per-line reader flags it
            .cast(COLUMNS)
        )
    # the other lines that may be sse records: "sse" in their text, or their bytes (a line that is not UTF-8)
    taken = pl.repeat(False, len(lines), eager=True).scatter(frame.get_column("pos"), True)
    maybe = (marks.get_column("maybe").fill_null(True) & ~taken).arg_true().to_list()
    return frame, [i for i in maybe if type(lines[i]) is bytes and b'"sse"' in lines[i]]


def sse_rows(lines: list) -> pl.DataFrame:
    """The plain ``sse`` records among ``lines`` (bytes, or an int for a line too long to read), decoded:
    ``pos`` (index in ``lines``), ``conn``, ``ts``, ``id``, ``event``, ``data``, ``retry``."""
    raw = pl.col("raw")
    return (
        pl.DataFrame({"raw": _text(lines)})
        .with_row_index("pos")
        .filter(raw.str.contains(SSE_LINE))
        .select(
            "pos",
            conn=raw.str.extract(r',"conn":"([^"]*)"', 1),
            ts=raw.str.extract(r'\A\{"kind":"sse","ts":"([^"]*)"', 1)
            .str.to_datetime("%Y-%m-%dT%H:%M:%S%.fZ", time_unit="us", time_zone="UTC", strict=False),
            # the JSON text of a string (or null) decoded field by field, not the line as a struct: the same
            # values, and Polars keeps far less memory after it
            **{k: raw.str.extract(_FIELD[k], 1).str.json_decode(pl.String) for k in ("id", "event")},
            data=_data_text(raw).str.json_decode(pl.String),
            retry=raw.str.extract(_FIELD["retry"], 1).replace("null", None).cast(pl.Int64),
        )
        .filter(pl.col("ts").is_not_null())  # a date that does not exist (Feb 30): the per-line reader flags it
        .cast(COLUMNS)
    )
